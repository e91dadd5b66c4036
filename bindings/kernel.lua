-- The process kernel: the scheduler inside one Lua process. It runs the
-- process's tasks (the entry method and coroutine.spawn'ed functions) as
-- coroutines, and implements channels, the inbox, events and receive.
-- What fewer processes use (select, the time, channel and log APIs, the
-- coroutine wrapper, listen, watch, set_options, upgrade) lives in
-- bindings/kernel_ext.lua, loaded into a process the first time it needs it:
-- every process loads this file, and each function in it costs every
-- process memory and spawn time (LuaJIT cannot share prototypes between
-- states).
--
-- It is compiled once and loaded as bytecode into each process. The host
-- (bindings/lua_process.cpp) calls it with H, its table of C primitives, and
-- gets back the table K of entry points:
--   K.start(fn, ...)            create the main task
--   K.step() -> code, value     take this step's events (H.next_event), then
--                               run ready tasks; code: 0 waiting, 1 continue,
--                               2 done (value: result), 3 failed (value: error)
--   K.api(name)                 build the API table `name` (lazily, on first use)
-- K.step hands each event to its handler:
--   K.message(from, topic, v)   a message arrived
--   K.complete(tag, err)        a command (sleep) completed
--   K.cancel(from, reason)      a cancel event
--   K.exit(from, ref, ok, v)    a monitored process ended (v: result or error)
--   K.reload(modules)           modules this process uses changed on disk
--   K.link_down(from, err)      a linked process failed
local H = ...

-- The real coroutine library: the global `coroutine` becomes the wrapper
-- of kernel_ext.lua.
local coroutine_lib = coroutine
local co_create, co_resume, co_yield = coroutine.create, coroutine.resume, coroutine.yield
local co_status, co_isyieldable = coroutine.status, coroutine.isyieldable
local select, type, error, tostring, setmetatable, getmetatable, rawget, xpcall =
  select, type, error, tostring, setmetatable, getmetatable, rawget, xpcall
local unpack = unpack

-- Yielded by a blocking call to tell the kernel (through any number of user
-- coroutines) that the task waits; YIELD, that it only lets other processes
-- run (time.sleep(0)). Nothing outside this file can forge them.
local BLOCK, YIELD, UPGRADE = {}, {}, {}

local K = {}

-- The extension kernel (kernel_ext.lua), loaded on first use; it reaches
-- this file's locals through the table internals() builds (at the end).
local EXT, internals
local function ext()
  if EXT == nil then EXT = H.load_ext()(internals(), H) end
  return EXT
end

---------------------------------------------------------------------------
-- Queues: a table with head/tail indices; O(1) push and shift.
local function queue() return { h = 1, t = 0 } end
local function qpush(q, v) local t = q.t + 1; q.t = t; q[t] = v end
local function qshift(q)
  local h, t = q.h, q.t
  if h > t then return nil end
  local v = q[h]; q[h] = nil
  -- Back to index 1 when empty, so keys stay in the array part instead of
  -- marching through the hash part (a rehash every few pushes).
  if h == t then q.h, q.t = 1, 0 else q.h = h + 1 end
  return v
end
local function qlen(q) return q.t - q.h + 1 end

---------------------------------------------------------------------------
-- Tasks.
local ready = queue()       -- tasks to resume now
local yielded = queue()     -- tasks that yielded to other processes (sleep(0))
local current = nil         -- the task being resumed
local main_task = nil
local outcome_code, outcome_value = nil, nil  -- set once the process is finished

local function fail_process(err)
  if outcome_code == nil then outcome_code, outcome_value = 3, err end
end

-- Wakes task t with values; the values become the blocking call's returns.
-- Up to two values travel in fields, the common cases (), (v) and (v, ok)
-- of every receive and send, so a wake allocates no table.
local function wake(t, ...)
  local n = select("#", ...)
  t.n = n
  if n <= 2 then t.v1, t.v2 = ... else t.vals = { ... } end
  qpush(ready, t)
end

-- wake(t, a, b) without the vararg: the path of every message to a waiting
-- receive.
local function wake2(t, a, b)
  t.n, t.v1, t.v2 = 2, a, b
  qpush(ready, t)
end

-- Blocks the running task until wake(t, ...) is called for it. Refused
-- outside a task (module top level) and where LuaJIT cannot yield (inside
-- require, a C iterator or callback), with the cause named.
local function block(sentinel)
  if current == nil then error("blocking call outside a process task", 3) end
  if not co_isyieldable() then
    error("blocking call inside a C function boundary (require, a C iterator, string.gsub or " ..
      "table.sort callback, ...)", 3)
  end
  return co_yield(sentinel or BLOCK)
end

local function traceback(err)
  if type(err) ~= "string" then
    local mt = getmetatable(err)
    if mt and mt.__tostring then err = tostring(err)
    elseif type(err) == "table" then err = "error object: " .. H.describe(err)
    else err = "error object: " .. tostring(err) end
  end
  return H.traceback(err, 2)
end

local function task_body(fn, ...)
  return xpcall(fn, traceback, ...)
end

local function new_task(fn, ...)
  local co = co_create(task_body)
  local t = { co = co, fn = fn }
  t.task = t  -- a task is its own waiter record for plain (non-select) waits
  wake(t, fn, ...)
  return t
end

local restart  -- defined with the inbox below

local C_BOUNDARY = "attempt to yield across C%-call boundary"

-- Called with the results of resuming task t.
-- The resume's results come as four values: enough for every case (an
-- error, a block or yield, UPGRADE with fn and its packed arguments, and a
-- finished task's xpcall flag, result and err).
local function after_resume(t, ok, first, r1, r2)
  if not ok then
    -- An error escaped task_body's xpcall: only yields across a C boundary
    -- and memory errors do.
    local msg = tostring(first)
    if msg:find(C_BOUNDARY) then
      msg = "blocking call inside a C function boundary (require, a C iterator, string.gsub or " ..
        "table.sort callback, ...): " .. msg
    end
    fail_process(msg)
    return
  end
  if co_status(t.co) == "dead" then
    -- first: xpcall's success flag, then the function's results.
    if first then
      if t == main_task and outcome_code == nil then
        local result, err = r1, r2
        if result == nil and err ~= nil then
          fail_process(type(err) == "string" and err or traceback(err))
        else
          outcome_code, outcome_value = 2, result
        end
      end
    else
      fail_process(r1)
    end
    return
  end
  if first == UPGRADE then
    restart(r1, unpack(r2, 1, r2.n))
    return
  end
  if first ~= BLOCK then
    -- YIELD, or a plain coroutine.yield at the top of a task: let other
    -- processes run, then resume it.
    t.n = 0
    qpush(yielded, t)
  end
end

function K.run()
  while outcome_code == nil do
    local t = qshift(ready)
    if t == nil then break end
    current = t
    local n, co = t.n, t.co
    local ok, first, r1, r2
    if n == 0 then
      ok, first, r1, r2 = co_resume(co)
    elseif n <= 2 then
      local a, b = t.v1, t.v2
      t.v1, t.v2 = nil, nil
      if n == 1 then ok, first, r1, r2 = co_resume(co, a) else ok, first, r1, r2 = co_resume(co, a, b) end
    else
      local vals = t.vals
      t.vals = nil
      ok, first, r1, r2 = co_resume(co, unpack(vals, 1, n))
    end
    -- BLOCK is only ever yielded: the task waits, nothing else to do.
    if not (ok and first == BLOCK) then after_resume(t, ok, first, r1, r2) end
    current = nil
  end
  if outcome_code ~= nil then return outcome_code, outcome_value end
  if qlen(yielded) > 0 then
    while true do
      local t = qshift(yielded)
      if t == nil then break end
      qpush(ready, t)
    end
    return 1
  end
  return 0
end

function K.start(fn, ...)
  main_task = new_task(fn, ...)
end

---------------------------------------------------------------------------
-- Timers live in kernel_ext: a completion means it is loaded.
function K.complete(tag, err)
  if EXT then EXT.complete(tag, err) end
end

---------------------------------------------------------------------------
-- Channels (inside one process). A waiter is { task, sel, value, case }:
-- sel is the select it belongs to (nil for a plain send/receive); once a
-- select fired, its other waiters are stale and skipped.
local Channel = {}
Channel.__index = Channel
Channel.__tostring = function(ch) return "channel: " .. H.describe(ch) end

local function new_channel(capacity)
  if capacity ~= nil and (type(capacity) ~= "number" or capacity < 0 or capacity % 1 ~= 0) then
    error("bad argument #1 to 'channel.new' (capacity must be a non-negative integer)", 3)
  end
  return setmetatable({ cap = capacity or 0, buf = queue(), recvq = queue(), sendq = queue(), closed = false },
    Channel)
end

local function live_waiter(q)
  while true do
    local w = qshift(q)
    if w == nil then return nil end
    if w.sel == nil or not w.sel.done then return w end
  end
end

-- Completes waiter w (a receiver) with v, ok.
local function finish_receiver(ch, w, v, ok)
  if w.sel then
    w.sel.done = true
    wake(w.task, { channel = ch, value = v, ok = ok })
  else
    wake2(w.task, v, ok)
  end
end

local function finish_sender(ch, w, closed)
  if w.sel then
    w.sel.done = true
    wake(w.task, { channel = ch, ok = not closed, closed = closed or nil })
  else
    wake(w.task, not closed)
  end
end

-- Tries to send without blocking; true when done.
local function try_send(ch, v)
  local r = live_waiter(ch.recvq)
  if r then finish_receiver(ch, r, v, true); return true end
  if qlen(ch.buf) < ch.cap then qpush(ch.buf, v); return true end
  return false
end

-- Tries to receive without blocking: ready, value, ok.
local function try_receive(ch)
  if qlen(ch.buf) > 0 then
    local v = qshift(ch.buf)
    local s = live_waiter(ch.sendq)
    if s then qpush(ch.buf, s.value); finish_sender(ch, s, false) end
    return true, v, true
  end
  local s = live_waiter(ch.sendq)
  if s then finish_sender(ch, s, false); return true, s.value, true end
  if ch.closed then return true, nil, false end
  return false
end

local function check_channel(ch, fname)
  if getmetatable(ch) ~= Channel then
    error("bad self to '" .. fname .. "' (channel expected, got " .. type(ch) .. ")", 3)
  end
end

function Channel.receive(ch)
  check_channel(ch, "receive")
  local ready_now, v, ok = try_receive(ch)
  if ready_now then return v, ok end
  qpush(ch.recvq, current)
  return block()
end

-- Pushes v without ever blocking (the inbox and events are unbounded).
local function deliver(ch, v)
  if not try_send(ch, v) then qpush(ch.buf, v) end
end

-- Methods this file lacks (send, close, case_receive, case_send) are
-- kernel_ext's: a process's own inbox and events are only received from.
setmetatable(Channel, { __index = function(_, k)
  ext()
  return rawget(Channel, k)
end })

---------------------------------------------------------------------------
-- The inbox, listeners and lifecycle events. They queue from the start.
local inbox = new_channel(0)
local events = new_channel(0)
local listeners = {}   -- topic -> channel

function K.message(from, topic, value)
  local msg = { topic = topic, from = from, payload = value }
  local ch = listeners[topic] or inbox
  -- The common cases inline: a plain receive waits (hand the message over),
  -- or nobody waits (queue it). Select and timeout waiters take deliver.
  local q = ch.recvq
  local h = q.h
  if h > q.t then
    qpush(ch.buf, msg)  -- what deliver does when nobody waits
    return
  end
  local w = q[h]
  if w.sel ~= nil then
    deliver(ch, msg)
    return
  end
  qshift(q)  -- w
  wake2(w.task, msg, true)
end

function K.cancel(from, reason)
  deliver(events, { kind = "cancel", from = from, reason = reason })
end

local exit_watchers = {}  -- monitor ref -> channel (process.watch)

function K.exit(from, ref, ok, value)
  local ev
  if ok then ev = { kind = "exit", from = from, result = value }
  else ev = { kind = "exit", from = from, error = value } end
  local w = exit_watchers[ref]
  if w then
    exit_watchers[ref] = nil
    deliver(w, ev)
  else
    deliver(events, ev)
  end
end

local trap_links = false
function K.link_down(from, err)
  if trap_links then
    deliver(events, { kind = "link_down", from = from, error = err })
  else
    fail_process("linked process " .. from .. " failed: " .. tostring(err))
  end
end

function K.reload(modules)
  deliver(events, { kind = "reload", modules = modules })
end

-- process.upgrade: drop every task, waiter and timer of the old code and
-- start fn as the new main task. The inbox, events and listeners (with what
-- they hold), links, monitors and names stay.
restart = function(fn, ...)
  ready, yielded = queue(), queue()
  if EXT then EXT.stop_timers() end
  inbox.recvq, inbox.sendq = queue(), queue()
  events.recvq, events.sendq = queue(), queue()
  for _, l in pairs(listeners) do l.recvq, l.sendq = queue(), queue() end
  main_task = new_task(fn, ...)
end

local function receive(timeout)
  local buf, sendq = inbox.buf, inbox.sendq
  if buf.h <= buf.t and sendq.h > sendq.t then
    -- A message waits and nobody blocks sending to the inbox: take it here.
    return qshift(buf)
  end
  local ok_now, msg = try_receive(inbox)
  if ok_now then return msg end
  if timeout == nil then
    qpush(inbox.recvq, current)
    return (block())
  end
  return ext().receive_timeout(timeout)  -- a tail call: error levels stay right
end

---------------------------------------------------------------------------
-- The API tables. `process` is built here, mostly from C primitives that
-- check their own arguments; its rarer calls come from kernel_ext on first
-- use. The other tables are all kernel_ext's.
local function build_process()
  local P = {
    pid = H.pid, memory = H.memory,  -- memory: bytes of Lua heap (an extension)
    spawn = H.spawn, spawn_linked = H.spawn_linked, spawn_monitored = H.spawn_monitored,
    send = H.send, link = H.link, unlink = H.unlink, monitor = H.monitor, unmonitor = H.unmonitor,
    cancel = H.cancel, terminate = H.terminate,
    registry = { register = H.register, lookup = H.lookup, unregister = H.unregister },
    receive = receive,
  }
  function P.inbox() return inbox end
  function P.events() return events end
  return setmetatable(P, { __index = function(t, k)
    local f = ext().process[k]
    if f ~= nil then t[k] = f end
    return f
  end })
end

-- The handlers of H.next_event's kinds, in its order.
local handlers = { K.message, K.complete, K.cancel, K.exit, K.reload, K.link_down }
local next_event, message = H.next_event, K.message

function K.step()
  while true do
    local kind, a, b, c, d = next_event()
    if kind == nil then break end
    if kind == 1 then message(a, b, c) else handlers[kind](a, b, c, d) end
  end
  return K.run()
end

function K.api(name)
  if name == "process" then return build_process() end
  return ext().api(name)
end

-- What kernel_ext reaches of this file (built when it loads).
internals = function() return {
  BLOCK = BLOCK, YIELD = YIELD, UPGRADE = UPGRADE, coroutine = coroutine_lib,
  queue = queue, qpush = qpush, qshift = qshift, qlen = qlen,
  wake = wake, block = block, new_task = new_task, current = function() return current end,
  Channel = Channel, new_channel = new_channel, check_channel = check_channel,
  try_send = try_send, try_receive = try_receive, deliver = deliver,
  live_waiter = live_waiter, finish_receiver = finish_receiver, finish_sender = finish_sender,
  inbox = inbox, listeners = listeners, exit_watchers = exit_watchers,
  set_trap_links = function(v) trap_links = v end,
} end

return K
