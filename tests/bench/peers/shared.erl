#!/usr/bin/env escript
%% The shared-table benchmarks of scripts/bench (shared_get, shared_set,
%% shared_mix) on ETS, same shapes and parameters: 1000 integer keys, a
%% small binary value, N calls from one process; the mix is 19 lookups to 1
%% insert, from 1 process and then 2 at once. The table has ETS's default
%% options: read_concurrency is for reads in bursts, and with a write every
%% 20 calls it made 2 processes 10-100x slower than 1 here.
%%   escript tests/bench/peers/shared.erl get|set|mix [--quick]
%% Prints "PER_OP NAME NS" (nanoseconds a call; the mix: with 1 process)
%% and, for the mix, "FIGURE shared_mix scale X": the ops/s of 2
%% processes over those of 1. Each run checks the table kept its values.
-module(shared).
-mode(compile).

-define(VALUE, <<"small value">>).

main([Kind | Rest]) ->
    N = case lists:member("--quick", Rest) of true -> 200000; false -> 2000000 end,
    run(list_to_atom(Kind), N),
    halt(0).

table() ->
    T = ets:new(bench, [set, public]),
    [ets:insert(T, {K, ?VALUE}) || K <- lists:seq(0, 999)],
    T.

check(T) -> [{999, ?VALUE}] = ets:lookup(T, 999).

ns(F) ->
    T0 = erlang:monotonic_time(nanosecond),
    F(),
    erlang:monotonic_time(nanosecond) - T0.

run(get, N) ->
    T = table(),
    Ns = ns(fun() -> gets(T, 1, N) end),
    check(T),
    io:format("PER_OP shared_get ~.3f~n", [Ns / N]);
run(set, N) ->
    T = table(),
    Ns = ns(fun() -> sets(T, 1, N) end),
    check(T),
    io:format("PER_OP shared_set ~.3f~n", [Ns / N]);
run(mix, N) ->
    T = table(),
    One = ns(fun() -> mix_procs(T, N, 1) end),
    Two = ns(fun() -> mix_procs(T, N, 2) end),
    check(T),
    io:format("PER_OP shared_mix ~.3f~n", [One / N]),
    io:format("FIGURE shared_mix scale ~.3f~n", [(2 * N / Two) / (N / One)]).

gets(_, I, N) when I > N -> ok;
gets(T, I, N) ->
    [{_, _}] = ets:lookup(T, I rem 1000),
    gets(T, I + 1, N).

sets(_, I, N) when I > N -> ok;
sets(T, I, N) ->
    true = ets:insert(T, {I rem 1000, ?VALUE}),
    sets(T, I + 1, N).

mix_procs(T, N, Procs) ->
    Self = self(),
    [spawn(fun() -> mix(T, 1, N), Self ! done end) || _ <- lists:seq(1, Procs)],
    [receive done -> ok end || _ <- lists:seq(1, Procs)],
    ok.

mix(_, I, N) when I > N -> ok;
mix(T, I, N) ->
    K = I rem 1000,
    case I rem 20 of
        0 -> true = ets:insert(T, {K, ?VALUE});
        _ -> [{_, _}] = ets:lookup(T, K)
    end,
    mix(T, I + 1, N).
