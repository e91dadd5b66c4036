-- Two processes bounce a message N times and report the round-trip time.
--   host run scripts/pingpong -- 100000
local function pong()
  while true do
    local m = process.receive()
    if m.topic == "stop" then return end
    process.send(m.from, "pong", m.payload)
  end
end

local function main(n)
  n = tonumber(n) or 100000
  local peer = assert(process.spawn("main:pong"))
  local t0 = time.now()
  for i = 1, n do
    process.send(peer, "ping", i)
    local m = process.receive()
    assert(m.payload == i, "out of step")
  end
  local secs = time.now() - t0
  process.send(peer, "stop", nil)
  log.info("%d round trips in %.3f s: %.2f us each", n, secs, secs / n * 1e6)
end

return { main = main, pong = pong }
