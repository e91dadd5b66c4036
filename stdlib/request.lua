-- request: call a process and wait for its matching reply.
--
--   local request = require("request")
--   -- caller
--   local sum, err = request.call(server, "add", { 1, 2 }, 5)  -- nil, "timeout" after 5 s
--   -- server
--   local msg = process.receive()
--   request.reply(msg, msg.payload.value[1] + msg.payload.value[2])
--
-- A call sends `{ call = REF, value = VALUE }` on the topic you give; the
-- server answers with request.reply(msg, result), which sends to the caller
-- on the topic "$reply". One dispatcher coroutine per process routes each
-- reply to the call waiting for its REF, so several coroutines may call at
-- once; a reply that comes after its call timed out is dropped, never left
-- in the inbox.
local M = {}

local REPLY_TOPIC = "$reply"
local pending = {}      -- ref -> channel(1)
local next_ref = 0
local dispatcher = nil

local function ensure_dispatcher()
  if dispatcher then return end
  local replies = process.listen(REPLY_TOPIC)
  dispatcher = coroutine.spawn(function()
    while true do
      local m = replies:receive()
      local p = m.payload
      local waiting = type(p) == "table" and pending[p.ref]
      if waiting then
        pending[p.ref] = nil
        waiting:send(p)
      end
      -- else: a late reply to a call that timed out; dropped.
    end
  end)
end

-- Sends `value` to `dest` (PID or registered name) on `topic` and waits up
-- to `timeout` (seconds or a duration string; default 5 s) for the reply.
-- Returns the reply value, or nil and "timeout", "not_found: ..." (no such
-- process, or it exited before replying) or the error the server replied
-- with through request.fail.
function M.call(dest, topic, value, timeout)
  if type(dest) ~= "string" then
    error("bad argument #1 to 'call' (PID or registered name expected, got " .. type(dest) .. ")", 2)
  end
  if type(topic) ~= "string" then error("bad argument #2 to 'call' (topic string expected)", 2) end
  local valid, secs = pcall(time.parse_duration, timeout or 5)
  if not valid then error("bad argument #4 to 'call' (" .. tostring(secs):gsub("^.-:%d+: ", "") .. ")", 2) end
  ensure_dispatcher()
  next_ref = next_ref + 1
  local ref = process.pid() .. "#" .. next_ref
  local box = channel.new(1)
  pending[ref] = box
  -- Watch the callee, so a call to a process that dies fails at once.
  local pid = dest
  if dest:sub(1, 1) ~= "<" then
    local found, err = process.registry.lookup(dest)
    if not found then pending[ref] = nil; return nil, err end
    pid = found
  end
  local watch, werr = process.watch(pid)
  if not watch then pending[ref] = nil; return nil, werr end
  local ok, err = process.send(pid, topic, { call = ref, value = value })
  if not ok then
    pending[ref] = nil
    process.unwatch(pid, watch)
    return nil, err
  end
  -- Stopped once the select returns: time.after's timer would stay for the
  -- whole timeout, and a process making many calls would hold thousands.
  local timer = time.timer(secs)
  local r = channel.select { box:case_receive(), watch:case_receive(), timer.channel:case_receive() }
  timer.stop()
  local exited = r.channel == watch
  if exited then
    -- A reply the callee sent just before it exited can arrive in the same
    -- step as its exit, which woke this select before the dispatcher could
    -- hand the reply over: one yield lets it, and the reply wins.
    time.sleep(0)
    local late = channel.select { box:case_receive(), default = true }
    if not late.default then r = late end
  end
  if not exited then process.unwatch(pid, watch) end
  if r.channel ~= box then
    pending[ref] = nil
    if r.channel == timer.channel then return nil, "timeout" end
    return nil, "not_found: " .. pid .. " exited before replying" ..
      (r.value.error and (": " .. r.value.error:match("^[^\n]*")) or "")
  end
  if r.value.error ~= nil then return nil, r.value.error end
  return r.value.value
end

-- True when msg is a call made with request.call.
function M.is_call(msg)
  return type(msg) == "table" and type(msg.payload) == "table" and type(msg.payload.call) == "string"
end

-- Answers a call. Returns true, or nil, err when the caller is gone.
function M.reply(msg, value)
  if not M.is_call(msg) then error("bad argument #1 to 'reply' (not a request.call message)", 2) end
  return process.send(msg.from, REPLY_TOPIC, { ref = msg.payload.call, value = value })
end

-- Answers a call with an error: the caller's call returns nil, err.
function M.fail(msg, err)
  if not M.is_call(msg) then error("bad argument #1 to 'fail' (not a request.call message)", 2) end
  return process.send(msg.from, REPLY_TOPIC, { ref = msg.payload.call, error = tostring(err) })
end

return M
