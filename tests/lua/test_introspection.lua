-- Introspection: process.list() and process.info(pid),
-- for processes in each state, their relations, and bad PIDs.
local T = require("t")

local function contains(list, x)
  for _, v in ipairs(list) do if v == x then return true end end
  return false
end

-- Polls info(pid) until check(info) holds (a process reaches a state a
-- moment after the send or spawn that leads there).
local function info_when(pid, check, what)
  local deadline = time.now() + 5
  local info
  repeat
    info = assert(process.info(pid))
    if check(info) then return info end
    time.sleep(0.01)
  until time.now() > deadline
  error("process.info(" .. pid .. ") never showed " .. what .. "; last status " .. tostring(info.status) ..
    ", mailbox " .. tostring(info.mailbox), 2)
end

local M = {}

function M.sleeper() time.sleep(60) end
function M.receiver() process.receive() end
function M.blocked_in_c() os.execute("sleep 3") end
function M.named(name) process.registry.register(name); process.receive() end

function M.main()
  return T.run {
    { "process.list has every live process, and not one that ended", function()
      local a = assert(process.spawn("test_introspection:receiver"))
      local list = process.list()
      T.ok(contains(list, process.pid()), "self listed")
      T.ok(contains(list, a), "child listed")
      process.send(a, "go", nil)
      local deadline = time.now() + 5
      while contains(process.list(), a) and time.now() < deadline do time.sleep(0.01) end
      T.ok(not contains(process.list(), a), "an ended process is not listed")
    end },

    { "info of the caller itself: running, its entry, heap, steps and start", function()
      local t0 = time.now()
      local me = assert(process.info(process.pid()))
      T.eq(me.status, "running")
      T.eq(me.entry, "test_introspection:main")
      T.ok(me.memory > 1000, "memory " .. tostring(me.memory))
      T.ok(me.steps >= 1, "steps " .. tostring(me.steps))
      T.ok(me.started <= t0, "started " .. me.started .. " before " .. t0)
      T.eq(me.mailbox, 0)
      for _, k in ipairs { "links", "monitors", "monitored_by", "names" } do T.eq(type(me[k]), "table", k) end
    end },

    { "a process in receive is idle; one asleep is waiting, and counts the messages it has not received", function()
      local t0 = time.now()
      local r = assert(process.spawn("test_introspection:receiver"))
      local info = info_when(r, function(i) return i.status == "idle" end, "idle")
      T.eq(info.mailbox, 0)
      T.eq(info.entry, "test_introspection:receiver")
      T.ok(info.started >= t0 and info.started <= time.now(), "started within the test")
      local s = assert(process.spawn("test_introspection:sleeper"))
      info_when(s, function(i) return i.status == "waiting" end, "waiting")
      for i = 1, 3 do process.send(s, "m" .. i, i) end
      info = info_when(s, function(i) return i.mailbox == 3 and i.status == "waiting" end, "3 messages")
      T.ok(info.steps >= 2, "steps " .. info.steps)
      process.terminate(r)
      process.terminate(s)
    end },

    { "a process blocked inside a C call is running", function()
      local c = assert(process.spawn("test_introspection:blocked_in_c"))
      time.sleep(0.3)
      local info = assert(process.info(c))
      T.eq(info.status, "running")
      T.eq(info.entry, "test_introspection:blocked_in_c")
    end },

    { "links, monitors, monitored_by and names", function()
      local child = assert(process.spawn_linked("test_introspection:receiver"))
      local watched = assert(process.spawn("test_introspection:receiver"))
      assert(process.monitor(watched))
      local named = assert(process.spawn("test_introspection:named", "introspected"))
      info_when(named, function(i) return #i.names == 1 end, "its name")
      T.eq(assert(process.info(named)).names[1], "introspected")
      T.eq(assert(process.info("introspected")).entry, "test_introspection:named", "by name")
      local ci = assert(process.info(child))
      T.ok(contains(ci.links, process.pid()), "the child's links hold its parent")
      local me = assert(process.info(process.pid()))
      T.ok(contains(me.links, child), "the parent's links hold the child")
      T.ok(contains(me.monitors, watched), "monitors")
      T.ok(contains(assert(process.info(watched)).monitored_by, process.pid()), "monitored_by")
      assert(process.unmonitor(watched))
      T.ok(not contains(assert(process.info(process.pid())).monitors, watched), "unmonitored")
      assert(process.unlink(child))
      for _, p in ipairs { child, watched, named } do process.terminate(p) end
    end },

    { "a dead, malformed or unknown PID answers nil and an error; a non-string raises", function()
      local r = assert(process.spawn("test_introspection:receiver"))
      process.terminate(r)
      local deadline = time.now() + 5
      local info, err
      repeat info, err = process.info(r); time.sleep(0.01) until info == nil or time.now() > deadline
      T.eq(info, nil)
      T.match(err, "^not_found: ")
      info, err = process.info("<0.x.1>")
      T.eq(info, nil)
      T.match(err, "^invalid: ")
      info, err = process.info("nobody-registered-this")
      T.eq(info, nil)
      T.match(err, "^not_found: ")
      T.raises(function() process.info(42) end, "string expected")
    end },
  }
end

return M
