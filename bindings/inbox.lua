-- The Lua half of a process's inbox, and the one owner in Lua of what it
-- is made of: the queue layout that every channel's buffer and wait queues
-- share (the inbox is a channel), the message constructor, and
-- process.receive's Lua form with its drain loop. The C half
-- (bindings/task_kernel.cpp) reads and writes the same layout through
-- QueueRef; kernel_ext.lua's channels take their queue functions from
-- here. Loaded once a process needs it (TaskKernel::load_inbox: its
-- kMessagesBeforeCtor-th message, its first Lua receive, or kernel_ext's
-- load), not at spawn: a process that gets a few messages never pays for
-- its load (about what 10 messages save).

---------------------------------------------------------------------------
-- Queues: { head, tail, items... } with the items from index 3, so that
-- C reads them with integer keys; O(1) push and shift. (With its first
-- item's slot in the array part from the start: added by the first push,
-- it rehashed the table.)
local HEAD, TAIL, FIRST = 1, 2, 3

local function queue()
  local q = { FIRST, FIRST - 1, false }
  q[FIRST] = nil
  return q
end

local function push(q, v) local t = q[TAIL] + 1; q[TAIL] = t; q[t] = v end

local function shift(q)
  local h, t = q[HEAD], q[TAIL]
  if h > t then return nil end
  local v = q[h]; q[h] = nil
  -- Back to the start when empty, so the keys stay in the array part
  -- instead of marching through the hash part (a rehash every few pushes).
  if h == t then q[HEAD], q[TAIL] = FIRST, FIRST - 1 else q[HEAD] = h + 1 end
  return v
end

local function len(q) return q[TAIL] - q[HEAD] + 1 end

local function clear(q)
  for i = q[HEAD], q[TAIL] do q[i] = nil end
  q[HEAD], q[TAIL] = FIRST, FIRST - 1
end

-- Drops items from the end while dead(item) says so.
local function drop_last_while(q, dead)
  local h, t = q[HEAD], q[TAIL]
  while t >= h and dead(q[t]) do
    q[t] = nil
    t = t - 1
  end
  if t < h then q[HEAD], q[TAIL] = FIRST, FIRST - 1 else q[TAIL] = t end
end

-- Keeps the items live(item) says, in order, from the start again;
-- returns how many.
local function keep(q, live)
  local n = FIRST - 1
  for i = q[HEAD], q[TAIL] do
    local v = q[i]
    q[i] = nil
    if live(v) then n = n + 1; q[n] = v end
  end
  q[HEAD], q[TAIL] = FIRST, n
  return n - FIRST + 1
end

---------------------------------------------------------------------------
-- The message constructor: { from =, topic =, payload = }, the one place a
-- message table is made (a shape's constructor, bindings/shape_cache.cpp,
-- is its case for one payload shape; before this chunk loads, the C
-- kernel makes the same table through the C API). A table constructor of
-- constants is one copy of a template (LuaJIT's TDUP) with its keys in
-- place, where building the table through the C API creates it and
-- inserts each key, about 400 instructions more a message. With buf (the
-- inbox's buffer) it appends the message there instead of returning it:
-- the C kernel's call for a message nobody waits for (TaskKernel::message).
local function new(from, topic, payload, buf)
  local m = { from = false, topic = false, payload = false }
  m.from, m.topic, m.payload = from, topic, payload
  if buf == nil then return m end
  local t = buf[TAIL] + 1
  buf[t] = m
  buf[TAIL] = t
end

-- Appends n messages, given as from, topic, payload after n, to buf: the
-- kernel's call for a run of messages that nobody waits for
-- (TaskKernel::begin_queue and end_queue), one call from C for the run
-- instead of one a message.
local function append(buf, n, ...)
  local v = { ... }
  for i = 1, 3 * n, 3 do new(v[i], v[i + 1], v[i + 2], buf) end
end

---------------------------------------------------------------------------
-- process.receive's Lua form over c_receive, the C receive's raw call,
-- which returns a message table, or nil, "timeout", or, when the task
-- waited and the kernel handed it a message (or took a queued one that
-- was waiting as its three values), the message's from, topic and payload
-- (from and topic strings: the kernel hands over no message from the
-- host, whose from is nil, that way): the table is then made here, in the
-- task's own code, where the C receive calls the constructor from C (a
-- C-to-Lua call a message). A handed-over table payload of a shape the
-- process keeps receiving comes as nil, its shape's constructor and true:
-- the constructor makes the whole message (bindings/shape_cache.hpp).
-- Each form copies new's template in its own code rather than calling it:
-- a call there cost Big 6% more instructions (BENCHMARKS.md's ledger).
--
-- With inbox (the inbox channel: { buf, recvq, sendq, closed, slow,
-- tables }), also its drain loop: a receive that first takes a queued
-- message itself while the inbox is on the C kernel's fast paths (no
-- listeners, senders or close), so that LuaJIT compiles it into the
-- caller's loop and a process draining a full inbox runs no C call per
-- message. Only for a process whose messages queue up (TaskKernel::
-- push_receive): reading the buffer at each receive costs a process that
-- always waits for its next message cache lines the C receive does not
-- touch.
local function receive_form(c_receive, inbox)
  if inbox == nil then
    return function(timeout)
      local a, b, c = c_receive(timeout)
      if b == nil then return a end     -- a message table
      if a == nil then
        if c then return b() end        -- its payload's shape's constructor
        return a, b                     -- nil, "timeout"
      end
      local m = { from = false, topic = false, payload = false }  -- new's template (see above)
      m.from, m.topic, m.payload = a, b, c
      return m
    end
  end
  local buf = inbox[1]
  -- (HEAD, TAIL and FIRST written as their numbers: as upvalues they cost
  -- each receive a load more: Big took 2-3% more instructions.)
  return function(timeout)
    local h = buf[1]
    if h <= buf[2] and not inbox[5] then
      if inbox[6] then return shift(buf) end  -- the buffer holds message tables
      -- Each message as its from, topic and payload (TaskKernel::flat_inbox_).
      local m = { from = false, topic = false, payload = false }
      m.from, m.topic, m.payload = buf[h], buf[h + 1], buf[h + 2]
      buf[h], buf[h + 1], buf[h + 2] = nil, nil, nil
      if h + 2 == buf[2] then buf[1], buf[2] = 3, 2 else buf[1] = h + 3 end
      return m
    end
    local a, b, c = c_receive(timeout)
    if b == nil then return a end
    if a == nil then
      if c then return b() end
      return a, b
    end
    local m = { from = false, topic = false, payload = false }
    m.from, m.topic, m.payload = a, b, c
    return m
  end
end

return {
  queue = queue, push = push, shift = shift, len = len, clear = clear,
  drop_last_while = drop_last_while, keep = keep,
  new = new, append = append, receive_form = receive_form,
}
