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
-- docs/ARCHITECTURE.md, "Process groups, shaped for a cluster").
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

-- The groups' process. Its calls beside pg's own (join, leave, members)
-- are the cluster layer's: "remote" { node =, events = } applies another
-- node's events to its part, "nodedown" drops a node's part, "subscribe"
-- answers this node's snapshot and then sends the caller each of this
-- node's events as a message on "$pg.event" (until the caller ends).
function M.run()
  local own = {}           -- this node's part: group -> { pid -> true }
  local remote = {}        -- node -> its part, as its keeper's events built it
  local of = {}            -- pid -> { group -> true }: what a member of own leaves when it ends
  local subscribers = {}   -- pid -> true: who gets own's events
  local events = process.events()
  local inbox = process.inbox()

  local function change(ev)
    apply(own, ev)
    for pid in pairs(subscribers) do process.send(pid, "$pg.event", ev) end
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

  local function take_events()
    while true do
      local r = channel.select { events:case_receive(), default = true }
      if r.default then return end
      if r.value.kind == "exit" then ended(r.value.from) end
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

  while true do
    local r = channel.select { inbox:case_receive(), events:case_receive() }
    local msg = r.value
    if r.channel == events then
      if msg.kind == "exit" then ended(msg.from) end
    elseif request.is_call(msg) then
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
end

return M
