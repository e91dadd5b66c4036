-- The other node's side of tests/test_cluster.cpp: messages both ways and
-- in order, PIDs as text, a monitor of a process on a node killed with
-- kill -9 (noconnection), and that node's restart (its old PID is
-- not_found). It says each step on stdout; the test kills and restarts
-- the serving node when it reads "monitoring".
local M = {}

local say = require("node_b").say

local function wait_for_node(name)
  for _ = 1, 200 do
    for _, n in ipairs(process.nodes()) do
      if n == name then return true end
    end
    time.sleep(0.05)
  end
  error("node " .. name .. " never connected")
end

function M.main(count)
  count = tonumber(count) or 1000
  assert(process.node() == "b")
  wait_for_node("a")
  -- Both ways, in order: every reply in the order sent.
  for i = 1, count do
    assert(process.send({ "echo", "a" }, "n", i))
  end
  local server
  for i = 1, count do
    local msg = assert(process.receive(10), "no reply " .. i)
    assert(msg.topic == "n" and msg.payload == i, "reply " .. i .. " was " .. tostring(msg.payload))
    server = msg.from
  end
  say("order ok", count)
  -- Over NATS's 1 MB payload limit: in parts, each way, with small ones
  -- after it still in order.
  local big = string.rep("0123456789abcdef", 3 * 65536 + 1)
  assert(process.send({ "echo", "a" }, "big", big))
  assert(process.send({ "echo", "a" }, "small", 1))
  local r1 = assert(process.receive(20), "no big reply")
  assert(r1.topic == "big" and r1.payload == big, "the big message came back changed")
  local r2 = assert(process.receive(10))
  assert(r2.topic == "small" and r2.payload == 1)
  say("big ok", #big)
  -- A PID as text: ours, given to the other node in a message, is sent to
  -- there and comes back to us; the server's PID string is the one it
  -- prints itself.
  assert(process.send(server, "text", { reply_to = process.pid() }))
  local msg = assert(process.receive(10))
  assert(msg.topic == "text" and msg.from == server)
  assert(process.send(server, "text-again", { reply_to = tostring(process.pid()) }))
  assert(process.receive(10).topic == "text-again")
  say("pid text ok", server)
  -- spawn_on: a process on node a, which answers from there; a missing
  -- module's error, and a node not connected, come back as nil, err.
  local child = assert(process.spawn_on("a", "worker", process.pid(), 7))
  local m = assert(process.receive(10), "the spawned process did not answer")
  assert(m.topic == "spawned" and m.from == child and m.payload.node == "a" and m.payload.x == 7)
  local none, err = process.spawn_on("a", "no_such_module")
  assert(none == nil and err, "spawn_on of a missing module answered " .. tostring(none))
  local none2, err2 = process.spawn_on("zz", "worker")
  assert(none2 == nil and err2:match("^not_found"), tostring(err2))
  say("spawn_on ok", child, err)
  -- A monitor of a process there, and its terminate from here.
  assert(process.monitor(child))
  assert(process.terminate(child))
  local ev = process.events():receive()
  assert(ev.kind == "exit" and ev.from == child, "expected the child's exit, got " .. tostring(ev.kind))
  say("remote terminate ok", tostring(ev.error))
  -- A monitor of the server, a link to it (trapped), and a monitor of
  -- its node.
  assert(process.monitor(server))
  process.set_options({ trap_links = true })
  assert(process.link(server))
  assert(process.monitor_node("a"))
  local events = process.events()
  say("monitoring", server)
  local got_exit, got_down, got_link
  while not (got_exit and got_down and got_link) do
    local ev = events:receive()
    if ev.kind == "exit" then
      assert(ev.from == server and ev.error == "noconnection", "exit " .. tostring(ev.error))
      assert(not got_exit, "a second exit")
      got_exit = true
      say("noconnection", ev.from)
    elseif ev.kind == "link_down" then
      assert(ev.from == server and ev.error == "noconnection", "link_down " .. tostring(ev.error))
      assert(not got_link, "a second link_down")
      got_link = true
      say("link_down noconnection")
    elseif ev.kind == "nodedown" then
      assert(ev.node == "a")
      got_down = true
      say("nodedown", ev.node)
    end
  end
  -- The test restarts node a: a new run, under the same name.
  local ev = events:receive()
  assert(ev.kind == "nodeup" and ev.node == "a", "expected nodeup, got " .. tostring(ev.kind))
  say("nodeup", ev.node)
  local ok, err = process.send(server, "n", 1)
  assert(ok == nil and tostring(err):match("^not_found"), "old PID: " .. tostring(ok) .. " " .. tostring(err))
  -- Its root may not have registered "echo" yet when the node is up: a
  -- send to a name nobody holds there is dropped, so ask again until the
  -- new run answers.
  local reply
  for _ = 1, 40 do
    assert(process.send({ "echo", "a" }, "n", 2))
    reply = process.receive(0.25)
    if reply then break end
  end
  assert(reply, "the new run of a never answered")
  assert(reply.payload == 2 and reply.from ~= server, "the new run answers with a new PID")
  say("old pid not_found", err)
  process.send(reply.from, "stop")
  say("done")
end

return M
