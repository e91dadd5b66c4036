#!/usr/bin/env escript
%% Erlang distribution between two nodes on loopback, the peer of the
%% host's cluster in tests/bench/cluster.sh. Both ends run this script as
%% distributed nodes (ERL_FLAGS="-sname NAME -setcookie C"):
%%   serve                 registers echo (answers {From, ping, X} with
%%                         {pong, X}) and counter (counts {m, Bin}
%%                         messages, answers {From, count, N} once N came)
%%   rtt NODE N            N round trips to NODE's echo: p50 and p99 in us
%%   oneway NODE N         N messages of 16 bytes to NODE's counter: msgs/s
-mode(compile).

main(["serve"]) ->
    register(echo, spawn(fun echo/0)),
    register(counter, spawn(fun() -> counter(0) end)),
    io:format("serving~n"),
    receive stop -> ok end;
main(["rtt", Node, N]) ->
    Peer = connect(Node),
    Count = list_to_integer(N),
    Times = [round_trip(Peer, I) || I <- lists:seq(1, Count)],
    Sorted = lists:sort(Times),
    io:format("FIGURE erlang_rtt p50_us ~.1f~nFIGURE erlang_rtt p99_us ~.1f~n",
              [lists:nth(max(1, Count div 2), Sorted) / 1.0,
               lists:nth(max(1, trunc(Count * 0.99)), Sorted) / 1.0]);
main(["oneway", Node, N]) ->
    Peer = connect(Node),
    Count = list_to_integer(N),
    Bin = <<"0123456789abcdef">>,
    T0 = erlang:monotonic_time(microsecond),
    {counter, Peer} ! {self(), count, Count},
    send_n({counter, Peer}, Bin, Count),
    receive counted -> ok after 60000 -> halt(1) end,
    Us = erlang:monotonic_time(microsecond) - T0,
    io:format("FIGURE erlang_oneway msgs_per_s ~.1f~n", [Count * 1.0e6 / Us]);
main(_) ->
    io:format(standard_error, "usage: cluster.erl serve | rtt NODE N | oneway NODE N~n", []),
    halt(2).

connect(Node) ->
    Peer = list_to_atom(Node),
    case net_kernel:connect_node(Peer) of
        true -> Peer;
        _ -> io:format(standard_error, "cluster.erl: cannot reach ~s~n", [Node]), halt(1)
    end.

round_trip(Peer, I) ->
    T0 = erlang:monotonic_time(microsecond),
    {echo, Peer} ! {self(), ping, I},
    receive {pong, I} -> erlang:monotonic_time(microsecond) - T0 after 5000 -> halt(1) end.

send_n(_, _, 0) -> ok;
send_n(To, Bin, N) -> To ! {m, Bin}, send_n(To, Bin, N - 1).

echo() ->
    receive {From, ping, X} -> From ! {pong, X} end,
    echo().

counter(_) ->
    receive {From, count, N} -> count(N), From ! counted end,
    counter(0).

count(0) -> ok;
count(N) -> receive {m, _} -> count(N - 1) end.
