-- Node a's side of tests/test_cluster_peer.cpp, whose test process plays
-- the other nodes with frames it forges on NATS. main registers "inbox"
-- and prints the topic of each message it gets, in order. peers(NODE, OK)
-- waits until node OK is connected (and a while longer), then prints what
-- this node reports of NODE: whether process.nodes() lists it, and the
-- events of a monitor of { "inbox", NODE } and of
-- process.monitor_node(NODE).
local M = {}

local say = require("node_b").say

local function listed(name)
  for _, n in ipairs(process.nodes()) do
    if n == name then return true end
  end
  return false
end

function M.main()
  assert(process.registry.register("inbox"))
  say("ready", process.pid())
  while true do
    local msg = process.receive()
    say("got", msg.topic)
  end
end

function M.peers(node, ok)
  say("ready", process.pid())
  for _ = 1, 200 do
    if listed(ok) then break end
    time.sleep(0.05)
  end
  -- NODE's heartbeats come as often as OK's, on a connection of their
  -- own: a while longer, so that NODE would be listed by now if heard.
  time.sleep(0.5)
  say("listed", ok, listed(ok))
  say("listed", node, listed(node))
  local events = process.events()
  assert(process.monitor({ "inbox", node }))
  assert(process.monitor_node(node))
  for _ = 1, 2 do
    local r = channel.select { events:case_receive(), time.after(2):case_receive() }
    if r.channel ~= events then break end
    local ev = r.value
    say("event", ev.kind, ev.error or ev.node)
  end
  say("done")
end

return M
