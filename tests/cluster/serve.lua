-- A node's side of tests/test_cluster.cpp: registers "echo" and answers
-- every message to its sender (or to the PID given as text in
-- payload.reply_to), in the order received.
local M = {}

function M.main()
  assert(process.registry.register("echo"))
  io.stdout:write("serving ", process.pid(), " on ", process.node(), "\n")
  io.stdout:flush()
  while true do
    local msg = process.receive()
    if msg.topic == "stop" then return end
    local to = msg.from
    if type(msg.payload) == "table" and msg.payload.reply_to then to = msg.payload.reply_to end
    assert(process.send(to, msg.topic, msg.payload))
  end
end

return M
