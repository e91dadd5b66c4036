-- A node's side of tests/test_cluster.cpp: registers "echo" and answers
-- every message to its sender (or to the PID given as text in
-- payload.reply_to), in the order received; and "sink", which answers a
-- large message with its size alone (tests/cluster/flow.lua's bulk).
local M = {}

function M.sink()
  while true do
    local msg = process.receive()
    local p = msg.payload
    -- Not asserted: the sender's node may have ended meanwhile (its
    -- messages still arriving), and the answer is then not_found.
    process.send(msg.from, msg.topic, type(p) == "string" and #p or p)
  end
end

function M.main()
  assert(process.registry.register("echo"))
  assert(process.registry.register("sink", assert(process.spawn("serve:sink"))))
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
