-- Node b's side of tests/test_cluster.cpp's transport cases, against
-- tests/cluster/serve.lua on node a: round trips while 8 MB messages flow
-- on the same node pair (main), a stream of numbered messages across a
-- restart of nats-server (stream), a partition (partition) and the bound
-- on what is buffered while the connection is down (flood). Each says its
-- steps and figures on stdout.
local node_b = require("node_b")
local say, wait_for_echo = node_b.say, node_b.wait_for_echo

local M = {}

local function poll(events)
  local r = channel.select({ events:case_receive(), timeout = 0 })
  return r.value
end

-- Sends `size` bytes to a's sink, each followed by a small message of the
-- same pair, until told to stop; checks that the small one comes back
-- after the large one (a pair's order holds while parts interleave).
-- `pause`: seconds between one answer and the next large message.
function M.bulk(parent, size, pause)
  local big = string.rep("x", size)
  local n = 0
  while true do
    assert(process.send({ "sink", "a" }, "big", big))
    assert(process.send({ "sink", "a" }, "mark", n))
    local r1 = assert(process.receive(60), "no answer to a large message")
    if r1.topic == "stop" then break end
    assert(r1.topic == "big" and r1.payload == size, "expected the large one's answer, got " .. r1.topic)
    local r2 = assert(process.receive(60))
    if r2.topic == "stop" then break end
    assert(r2.topic == "mark" and r2.payload == n, "the small one overtook the large one")
    n = n + 1
    if n == 1 then process.send(parent, "flowing", n) end
    if pause > 0 then time.sleep(pause) end
  end
  process.send(parent, "bulk done", n)
end

local function percentile(sorted, p)
  return sorted[math.max(1, math.ceil(#sorted * p))]
end

-- Ping round trips to a's echo while another process sends size_mb
-- messages to a's sink, one after another (pause_s between them: a flow
-- that leaves the CPUs free, so that what the pings measure is what
-- waits ahead of them in the connection, not a saturated machine).
function M.main(pings, size_mb, pause_s)
  pings = tonumber(pings) or 500
  local size = math.floor((tonumber(size_mb) or 8) * 1048576)
  wait_for_echo()
  local bulk = assert(process.spawn("flow:bulk", process.pid(), size, tonumber(pause_s) or 0))
  local m = assert(process.receive(60), "the bulk sender never finished a message")
  assert(m.topic == "flowing", m.topic)
  local rtts = {}
  for i = 1, pings do
    local t0 = time.now()
    assert(process.send({ "echo", "a" }, "ping", i))
    local r = assert(process.receive(10), "no pong " .. i)
    assert(r.topic == "ping" and r.payload == i, "pong " .. i .. " was " .. tostring(r.payload))
    rtts[i] = (time.now() - t0) * 1000
    time.sleep(0.002)
  end
  process.send(bulk, "stop")
  local done = assert(process.receive(60), "the bulk sender never stopped")
  assert(done.topic == "bulk done", done.topic)
  table.sort(rtts)
  say(string.format("pings %d p50 %.3f ms p99 %.3f ms max %.3f ms; large messages %d of %d MB",
    pings, percentile(rtts, 0.5), percentile(rtts, 0.99), rtts[#rtts], done.payload, size / 1048576))
end

-- Numbered messages to a's echo, `window` in flight, for `seconds`: every
-- reply must come back once and in order. The test restarts nats-server
-- meanwhile; the longest wait for a reply shows the outage was crossed.
function M.stream(seconds, window)
  seconds = tonumber(seconds) or 4
  window = tonumber(window) or 200
  wait_for_echo()
  assert(process.monitor_node("a"))
  local events = process.events()
  local sent, got = 0, 0
  local started = time.now()
  local last, longest = started, 0
  say("streaming")
  while time.now() - started < seconds or got < sent do
    while sent - got < window and time.now() - started < seconds do
      sent = sent + 1
      assert(process.send({ "echo", "a" }, "n", sent))
    end
    local r = assert(process.receive(15), "no reply after " .. got)
    got = got + 1
    assert(r.topic == "n" and r.payload == got, "expected reply " .. got .. ", got " .. tostring(r.payload))
    local now = time.now()
    longest = math.max(longest, now - last)
    last = now
    local ev = poll(events)
    if ev and ev.kind == "nodedown" then error("node a went down mid-stream") end
  end
  local ev = poll(events)
  assert(not (ev and ev.kind == "nodedown"), "node a went down mid-stream")
  say(string.format("stream ok %d longest wait %.0f ms", got, longest * 1000))
end

-- A monitor of a's echo and of node a; the test cuts node a off and
-- joins it again.
function M.partition()
  local echo = wait_for_echo()
  assert(process.monitor(echo))
  assert(process.monitor_node("a"))
  local events = process.events()
  say("monitoring")
  local exits, down = 0, false
  while true do
    local ev = events:receive()
    if ev.kind == "exit" then
      assert(ev.from == echo and ev.error == "noconnection", "exit " .. tostring(ev.error))
      exits = exits + 1
      say("noconnection")
    elseif ev.kind == "nodedown" then
      down = true
      say("nodedown a")
    elseif ev.kind == "nodeup" and down then
      say("nodeup a")
      break
    end
  end
  -- The monitor that fired stays fired: nothing more comes of it.
  local t = time.now()
  while time.now() - t < 1.5 do
    local ev = poll(events)
    if ev and ev.kind == "exit" then exits = exits + 1 end
    time.sleep(0.05)
  end
  say("exits", exits)
  say("done")
end

-- Sends 1 MB to a's sink every 50 ms; once the connection is lost they
-- pile up until the 8 MB bound takes node a down.
function M.flood()
  wait_for_echo()
  assert(process.monitor_node("a"))
  local events = process.events()
  local big = string.rep("y", 1048576)
  say("flooding")
  local sent = 0
  while true do
    local ok, err = process.send({ "sink", "a" }, "big", big)
    if not ok then
      say("send refused after", sent, err)
      break
    end
    sent = sent + 1
    while process.receive(0) do end
    local ev = poll(events)
    if ev and ev.kind == "nodedown" then
      say("nodedown a after", sent)
      break
    end
    time.sleep(0.05)
  end
  say("done")
end

return M
