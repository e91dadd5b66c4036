-- A small test harness for Lua-level tests run through the host: each test
-- file's main runs its cases in order and fails (exit status 1) if any did.
local T = {}

local function show(v)
  if type(v) == "string" then return string.format("%q", v) end
  return tostring(v)
end

function T.eq(got, want, what)
  if got ~= want and not (got ~= got and want ~= want) then
    error((what or "value") .. ": expected " .. show(want) .. ", got " .. show(got), 2)
  end
end

function T.ok(cond, what)
  if not cond then error((what or "condition") .. " is false", 2) end
end

function T.match(s, pattern, what)
  if type(s) ~= "string" or not s:find(pattern) then
    error((what or "string") .. ": " .. show(s) .. " does not match " .. show(pattern), 2)
  end
end

-- Expects fn to raise an error matching pattern.
function T.raises(fn, pattern, what)
  local ok, err = pcall(fn)
  if ok then error((what or "call") .. " did not raise", 2) end
  if pattern and not tostring(err):find(pattern) then
    error((what or "call") .. " raised " .. show(tostring(err)) .. ", expected " .. show(pattern), 2)
  end
end

-- Expects fn to raise an error that is exactly the caller's file and
-- line, then msg (plain text, at the start): a check must blame the line
-- that made the bad call, not a line of the library. Call it with fn on
-- the same line.
function T.raises_here(fn, msg, what)
  local at = debug.getinfo(2, "Sl")
  local ok, err = pcall(fn)
  if ok then error((what or "call") .. " did not raise", 2) end
  local want = at.short_src .. ":" .. at.currentline .. ": " .. msg
  if tostring(err):sub(1, #want) ~= want then
    error((what or "call") .. " raised " .. show(tostring(err)) .. ", expected " .. show(want .. "..."), 2)
  end
end

-- The next message, which must be on `topic`, and its payload; raises
-- after secs (default 5) with none.
function T.expect(topic, secs)
  local m, err = process.receive(secs or 5)
  if not m then error("no " .. topic .. " message: " .. tostring(err), 2) end
  T.eq(m.topic, topic, "topic")
  return m.payload
end

-- Waits for the next event of `kind` (skipping none), with a timeout.
function T.next_event(kind, timeout)
  local ev_ch = process.events()
  local deadline = time.after(timeout or 5)
  local r = channel.select { ev_ch:case_receive(), deadline:case_receive() }
  if r.channel == deadline then error("no " .. kind .. " event within " .. (timeout or 5) .. " s", 2) end
  T.eq(r.value.kind, kind, "event kind")
  return r.value
end

-- A new directory under /tmp, made with fs (not os.tmpname: its mkstemp
-- escapes ThreadSanitizer's file-descriptor tracking, which then takes
-- the reuse of a number the I/O thread closed for a race).
-- Two test programs at once (two builds' ctest runs) make the same names
-- in turn: a name taken is tried again with the next one.
local made = 0
function T.tmpdir()
  for _ = 1, 100 do
    made = made + 1
    local dir = string.format("/tmp/host-test-%s-%d-%d-%d", (process.pid():gsub("%W", "")), made,
      math.floor(time.now() * 1e3) % 1e9, math.random(1e9))
    local ok, err = fs.mkdir(dir)
    if ok then return dir end
    if not tostring(err):match("^exists") then error(err, 2) end
  end
  error("no free directory name under /tmp", 2)
end

-- A loopback port nothing listens on (bound, then released).
function T.free_port()
  local srv = assert(require("socket").bind("127.0.0.1", 0))
  local _, port = srv:getsockname()
  srv:close()
  return port
end

-- Waits until something listens on port (a peer the test started): true,
-- or false after secs.
function T.wait_port(port, secs)
  local socket = require("socket")
  local deadline = time.now() + secs
  while time.now() < deadline do
    local c = socket.connect("127.0.0.1", port)
    if c then
      c:close()
      return true
    end
    time.sleep(0.05)
  end
  return false
end

-- Waits until cond() is true; raises after secs (default 5).
function T.eventually(cond, secs, what)
  secs = secs or 5
  local deadline = time.now() + secs
  while time.now() < deadline do
    if cond() then return end
    time.sleep(0.02)
  end
  error((what or "condition") .. " did not hold within " .. secs .. " s", 2)
end

-- Live processes running entry.
function T.count_processes(entry)
  local n = 0
  for _, pid in ipairs(process.list()) do
    local info = process.info(pid)
    if info and info.entry == entry then n = n + 1 end
  end
  return n
end

function T.run(cases)
  local passed, failed = 0, 0
  for _, case in ipairs(cases) do
    local name, fn = case[1], case[2]
    local ok, err = xpcall(fn, debug.traceback)
    if ok then
      passed = passed + 1
      print("ok   " .. name)
    else
      failed = failed + 1
      print("FAIL " .. name .. ": " .. tostring(err))
    end
  end
  print(string.format("%d passed, %d failed", passed, failed))
  if failed > 0 then error(failed .. " test(s) failed", 0) end
  return true
end

return T
