#!/usr/bin/env escript
%% The Savina shapes of scripts/bench in idiomatic Erlang, same parameters.
%%   escript tests/bench/peers/savina.erl NAME [--quick]
%% Prints "RESULT NAME SECONDS"; checks each result like the host does.
-module(savina).
-mode(compile).
%% request and server_call: the callbacks of their gen_server.
-behaviour(gen_server).
-export([init/1, handle_call/3, handle_cast/2]).

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
    N = pick(Q, 20000, 1000000),
    Pong = spawn(fun pong/0),
    {S, ok} = timeit(fun() -> ping(Pong, 1, N) end),
    S;
run(counting, Q) ->
    N = pick(Q, 20000, 5000000),
    Self = self(),
    C = spawn(fun() -> counter(0) end),
    {S, Total} = timeit(fun() -> send_n(C, N), C ! {total, Self}, receive {total, T} -> T end end),
    N = Total,
    S;
run(threadring100, Q) -> threadring(100, pick(Q, 20000, 2000000));
run(threadring1000, Q) -> threadring(1000, pick(Q, 10000, 1000000));
run(fj_create, Q) ->
    N = pick(Q, 2000, 150000),
    Self = self(),
    {S, Sum} = timeit(fun() ->
        [begin P = spawn(fun() -> receive {go, I} -> Self ! {r, I} end end), P ! {go, I} end
         || I <- lists:seq(1, N)],
        collect(N, 0)
    end),
    Sum = N * (N + 1) div 2,
    S;
run(fj_throughput, Q) ->
    {Actors, N} = {40, pick(Q, 2000, 100000)},
    Self = self(),
    %% Each worker's mailbox grows to N messages by design: keep them off
    %% its heap, as OTP's documentation advises for such processes (with
    %% the default, every collection copies the queue: 18-213 s here).
    Pids = [spawn_opt(fun() -> fj_worker(Self, N, 0, 0.0) end, [{message_queue_data, off_heap}])
            || _ <- lists:seq(1, Actors)],
    {S, Sum} = timeit(fun() ->
        lists:foreach(fun(_) -> [P ! work || P <- Pids] end, lists:seq(1, N)),
        collect(Actors, 0)
    end),
    Sum = Actors * N,
    S;
run(big, Q) ->
    {Workers, N} = {100, pick(Q, 500, 10000)},
    Self = self(),
    Pids = [spawn(fun() -> big_start(Self, N, I) end) || I <- lists:seq(1, Workers)],
    Peers = list_to_tuple(Pids),
    {S, Pings} = timeit(fun() -> [P ! {peers, Peers} || P <- Pids], collect(Workers, 0) end),
    Pings = Workers * N,
    S;
run(chameneos, Q) ->
    {Creatures, Meetings} = {10, pick(Q, 20000, 600000)},
    Self = self(),
    {S, Total} = timeit(fun() ->
        spawn(fun() -> mall_start(Self, Creatures, Meetings) end),
        receive {meetings, T} -> T end
    end),
    Total = 2 * Meetings,
    S;
%% Spawn-and-idle memory: N processes blocked in receive; the RSS they add,
%% per process, is printed as "MEMORY idle_memory KB".
run(idle_memory, Q) ->
    N = pick(Q, 10000, 100000),
    Self = self(),
    Before = rss_kb(),
    {S, Pids} = timeit(fun() ->
        Ps = [spawn(fun idle/0) || _ <- lists:seq(1, N)],
        lists:last(Ps) ! {ping, Self},
        receive pong -> ok end,
        Ps
    end),
    After = rss_kb(),
    io:format("MEMORY idle_memory ~.2f~n", [(After - Before) / N]),
    [P ! stop || P <- Pids],
    S;
%% request: gen_server:call, OTP's request/reply (a monitor, the call, a
%% receive of its reference with a timeout, the demonitor), N calls.
run(request, Q) ->
    N = pick(Q, 5000, 200000),
    {ok, Server} = gen_server:start(?MODULE, [], []),
    {S, ok} = timeit(fun() -> call_n(Server, 1, N) end),
    gen_server:stop(Server),
    S;
%% server_call: the host's server.call is gen_server:call too (request's
%% round trip plus a server's dispatch), so its peer is the same N calls.
run(server_call, Q) ->
    run(request, Q);
run(fib, Q) ->
    {N, Want} = pick(Q, {14, 377}, {24, 46368}),
    Self = self(),
    {S, V} = timeit(fun() -> spawn(fun() -> fibp(N, Self) end), receive {fib, X} -> X end end),
    Want = V,
    S.


call_n(_, I, N) when I > N -> ok;
call_n(Server, I, N) ->
    Reply = gen_server:call(Server, {add, I}, 5000),
    true = Reply =:= I + 1,
    call_n(Server, I + 1, N).

init([]) -> {ok, nil}.
handle_call({add, I}, _From, State) -> {reply, I + 1, State}.
handle_cast(_, State) -> {noreply, State}.

idle() ->
    receive
        {ping, From} -> From ! pong, idle();
        stop -> ok
    end.

rss_kb() ->
    {ok, Status} = file:read_file("/proc/self/status"),
    {match, [Kb]} = re:run(Status, "VmRSS:\\s+(\\d+)", [{capture, all_but_first, list}]),
    list_to_integer(Kb).

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

fj_worker(Report, N, N, X) -> Report ! {r, N}, X;
fj_worker(Report, N, K, X) ->
    receive work -> fj_worker(Report, N, K + 1, X + compute(1, 0.0)) end.

compute(11, Acc) -> Acc;
compute(K, Acc) -> compute(K + 1, Acc + math:sqrt(K) * math:sin(K)).

big_start(Report, N, Index) ->
    receive {peers, Peers} -> big_loop(Report, N, Peers, big_ping(Peers, Index * 7919), 1) end.

big_ping(Peers, Rng0) ->
    Rng = (Rng0 * 1103515245 + 12345) rem 2147483648,
    J = Rng rem tuple_size(Peers) + 1,
    Me = self(),
    Target = case element(J, Peers) of Me -> element(J rem tuple_size(Peers) + 1, Peers); P -> P end,
    Target ! {ping, Me},
    Rng.

big_loop(Report, N, Peers, Rng, Sent) ->
    receive
        {ping, From} -> From ! pong, big_loop(Report, N, Peers, Rng, Sent);
        pong when Sent < N -> big_loop(Report, N, Peers, big_ping(Peers, Rng), Sent + 1);
        pong -> Report ! {r, Sent}, big_loop(Report, N, Peers, Rng, Sent)
    end.

complement(C, C) -> C;
complement(blue, red) -> yellow;
complement(blue, yellow) -> red;
complement(red, blue) -> yellow;
complement(red, yellow) -> blue;
complement(yellow, blue) -> red;
complement(yellow, red) -> blue.

creature(Mall, Color, Met) ->
    Mall ! {meet, self(), Color},
    receive
        stop -> Mall ! {met, Met};
        {mate, Other} -> creature(Mall, complement(Color, Other), Met + 1)
    end.

mall_start(Report, Creatures, Meetings) ->
    Mall = self(),
    Colors = {blue, red, yellow},
    [spawn(fun() -> creature(Mall, element((I - 1) rem 3 + 1, Colors), 0) end) || I <- lists:seq(1, Creatures)],
    mall(Report, Creatures, Meetings, none, 0, 0, 0).

mall(Report, Creatures, _Meetings, _Waiting, _Done, Creatures, Total) -> Report ! {meetings, Total};
mall(Report, Creatures, Meetings, Waiting, Done, Stopped, Total) ->
    receive
        {meet, From, _} when Done >= Meetings ->
            From ! stop, mall(Report, Creatures, Meetings, Waiting, Done, Stopped, Total);
        {meet, From, Color} ->
            case Waiting of
                none -> mall(Report, Creatures, Meetings, {From, Color}, Done, Stopped, Total);
                {W, WColor} ->
                    W ! {mate, Color}, From ! {mate, WColor},
                    mall(Report, Creatures, Meetings, none, Done + 1, Stopped, Total)
            end;
        {met, Met} -> mall(Report, Creatures, Meetings, Waiting, Done, Stopped + 1, Total + Met)
    end.

fibp(N, Parent) when N < 2 -> Parent ! {fib, N};
fibp(N, Parent) ->
    Me = self(),
    spawn(fun() -> fibp(N - 1, Me) end),
    spawn(fun() -> fibp(N - 2, Me) end),
    receive {fib, A} -> receive {fib, B} -> Parent ! {fib, A + B} end end.
