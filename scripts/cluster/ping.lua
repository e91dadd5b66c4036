-- Node a of the cluster example (README.md, "Several hosts"): waits for
-- node b, pings its "echo" by name, monitors it by PID, and starts a
-- process over there with spawn_on.
local function main(count)
  count = tonumber(count) or 5
  assert(process.node(), "run with --node a --cluster nats://127.0.0.1:4222")
  process.monitor_node("b")
  local events = process.events()
  -- nodedown at once while b is not connected; then nodeup when it is.
  while true do
    local ev = events:receive()
    if ev.kind == "nodeup" then break end
    log.info("waiting for node b (%s)", ev.kind)
  end
  local echo
  for i = 1, count do
    local t0 = time.now()
    assert(process.send({ "echo", "b" }, "ping", i))
    local reply = assert(process.receive(5))
    echo = reply.from
    log.info("pong %d from %s in %.3f ms", reply.payload, reply.from, (time.now() - t0) * 1000)
  end
  local greeter = assert(process.spawn_on("b", "greeter", process.pid()))
  log.info("spawned %s on b: %s", greeter, process.receive(5).payload)
  process.monitor(echo)
  process.send(echo, "stop")
  local ev = events:receive()
  log.info("echo on b ended: %s", ev.error or "normally")
end

return { main = main }
