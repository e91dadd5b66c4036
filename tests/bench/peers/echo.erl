%% The TCP echo benchmark's Erlang side (tests/bench/echo.sh): gen_tcp, a
%% process a connection, as an OTP user writes it (passive sockets, binary,
%% recv of whatever has come).
%%   escript echo.erl PORT
-module(echo).
-export([main/1]).

main([Port]) ->
    {ok, L} = gen_tcp:listen(list_to_integer(Port),
                             [binary, {packet, raw}, {active, false}, {reuseaddr, true},
                              {nodelay, true}, {backlog, 1024}, {ip, {127,0,0,1}}]),
    accept(L).

accept(L) ->
    {ok, S} = gen_tcp:accept(L),
    Pid = spawn(fun() -> receive go -> loop(S) end end),
    ok = gen_tcp:controlling_process(S, Pid),
    Pid ! go,
    accept(L).

loop(S) ->
    case gen_tcp:recv(S, 0) of
        {ok, Data} ->
            case gen_tcp:send(S, Data) of
                ok -> loop(S);
                _ -> gen_tcp:close(S)
            end;
        _ -> gen_tcp:close(S)
    end.
