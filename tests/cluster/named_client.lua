-- Node b's side of tests/test_cluster.cpp's names case, against
-- tests/cluster/hub.lua on node a: process.monitor({ name, node }),
-- server.call and cast across nodes, pg groups spanning the two; then,
-- once it says "ready for kill" and the test kills node a, that a call in
-- flight, a monitor by name and a's pg members all end with its nodedown.
local server = require("server")
local pg = require("pg")

local M = {}

local say = require("node_b").say

local function wait_for_node(name)
  for _ = 1, 200 do
    for _, n in ipairs(process.nodes()) do
      if n == name then return end
    end
    time.sleep(0.05)
  end
  error("node " .. name .. " never connected")
end

local function next_event(events, secs)
  local r = channel.select { events:case_receive(), time.after(secs):case_receive() }
  if r.channel == events then return r.value end
end

function M.idle()
  process.receive()
end

-- One call by name; tells parent its answer, then ends.
function M.call_once(parent)
  process.send(parent, "called", (server.call({ "counter", "a" }, { add = 0 })))
end

-- A call that waits on node a until a goes away; tells parent how it ended.
function M.slow_call(parent)
  local started = time.now()
  local v, err = server.call({ "counter", "a" }, "slow", 30)
  process.send(parent, "call ended", { v = v, err = err, took = time.now() - started })
end

function M.main()
  wait_for_node("a")
  local events = process.events()

  -- process.monitor({ name, node }): nobody holds the name there.
  assert(process.monitor({ "nosuch", "a" }) == true)
  local ev = assert(next_event(events, 5), "no exit for a name nobody holds on a")
  assert(ev.kind == "exit" and ev.error == "noproc", "expected noproc, got " .. tostring(ev.error))
  assert(ev.from == nil, "a noproc by name names no process")
  local ok, err = process.link({ "counter", "a" })
  assert(ok == nil and tostring(err):match("^invalid: process.link takes a PID"), tostring(err))
  ok, err = process.link({ "local_idle", "b" })
  assert(ok == nil and tostring(err):match("^invalid:"), tostring(err))
  say("monitor noproc ok; link refused:", err)
  -- This node's own name: a local monitor by name.
  local idle = assert(process.spawn("named_client:idle"))
  assert(process.registry.register("local_idle", idle))
  assert(process.monitor({ "local_idle", "b" }))
  assert(process.terminate(idle))
  ev = assert(next_event(events, 5))
  assert(ev.kind == "exit" and ev.from == idle and ev.error == "terminated", tostring(ev.error))
  local none, nerr = process.monitor({ "nobody_here", "b" })
  assert(none == nil and tostring(nerr):match("^not_found"), tostring(nerr))
  say("local monitor by name ok")

  -- server.call and cast by { name, node }, then by the remote PID.
  local function watchers()
    assert(process.send({ "hub", "a" }, "watchers", "counter"))
    local w = assert(process.receive(5), "hub did not answer")
    assert(w.topic == "watchers", w.topic)
    return w.payload
  end
  local before = watchers()
  assert(server.call({ "counter", "a" }, { add = 2 }) == 2)
  assert(server.cast({ "counter", "a" }, { add = 3 }))
  assert(server.call({ "counter", "a" }, { add = 0 }) == 5)
  local spid = assert(server.call({ "counter", "a" }, "pid"))
  assert(server.call(spid, { add = 1 }) == 6)
  assert(server.cast(spid, { add = 1 }))
  assert(server.call(spid, { add = 0 }) == 7)
  local t0 = time.now()
  local v, cerr = server.call({ "nosuch", "a" }, { add = 1 }, 5)
  assert(v == nil and tostring(cerr):match("^not_found: 'nosuch' on node a"), tostring(cerr))
  assert(time.now() - t0 < 2, "a missing name waited for the timeout")
  v, cerr = server.call({ "counter", "a" }, "slow", 0.3)
  assert(v == nil and cerr == "timeout", tostring(cerr))
  -- This node's own name: a local server.
  assert(server.start("counter_server", 10, { name = "local_counter" }))
  assert(server.call({ "local_counter", "b" }, { add = 1 }) == 11)
  assert(server.stop({ "local_counter", "b" }) == true)
  assert(process.registry.lookup("local_counter") == nil, "the local server outlived its stop")
  -- server.stop by { name, node }: true once it ended there.
  assert(server.stop({ "spare", "a" }) == true)
  v, cerr = server.call({ "spare", "a" }, { add = 1 })
  assert(v == nil and tostring(cerr):match("^not_found"), tostring(cerr))
  -- Each call by name watches the server for itself alone and drops the
  -- watch after: three callers that end (a PID counts once however many
  -- monitors it holds) leave none, and only this process's kept watch of
  -- the calls by PID is added on a.
  for _ = 1, 3 do assert(process.spawn("named_client:call_once", process.pid())) end
  for _ = 1, 3 do
    local m = assert(process.receive(5), "a caller did not answer")
    assert(m.topic == "called" and m.payload == 7, tostring(m.payload))
  end
  local after = watchers()
  assert(after == before + 1, "the server's watchers went from " .. before .. " to " .. after .. ", not one more")
  say("server.call ok", spid)

  -- pg: a's members joined before this node connected (the sync). Up to
  -- 5 s: the sync is a poll and a round trip, but a loaded machine (the
  -- sanitizers' runs) has taken 2 s.
  local members = {}
  for _ = 1, 250 do
    members = pg.members("g")
    if #members == 2 then break end
    time.sleep(0.02)
  end
  assert(#members == 2, "b sees " .. #members .. " of a's 2 members of g")
  say("pg sync ok")
  assert(pg.send("g", "hi", 1) == 2)
  for _ = 1, 2 do
    local m = assert(process.receive(5), "a member of g on a did not answer")
    assert(m.topic == "got" and m.payload == "a", tostring(m.topic))
  end
  say("pg send ok")
  -- A join here is seen on a within 1 s.
  assert(pg.join("g2"))
  local joined = time.now()
  local seen
  while not seen and time.now() - joined < 1 do
    assert(process.send({ "hub", "a" }, "members", "g2"))
    local m = assert(process.receive(1), "hub did not answer")
    seen = #m.payload == 1 and m.payload[1] == process.pid()
    if not seen then time.sleep(0.02) end
  end
  assert(seen, "a did not see this node's join within 1 s")
  say("pg join seen in", string.format("%.3f", time.now() - joined))

  -- Node a goes away: a call in flight, a monitor by name, a's members.
  assert(process.monitor({ "counter", "a" }))
  assert(process.spawn("named_client:slow_call", process.pid()))
  time.sleep(0.3)  -- its call waits on a
  say("ready for kill")
  local inbox = process.inbox()
  local got_exit, got_call
  while not (got_exit and got_call) do
    local r = channel.select { events:case_receive(), inbox:case_receive(), time.after(10):case_receive() }
    assert(r.channel == events or r.channel == inbox, "nothing came within 10 s of the kill")
    local x = r.value
    if r.channel == events and x.kind == "exit" then
      assert(x.error == "noconnection" and not got_exit, tostring(x.error))
      got_exit = true
      say("monitor by name noconnection")
    elseif r.channel == inbox and x.topic == "call ended" then
      assert(x.payload.v == nil and x.payload.err == "exit: noconnection", tostring(x.payload.err))
      got_call = true
      say("call noconnection", x.payload.err, string.format("%.3f", x.payload.took))
    end
  end
  for _ = 1, 100 do
    if #pg.members("g") == 0 then break end
    time.sleep(0.02)
  end
  assert(#pg.members("g") == 0, "a's members outlived its nodedown")
  say("pg nodedown ok")
  say("done")
end

return M
