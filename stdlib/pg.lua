-- pg: named groups of processes (Erlang's pg). A process joins and leaves
-- groups; pg.send sends one message to every member; a process leaves all
-- its groups when it ends.
--
--   local pg = require("pg")
--   pg.join("chat")                        -- this process
--   pg.send("chat", "line", "hello")       -- how many it was sent to
--   pg.members("chat")                     -- { pid, ... }
--
-- The groups are kept by one process of the host, registered as "$pg" and
-- started by the first pg call that needs it. It monitors every member, so
-- a member's end takes it out of its groups; before it answers a call it
-- takes in the exit events already queued, so a member whose monitor
-- elsewhere has seen its end is never listed again. A group is a string
-- (or a number); its members are a set.
--
-- It keeps a member set for each node and group, changed by join and leave
-- events that a cluster layer can pass between hosts (M.run, below;
-- docs/ARCHITECTURE.md, "Process groups, shaped for a cluster"). With
-- --cluster the host starts it at once and it is that layer itself: it
-- sends its own events to the keeper of every connected node and its whole
-- part to a node that connects ("Process groups across the cluster").
local request = require("request")

local M = {}

local NAME = "$pg"

local function check_group(group, fname)
  local t = type(group)
  if t ~= "string" and t ~= "number" then
    error("bad argument #1 to '" .. fname .. "' (group name expected, got " .. t .. ")", 3)
  end
end

local function check_pid(pid, fname)
  if pid ~= nil and type(pid) ~= "string" then
    error("bad argument #2 to '" .. fname .. "' (PID expected, got " .. type(pid) .. ")", 3)
  end
end

-- The groups' process: PID, started here when it is not running yet.
local function keeper()
  local pid = process.registry.lookup(NAME)
  if pid then return pid end
  local new, err = process.spawn("pg:run")
  if not new then error("pg: cannot start its process: " .. tostring(err), 3) end
  if process.registry.register(NAME, new) then return new end
  process.terminate(new)  -- another caller's started first
  return assert(process.registry.lookup(NAME), "pg: its process is gone")
end

-- A call to the groups' process; a keeper that ended between the lookup
-- and the call (the host's shutdown) is started again once.
local function call(op, value)
  for _ = 1, 2 do
    local ok, result = request.call_raw(keeper(), op, value, 5, 3)
    if ok then return result end
    if result ~= nil then return nil, result end
  end
  return nil, "not_found: pg's process ended"
end

-- Adds pid (default: this process) to group. Returns true, or nil,
-- "not_found: ..." when pid is not alive.
function M.join(group, pid)
  check_group(group, "join")
  check_pid(pid, "join")
  return call("join", { group = group, pid = pid or process.pid() })
end

-- Takes pid (default: this process) out of group; true, also when it was
-- not a member.
function M.leave(group, pid)
  check_group(group, "leave")
  check_pid(pid, "leave")
  return call("leave", { group = group, pid = pid or process.pid() })
end

-- The group's members, a table of PIDs (empty for an unknown group).
function M.members(group)
  check_group(group, "members")
  return call("members", group)
end

-- Sends (topic, value) to every member of group; returns how many it was
-- sent to (a member that ended meanwhile is not counted).
function M.send(group, topic, value)
  check_group(group, "send")
  if type(topic) ~= "string" then error("bad argument #2 to 'send' (topic string expected)", 2) end
  local members, err = call("members", group)
  if not members then return nil, err end
  local n = 0
  for i = 1, #members do
    if process.send(members[i], topic, value) then n = n + 1 end
  end
  return n
end

-- Membership, in the shape a cluster of hosts will merge: one part for
-- each node, part[group][pid] = true. This host's part (`own`) changes only
-- by events { kind = "join" | "leave", group =, pid = }, applied by the same
-- function that applies another node's events to its part (`remote[node]`),
-- so a keeper can send its events to the other nodes' keepers as they are.
-- A member's end is a leave of each of its groups; a node that goes down
-- takes its whole part with it; `snapshot` is this node's part as joins,
-- what a node that just connected applies first.
local function apply(part, ev)
  local g = part[ev.group]
  if ev.kind == "join" then
    if not g then
      g = {}
      part[ev.group] = g
    end
    g[ev.pid] = true
  elseif g then
    g[ev.pid] = nil
    if next(g) == nil then part[ev.group] = nil end
  end
end

local function snapshot(part)
  local evs = {}
  for group, pids in pairs(part) do
    for pid in pairs(pids) do evs[#evs + 1] = { kind = "join", group = group, pid = pid } end
  end
  return evs
end

-- How often a keeper in a cluster looks for nodes that connected (it
-- learns of a node's end from its nodedown event, of its return from its
-- nodeup): a join reaches a new node within this plus a round trip.
local POLL_NODES = 0.25
-- The topic of the keepers' messages to each other.
local PEER = "$pg.peer"

-- The groups' process. Its calls beside pg's own (join, leave, members)
-- are the cluster layer's: "remote" { node =, events = } applies another
-- node's events to its part, "nodedown" drops a node's part, "subscribe"
-- answers this node's snapshot and then sends the caller each of this
-- node's events as a message on "$pg.event" (until the caller ends).
--
-- In a cluster (process.node() set) it also bridges the keepers, each
-- registered as "$pg" on its node, on one topic, "$pg.peer", which it
-- listens to apart from its calls: { sync = true, node =, events =, ask =
-- } is a node's whole part (replacing what this keeper held of it; ask:
-- send yours back), sent when a keeper first sees a node; { node =, ev = }
-- one event of its part, sent to every node seen. A node's nodedown drops
-- its part, after what its keeper sent before it went away.
function M.run()
  local own = {}           -- this node's part: group -> { pid -> true }
  local remote = {}        -- node -> its part, as its keeper's events built it
  local of = {}            -- pid -> { group -> true }: what a member of own leaves when it ends
  local subscribers = {}   -- pid -> true: who gets own's events
  local events = process.events()
  local inbox = process.inbox()
  local me = process.node()  -- nil without a cluster: no bridge, no polling
  local peers = {}           -- node -> true: the connected nodes whose keepers get own's events
  -- The other keepers' messages, in the order sent: apart from the calls,
  -- so that a nodedown can take in all that came before it at once.
  local from_peers = me and process.listen(PEER)

  local function change(ev)
    apply(own, ev)
    for pid in pairs(subscribers) do process.send(pid, "$pg.event", ev) end
    for node in pairs(peers) do process.send({ NAME, node }, PEER, { node = me, ev = ev }) end
  end

  local function sync_with(node, ask)
    process.send({ NAME, node }, PEER, { sync = true, node = me, events = snapshot(own), ask = ask })
  end

  -- A node seen connected: it gets this part (and is asked for its own)
  -- and, from now on, each event; its end and return come as events.
  local function node_seen(node)
    if peers[node] then return end
    peers[node] = true
    process.monitor_node(node)
    sync_with(node, true)
  end

  local function poll_nodes()
    for _, node in ipairs(process.nodes()) do node_seen(node) end
  end

  local function is_event(ev)
    return type(ev) == "table" and (ev.kind == "join" or ev.kind == "leave") and type(ev.pid) == "string"
      and (type(ev.group) == "string" or type(ev.group) == "number")
  end

  -- Another keeper's message: its whole part, or one event of it. A
  -- malformed one (not a keeper of this host's kind) is logged and dropped.
  local function from_peer(msg)
    local v = msg.payload
    if type(v) ~= "table" or type(v.node) ~= "string" or v.node == me or (v.sync and type(v.events) ~= "table") then
      log.warn("pg: dropped a message on %s from %s that is not a keeper's", PEER, tostring(msg.from))
      return
    end
    if v.sync then
      local part = {}
      for _, ev in ipairs(v.events) do
        if is_event(ev) then apply(part, ev) end
      end
      remote[v.node] = part
      if not peers[v.node] then
        node_seen(v.node)  -- its sync, which asks, carries this part
      elseif v.ask then
        sync_with(v.node, false)
      end
    elseif is_event(v.ev) then
      local part = remote[v.node] or {}
      remote[v.node] = part
      apply(part, v.ev)
    end
  end

  local function join(group, pid)
    if not of[pid] then
      of[pid] = {}
      if not subscribers[pid] then process.monitor(pid) end
    end
    of[pid][group] = true
    change { kind = "join", group = group, pid = pid }
  end

  local function leave(group, pid)
    local mine = of[pid]
    if not (mine and mine[group]) then return end
    mine[group] = nil
    if next(mine) == nil then
      of[pid] = nil
      if not subscribers[pid] then process.unmonitor(pid) end
    end
    change { kind = "leave", group = group, pid = pid }
  end

  local function ended(pid)
    subscribers[pid] = nil
    local mine = of[pid]
    if not mine then return end
    of[pid] = nil
    for group in pairs(mine) do change { kind = "leave", group = group, pid = pid } end
  end

  local function node_event(ev)
    if ev.kind == "nodedown" then
      -- What its keeper sent before it went away is in from_peers already
      -- (a node's messages come before its nodedown): applied first, so
      -- none of it outlives the part.
      while true do
        local r = channel.select { from_peers:case_receive(), default = true }
        if r.default then break end
        from_peer(r.value)
      end
      peers[ev.node] = nil
      remote[ev.node] = nil
    else
      node_seen(ev.node)
    end
  end

  local function on_event(ev)
    if ev.kind == "exit" then
      ended(ev.from)
    elseif (ev.kind == "nodedown" or ev.kind == "nodeup") and me then
      node_event(ev)
    end
  end

  local function take_events()
    while true do
      local r = channel.select { events:case_receive(), default = true }
      if r.default then return end
      on_event(r.value)
    end
  end

  local function members(group)
    local list, n = {}, 0
    for pid in pairs(own[group] or {}) do
      n = n + 1
      list[n] = pid
    end
    for _, part in pairs(remote) do
      for pid in pairs(part[group] or {}) do
        n = n + 1
        list[n] = pid
      end
    end
    return list
  end

  local function handle(msg)
    if request.is_call(msg) then
      take_events()
      local op, v = msg.topic, msg.payload.value
      if op == "join" then
        if of[v.pid] and of[v.pid][v.group] then
          request.reply(msg, true)
        elseif not process.info(v.pid) then
          request.fail(msg, "not_found: " .. tostring(v.pid) .. " is not alive")
        else
          join(v.group, v.pid)
          request.reply(msg, true)
        end
      elseif op == "leave" then
        leave(v.group, v.pid)
        request.reply(msg, true)
      elseif op == "members" then
        request.reply(msg, members(v))
      elseif op == "remote" then
        local part = remote[v.node] or {}
        remote[v.node] = part
        for _, ev in ipairs(v.events) do apply(part, ev) end
        request.reply(msg, true)
      elseif op == "nodedown" then
        remote[v] = nil
        request.reply(msg, true)
      elseif op == "subscribe" then
        if not subscribers[msg.from] and not of[msg.from] then process.monitor(msg.from) end
        subscribers[msg.from] = true
        request.reply(msg, snapshot(own))
      else
        request.fail(msg, "invalid: pg has no operation '" .. tostring(op) .. "'")
      end
    end
  end

  local cases = { inbox:case_receive(), events:case_receive() }
  local polled = -math.huge
  if me then
    cases[3] = from_peers:case_receive()
    cases.timeout = POLL_NODES
  end
  while true do
    if me and time.now() - polled >= POLL_NODES then
      polled = time.now()
      poll_nodes()
    end
    local r = channel.select(cases)  -- a timeout: the poll above, next time round
    local msg = r.value
    if r.channel == events then
      if msg.kind == "cancel" then return "canceled" end  -- the host's shutdown: nothing to hand on
      on_event(msg)
    elseif r.channel == inbox then
      handle(msg)
    elseif r.channel == from_peers then
      from_peer(msg)
    end
  end
end

return M
