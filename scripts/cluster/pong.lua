-- Node b of the cluster example (README.md, "Several hosts"): answers
-- every "ping" with a "pong" to its sender, on whichever node it runs.
local function main()
  assert(process.registry.register("echo"))
  log.info("node %s: echo is %s", process.node(), process.pid())
  while true do
    local msg = process.receive()
    if msg.topic == "stop" then return end
    process.send(msg.from, "pong", msg.payload)
  end
end

return { main = main }
