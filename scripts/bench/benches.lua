-- The benchmarks themselves. Each takes (quick, helpers) and returns
-- { params, seconds, per_op, unit[, figures] }, after checking its own
-- result; figures is a list of { key, number } for scripts (main.lua).
local B = { order = { "spawn_seq", "spawn_conc", "idle_memory", "idle_memory_lib", "idle_memory_slept",
  "idle_memory_timed", "queue_memory", "pingpong", "ring", "ring_local", "ring_long_topic", "pingpong_strings",
  "send_1k", "send_tables", "send_named", "send_self", "sleepers", "introspect", "pg_send", "shared_get",
  "shared_set", "shared_mix", "exec_lines", "exec_wait_read" } }

-- The Savina shapes shared with the Erlang and Go peers
-- (tests/bench/peers/); the same parameters live in all three.
B.suite = { "pingpong", "counting", "threadring100", "threadring1000", "fj_throughput", "fj_create", "big",
  "chameneos", "fib", "request", "server_call" }

local function elapsed(t0) return time.now() - t0 end

function B.spawn_seq(quick)
  local n = quick and 2000 or 20000
  local t0 = time.now()
  for i = 1, n do
    assert(process.spawn_monitored("nodes.noop", i))
    local ev = process.events():receive()
    assert(ev.result == i, "wrong result")
  end
  local s = elapsed(t0)
  return { params = "n=" .. n, seconds = s, per_op = s / n * 1e6, unit = "us/spawn" }
end

function B.spawn_conc(quick)
  local n = quick and 10000 or 100000
  local t0 = time.now()
  for i = 1, n do
    assert(process.spawn_monitored("nodes.noop", i))
    if i % 1000 == 0 then time.sleep(0) end  -- a long spawn loop must yield (--time-limit)
  end
  local sum = 0
  local events = process.events()
  for _ = 1, n do sum = sum + events:receive().result end
  local s = elapsed(t0)
  assert(sum == n * (n + 1) / 2, "wrong sum")
  return { params = "n=" .. n .. " concurrent", seconds = s, per_op = s / n * 1e6, unit = "us/spawn" }
end

-- n processes of `node` blocked in receive: the RSS each adds, and the Lua
-- heap of the last one, which it reports before all are stopped. Run it
-- alone (`-- idle_memory`): after other benchmarks, the chunks they left
-- in the arenas' pools are reused without adding RSS.
local function idle_processes(name, node, quick, h)
  local n = quick and 10000 or 100000
  collectgarbage()
  local before = h.rss_kb()
  local t0 = time.now()
  local pids = {}
  for i = 1, n do
    pids[i] = assert(process.spawn(node))
    if i % 1000 == 0 then time.sleep(0) end
  end
  -- Ask the last one for its heap: by the time it answers, all have started.
  process.send(pids[n], "heap", nil)
  local heap = process.receive(60).payload
  local s = elapsed(t0)
  local after = h.rss_kb()
  for i = 1, n do process.send(pids[i], "stop", nil) end
  local per_kb = (after - before) / n
  print(string.format("%s: %.1f KB RSS per process, %.1f KB counted Lua heap per process", name, per_kb, heap / 1024))
  print(string.format("MEMORY %s %.2f", name, per_kb))  -- for tests/bench/compare.sh
  return { params = "n=" .. n, seconds = s, per_op = per_kb, unit = "KB RSS/proc" }
end

-- process.list and process.info over n idle processes (the inspector's
-- work): the per-op figure is one info call, list's time printed beside.
function B.introspect(quick)
  local n = quick and 10000 or 100000
  local pids = {}
  for i = 1, n do
    pids[i] = assert(process.spawn("nodes.idle"))
    if i % 1000 == 0 then time.sleep(0) end
  end
  process.send(pids[n], "heap", nil)
  assert(process.receive(60), "the last process never answered")
  local t0 = time.now()
  local listed = #process.list()
  local list_s = elapsed(t0)
  assert(listed >= n, "list missed processes: " .. listed)
  t0 = time.now()
  local memory = 0
  for i = 1, n do
    local info = assert(process.info(pids[i]))
    memory = memory + info.memory
    if i % 1000 == 0 then time.sleep(0) end
  end
  local s = elapsed(t0)
  for i = 1, n do process.send(pids[i], "stop", nil) end
  assert(memory > n * 1000, "implausible heap total")
  print(string.format("introspect: process.list of %d processes %.1f ms, process.info %.2f us each", listed,
    list_s * 1e3, s / n * 1e6))
  return { params = "n=" .. n, seconds = s, per_op = s / n * 1e6, unit = "us/info" }
end

-- The Savina-style idle process: a one-function module, nothing opened.
function B.idle_memory(quick, h) return idle_processes("idle_memory", "nodes.idle", quick, h) end

-- One that has used the base library and keeps a small table.
function B.idle_memory_lib(quick, h) return idle_processes("idle_memory_lib", "nodes.idle_lib", quick, h) end

-- One that has slept once (time.sleep's C path: BENCHMARKS.md, change 96).
function B.idle_memory_slept(quick, h) return idle_processes("idle_memory_slept", "nodes.idle_slept", quick, h) end

-- One that waits in receive with a timeout (its C path: change 98).
function B.idle_memory_timed(quick, h) return idle_processes("idle_memory_timed", "nodes.idle_timed", quick, h) end

-- A process per delay: n processes that each sleep 1 ms and answer, as
-- short-lived workers with a delay do.
function B.sleepers(quick)
  local n = quick and 10000 or 100000
  local me = process.pid()
  local t0 = time.now()
  for i = 1, n do
    assert(process.spawn("nodes.sleeper", me, i))
    if i % 1000 == 0 then time.sleep(0) end
  end
  local sum = 0
  for _ = 1, n do sum = sum + assert(process.receive(30), "a sleeper did not answer").payload end
  local s = elapsed(t0)
  assert(sum == n * (n + 1) / 2, "wrong sum")
  return { params = "n=" .. n .. ", 1 ms each", seconds = s, per_op = s / n * 1e6, unit = "us/process" }
end

function B.pingpong(quick)
  local n = quick and 20000 or 1000000
  local pong = assert(process.spawn("nodes.pong"))
  local t0 = time.now()
  local msg = { n = 0 }
  for i = 1, n do
    msg.n = i
    process.send(pong, "ping", msg)
    local r = process.receive()
    if r.payload.n ~= i then error("pingpong out of step") end
  end
  local s = elapsed(t0)
  process.send(pong, "stop", nil)
  return { params = "n=" .. n, seconds = s, per_op = s / n * 1e6, unit = "us/round trip" }
end

-- What a message waiting for a busy process costs: n messages sent to one
-- that is inside a long step, so all of them wait in its queue.
function B.queue_memory(quick, h)
  local n = quick and 100000 or 1000000
  local node = assert(process.spawn("nodes.busy", process.pid(), quick and 1 or 4))
  assert(process.receive(10).topic == "busy")
  collectgarbage()
  local before = h.rss_kb()
  local t0 = time.now()
  for i = 1, n do process.send(node, "m", i) end
  local s = elapsed(t0)
  local per_byte = (h.rss_kb() - before) * 1024 / n
  process.send(node, "end", nil)
  local m = process.receive(60)
  assert(m and m.payload == n, "the busy process lost messages")
  return { params = "n=" .. n, seconds = s, per_op = per_byte, unit = "B RSS/message" }
end

function B.send_1k(quick)
  local n = quick and 20000 or 200000
  local sink = assert(process.spawn("nodes.sink", process.pid(), n))
  local payload = string.rep("x", 1024)
  local t0 = time.now()
  for _ = 1, n do process.send(sink, "data", payload) end
  local m = process.receive()
  local s = elapsed(t0)
  assert(m.payload == n * 1024, "sink lost bytes")
  return { params = "n=" .. n .. " 1 KB strings", seconds = s, per_op = s / n * 1e6, unit = "us/message" }
end

-- A program's output read line by line: `seq n` through exec.start's
-- stdout, one receive("*l") a line (most answered by what is buffered).
function B.exec_lines(quick)
  local n = quick and 20000 or 200000
  local t0 = time.now()
  local p = assert(exec.start({ "seq", tostring(n) }))
  local count, last = 0, nil
  while true do
    local line = p.stdout:receive("*l")
    if not line then break end
    count, last = count + 1, line
  end
  local s = elapsed(t0)
  assert(count == n and last == tostring(n), "lines lost")
  assert(p:wait().code == 0)
  return { params = "n=" .. n .. " lines of seq", seconds = s, per_op = s / n * 1e6, unit = "us/line" }
end

-- A program waited for before its output is read: `seq 100000` (588 KB,
-- more than a pipe holds) started, p:wait(), then receive("*a"); the
-- output comes in while the wait waits (read ahead up to 1 MiB a pipe).
-- Rounds of it; a wait that times out fails the run.
function B.exec_wait_read(quick)
  local rounds = quick and 5 or 50
  local t0 = time.now()
  for _ = 1, rounds do
    local p = assert(exec.start({ "seq", "100000" }))
    local st, err = p:wait(10)
    assert(st and st.code == 0, "wait: " .. tostring(err))
    assert(#p.stdout:receive("*a") == 588895, "output lost")
  end
  local s = elapsed(t0)
  return { params = rounds .. " rounds of seq 100000", seconds = s, per_op = s / rounds * 1e3, unit = "ms/round" }
end

-- pg.send to a group of 1,000 members against the same 1,000 sends made
-- one by one, alternately, rounds of each; the ratio is the figure.
function B.pg_send(quick)
  local pg = require("pg")
  local members, rounds = 1000, quick and 20 or 200
  local group = "bench" .. process.pid()
  local pids = {}
  for i = 1, members do
    pids[i] = assert(process.spawn("nodes.count_to", process.pid(), 2 * rounds))
    assert(pg.join(group, pids[i]))
  end
  local plain, grouped = 0, 0
  for _ = 1, rounds do
    local t0 = time.now()
    for i = 1, members do process.send(pids[i], "m", 1) end
    plain = plain + elapsed(t0)
    t0 = time.now()
    assert(pg.send(group, "m", 1) == members, "pg.send missed a member")
    grouped = grouped + elapsed(t0)
  end
  for _ = 1, members do assert(process.receive(30), "a member did not finish") end
  return { params = members .. " members x " .. rounds .. " rounds, plain sends " ..
             string.format("%.1f us", plain / rounds * 1e6) .. " a round, ratio pg/plain " ..
             string.format("%.2fx", grouped / plain),
           seconds = plain + grouped, per_op = grouped / rounds * 1e6, unit = "us/pg.send" }
end

-- require("shared"): one call on a table, a small string value, 1000 keys.
local function shared_calls(name, quick, call)
  local n = quick and 200000 or 2000000
  local t = assert(require("shared").table("bench_" .. name))
  local v = "small value"
  for k = 0, 999 do t:set(k, v) end
  local t0 = time.now()
  call(t, n, v)
  local s = elapsed(t0)
  assert(t:get(999) == v, "the table lost a value")
  return { params = "n=" .. n .. ", 1000 keys", seconds = s, per_op = s / n * 1e9, unit = "ns/op" }
end

function B.shared_get(quick)
  return shared_calls("shared_get", quick, function(t, n)
    local get = t.get
    for i = 1, n do get(t, i % 1000) end
  end)
end

function B.shared_set(quick)
  return shared_calls("shared_set", quick, function(t, n, v)
    local set = t.set
    for i = 1, n do set(t, i % 1000, v) end
  end)
end

-- Read-mostly (19 gets to 1 set) from 1, then 2 processes at once, each
-- making n calls: with a worker each, the second should add throughput
-- (the shards' locks are per key). Run with --workers 2 or more.
function B.shared_mix(quick)
  local n = quick and 200000 or 2000000
  local name = "bench_shared_mix"
  assert(require("shared").table(name))
  local function run(procs)
    local t0 = time.now()
    for _ = 1, procs do assert(process.spawn("nodes.shared_mix", process.pid(), name, n)) end
    for _ = 1, procs do assert(process.receive(120), "a worker did not finish") end
    return elapsed(t0)
  end
  local one = run(1)
  local two = run(2)
  local scale = (2 * n / two) / (n / one)
  return { params = string.format("n=%d a process, 1 proc %.0f ns/op, 2 procs %.2fx the ops/s", n, one / n * 1e9,
             scale),
           seconds = one + two, per_op = two / (2 * n) * 1e9, unit = "ns/op (2 procs)",
           figures = { { "one_ns", one / n * 1e9 }, { "scale", scale } } }
end

-- Table payloads through the codec: a 100-item array and a record of 8
-- items and 3 keys, alternately, to a sink that adds up their lengths.
function B.send_tables(quick)
  local n = quick and 2000 or 20000
  local sink = assert(process.spawn("nodes.sink", process.pid(), 2 * n))
  local array = {}
  for i = 1, 100 do array[i] = i end
  local record = { 1, 2, 3, 4, 5, 6, 7, 8, name = "record", ok = true, ratio = 0.5 }
  local t0 = time.now()
  for _ = 1, n do
    process.send(sink, "array", array)
    process.send(sink, "record", record)
  end
  local m = process.receive()
  local s = elapsed(t0)
  assert(m.payload == n * (100 + 8), "sink lost items")
  return { params = "n=" .. n .. " arrays and records", seconds = s, per_op = s / (2 * n) * 1e6, unit = "us/message" }
end

-- PingPong with string payloads that the receivers do not keep: a new
-- 10-byte string each round trip, then one 20-byte string over and over
-- (longer than the 15 bytes a process keeps); not in the Savina suite.
function B.pingpong_strings(quick)
  local n = quick and 2000 or 100000
  local echo = assert(process.spawn("nodes.string_echo"))
  local t0 = time.now()
  for i = 1, n do
    local v = ("s%09d"):format(i)
    process.send(echo, "s", v)
    assert(process.receive().payload == v, "wrong echo")
  end
  local long = ("x"):rep(20)
  for _ = 1, n do
    process.send(echo, "s", long)
    assert(process.receive().payload == long, "wrong echo")
  end
  local s = elapsed(t0)
  process.send(echo, "stop", nil)
  return { params = "n=" .. n .. " new, n=" .. n .. " long", seconds = s, per_op = s / (2 * n) * 1e6,
    unit = "us/round trip" }
end

-- Counting's shape, to a registered name: what a send to a named server
-- costs beside a send to its PID (counting).
function B.send_named(quick)
  local n = quick and 20000 or 200000
  local counter = assert(process.spawn("nodes.counter"))
  assert(process.registry.register("bench_counter", counter))
  local t0 = time.now()
  for _ = 1, n do process.send("bench_counter", "inc", nil) end
  process.send("bench_counter", "total", nil)
  local m = process.receive()
  local s = elapsed(t0)
  assert(m.payload == n, "counter lost messages")
  return { params = "n=" .. n, seconds = s, per_op = s / n * 1e6, unit = "us/message" }
end

-- A process that sends itself a message and receives it, one at a time
-- (Erlang's `self() ! Msg`): each send readies the running process, whose
-- step then ends and starts again with the message.
function B.send_self(quick)
  local n = quick and 20000 or 1000000
  local me = process.pid()
  local sum = 0
  local t0 = time.now()
  for i = 1, n do
    process.send(me, "self", i)
    sum = sum + process.receive().payload
  end
  local s = elapsed(t0)
  assert(sum == n * (n + 1) / 2, "lost messages to itself")
  return { params = "n=" .. n, seconds = s, per_op = s / n * 1e6, unit = "us/message" }
end

function B.counting(quick)
  local n = quick and 20000 or 5000000
  local counter = assert(process.spawn("nodes.counter"))
  local t0 = time.now()
  for _ = 1, n do process.send(counter, "inc", nil) end
  process.send(counter, "total", nil)
  local m = process.receive()
  local s = elapsed(t0)
  assert(m.payload == n, "counter lost messages")
  return { params = "n=" .. n, seconds = s, per_op = s / n * 1e6, unit = "us/message" }
end

local function threadring(size, hops, node, topic)
  node = node or "nodes.ring"
  topic = topic or "token"
  local me = process.pid()
  local first = assert(process.spawn(node, me, topic))
  local prev, nodes = first, { first }
  for i = 2, size do
    local p = assert(process.spawn(node, me, topic))
    process.send(prev, "next", p)
    prev, nodes[i] = p, p
  end
  process.send(prev, "next", first)
  local t0 = time.now()
  process.send(first, topic, hops)
  local m = process.receive()
  local s = elapsed(t0)
  assert(m.topic == "done" and m.payload == 0, "ring ended wrong")
  for i = 1, size do process.send(nodes[i], "stop", nil) end
  return { params = "procs=" .. size .. " hops=" .. hops, seconds = s, per_op = s / hops * 1e6, unit = "us/hop" }
end

function B.threadring100(quick) return threadring(100, quick and 20000 or 2000000) end

-- The 1000-process ring of the Lua process benchmarks; RING_SIZE changes
-- the ring (BENCHMARKS.md compares 10, 100 and 1000).
function B.ring(quick)
  return threadring(tonumber(os.getenv("RING_SIZE")) or 1000, quick and 100000 or 1000000)
end
function B.threadring1000(quick) return threadring(1000, quick and 10000 or 1000000) end

-- ThreadRing 100 with nodes that keep process.receive in a local
-- (nodes/ring_local.lua): the C function's form of receive, not in the
-- Savina suite.
function B.ring_local(quick) return threadring(100, quick and 20000 or 2000000, "nodes.ring_local") end

-- ThreadRing 100 whose token travels on a topic of 17 bytes
-- (nodes/ring_topic.lua), not in the Savina suite.
function B.ring_long_topic(quick)
  return threadring(100, quick and 20000 or 2000000, "nodes.ring_topic", "token_passing_msg")
end

function B.fj_create(quick)
  local n = quick and 2000 or 150000
  local t0 = time.now()
  for i = 1, n do
    local pid = assert(process.spawn_monitored("nodes.once"))
    process.send(pid, "go", i)
    if i % 1000 == 0 then time.sleep(0) end
  end
  local sum, events = 0, process.events()
  for _ = 1, n do sum = sum + events:receive().result end
  local s = elapsed(t0)
  assert(sum == n * (n + 1) / 2, "wrong sum")
  return { params = "n=" .. n, seconds = s, per_op = s / n * 1e6, unit = "us/process" }
end

-- A actors each get N messages (round robin) and do a little arithmetic
-- per message; each reports when it has seen N.
function B.fj_throughput(quick)
  local actors, n = 40, quick and 2000 or 100000
  local me = process.pid()
  local pids = {}
  for i = 1, actors do pids[i] = assert(process.spawn("nodes.fj_worker", me, n)) end
  local t0 = time.now()
  for _ = 1, n do
    for i = 1, actors do process.send(pids[i], "work", nil) end
  end
  local sum = 0
  for _ = 1, actors do sum = sum + process.receive().payload end
  local s = elapsed(t0)
  assert(sum == actors * n, "lost work")
  return { params = "actors=" .. actors .. " n=" .. n, seconds = s, per_op = s / (actors * n) * 1e6, unit = "us/message" }
end

-- W workers each ping a random other worker N times, waiting for each pong.
function B.big(quick)
  local workers, n = 100, quick and 500 or 10000
  local me = process.pid()
  local pids = {}
  for i = 1, workers do pids[i] = assert(process.spawn("nodes.big_worker", me, n, i)) end
  local t0 = time.now()
  for i = 1, workers do process.send(pids[i], "peers", pids) end
  local pings = 0
  for _ = 1, workers do pings = pings + process.receive().payload end
  local s = elapsed(t0)
  for i = 1, workers do process.send(pids[i], "stop", nil) end
  assert(pings == workers * n, "lost pings")
  return { params = "workers=" .. workers .. " n=" .. n, seconds = s, per_op = s / pings * 1e6, unit = "us/ping-pong" }
end

-- A mall pairs meeting requests from C creatures until M meetings happened.
function B.chameneos(quick)
  local creatures, meetings = 10, quick and 20000 or 600000
  local t0 = time.now()
  assert(process.spawn("nodes.chameneos:mall", process.pid(), creatures, meetings))
  local m = process.receive()
  local s = elapsed(t0)
  assert(m.payload == 2 * meetings, "meetings counted wrong: " .. tostring(m.payload))
  return { params = "creatures=" .. creatures .. " meetings=" .. meetings, seconds = s, per_op = s / meetings * 1e6,
    unit = "us/meeting" }
end

function B.fib(quick)
  local n = quick and 14 or 24
  local fibs = { [0] = 0, 1 }
  for i = 2, n + 1 do fibs[i] = fibs[i - 1] + fibs[i - 2] end
  local want = fibs[n]
  local t0 = time.now()
  assert(process.spawn("nodes.fib", n, process.pid()))
  local m = process.receive()
  local s = elapsed(t0)
  assert(m.payload == want, "fib(" .. n .. ") = " .. tostring(m.payload))
  local procs = 2 * fibs[n + 1] - 1  -- calls of the naive recursion
  return { params = "n=" .. n, seconds = s, per_op = s / procs * 1e6, unit = "us/process" }
end

-- request/reply the OTP way: request.call (a watch of the server, the call,
-- a select on its reply, the watch's exit and a timeout) against a server
-- that answers with request.reply; Erlang's gen_server:call.
function B.request(quick)
  local request = require("request")
  local n = quick and 5000 or 200000
  local server = assert(process.spawn("nodes.adder"))
  local t0 = time.now()
  for i = 1, n do
    local v, err = request.call(server, "add", i, 5)
    if v ~= i + 1 then error("request: call " .. i .. " got " .. tostring(v) .. " " .. tostring(err)) end
  end
  local s = elapsed(t0)
  process.send(server, "stop", nil)
  return { params = "n=" .. n, seconds = s, per_op = s / n * 1e6, unit = "us/call" }
end

-- server.call against a server (require("server")) whose handle_call
-- answers with its request plus one: request's round trip plus the
-- server's dispatch and the request table; Erlang's gen_server:call.
function B.server_call(quick)
  local server = require("server")
  local n = quick and 5000 or 200000
  local pid = assert(server.start("nodes.add_server"))
  local t0 = time.now()
  for i = 1, n do
    local v, err = server.call(pid, i, 5)
    if v ~= i + 1 then error("server_call: call " .. i .. " got " .. tostring(v) .. " " .. tostring(err)) end
  end
  local s = elapsed(t0)
  assert(server.stop(pid))
  return { params = "n=" .. n, seconds = s, per_op = s / n * 1e6, unit = "us/call" }
end

return B
