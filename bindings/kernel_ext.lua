-- The extension kernel: the parts of the process kernel that fewer
-- processes use: durations, select, the time, channel and log APIs, the
-- coroutine wrapper, and process.listen/watch/unwatch/set_options/upgrade.
-- bindings/kernel.lua loads it into a process on first use and calls it
-- with I, its internals, and H, the C primitives; it returns E:
--   E.duration(d, level)   seconds from a number or a string like "250ms"
--   E.receive_timeout(t)   process.receive(t) once nothing is waiting
--   E.complete(tag, err)   a sleep command completed
--   E.stop_timers()        stop every timer (process.upgrade)
--   E.process              the process API's calls defined here
--   E.api(name)            the API table `name` (time, channel, log, coroutine)
-- and adds the methods send, close, case_receive and case_send to channels.
local I, H = ...

local co = I.coroutine
local co_create, co_resume, co_yield, co_status, co_running = co.create, co.resume, co.yield, co.status, co.running
local BLOCK, YIELD, UPGRADE = I.BLOCK, I.YIELD, I.UPGRADE
local queue, qpush, qshift, qlen = I.queue, I.qpush, I.qshift, I.qlen
local wake, block, new_task, current = I.wake, I.block, I.new_task, I.current
local Channel, new_channel, check_channel = I.Channel, I.new_channel, I.check_channel
local try_send, try_receive, deliver = I.try_send, I.try_receive, I.deliver
local live_waiter, finish_receiver, finish_sender = I.live_waiter, I.finish_receiver, I.finish_sender
local type, error, tostring, setmetatable, getmetatable, pairs, select = type, error, tostring, setmetatable, getmetatable, pairs, select

local E = {}

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

E.duration = duration

---------------------------------------------------------------------------
-- Timers: sleep commands and what runs when they complete.
local next_tag = 0
local timers = {}  -- tag -> function(err) called when the command completes

-- Starts a sleep command; fn() runs when it completes (unless stopped).
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

function E.complete(tag, err)
  local fn = timers[tag]
  if fn then
    timers[tag] = nil
    fn(err)
  end
  -- Else: a completion for a timer already stopped; nothing waits for it.
end

function E.stop_timers()
  for tag in pairs(timers) do stop_timer(tag) end
end

-- process.receive(timeout) when the inbox is empty.
function E.receive_timeout(timeout)
  local secs = duration(timeout, 2)
  if secs <= 0 then return nil, "timeout" end
  local sel = { done = false }
  local t = current()
  if t == nil then error("blocking call outside a process task", 2) end
  qpush(I.inbox.recvq, { task = t, sel = sel })
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
-- The channel methods that kernel.lua leaves to this file.
function Channel.send(ch, v)
  check_channel(ch, "send")
  if ch.closed then error("send on a closed channel", 2) end
  if try_send(ch, v) then return true end
  qpush(ch.sendq, { task = current(), value = v })
  if not block() then error("send on a closed channel", 2) end
  return true
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

---------------------------------------------------------------------------
-- select over channels.
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
    local w = { task = current(), sel = sel, value = c.value }
    qpush(c.op == "receive" and c.channel.recvq or c.channel.sendq, w)
  end
  local r = block()
  if r.closed then error("send on a closed channel", 2) end
  return r
end

---------------------------------------------------------------------------
-- process.listen(topic): moves what already waits in the inbox for topic.
local function listen(topic)
  if type(topic) ~= "string" then error("bad argument #1 to 'listen' (string expected, got " .. type(topic) .. ")", 2) end
  local listeners = I.listeners
  local l = listeners[topic]
  if l then return l end
  l = new_channel(0)
  listeners[topic] = l
  -- Move what already waits in the inbox for this topic, keeping the rest in order.
  local inbox = I.inbox
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

---------------------------------------------------------------------------
-- The coroutine library, wrapped the way OpenResty does: a blocking call in
-- a user's coroutine yields BLOCK through every resume up to the kernel, and
-- the values it is woken with travel back down. Plain yields go to the
-- user's resumer as usual.
local function pass(co, ok, first, ...)
  if ok and (first == BLOCK or first == YIELD or first == UPGRADE) and co_status(co) == "suspended" then
    return pass(co, co_resume(co, co_yield(first, ...)))
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
  isyieldable = co.isyieldable,
  wrap = function(fn)
    if type(fn) ~= "function" then error("bad argument #1 to 'wrap' (function expected)", 2) end
    local co = co_create(fn)
    return function(...) return wrap_result(user_resume(co, ...)) end
  end,
  spawn = function(fn, ...)
    if type(fn) ~= "function" then error("bad argument #1 to 'spawn' (function expected)", 2) end
    return new_task(fn, ...).co
  end,
}, { __index = co })

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
    local t = current()
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

-- The process API's calls that kernel.lua leaves to this file.
local exit_watchers = I.exit_watchers
E.process = {
  listen = listen,
  -- An extension: a private monitor whose exit event goes to the returned
  -- channel instead of events(); unwatch(pid, ch) drops it.
  watch = function(pid)
    check_string(pid, 1, "watch")
    local ok, ref = H.watch_monitor(pid)
    if not ok then return nil, ref end
    local ch = new_channel(1)
    ch.ref = ref
    exit_watchers[ref] = ch
    return ch
  end,
  unwatch = function(pid, ch)
    check_string(pid, 1, "unwatch")
    if getmetatable(ch) ~= Channel or not ch.ref then error("bad argument #2 to 'unwatch' (watch channel expected)", 2) end
    exit_watchers[ch.ref] = nil
    return H.demonitor(pid, ch.ref)
  end,
  set_options = function(opts)
    if type(opts) ~= "table" then error("bad argument #1 to 'set_options' (table expected)", 2) end
    for k, v in pairs(opts) do
      if k == "trap_links" then
        if type(v) ~= "boolean" then error("bad option 'trap_links' (boolean expected)", 2) end
        I.set_trap_links(v)
      else
        error("unknown option '" .. tostring(k) .. "'", 2)
      end
    end
    return true
  end,
  upgrade = function(entry, ...)
    if entry ~= nil then check_string(entry, 1, "upgrade") end
    local fn, err = H.load_entry(entry)
    if not fn then return nil, err end
    if current() == nil then error("process.upgrade outside a process task", 2) end
    co_yield(UPGRADE, fn, { n = select("#", ...), ... })  -- never returns: the task is dropped
  end,
}

local builders = { channel = build_channel, time = build_time, log = build_log }

function E.api(name)
  if name == "coroutine" then return user_coroutine end
  local b = builders[name]
  return b and b()
end

return E
