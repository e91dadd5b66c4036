-- stdlib/request and stdlib/supervisor.
local T = require("t")
local request = require("request")
local supervisor = require("supervisor")

local me

-- Collects `n` "started" reports: id -> pid.
local function started(n)
  local got = {}
  for _ = 1, n do
    local m = assert(process.receive(5), "a child did not start")
    T.eq(m.topic, "started")
    got[m.payload.id] = m.payload.pid
  end
  return got
end

-- No link_down came: a supervisor whose child did not start at first
-- unlinks from its caller before it fails.
local function no_link_down()
  local r = channel.select { process.events():case_receive(), timeout = 0.2 }
  T.ok(r.timeout, "no event after a start that returned nil (got " .. tostring(r.value and r.value.kind) .. ")")
end

local function children(ids, restart)
  local list = {}
  for i, id in ipairs(ids) do
    list[i] = { id = id, entry = "fixtures.child", args = { me, id }, restart = restart or "permanent" }
  end
  return list
end

return { main = function()
  me = process.pid()
  process.set_options { trap_links = true }  -- a supervisor giving up must not take the tests down
  return T.run {
    { "call returns the reply; concurrent calls each get their own", function()
      local s = assert(process.spawn("fixtures.server"))
      T.eq(request.call(s, "echo", { x = 1 }).x, 1)
      local results = channel.new(10)
      for i = 1, 5 do coroutine.spawn(function() results:send(request.call(s, "echo", i)) end) end
      local sum = 0
      for _ = 1, 5 do sum = sum + results:receive() end
      T.eq(sum, 15)
      process.send(s, "stop", nil)
    end },
    { "many calls at once from many tasks each get their own reply, never another's", function()
      -- Each reply reaches whichever of the process's calls takes it from
      -- the "$reply" listener first: one of its own it keeps, another's it
      -- hands to that call's box. Distinct values catch a swap, which a sum
      -- would not.
      local servers = { assert(process.spawn("fixtures.server")), assert(process.spawn("fixtures.server")) }
      local done = channel.new(20)
      for t = 1, 20 do
        coroutine.spawn(function()
          local wrong
          for i = 1, 50 do
            local v = t * 1000 + i
            local got, err = request.call(servers[(t + i) % 2 + 1], "echo", v)
            if got ~= v and not wrong then wrong = "task " .. t .. " call " .. i .. ": " .. tostring(got) .. " " .. tostring(err) end
          end
          done:send(wrong or true)
        end)
      end
      for _ = 1, 20 do T.eq(done:receive(), true) end
      T.eq(select(2, process.receive(0)), "timeout", "no stray reply in the inbox")
      for _, s in ipairs(servers) do process.send(s, "stop", nil) end
    end },
    { "a call answered in time leaves no timer behind", function()
      -- Its timeout's timer is stopped: held until it fired, each call's
      -- timer (a closure and a channel) stayed for the whole timeout, and
      -- a process calling often held thousands.
      local s = assert(process.spawn("fixtures.server"))
      T.eq(request.call(s, "echo", 0, 60), 0)
      collectgarbage(); collectgarbage()
      local before = process.memory()
      for i = 1, 3000 do T.eq(request.call(s, "echo", i, 60), i) end
      collectgarbage(); collectgarbage()
      local grown = process.memory() - before
      T.ok(grown < 100 * 1024, "3000 calls kept " .. grown .. " bytes")
      process.send(s, "stop", nil)
    end },
    { "call times out, and the late reply never reaches the inbox", function()
      local s = assert(process.spawn("fixtures.server"))
      -- The reply comes 0.45 s after the timeout: a loaded machine (CI's
      -- sanitizer runs) may deliver the timer late, but not that late.
      local v, err = request.call(s, "slow", 0.5, 0.05)
      T.eq(v, nil); T.eq(err, "timeout")
      time.sleep(0.6)
      T.eq(select(2, process.receive(0)), "timeout", "no stray reply in the inbox")
      T.eq(request.call(s, "echo", "after"), "after")
      process.send(s, "stop", nil)
    end },
    { "a late reply is never taken for the next call's", function()
      local s = assert(process.spawn("fixtures.server"))
      local s2 = assert(process.spawn("fixtures.server"))
      -- The slow server's "late" arrives while the same task's next call,
      -- to another server that takes as long, still waits.
      T.eq(select(2, request.call(s, "slow", 0.1, 0.02)), "timeout")
      T.eq(request.call(s2, "slow", 0.2, 5), "late")
      T.eq(request.call(s, "echo", "mine"), "mine")
      -- Concurrent calls where one times out: the others get their own.
      local results = channel.new(3)
      coroutine.spawn(function() results:send({ request.call(s, "slow", 0.1, 0.02) }) end)
      coroutine.spawn(function() results:send({ request.call(s2, "echo", "b") }) end)
      coroutine.spawn(function() results:send({ request.call(s2, "echo", "c") }) end)
      local got = {}
      for _ = 1, 3 do local r = results:receive(); got[#got + 1] = tostring(r[1]) .. "/" .. tostring(r[2]) end
      table.sort(got)
      T.eq(table.concat(got, " "), "b/nil c/nil nil/timeout")
      time.sleep(0.15)
      T.eq(request.call(s, "echo", "after"), "after")
      T.eq(select(2, process.receive(0)), "timeout", "no stray reply in the inbox")
      process.send(s, "stop", nil); process.send(s2, "stop", nil)
    end },
    { "a call that cannot wait fails before it sends anything", function()
      local s = assert(process.spawn("fixtures.server"))
      T.raises(function() table.sort({ 2, 1 }, function(a, b) request.call(s, "echo", "lost"); return a < b end) end,
        "C function boundary")
      time.sleep(0.05)
      -- Nothing went out: no reply waits to be taken for the next call's.
      T.eq(request.call(s, "echo", "mine"), "mine")
      process.send(s, "stop", nil)
    end },
    { "calls waiting on one server all fail at once when it dies", function()
      -- The watch of a server is kept from call to call and shared: its
      -- one exit event must reach every call waiting on it.
      local s = assert(process.spawn("fixtures.server"))
      T.eq(request.call(s, "echo", 1), 1)
      local results = channel.new(3)
      for _ = 1, 3 do
        coroutine.spawn(function() results:send({ request.call(s, "ignore", nil, 5) }) end)
      end
      time.sleep(0.05)
      local t0 = time.now()
      process.terminate(s)
      for _ = 1, 3 do
        local r = results:receive()
        T.eq(r[1], nil); T.match(r[2], "^not_found: .* exited before replying")
      end
      T.ok(time.now() - t0 < 1, "took " .. (time.now() - t0) .. " s")
      T.match(select(2, request.call(s, "echo", 2)), "^not_found")
    end },
    { "calls to many servers keep a bounded number of watches", function()
      local function heap() collectgarbage(); collectgarbage(); return process.memory() end
      local function call_new_servers(n)
        for i = 1, n do
          local s = assert(process.spawn("fixtures.server"))
          T.eq(request.call(s, "echo", i), i)
          process.send(s, "stop", nil)
        end
        time.sleep(0.05)
      end
      -- The first few hundred calls also grow the heap once: the JIT's
      -- traces of the call's code count in it (86 KB here).
      call_new_servers(300)
      local before = heap()
      call_new_servers(300)
      local grown = heap() - before
      T.ok(grown < 48 * 1024, "300 servers called kept " .. grown .. " bytes")
    end },
    { "a reply sent just before the server ends still reaches call, and its exit nothing else", function()
      local function queued_event()
        local r = channel.select { process.events():case_receive(), default = true }
        return not r.default and r.value or nil
      end
      while queued_event() do end
      -- The reply and the exit often arrive together; the reply wins.
      for i = 1, 30 do
        local s = assert(process.spawn("fixtures.server"))
        local v, err = request.call(s, "last", i)
        T.eq(err, nil); T.eq(v, i)
      end
      -- An exit on its way when call dropped its watch is dropped with it
      -- (as after Erlang's demonitor), not left in events().
      time.sleep(0.1)
      local stray = queued_event()
      T.eq(stray and (stray.kind .. " from " .. tostring(stray.from)), nil)
    end },
    { "call reports a server error, a dead server and an unknown name", function()
      local s = assert(process.spawn("fixtures.server"))
      local v, err = request.call(s, "fail", "bad")
      T.eq(v, nil); T.eq(err, "invalid: bad")
      v, err = request.call(s, "die", nil, 5)
      T.eq(v, nil); T.match(err, "^not_found: .* exited before replying: .*server died")
      v, err = request.call(s, "echo", 1)
      T.match(err, "^not_found")
      T.raises(function() local r = request.call(42, "echo", 1); return r end,
        "test_stdlib%.lua:%d+: bad argument #1 to 'call' %(PID or registered name expected, got number%)")
      T.raises(function() local r = request.call(s, "echo", 1, "soon"); return r end,
        "test_stdlib%.lua:%d+: bad argument #4 to 'call' %(invalid duration: \"soon\"%)")
      T.raises(function() local r = request.call(s, "echo", 1, -1); return r end,
        "test_stdlib%.lua:%d+: bad argument #4 to 'call' %(invalid duration: %-1%)")
      T.raises(function() local r = request.call(s, "echo", 1, 0 / 0); return r end,
        "bad argument #4 to 'call' %(invalid duration: %-?nan%)")
      local live = assert(process.spawn("fixtures.server"))
      T.eq(request.call(live, "echo", 7, "250ms"), 7)
      T.eq(request.call(live, "echo", 8, 0.25), 8)
      process.send(live, "stop", nil)
      v, err = request.call("nobody-here", "echo", 1)
      T.match(err, "^not_found")
    end },
    { "one_for_one restarts only the child that failed", function()
      local sup = assert(supervisor.start { strategy = "one_for_one", children = children({ "a", "b", "c" }) })
      local first = started(3)
      process.send(first.b, "crash", nil)
      local again = started(1)
      T.ok(again.b and again.b ~= first.b, "b restarted")
      T.eq(process.receive(0.1), nil, "a and c untouched")
      local list = supervisor.which_children(sup)
      T.eq(list[1].pid, first.a); T.eq(list[2].pid, again.b); T.eq(list[3].pid, first.c)
      process.cancel(sup)
    end },
    { "one_for_all restarts every child", function()
      local sup = assert(supervisor.start { strategy = "one_for_all", children = children({ "a", "b", "c" }) })
      local first = started(3)
      process.send(first.a, "crash", nil)
      local again = started(3)
      for _, id in ipairs({ "a", "b", "c" }) do T.ok(again[id] ~= first[id], id .. " restarted") end
      T.match(select(2, process.send(first.c, "x", 1)), "^not_found", "old c is gone")
      process.cancel(sup)
    end },
    { "rest_for_one restarts the failed child and those after it", function()
      local sup = assert(supervisor.start { strategy = "rest_for_one", children = children({ "a", "b", "c" }) })
      local first = started(3)
      process.send(first.b, "crash", nil)
      local again = started(2)
      T.ok(again.b and again.c and not again.a, "b and c restarted, a kept")
      T.eq(supervisor.which_children(sup)[1].pid, first.a)
      process.cancel(sup)
    end },
    { "transient children restart only on failure; temporary never", function()
      local list = children({ "t" }, "transient")
      list[2] = { id = "tmp", entry = "fixtures.child", args = { me, "tmp" }, restart = "temporary" }
      local sup = assert(supervisor.start { children = list })
      local first = started(2)
      process.send(first.t, "quit", nil)        -- normal exit: not restarted
      process.send(first.tmp, "crash", nil)     -- temporary: not restarted
      T.eq(process.receive(0.2), nil, "nothing restarted")
      local kids = supervisor.which_children(sup)
      T.eq(kids[1].pid, nil); T.eq(kids[2].pid, nil)
      process.cancel(sup)
    end },
    { "a child that does not start at first fails start at once with its error", function()
      -- Alone, the failing child ends its supervisor at once, often before
      -- start asks it anything: start still gets the child's error.
      for _ = 1, 30 do
        local sup, err = supervisor.start { children = { { id = "x", entry = "fixtures.no_such_module" } } }
        T.eq(sup, nil)
        T.match(err, "^supervisor: child 'x' did not start: not_found: module 'fixtures%.no_such_module'")
      end
      no_link_down()
      local list = children({ "a" })
      list[2] = { id = "x", entry = "fixtures.no_such_module" }
      local sup, err = supervisor.start { children = list }
      T.eq(sup, nil)
      T.match(err, "^supervisor: child 'x' did not start: not_found: module 'fixtures%.no_such_module'")
      no_link_down()
      -- a, started before x, was stopped with it (maybe before it ran):
      -- at most its one report, and no retry started anything.
      local reports = 0
      while true do
        local m = process.receive(0.2)
        if not m then break end
        T.eq(m.payload.id, "a"); reports = reports + 1
      end
      T.ok(reports <= 1, "a started once at most")
    end },
    { "a child whose name is taken does not start, and start says so", function()
      assert(process.registry.register("taken_by_the_test", me))
      local sup, err = supervisor.start {
        children = { { id = "db", entry = "fixtures.child", args = { me, "db" }, name = "taken_by_the_test" } },
      }
      T.eq(sup, nil)
      T.match(err, "^supervisor: child 'db' did not start: exists: ")
      no_link_down()
      T.eq(process.registry.lookup("taken_by_the_test"), me, "the name still names its holder")
      process.registry.unregister("taken_by_the_test")
      while process.receive(0.2) do end  -- the child's start report, if it ran before it was stopped
    end },
    { "a child that does not start makes start return nil and its error, never fail a caller that does not trap links", function()
      -- The supervisor's failure used to reach the caller over the link,
      -- sometimes before start's reply: the caller failed instead.
      assert(process.registry.register("taken_by_the_test", me))
      local starter = assert(process.spawn_monitored("fixtures.sup_starter", 50, "taken_by_the_test"))
      local ev
      repeat ev = T.next_event("exit", 60) until ev.from == starter
      T.eq(ev.error, nil, "the caller failed")
      T.eq(ev.result, 50, "starts that returned nil and the child's error")
      process.registry.unregister("taken_by_the_test")
    end },
    { "a temporary child stopped because a sibling failed is not started again", function()
      -- OTP's rule: rest_for_one and one_for_all stop the temporary
      -- children they reach, and never restart them; restart_children
      -- does not start one that has ended either.
      for _, strategy in ipairs({ "rest_for_one", "one_for_all" }) do
        local list = children({ "a", "b" })
        list[3] = { id = "tmp", entry = "fixtures.child", args = { me, "tmp" }, restart = "temporary" }
        local sup = assert(supervisor.start { strategy = strategy, children = list })
        local first = started(3)
        process.send(first.b, "crash", nil)
        local again = started(strategy == "rest_for_one" and 1 or 2)
        T.ok(again.b and not again.tmp, strategy .. ": b restarted, tmp not")
        T.eq(process.receive(0.2), nil, strategy .. ": nothing else started")
        local kids = supervisor.which_children(sup)
        T.eq(kids[3].id, "tmp"); T.eq(kids[3].pid, nil, strategy .. ": tmp stays stopped")
        T.eq(supervisor.restart_children(sup), true)
        local third = started(2)
        T.ok(third.a and third.b and not third.tmp, strategy .. ": restart_children leaves tmp ended")
        T.eq(process.receive(0.2), nil, strategy .. ": tmp not started by restart_children")
        process.cancel(sup)
      end
    end },
    { "past the restart intensity the supervisor gives up and its parent hears of it", function()
      local sup = assert(supervisor.start { intensity = 2, period = 10, children = children({ "x" }) })
      process.monitor(sup)
      local pid = started(1).x
      for _ = 1, 3 do
        process.send(pid, "crash", nil)
        local m = process.receive(2)
        if m then pid = m.payload.pid end
      end
      local ev
      repeat ev = T.next_event("exit") or nil until ev.from == sup
      T.match(ev.error, "restart intensity exceeded")
    end },
    { "restart_children restarts every child on the newest code", function()
      local sup = assert(supervisor.start { children = children({ "a", "b" }) })
      local first = started(2)
      T.eq(supervisor.restart_children(sup), true)
      local again = started(2)
      T.ok(again.a ~= first.a and again.b ~= first.b, "both restarted")
      process.cancel(sup)
    end },
    { "bad supervisor specs raise", function()
      T.raises(function() supervisor.start { strategy = "all_for_none", children = {} } end, "unknown supervisor strategy")
      T.raises(function() supervisor.start { children = { { id = "x" } } } end, "needs an entry")
      T.raises(function() local r = supervisor.which_children(42); return r end,
        "test_stdlib%.lua:%d+: bad argument #1 to 'which_children' %(supervisor PID or name expected, got number%)")
      T.raises(function() supervisor.start { children = { { entry = "a", restart = "sometimes" } } } end, "unknown restart")
    end },
    { "an unknown supervisor option or child option raises at the caller's line, starting nothing", function()
      local before = T.count_processes("supervisor:run")
      T.raises_here(function() supervisor.start { intesity = 1, children = {} } end, "invalid: unknown option 'intesity'")
      T.raises_here(function() supervisor.start { children = { { entry = "fixtures.idle", restrat = "temporary" } } } end, "invalid: unknown option 'restrat'")
      T.raises_here(function() supervisor.start { strategy = "all_for_none", children = {} } end, "invalid: unknown supervisor strategy")
      T.raises_here(function() supervisor.start { children = { { id = "x" } } } end, "invalid: child #1 needs an entry string")
      -- At most as many as before: one an earlier case cancelled may end meanwhile.
      local after = T.count_processes("supervisor:run")
      T.ok(after <= before, "no supervisor started: " .. before .. " before, " .. after .. " after")
    end },
  }
end }
