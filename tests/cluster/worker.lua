-- Started on node a by tests/cluster/client.lua's process.spawn_on: says
-- where it runs, then waits to be terminated.
local M = {}

function M.main(reply_to, x)
  assert(process.send(reply_to, "spawned", { node = process.node(), x = x }))
  process.receive()
end

return M
