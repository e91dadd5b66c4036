-- A server for tests/cluster/named_client.lua's server.call across
-- nodes: a running total; "pid" answers its PID, "slow" never answers
-- (the caller waits until its timeout, or until this node goes away).
local server = require("server")

return {
  init = function(n) return { n = n } end,
  handle_call = function(req, _, state)
    if req == "pid" then return process.pid(), state end
    if req == "slow" then return server.noreply(state) end
    state.n = state.n + req.add
    return state.n, state
  end,
  handle_cast = function(msg, state)
    state.n = state.n + msg.add
    return state
  end,
}
