-- The process kernel: the scheduler inside one Lua process. It runs the
-- process's tasks (the entry method and coroutine.spawn'ed functions) as
-- coroutines, implements channels, select, the inbox, listen, timers and
-- the coroutine wrapper, and builds the process/channel/time/log API.
--
-- It is compiled once and loaded as bytecode into each process. The host
-- (bindings/lua_process.cpp) calls it with H, its table of C primitives, and
-- gets back the table K of entry points it drives each step:
--   K.start(fn, ...)            create the main task
--   K.message(from, topic, v)   a message arrived
--   K.complete(tag, err)        a command (sleep) completed
--   K.cancel(from, reason)      a cancel event
--   K.exit(from, ref, ok, v)    a monitored process ended (v: result or error)
--   K.link_down(from, err)      a linked process failed
--   K.reload(modules)           modules this process uses changed on disk
--   K.run() -> code, value      run ready tasks; code: 0 waiting, 1 continue,
--                               2 done (value: result), 3 failed (value: error)
--   K.api(name)                 build the API table `name` (lazily, on first use)
local H = ...

local co_create, co_resume, co_yield = coroutine.create, coroutine.resume, coroutine.yield
local co_status, co_running = coroutine.status, coroutine.running
local select, type, error, tostring, setmetatable, pcall, xpcall =
  select, type, error, tostring, setmetatable, pcall, xpcall
local unpack = unpack

-- Yielded by a blocking call to tell the kernel (through any number of user
-- coroutines) that the task waits; YIELD, that it only lets other processes
-- run (time.sleep(0)). Nothing outside this file can forge them.
local BLOCK, YIELD, UPGRADE = {}, {}, {}

local K = {}

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
local next_tag = 0
local timers = {}           -- tag -> function() called when the command completes

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

-- Blocks the running task until wake(t, ...) is called for it. Refused
-- outside a task (module top level) and where LuaJIT cannot yield (inside
-- require, a C iterator or callback), with the cause named.
local function block(sentinel)
  if current == nil then error("blocking call outside a process task", 3) end
  if not coroutine.isyieldable() then
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
local function after_resume(t, ok, first, ...)
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
        local result, err = ...
        if result == nil and err ~= nil then
          fail_process(type(err) == "string" and err or traceback(err))
        else
          outcome_code, outcome_value = 2, result
        end
      end
    else
      fail_process((...))
    end
    return
  end
  if first == UPGRADE then
    restart(...)
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
    if n == 0 then
      after_resume(t, co_resume(co))
    elseif n <= 2 then
      local a, b = t.v1, t.v2
      t.v1, t.v2 = nil, nil
      if n == 1 then after_resume(t, co_resume(co, a)) else after_resume(t, co_resume(co, a, b)) end
    else
      local vals = t.vals
      t.vals = nil
      after_resume(t, co_resume(co, unpack(vals, 1, n)))
    end
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
-- Durations: seconds as a number, or "250ms", "5s", "1m", "1h30m", "10us".
local UNITS = { ns = 1e-9, us = 1e-6, ms = 1e-3, s = 1, m = 60, h = 3600 }

local function duration(d, level)
  if type(d) == "number" then
    if d ~= d or d < 0 then error("invalid duration: " .. tostring(d), level + 1) end
    return d
  end
  if type(d) ~= "string" then
    error("bad duration: expected seconds or a string like \"250ms\", got " .. type(d), level + 1)
  end
  local total, pos, n = 0, 1, #d
  if n == 0 then error("invalid duration: empty string", level + 1) end
  while pos <= n do
    local num, unit, stop = d:match("^(%d+%.?%d*)(%a+)()", pos)
    if not num then num, unit, stop = d:match("^(%.%d+)(%a+)()", pos) end
    local scale = unit and UNITS[unit]
    if not scale then error("invalid duration: \"" .. d .. "\"", level + 1) end
    total = total + tonumber(num) * scale
    pos = stop
  end
  return total
end

-- Starts a sleep command; fn() runs when it completes (unless cancelled).
local function start_timer(seconds, fn)
  next_tag = next_tag + 1
  local tag = next_tag
  timers[tag] = fn
  H.sleep_cmd(tag, seconds)
  return tag
end

local function stop_timer(tag)
  if timers[tag] then
    timers[tag] = nil
    H.cancel_cmd(tag)
  end
end

function K.complete(tag, err)
  local fn = timers[tag]
  if fn then
    timers[tag] = nil
    fn(err)
  end
  -- Else: a completion for a timer already stopped; nothing waits for it.
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
    wake(w.task, v, ok)
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

function Channel.send(ch, v)
  check_channel(ch, "send")
  if ch.closed then error("send on a closed channel", 2) end
  if try_send(ch, v) then return true end
  qpush(ch.sendq, { task = current, value = v })
  if not block() then error("send on a closed channel", 2) end
  return true
end

function Channel.receive(ch)
  check_channel(ch, "receive")
  local ready_now, v, ok = try_receive(ch)
  if ready_now then return v, ok end
  qpush(ch.recvq, current)
  return block()
end

function Channel.close(ch)
  check_channel(ch, "close")
  if ch.closed then return true end
  ch.closed = true
  while true do
    local r = live_waiter(ch.recvq)
    if not r then break end
    finish_receiver(ch, r, nil, false)
  end
  while true do
    local s = live_waiter(ch.sendq)
    if not s then break end
    finish_sender(ch, s, true)
  end
  return true
end

-- Pushes v without ever blocking (the inbox and events are unbounded).
local function deliver(ch, v)
  if not try_send(ch, v) then qpush(ch.buf, v) end
end

function Channel.case_receive(ch)
  check_channel(ch, "case_receive")
  return { op = "receive", channel = ch }
end

function Channel.case_send(ch, v)
  check_channel(ch, "case_send")
  return { op = "send", channel = ch, value = v }
end

local function channel_select(cases)
  if type(cases) ~= "table" then error("bad argument #1 to 'select' (table expected)", 2) end
  local n = #cases
  for i = 1, n do
    local c = cases[i]
    if type(c) ~= "table" or getmetatable(c.channel) ~= Channel then
      error("bad case #" .. i .. " to 'select' (use ch:case_receive() or ch:case_send(v))", 2)
    end
  end
  for i = 1, n do
    local c = cases[i]
    local ch = c.channel
    if c.op == "receive" then
      local ok_now, v, ok = try_receive(ch)
      if ok_now then return { channel = ch, value = v, ok = ok } end
    else
      if ch.closed then error("send on a closed channel", 2) end
      if try_send(ch, c.value) then return { channel = ch, ok = true } end
    end
  end
  if cases.default then return { default = true } end
  if n == 0 then error("select with no cases and no default would block forever", 2) end
  local sel = { done = false }
  for i = 1, n do
    local c = cases[i]
    local w = { task = current, sel = sel, value = c.value }
    qpush(c.op == "receive" and c.channel.recvq or c.channel.sendq, w)
  end
  local r = block()
  if r.closed then error("send on a closed channel", 2) end
  return r
end

---------------------------------------------------------------------------
-- The inbox, listeners and lifecycle events. They queue from the start.
local inbox = new_channel(0)
local events = new_channel(0)
local listeners = {}   -- topic -> channel

function K.message(from, topic, value)
  local msg = { topic = topic, from = from, payload = value }
  local l = listeners[topic]
  deliver(l or inbox, msg)
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
  for tag in pairs(timers) do stop_timer(tag) end
  inbox.recvq, inbox.sendq = queue(), queue()
  events.recvq, events.sendq = queue(), queue()
  for _, l in pairs(listeners) do l.recvq, l.sendq = queue(), queue() end
  main_task = new_task(fn, ...)
end

local function listen(topic)
  if type(topic) ~= "string" then error("bad argument #1 to 'listen' (string expected, got " .. type(topic) .. ")", 2) end
  local l = listeners[topic]
  if l then return l end
  l = new_channel(0)
  listeners[topic] = l
  -- Move what already waits in the inbox for this topic, keeping the rest in order.
  local buf = inbox.buf
  local keep = queue()
  while true do
    local m = qshift(buf)
    if m == nil then break end
    if m.topic == topic then qpush(l.buf, m) else qpush(keep, m) end
  end
  inbox.buf = keep
  return l
end

local function receive(timeout)
  local ok_now, msg = try_receive(inbox)
  if ok_now then return msg end
  if timeout == nil then
    qpush(inbox.recvq, current)
    return (block())
  end
  local secs = duration(timeout, 2)
  if secs <= 0 then return nil, "timeout" end
  local sel = { done = false }
  local t = current
  local w = { task = t, sel = sel }
  qpush(inbox.recvq, w)
  local tag = start_timer(secs, function()
    if not sel.done then
      sel.done = true
      wake(t, { timeout = true })
    end
  end)
  local r = block()
  if r.timeout then return nil, "timeout" end
  stop_timer(tag)
  return r.value
end

---------------------------------------------------------------------------
-- The coroutine library, wrapped the way OpenResty does: a blocking call in
-- a user's coroutine yields BLOCK through every resume up to the kernel, and
-- the values it is woken with travel back down. Plain yields go to the
-- user's resumer as usual.
local function pass(co, ok, first, ...)
  if ok and (first == BLOCK or first == YIELD or first == UPGRADE) and co_status(co) == "suspended" then
    return pass(co, co_resume(co, co_yield(first)))
  end
  return ok, first, ...
end

local function user_resume(co, ...)
  if type(co) ~= "thread" then
    error("bad argument #1 to 'resume' (coroutine expected)", 2)
  end
  return pass(co, co_resume(co, ...))
end

local function wrap_result(ok, ...)
  if not ok then error((...), 0) end
  return ...
end

local user_coroutine = setmetatable({
  create = co_create,
  resume = user_resume,
  yield = co_yield,
  status = co_status,
  running = co_running,
  isyieldable = coroutine.isyieldable,
  wrap = function(fn)
    if type(fn) ~= "function" then error("bad argument #1 to 'wrap' (function expected)", 2) end
    local co = co_create(fn)
    return function(...) return wrap_result(user_resume(co, ...)) end
  end,
  spawn = function(fn, ...)
    if type(fn) ~= "function" then error("bad argument #1 to 'spawn' (function expected)", 2) end
    return new_task(fn, ...).co
  end,
}, { __index = coroutine })

---------------------------------------------------------------------------
-- The API tables.
local function check_string(v, n, fname)
  if type(v) ~= "string" then
    error("bad argument #" .. n .. " to '" .. fname .. "' (string expected, got " .. type(v) .. ")", 3)
  end
end

local function build_time()
  local time = {}
  function time.sleep(d)
    local secs = duration(d, 2)
    if secs <= 0 then
      block(YIELD)  -- K.run re-queues it behind other processes
      return
    end
    local t = current
    if t == nil then error("blocking call outside a process task", 2) end
    start_timer(secs, function() wake(t) end)
    block()
  end
  function time.after(d)
    local secs = duration(d, 2)
    local ch = new_channel(1)
    start_timer(secs, function() deliver(ch, H.now()) end)
    return ch
  end
  function time.ticker(d)
    local secs = duration(d, 2)
    if secs <= 0 then error("bad argument #1 to 'ticker' (duration must be positive)", 2) end
    local ch = new_channel(1)
    local stopped, tag = false, nil
    local function arm()
      tag = start_timer(secs, function()
        if stopped then return end
        if qlen(ch.buf) == 0 then deliver(ch, H.now()) end  -- a slow reader misses ticks, as in Go
        arm()
      end)
    end
    arm()
    return { channel = ch, stop = function()
      stopped = true
      if tag then stop_timer(tag) end
      return true
    end }
  end
  time.now = H.now
  time.parse_duration = function(d) return duration(d, 2) end
  return time
end

local function build_channel()
  return { new = function(capacity) return new_channel(capacity) end, select = channel_select }
end

local function build_log()
  local log = {}
  for _, level in ipairs({ "trace", "debug", "info", "warn", "error" }) do
    log[level] = function(fmt, ...)
      local msg
      if select("#", ...) > 0 then msg = string.format(fmt, ...) else msg = tostring(fmt) end
      H.log(level, msg)
    end
  end
  return log
end

local function build_process()
  local P = {}
  P.pid = H.pid
  P.memory = H.memory  -- bytes of Lua heap this process holds (an extension)
  function P.spawn(entry, ...) check_string(entry, 1, "spawn"); return H.spawn(0, entry, ...) end
  function P.spawn_linked(entry, ...) check_string(entry, 1, "spawn_linked"); return H.spawn(1, entry, ...) end
  function P.spawn_monitored(entry, ...) check_string(entry, 1, "spawn_monitored"); return H.spawn(2, entry, ...) end
  function P.send(dest, topic, value)
    check_string(dest, 1, "send")
    check_string(topic, 2, "send")
    return H.send(dest, topic, value)
  end
  function P.inbox() return inbox end
  function P.events() return events end
  P.listen = listen
  P.receive = receive
  function P.link(pid) check_string(pid, 1, "link"); return H.link(pid) end
  function P.unlink(pid) check_string(pid, 1, "unlink"); return H.unlink(pid) end
  function P.monitor(pid)
    check_string(pid, 1, "monitor")
    local ok, err = H.monitor(pid)
    if not ok then return nil, err end
    return true
  end
  -- An extension: a private monitor whose exit event goes to the returned
  -- channel instead of events(); unwatch(pid, ch) drops it.
  function P.watch(pid)
    check_string(pid, 1, "watch")
    local ok, ref = H.monitor(pid)
    if not ok then return nil, ref end
    local ch = new_channel(1)
    ch.ref = ref
    exit_watchers[ref] = ch
    return ch
  end
  function P.unwatch(pid, ch)
    check_string(pid, 1, "unwatch")
    if getmetatable(ch) ~= Channel or not ch.ref then error("bad argument #2 to 'unwatch' (watch channel expected)", 2) end
    exit_watchers[ch.ref] = nil
    return H.demonitor(pid, ch.ref)
  end
  function P.unmonitor(pid) check_string(pid, 1, "unmonitor"); return H.unmonitor(pid) end
  function P.set_options(opts)
    if type(opts) ~= "table" then error("bad argument #1 to 'set_options' (table expected)", 2) end
    for k, v in pairs(opts) do
      if k == "trap_links" then
        if type(v) ~= "boolean" then error("bad option 'trap_links' (boolean expected)", 2) end
        trap_links = v
      else
        error("unknown option '" .. tostring(k) .. "'", 2)
      end
    end
    return true
  end
  function P.cancel(pid, reason)
    check_string(pid, 1, "cancel")
    return H.cancel(pid, reason == nil and "canceled" or tostring(reason))
  end
  function P.terminate(pid) check_string(pid, 1, "terminate"); return H.terminate(pid) end
  P.registry = {
    register = function(name, pid)
      check_string(name, 1, "register")
      if pid ~= nil then check_string(pid, 2, "register") end
      return H.register(name, pid)
    end,
    lookup = function(name) check_string(name, 1, "lookup"); return H.lookup(name) end,
    unregister = function(name) check_string(name, 1, "unregister"); return H.unregister(name) end,
  }
  function P.upgrade(entry, ...)
    if entry ~= nil then check_string(entry, 1, "upgrade") end
    local fn, err = H.load_entry(entry)
    if not fn then return nil, err end
    if current == nil then error("process.upgrade outside a process task", 2) end
    co_yield(UPGRADE, fn, ...)  -- never returns: the task is dropped
  end
  return P
end

local builders = { process = build_process, channel = build_channel, time = build_time, log = build_log }

function K.api(name)
  if name == "coroutine" then return user_coroutine end
  local b = builders[name]
  return b and b()
end

return K
