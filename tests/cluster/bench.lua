-- Node b's side of tests/bench/cluster.sh, against tests/cluster/serve.lua
-- on node a. Prints "FIGURE NAME KEY VALUE" lines:
--   rtt N        N round trips to a's echo, one after another: p50, p99
--   oneway N     N messages of 16 bytes to a counter on a: messages/s
--   mb N         N messages of 1 MB to a's sink, 8 in flight: MB/s
local node_b = require("node_b")
local wait_for_echo = node_b.wait_for_echo

local M = {}

local function figure(name, key, value)
  node_b.say(string.format("FIGURE %s %s %.1f", name, key, value))
end

function M.rtt(n)
  n = tonumber(n) or 10000
  wait_for_echo()
  local t = {}
  for i = 1, n do
    local t0 = time.now()
    assert(process.send({ "echo", "a" }, "p", i))
    local r = assert(process.receive(5), "no reply")
    assert(r.payload == i)
    t[i] = (time.now() - t0) * 1e6
  end
  table.sort(t)
  figure("host_rtt", "p50_us", t[math.max(1, math.floor(n / 2))])
  figure("host_rtt", "p99_us", t[math.max(1, math.floor(n * 0.99))])
end

-- On node a (spawn_on): receives n messages, then says so.
function M.counter(reply_to, n)
  for _ = 1, n do process.receive() end
  process.send(reply_to, "counted", n)
end

function M.oneway(n)
  n = tonumber(n) or 200000
  wait_for_echo()
  local counter = assert(process.spawn_on("a", "bench:counter", process.pid(), n))
  local payload = "0123456789abcdef"
  local t0 = time.now()
  for _ = 1, n do assert(process.send(counter, "m", payload)) end
  local r = assert(process.receive(120), "the counter never finished")
  assert(r.topic == "counted")
  figure("host_oneway", "msgs_per_s", n / (time.now() - t0))
end

function M.mb(n)
  n = tonumber(n) or 200
  wait_for_echo()
  local big = string.rep("z", 1048576)
  local t0 = time.now()
  local sent, got = 0, 0
  while got < n do
    while sent < n and sent - got < 8 do
      sent = sent + 1
      assert(process.send({ "sink", "a" }, "big", big))
    end
    local r = assert(process.receive(60), "no answer from the sink")
    assert(r.payload == #big)
    got = got + 1
  end
  figure("host_mb", "mb_per_s", n / (time.now() - t0))
end

return M
