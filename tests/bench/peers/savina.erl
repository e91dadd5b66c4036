#!/usr/bin/env escript
%% The Savina shapes of scripts/bench in idiomatic Erlang, same parameters.
%%   escript tests/bench/peers/savina.erl NAME [--quick]
%% Prints "RESULT NAME SECONDS"; checks each result like the host does.
-module(savina).
-mode(compile).

main([Name | Rest]) ->
    Quick = lists:member("--quick", Rest),
    Secs = run(list_to_atom(Name), Quick),
    io:format("RESULT ~s ~.6f~n", [Name, Secs]),
    halt(0).

pick(true, Q, _) -> Q;
pick(false, _, F) -> F.

timeit(F) ->
    T0 = erlang:monotonic_time(microsecond),
    R = F(),
    {(erlang:monotonic_time(microsecond) - T0) / 1.0e6, R}.

run(pingpong, Q) ->
    N = pick(Q, 20000, 200000),
    Pong = spawn(fun pong/0),
    {S, ok} = timeit(fun() -> ping(Pong, 1, N) end),
    S;
run(counting, Q) ->
    N = pick(Q, 20000, 200000),
    Self = self(),
    C = spawn(fun() -> counter(0) end),
    {S, Total} = timeit(fun() -> send_n(C, N), C ! {total, Self}, receive {total, T} -> T end end),
    N = Total,
    S;
run(threadring100, Q) -> threadring(100, pick(Q, 20000, 200000));
run(threadring1000, Q) -> threadring(1000, pick(Q, 10000, 100000));
run(fj_create, Q) ->
    N = pick(Q, 2000, 20000),
    Self = self(),
    {S, Sum} = timeit(fun() ->
        [begin P = spawn(fun() -> receive {go, I} -> Self ! {r, I} end end), P ! {go, I} end
         || I <- lists:seq(1, N)],
        collect(N, 0)
    end),
    Sum = N * (N + 1) div 2,
    S;
run(fib, Q) ->
    {N, Want} = pick(Q, {14, 377}, {17, 1597}),
    Self = self(),
    {S, V} = timeit(fun() -> spawn(fun() -> fibp(N, Self) end), receive {fib, X} -> X end end),
    Want = V,
    S.

ping(_, I, N) when I > N -> ok;
ping(Pong, I, N) ->
    Pong ! {self(), I},
    receive {pong, I} -> ping(Pong, I + 1, N) end.

pong() ->
    receive {From, I} -> From ! {pong, I}, pong() end.

send_n(_, 0) -> ok;
send_n(C, K) -> C ! inc, send_n(C, K - 1).

counter(T) ->
    receive
        inc -> counter(T + 1);
        {total, From} -> From ! {total, T}
    end.

threadring(Size, Hops) ->
    Self = self(),
    First = spawn(fun() -> ring_start(Self) end),
    Last = lists:foldl(fun(_, Prev) ->
                           P = spawn(fun() -> ring_start(Self) end),
                           Prev ! {next, P},
                           P
                       end, First, lists:seq(2, Size)),
    Last ! {next, First},
    {S, ok} = timeit(fun() -> First ! {token, Hops}, receive {done, 0} -> ok end end),
    S.

ring_start(Report) -> receive {next, P} -> ring(Report, P) end.

ring(Report, Next) ->
    receive
        {token, 0} -> Report ! {done, 0}, ring(Report, Next);
        {token, K} -> Next ! {token, K - 1}, ring(Report, Next)
    end.

collect(0, Acc) -> Acc;
collect(K, Acc) -> receive {r, I} -> collect(K - 1, Acc + I) end.

fibp(N, Parent) when N < 2 -> Parent ! {fib, N};
fibp(N, Parent) ->
    Me = self(),
    spawn(fun() -> fibp(N - 1, Me) end),
    spawn(fun() -> fibp(N - 2, Me) end),
    receive {fib, A} -> receive {fib, B} -> Parent ! {fib, A + B} end end.
