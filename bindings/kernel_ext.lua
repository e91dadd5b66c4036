-- The Lua half of the process kernel, loaded into a process the first time
-- it needs it: channels (beyond the inbox's plain receive), select,
-- durations and timers, the time (but now) and channel APIs, the coroutine
-- wrapper, and process.inbox/events/listen/watch/unwatch/set_options/
-- upgrade. The C half (bindings/task_kernel.cpp) runs the tasks and handles
-- what every process does: messages, process.receive, lifecycle events
-- (queued until events() is asked for), log and time.now. A process that
-- only spawns, sends, receives and logs never loads this file (LuaJIT
-- cannot share prototypes between states, so every function here would
-- cost each such process memory and spawn time).
--
-- The C half calls it with I, its internals, and H, the C primitives:
--   I.BLOCK, I.YIELD, I.UPGRADE, I.RECEIVE   sentinels a task yields (below)
--   I.coroutine        the real coroutine library
--   I.getmetatable, I.setmetatable   the base library's own
--   I.wake(t, ...)     make task t (a thread) ready; the values become the
--                      returns of its blocking call
--   I.new_task(fn, ...) -> t   start a task
--   I.current() -> t   the running task, or nil outside a task
--   I.inbox            the inbox: a channel table the C half also uses, with
--                      a fifth field, true once I.slow_inbox was called, and
--                      a sixth, true once its buffer holds message tables
--                      (until then, each message's three values: the C
--                      half's and inbox.lua's; I.listening, I.slow_inbox
--                      and I.inbox_tables make it tables)
--   I.inbox_tables()   the inbox's buffer as message tables from now on
--   I.listening(l)     process.listen was called: l maps topics to their
--                      channels, which the C half delivers to (E.deliver)
--   I.slow_inbox()     from now on the C half hands every inbox message to
--                      E.deliver and process.receive uses E.try_receive,
--                      and its tasks parked in process.receive join the
--                      inbox's recvq: called once the inbox has senders or
--                      is closed, which only this file handles
--   I.C_BOUNDARY       the error of a blocking call where a task cannot yield
--   I.receive()        process.receive in bindings/inbox.lua's form (without
--                      the drain loop), for inbox:receive()
--   I.events           the events channel table: the C half builds the
--                      lifecycle events and delivers them (E.deliver), or
--                      queues them there itself until this file loads
--   I.set_trap_links(b)  process.set_options{trap_links = b}
--   I.open_events()    process.events() was called: a cancel is an event
--                      from now on, no longer the process's end
--   I.timer_start(secs) -> id   a timer in the C half's table, which calls
--                      E.complete(id) when it fires; I.timer_stop(id)
-- and gets back E:
--   E.deliver(ch, msg)          a message the C half does not take itself
--                               (to the inbox or a listener)
--   E.try_receive(ch)           see below (process.receive once I.slow_inbox)
--   E.receive_timeout(t, secs)  task t blocks in process.receive(secs)
--   E.timed_waiter(t, secs)     the waiter of such a receive (C's slow_inbox)
--   E.complete(id)              timer id fired
--   E.watched(ref, ev)          an exit event for a process.watch channel?
--                               (true: delivered there)
--   E.reset()                   drop timers and waiters (process.upgrade)
--   E.process                   the process API's calls defined here
--   E.api(name)                 the API table `name` (time, channel, coroutine;
--                               the C half makes log and time.now itself)
--
-- A task blocks by yielding BLOCK (through any number of user coroutines,
-- see the wrapper below) after putting itself where a wake will find it;
-- YIELD only lets other processes run (time.sleep(0)); UPGRADE carries
-- process.upgrade's new entry; RECEIVE is process.receive's, whose waiter
-- the C half registers once the yield got through. They are light userdata
-- made in C: no script can forge them.
local I, H = ...

local co = I.coroutine
local co_create, co_resume, co_yield, co_status, co_running = co.create, co.resume, co.yield, co.status, co.running
local co_isyieldable = co.isyieldable
local BLOCK, YIELD, UPGRADE, RECEIVE = I.BLOCK, I.YIELD, I.UPGRADE, I.RECEIVE
local wake, new_task, current = I.wake, I.new_task, I.current
local type, error, tostring, pairs, ipairs, select = type, error, tostring, pairs, ipairs, select
-- The base library's own, not the globals (bindings/metatable_calls.lua).
local setmetatable, getmetatable = I.setmetatable, I.getmetatable

local E = {}

---------------------------------------------------------------------------
-- Queues: { head, tail, items... } with the items from index 3, so the C
-- half reads them with integer keys; O(1) push and shift. The layout's
-- owner: the C half (QueueRef) and bindings/inbox.lua's constructor and
-- drain loop write and read the same, and the inbox's buffer is this
-- layout too. (Defined here, not in inbox.lua, which every process that
-- receives 16 messages loads: these functions' prototypes there cost each
-- such process heap, and a ring of such processes a good part of
-- its wall time: BENCHMARKS.md's source figures.)
local HEAD, TAIL, FIRST = 1, 2, 3
-- (With its first item's slot in the array part from the start: added by
-- the first push, it rehashed the table.)
local function queue()
  local q = { FIRST, FIRST - 1, false }
  q[FIRST] = nil
  return q
end
local function qpush(q, v) local t = q[TAIL] + 1; q[TAIL] = t; q[t] = v end
local function qshift(q)
  local h, t = q[HEAD], q[TAIL]
  if h > t then return nil end
  local v = q[h]; q[h] = nil
  -- Back to the start when empty, so the keys stay in the array part
  -- instead of marching through the hash part (a rehash every few pushes).
  if h == t then q[HEAD], q[TAIL] = FIRST, FIRST - 1 else q[HEAD] = h + 1 end
  return v
end
local function qlen(q) return q[TAIL] - q[HEAD] + 1 end
local function qclear(q)
  for i = q[HEAD], q[TAIL] do q[i] = nil end
  q[HEAD], q[TAIL] = FIRST, FIRST - 1
end
-- Drops items from the end while dead(item) says so.
local function qdrop_last_while(q, dead)
  local h, t = q[HEAD], q[TAIL]
  while t >= h and dead(q[t]) do
    q[t] = nil
    t = t - 1
  end
  if t < h then q[HEAD], q[TAIL] = FIRST, FIRST - 1 else q[TAIL] = t end
end
-- Keeps the items live(item) says, in order, from the start again;
-- returns how many.
local function qkeep(q, live)
  local n = FIRST - 1
  for i = q[HEAD], q[TAIL] do
    local v = q[i]
    q[i] = nil
    if live(v) then n = n + 1; q[n] = v end
  end
  q[HEAD], q[TAIL] = FIRST, n
  return n - FIRST + 1
end

-- Records of a fixed shape, made from a constructor of constants and then
-- filled in: LuaJIT copies such a constructor's template with its keys in
-- place, where one with variable values (`{ task = t, value = v }`) adds
-- its keys one by one and rehashes the new table for one of them in two
-- (each costly, and a request.call made many: BENCHMARKS.md's source figures).
local function waiter(task, sel, value)
  local w = { task = false, sel = false, value = false }
  w.task, w.sel, w.value = task, sel, value
  return w
end

-- A select's result: a receive case's ...
local function received(ch, v, ok)
  local r = { channel = false, value = false, ok = false }
  r.channel, r.value, r.ok = ch, v, ok
  return r
end

-- ... and a send case's.
local function sent(ch, closed)
  local r = { channel = false, ok = false, closed = false }
  r.channel, r.ok, r.closed = ch, not closed, closed or nil
  return r
end

---------------------------------------------------------------------------
-- Blocking.
-- Returns the running task, or raises where it cannot block.
local function check_blockable(level)
  local t = current()
  if t == nil then error("blocking call outside a process task", level + 1) end
  if not co_isyieldable() then error(I.C_BOUNDARY, level + 1) end
  return t
end

-- Blocks the running task until a wake for it; returns the wake's values.
-- Callers check check_blockable first, before they put the task anywhere.
local function block()
  return co_yield(BLOCK)
end

---------------------------------------------------------------------------
-- Channels. A channel is { buf, recvq, sendq, closed, cap = n } (integer
-- keys for what the C half reads of the inbox). A waiter in recvq or sendq
-- is a task (a plain receive) or a record { task, sel, value, one, tag }:
-- sel is the select it belongs to (nil for a plain send), a record with
-- `done` (a select's receive cases share one, which is its own sel); once
-- a select fired, its other waiters are stale and skipped. `one` marks a
-- process.receive with a timeout, which returns the message alone.
local BUF, RECVQ, SENDQ, CLOSED, SLOW = 1, 2, 3, 4, 5
local inbox = I.inbox

local Channel = {}
Channel.__index = Channel
Channel.__tostring = function(ch) return "channel: " .. H.describe(ch) end

local function new_channel(capacity)
  if capacity ~= nil and (type(capacity) ~= "number" or capacity < 0 or capacity % 1 ~= 0) then
    error("bad argument #1 to 'channel.new' (capacity must be a non-negative integer)", 2)
  end
  local ch = { false, false, false, false, cap = 0 }  -- see waiter
  ch[BUF], ch[RECVQ], ch[SENDQ], ch.cap = queue(), queue(), queue(), capacity or 0
  return setmetatable(ch, Channel)
end

-- A channel(1) for one of process.watch's exit events, with its monitor's ref.
local function watch_channel(ref)
  local ch = { false, false, false, false, cap = 1, ref = false }
  ch[BUF], ch[RECVQ], ch[SENDQ], ch.ref = queue(), queue(), queue(), ref
  return setmetatable(ch, Channel)
end

-- time.timer's and time.ticker's { channel =, stop = }.
local function stoppable(ch, stop)
  local t = { channel = false, stop = false }
  t.channel, t.stop = ch, stop
  return t
end

local function is_live(w) return type(w) == "thread" or w.sel == nil or not w.sel.done end

local function live_waiter(q)
  while true do
    local w = qshift(q)
    if w == nil then return nil end
    if is_live(w) then return w end
  end
end

-- A select leaves a waiter in each of its channels; once one fires, the
-- others are stale. Left for live_waiter, they would pile up in a channel
-- that seldom fires (a select over the inbox and a quit channel, or
-- events(), held one more stale waiter for each message, for good). The
-- select's own are the newest in each queue, so it drops them from the
-- end (prune_stale); a queue whose stale waiters sit below live ones
-- (several tasks selecting on one channel) is compacted when it has grown
-- to twice its live waiters (push_waiter): every push O(1) amortized.
local function is_stale(w) return not is_live(w) end
local function prune_stale(q) qdrop_last_while(q, is_stale) end

local compact_at = setmetatable({}, { __mode = "k" })  -- queue -> its length that compacts it (default 32)

local function push_waiter(q, w)
  if qlen(q) >= (compact_at[q] or 32) then
    local live = qkeep(q, is_live)
    compact_at[q] = live >= 16 and 2 * live or nil
  end
  qpush(q, w)
end

local stop_timer  -- defined with the timers below

-- Completes waiter w (a receiver) with v, ok.
local function finish_receiver(ch, w, v, ok)
  if type(w) == "thread" then
    wake(w, v, ok)
  elseif w.one then
    w.sel.done = true
    stop_timer(w.tag)
    wake(w.task, v)
  else
    w.sel.done = true
    wake(w.task, received(ch, v, ok))
  end
end

local function finish_sender(ch, w, closed)
  if w.sel then
    w.sel.done = true
    wake(w.task, sent(ch, closed))
  else
    wake(w.task, not closed)
  end
end

-- Tries to send without blocking; true when done.
local function try_send(ch, v)
  local r = live_waiter(ch[RECVQ])
  if r then finish_receiver(ch, r, v, true); return true end
  if qlen(ch[BUF]) < ch.cap then qpush(ch[BUF], v); return true end
  return false
end

-- Tries to receive without blocking: ready, value, ok.
local function try_receive(ch)
  local buf = ch[BUF]
  if qlen(buf) > 0 then
    local v = qshift(buf)
    local s = live_waiter(ch[SENDQ])
    if s then qpush(buf, s.value); finish_sender(ch, s, false) end
    return true, v, true
  end
  local s = live_waiter(ch[SENDQ])
  if s then finish_sender(ch, s, false); return true, s.value, true end
  if ch[CLOSED] then return true, nil, false end
  return false
end
E.try_receive = try_receive

-- Pushes v without ever blocking (the inbox and events are unbounded).
local function deliver(ch, v)
  if not try_send(ch, v) then qpush(ch[BUF], v) end
end

local function check_channel(ch, fname)
  if getmetatable(ch) ~= Channel then
    error("bad self to '" .. fname .. "' (channel expected, got " .. type(ch) .. ")", 3)
  end
end

-- process.receive's Lua form (bindings/inbox.lua), for inbox:receive().
local inbox_receive = I.receive

function Channel.receive(ch)
  -- The inbox on the C kernel's fast paths: its receive, plus ok.
  if ch == inbox and not inbox[SLOW] then return inbox_receive(), true end
  check_channel(ch, "receive")
  local ready_now, v, ok = try_receive(ch)
  if ready_now then return v, ok end
  qpush(ch[RECVQ], check_blockable(2))
  return block()
end


---------------------------------------------------------------------------
-- Durations: seconds as a number, or "250ms", "5s", "1m", "1h30m", "10us"
-- (bindings/duration.cpp parses them, for time.sleep's C path as well).
-- level: as error's, from the caller of duration. Not a tail call, so that
-- the levels count this frame.
local parse_duration = H.duration
local function duration(d, level)
  local secs = parse_duration(d, level + 1)
  return secs
end


---------------------------------------------------------------------------
-- Timers: the C half keeps them (one table for every timed wait of the
-- process, with one sleep command armed for the earliest: TaskKernel's
-- timers), and calls E.complete(id) when one fires.
local timers = {}  -- id -> function called when it fires, or a waiter that it times out

-- Starts a timer; fn() runs when it fires (unless stopped); fn may be a
-- select's or a timed receive's waiter instead (time_out): no closure to
-- make for each.
local function start_timer(seconds, fn)
  local id = I.timer_start(seconds)
  timers[id] = fn
  return id
end

stop_timer = function(id)
  if timers[id] then
    timers[id] = nil
    I.timer_stop(id)
  end
end

-- A select's timeout, or a timed receive's, came first.
local function time_out(w)
  if w.sel.done then return end
  w.sel.done = true
  if w.one then
    prune_stale(inbox[RECVQ])
    wake(w.task, nil, "timeout")
  else
    wake(w.task, { timeout = true })
  end
end

function E.complete(id)
  local fn = timers[id]
  if fn then
    timers[id] = nil
    if type(fn) == "table" then time_out(fn) else fn() end
  end
  -- Else: a timer already stopped; nothing waits for it.
end

-- Task t's waiter in the inbox's receive queue for a process.receive that
-- times out after secs: it wakes with the first message, or with nil,
-- "timeout". Made here for a receive that finds nothing, or by C for one it
-- parked with its own timer when the inbox came to these rules (slow_inbox).
function E.timed_waiter(t, secs)
  local w = { task = false, sel = false, one = true, tag = false, done = false }
  w.task, w.sel = t, w
  w.tag = start_timer(secs, w)
  return w
end

-- Task t blocked in process.receive(secs) behind other waiters.
function E.receive_timeout(t, secs)
  push_waiter(inbox[RECVQ], E.timed_waiter(t, secs))
end

---------------------------------------------------------------------------
-- The channel methods that kernel.lua leaves to this file.
function Channel.send(ch, v)
  check_channel(ch, "send")
  if ch == inbox then I.slow_inbox() end
  if ch[CLOSED] then error("send on a closed channel", 2) end
  if try_send(ch, v) then return true end
  qpush(ch[SENDQ], waiter(check_blockable(2), nil, v))
  if not block() then error("send on a closed channel", 2) end
  return true
end

-- process.listen's channels (below), here for close.
local listeners = {}      -- topic -> channel

function Channel.close(ch)
  check_channel(ch, "close")
  if ch == inbox then I.slow_inbox() end
  if ch[CLOSED] then return true end
  ch[CLOSED] = true
  -- A listener closed stops listening: its topic's later messages go to
  -- the inbox again (or to a new listen), and what it holds stays for its
  -- receives until drained. Kept, they would wait in a channel that says
  -- it is closed.
  for topic, l in pairs(listeners) do
    if l == ch then
      listeners[topic] = nil
      break
    end
  end
  while true do
    local r = live_waiter(ch[RECVQ])
    if not r then break end
    finish_receiver(ch, r, nil, false)
  end
  while true do
    local s = live_waiter(ch[SENDQ])
    if not s then break end
    finish_sender(ch, s, true)
  end
  return true
end

---------------------------------------------------------------------------
-- select over channels.
function Channel.case_receive(ch)
  check_channel(ch, "case_receive")
  if ch == inbox then I.inbox_tables() end  -- select reads its buffer
  local c = { op = "receive", channel = false }
  c.channel = ch
  return c
end

function Channel.case_send(ch, v)
  check_channel(ch, "case_send")
  if ch == inbox then I.slow_inbox() end
  local c = { op = "send", channel = false, value = false }
  c.channel, c.value = ch, v
  return c
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
  -- An extension: `timeout = d` (a duration) ends a select that nothing
  -- was ready for within d with { timeout = true }, as Erlang's
  -- `receive ... after`, without a timer channel and its case.
  local secs = cases.timeout
  if secs ~= nil then secs = duration(secs, 2) end
  for i = 1, n do
    local c = cases[i]
    local ch = c.channel
    if c.op == "receive" then
      local ok_now, v, ok = try_receive(ch)
      if ok_now then return received(ch, v, ok) end
    else
      if ch[CLOSED] then error("send on a closed channel", 2) end
      if try_send(ch, c.value) then return sent(ch, false) end
    end
  end
  if cases.default then return { default = true } end
  if secs and secs <= 0 then return { timeout = true } end
  if n == 0 and not secs then error("select with no cases and no default would block forever", 2) end
  local t = check_blockable(2)
  local sel = { task = false, sel = false, done = false }  -- the receive cases' waiter
  sel.task, sel.sel = t, sel
  for i = 1, n do
    local c = cases[i]
    if c.op == "receive" then
      push_waiter(c.channel[RECVQ], sel)
    else
      push_waiter(c.channel[SENDQ], waiter(t, sel, c.value))
    end
  end
  local tag = secs and start_timer(secs, sel)
  local r = block()
  if tag and not r.timeout then stop_timer(tag) end
  for i = 1, n do
    local c = cases[i]
    prune_stale(c.channel[c.op == "receive" and RECVQ or SENDQ])
  end
  if r.closed then error("send on a closed channel", 2) end
  return r
end

---------------------------------------------------------------------------
-- The inbox and events (made by the C half, channels from now on),
-- listeners and watchers.
local events = I.events
local open_events = I.open_events
for _, ch in ipairs({ inbox, events }) do
  ch.cap = 0
  -- Their receive as their own field: found through the metatable, each
  -- inbox:receive() paid a costly C lookup (the
  -- interpreter resolves __index tables in C).
  ch.receive = Channel.receive
  setmetatable(ch, Channel)
end
local exit_watchers = {}  -- monitor ref -> channel (process.watch)

E.deliver = deliver

function E.watched(ref, ev)
  local w = exit_watchers[ref]
  if not w then return false end
  exit_watchers[ref] = nil
  deliver(w, ev)
  return true
end

-- process.upgrade: the old code's timers and waiters go; what events and
-- listeners hold stays (the C half clears the inbox's waiters itself).
function E.reset()
  timers = {}  -- the C half dropped them (TaskKernel::restart)
  qclear(events[RECVQ]); qclear(events[SENDQ])
  for _, l in pairs(listeners) do qclear(l[RECVQ]); qclear(l[SENDQ]) end
end

-- process.listen(topic): moves what already waits in the inbox for topic.
local function listen(topic)
  if type(topic) ~= "string" then error("bad argument #1 to 'listen' (string expected, got " .. type(topic) .. ")", 2) end
  local l = listeners[topic]
  if l then return l end
  l = new_channel(0)
  listeners[topic] = l
  I.listening(listeners)
  -- Move what already waits in the inbox for this topic, keeping the rest
  -- in order (in place: the C half holds the inbox's queues).
  local buf = inbox[BUF]
  local keep = {}
  while true do
    local m = qshift(buf)
    if m == nil then break end
    if m.topic == topic then qpush(l[BUF], m) else keep[#keep + 1] = m end
  end
  for k = 1, #keep do qpush(buf, keep[k]) end
  return l
end

---------------------------------------------------------------------------
-- The coroutine library, wrapped the way OpenResty does: a blocking call in
-- a user's coroutine yields BLOCK through every resume up to the kernel, and
-- the values it is woken with travel back down. Plain yields go to the
-- user's resumer as usual.
local function pass(co, ok, first, ...)
  if ok and (first == BLOCK or first == RECEIVE or first == YIELD or first == UPGRADE) and co_status(co) == "suspended" then
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
    return new_task(fn, ...)
  end,
}, { __index = co })

---------------------------------------------------------------------------
-- The API tables.
local function check_string(v, n, fname)
  if type(v) ~= "string" then
    error("bad argument #" .. n .. " to '" .. fname .. "' (string expected, got " .. type(v) .. ")", 3)
  end
end

-- A PID or name, or a { name, node } table (checked by the C half).
local function check_target(v, n, fname)
  if type(v) ~= "string" and type(v) ~= "table" then
    error("bad argument #" .. n .. " to '" .. fname .. "' (PID, name or { name, node } expected, got "
      .. type(v) .. ")", 3)
  end
end

local function build_time()
  local time = {}
  function time.after(d)
    local secs = duration(d, 2)
    local ch = new_channel(1)
    start_timer(secs, function() deliver(ch, H.now()) end)
    return ch
  end
  -- Go's time.NewTimer: time.after's channel with a stop, for a timeout
  -- that is no longer needed (request.call's): a stopped timer's entry
  -- and closure go at once, where time.after's wait for their delay.
  -- stop() is true when it stopped the timer, false once it has fired or
  -- was stopped.
  function time.timer(d)
    local secs = duration(d, 2)
    local ch = new_channel(1)
    local tag
    tag = start_timer(secs, function()
      tag = nil
      deliver(ch, H.now())
    end)
    return stoppable(ch, function()
      if not tag then return false end
      stop_timer(tag)
      tag = nil
      return true
    end)
  end
  function time.ticker(d)
    local secs = duration(d, 2)
    if secs <= 0 then error("bad argument #1 to 'ticker' (duration must be positive)", 2) end
    local ch = new_channel(1)
    local stopped, tag = false, nil
    local function arm()
      tag = start_timer(secs, function()
        if stopped then return end
        if qlen(ch[BUF]) == 0 then deliver(ch, H.now()) end  -- a slow reader misses ticks, as in Go
        arm()
      end)
    end
    arm()
    return stoppable(ch, function()
      stopped = true
      if tag then stop_timer(tag) end
      return true
    end)
  end
  time.now = H.now
  time.parse_duration = function(d)
    local secs = duration(d, 2)  -- not a tail call: the error's level counts this frame
    return secs
  end
  return time
end

local function build_channel()
  return { new = new_channel, select = channel_select }
end


-- The process API's calls the C half leaves to this file.
E.process = {
  inbox = function() return inbox end,
  -- Opening the events is what lets a process see a cancel (else one
  -- ends it at once): the C half is told on each call, a flag it keeps.
  events = function() open_events() return events end,
  listen = listen,
  -- An extension: a private monitor whose exit event goes to the returned
  -- channel instead of events(); unwatch(pid, ch) drops it. pid may be a
  -- { name, node }, as process.monitor's.
  watch = function(pid)
    check_target(pid, 1, "watch")
    local ok, ref = H.watch_monitor(pid)
    if not ok then return nil, ref end
    local ch = watch_channel(ref)
    exit_watchers[ref] = ch
    return ch
  end,
  unwatch = function(pid, ch)
    check_target(pid, 1, "unwatch")
    if getmetatable(ch) ~= Channel or not ch.ref then error("bad argument #2 to 'unwatch' (watch channel expected)", 2) end
    exit_watchers[ch.ref] = nil
    return H.demonitor(pid, ch.ref)
  end,
  set_options = function(opts)
    if type(opts) ~= "table" then error("bad argument #1 to 'set_options' (table expected)", 2) end
    for k, v in pairs(opts) do
      if k == "trap_links" then
        if type(v) ~= "boolean" then error("invalid: option 'trap_links' must be a boolean, got " .. type(v), 2) end
        I.set_trap_links(v)
      else
        -- The wording of stdlib/host/options.lua's check (the kernel does
        -- not load modules).
        error("invalid: unknown option '" .. tostring(k) .. "'", 2)
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

local builders = { channel = build_channel, time = build_time }

function E.api(name)
  if name == "coroutine" then return user_coroutine end
  local b = builders[name]
  return b and b()
end

return E
