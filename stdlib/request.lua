-- request: call a process and wait for its matching reply.
--
--   local request = require("request")
--   -- caller
--   local sum, err = request.call(server, "add", { 1, 2 }, 5)  -- nil, "timeout" after 5 s
--   -- server
--   local msg = process.receive()
--   request.reply(msg, msg.payload.value[1] + msg.payload.value[2])
--
-- A call sends `{ call = REF, value = VALUE }` on the topic you give (REF a
-- number, unique within the calling process); the server answers with
-- request.reply(msg, result), which sends to the caller on the topic
-- "$reply". Several coroutines of one process may call at once: whichever
-- call takes a reply from the "$reply" listener keeps it when it is its
-- own and hands it to the call waiting for its REF when it is not; a reply
-- that comes after its call timed out is dropped, never left in the inbox.
local M = {}

local REPLY_TOPIC = "$reply"
local replies = nil     -- process.listen(REPLY_TOPIC), made by the first call
local waiting = {}      -- ref -> the box of the call in flight
local next_ref = 0
-- Each task's box (a one-slot channel) and the select cases of its calls,
-- made by its first call: a task makes one call at a time, and a box is
-- empty again once its call ends (only waiting's boxes get replies).
local boxes = setmetatable({}, { __mode = "k" })

-- The callees' watches (process.watch), kept from one call to the next,
-- so a server called again and again is watched once, as long as it
-- lives: pid -> { ch = its channel, case = ch:case_receive(), used =,
-- busy = calls waiting on it }. At most WATCHES_KEPT: a call to another
-- drops the least recently used that no call waits on (unwatch). Its exit
-- event, once a call takes it, goes back into the channel for the others.
local WATCHES_KEPT = 16
local watches, kept, clock = {}, 0, 0

local function forget_watch(pid)
  if watches[pid] then
    watches[pid] = nil
    kept = kept - 1
  end
end

-- Drops a kept watch whose callee may still live.
local function unwatch_kept(pid)
  process.unwatch(pid, watches[pid].ch)
  forget_watch(pid)
end

local function watch_of(pid)
  clock = clock + 1
  local w = watches[pid]
  if w then
    w.used = clock
    return w
  end
  if kept >= WATCHES_KEPT then
    local oldest
    for p, o in pairs(watches) do
      if o.busy == 0 and (not oldest or o.used < watches[oldest].used) then oldest = p end
    end
    if oldest then unwatch_kept(oldest) end
  end
  local ch, err = process.watch(pid)
  if not ch then return nil, err end
  w = { ch = false, case = false, used = 0, busy = 0 }  -- keys in place: see reply_to
  w.ch, w.case, w.used = ch, ch:case_receive(), clock
  watches[pid] = w
  kept = kept + 1
  return w
end

-- Ends a call's watch: its own (a name on another node), or the kept one
-- of pid. (A function of the module, not a closure a call: a closure
-- and its upvalues were allocations on every call.)
local function drop_watch(w, dest, pid)
  if w.once then process.unwatch(dest, w.ch) else unwatch_kept(pid) end
end

-- Hands a reply's payload to the call waiting for it; a late one is dropped.
local function route(p)
  local box = type(p) == "table" and waiting[p.ref]
  if box then
    waiting[p.ref] = nil
    box:send(p)
  end
end

-- Routes the replies already queued, without blocking.
local function route_queued()
  while true do
    local r = channel.select { replies:case_receive(), default = true }
    if r.default then return end
    route(r.value.payload)
  end
end

-- A { name, node } destination as words, for an error.
function M.describe(dest)
  if type(dest) == "table" then return "'" .. tostring(dest[1]) .. "' on node " .. tostring(dest[2]) end
  return tostring(dest)
end

-- request.call's work, for it and for server.call, which words the
-- outcomes its own way: true, the reply's value; or false, err (no such
-- process, a failed send, "timeout", or request.fail's error); or false,
-- nil, EXIT, PID when the callee PID ended before it replied (EXIT its
-- exit event; PID the destination as given). `level` is where argument
-- errors point (the caller of the public function). dest may be { name,
-- node }: a name registered on that node (SPEC's cluster).
function M.call_raw(dest, topic, value, timeout, level)
  level = (level or 2) + 1
  local named = type(dest) == "table"
  if named and (type(dest[1]) ~= "string" or type(dest[2]) ~= "string") then
    error("bad argument #1 to 'call' ({ name, node } of two strings expected)", level)
  end
  if not named and type(dest) ~= "string" then
    error("bad argument #1 to 'call' (PID or registered name expected, got " .. type(dest) .. ")", level)
  end
  if type(topic) ~= "string" then error("bad argument #2 to 'call' (topic string expected)", level) end
  local secs = timeout or 5
  if type(secs) ~= "number" or not (secs >= 0) then  -- seconds as they are; the rest parsed
    local valid
    valid, secs = pcall(time.parse_duration, secs)
    if not valid then error("bad argument #4 to 'call' (" .. tostring(secs):gsub("^.-:%d+: ", "") .. ")", level) end
  end
  -- A call that could not wait (outside a process task, or where LuaJIT
  -- cannot yield) fails before it sends anything, with the kernel's own
  -- error for it, which a select raises.
  local task = coroutine.running()
  if not task or not coroutine.isyieldable() then channel.select { channel.new():case_receive() } end
  if not replies then replies = process.listen(REPLY_TOPIC) end
  -- Watch the callee, so a call to a process that dies fails at once.
  local pid = dest
  if named and dest[2] == process.node() then pid, named = dest[1], false end  -- this node: a local name
  if not named and pid:byte(1) ~= 60 then  -- not "<...>": a registered name
    local found, err = process.registry.lookup(pid)
    if not found then return false, err end
    pid = found
  end
  local w, werr
  if named then
    -- A name on another node: watched for this call alone (that node
    -- finds the process the name names when the watch arrives, just
    -- before the call, which travels behind it; a kept watch could watch
    -- a process the name no longer names). Its exit answers a missing
    -- name (noproc) and the node's end (noconnection) at once.
    local ch
    ch, werr = process.watch(dest)
    if not ch then return false, werr end
    w = { ch = ch, case = ch:case_receive(), used = 0, busy = 0, once = true }
  else
    w, werr = watch_of(pid)
  end
  if not w then return false, werr end
  local watch = w.ch
  next_ref = next_ref + 1
  local ref = next_ref
  local body = { call = 0, value = false }  -- keys in place: see reply_to
  body.call, body.value = ref, value
  local ok, err = process.send(pid, topic, body)
  if not ok then
    drop_watch(w, dest, pid)
    return false, err
  end
  local cases = boxes[task]
  if not cases then
    local box = channel.new(1)
    cases = { box:case_receive(), replies:case_receive(), box = box }
    boxes[task] = cases
  end
  local box = cases.box
  waiting[ref] = box
  cases[3] = w.case
  cases.timeout = secs
  local r, reply
  w.busy = w.busy + 1
  repeat
    r = channel.select(cases)
    if r.channel == replies then
      -- Its own reply, the usual case, is taken here; another call's goes
      -- to that call's box.
      local p = r.value.payload
      if type(p) == "table" and p.ref == ref then
        reply = p
        break
      end
      route(p)
    end
  until r.channel ~= replies
  w.busy = w.busy - 1
  if w.once and r.channel ~= watch then drop_watch(w, dest, pid) end
  if reply then
    waiting[ref] = nil
  elseif r.channel == box then
    reply = r.value
  else
    if r.channel == watch and not w.once then
      watch:send(r.value)  -- for the other calls waiting on it (the channel holds one)
      forget_watch(pid)
    end
    -- The reply wins when it came in the same step as the timeout or the
    -- callee's exit (a reply sent just before it exited can wait behind
    -- its exit event): another task may have put it in the box already,
    -- or it waits in replies. The box is empty again for the next call.
    if r.channel == watch then route_queued() end
    waiting[ref] = nil
    local late = channel.select { box:case_receive(), default = true }
    if late.default then
      if r.timeout then return false, "timeout" end
      return false, nil, r.value, pid
    end
    reply = late.value
  end
  if reply.error ~= nil then return false, reply.error end
  return true, reply.value
end

-- Sends `value` to `dest` (PID or registered name) on `topic` and waits up
-- to `timeout` (seconds or a duration string; default 5 s) for the reply.
-- Returns the reply value, or nil and "timeout", "not_found: ..." (no such
-- process, or it exited before replying) or the error the server replied
-- with through request.fail.
function M.call(dest, topic, value, timeout)
  local ok, v, exit, pid = M.call_raw(dest, topic, value, timeout, 2)
  if ok then return v end
  if v ~= nil then return nil, v end
  return nil, "not_found: " .. M.describe(pid) .. " exited before replying" ..
    (exit.error and (": " .. exit.error:match("^[^\n]*")) or "")
end

-- True when msg is a call made with request.call.
function M.is_call(msg)
  return type(msg) == "table" and type(msg.payload) == "table" and type(msg.payload.call) == "number"
end

-- The reply to a call: made from a constructor of constants, then filled
-- in, because LuaJIT builds `{ ref = r, value = v }` key by key and
-- rehashes it on the way (BENCHMARKS.md's source figures).
local function reply_to(msg, key, value)
  local body = { ref = 0, value = false, error = false }
  body.ref, body.value, body.error = msg.payload.call, nil, nil
  body[key] = value
  return process.send(msg.from, REPLY_TOPIC, body)
end

-- Answers a call. Returns true, or nil, err when the caller is gone.
function M.reply(msg, value)
  if not M.is_call(msg) then error("bad argument #1 to 'reply' (not a request.call message)", 2) end
  return reply_to(msg, "value", value)
end

-- Answers a call with an error: the caller's call returns nil, err.
function M.fail(msg, err)
  if not M.is_call(msg) then error("bad argument #1 to 'fail' (not a request.call message)", 2) end
  return reply_to(msg, "error", tostring(err))
end

return M
