-- The Lua half of a process's inbox: the message constructor, and
-- process.receive's Lua form with its drain loop. The inbox's buffer is a
-- queue of kernel_ext.lua's layout ({ head, tail, items... }, items from
-- index 3), which the C half (bindings/task_kernel.cpp, QueueRef) writes
-- too. Loaded once a process needs it (TaskKernel::load_inbox: its
-- kMessagesBeforeCtor-th message, its first Lua receive, or kernel_ext's
-- load), not at spawn: a process that gets a few messages never pays for
-- its load (about what 10 messages save). Kept to what every such process
-- uses: each function here is a prototype in each of them.

local TAIL = 2

---------------------------------------------------------------------------
-- The message constructor: { from =, topic =, payload = }, the one place a
-- message table is made (a shape's constructor, bindings/shape_cache.cpp,
-- is its case for one payload shape; before this chunk loads, the C
-- kernel makes the same table through the C API). A table constructor of
-- constants is one copy of a template (LuaJIT's TDUP) with its keys in
-- place, where building the table through the C API creates it and
-- inserts each key, more work on every message (BENCHMARKS.md's source figures). With buf (the
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
-- a call there cost Big more (BENCHMARKS.md's source figures).
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
  -- (The layout's indices written as numbers: as upvalues they cost each
  -- receive a load more (BENCHMARKS.md's source figures).)
  return function(timeout)
    local h = buf[1]
    if h <= buf[2] and not inbox[5] then
      if inbox[6] then  -- the buffer holds message tables
        local v = buf[h]
        buf[h] = nil
        if h == buf[2] then buf[1], buf[2] = 3, 2 else buf[1] = h + 1 end
        return v
      end
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

return new, append, receive_form
