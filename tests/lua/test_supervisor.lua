-- stdlib/supervisor, dynamic: start_child, terminate_child,
-- which_children, count_children, max_children, shutdown and delay, and
-- the order children stop in.
local T = require("t")
local supervisor = require("supervisor")

local me

local expect = T.expect

local function child(id, extra)
  local c = { id = id, entry = "fixtures.child", args = { me, id } }
  for k, v in pairs(extra or {}) do c[k] = v end
  return c
end

return { main = function()
  me = process.pid()
  process.set_options { trap_links = true }
  return T.run {
    { "start_child adds children to a running supervisor; which_children and count_children see them", function()
      local sup = assert(supervisor.start { children = {} })
      T.eq(#supervisor.which_children(sup), 0)
      local a = assert(supervisor.start_child(sup, child("a")))
      T.eq(expect("started").pid, a)
      local b = assert(supervisor.start_child(sup, child("b", { restart = "transient" })))
      T.eq(expect("started").pid, b)
      local kids = supervisor.which_children(sup)
      T.eq(#kids, 2)
      T.eq(kids[1].id, "a"); T.eq(kids[1].pid, a); T.eq(kids[1].restart, "permanent"); T.eq(kids[1].status, "running")
      T.eq(kids[2].id, "b"); T.eq(kids[2].restart, "transient")
      local n = supervisor.count_children(sup)
      T.eq(n.specs, 2); T.eq(n.active, 2)
      process.send(b, "quit", nil)  -- transient, normal end: known, not running
      T.eventually(function() return supervisor.count_children(sup).active == 1 end, 5, "b ended")
      T.eq(supervisor.count_children(sup).specs, 2)
      -- A crash of a is restarted, as for a child given at start.
      process.send(a, "crash", nil)
      local again = expect("started")
      T.eq(again.id, "a"); T.ok(again.pid ~= a, "a new process")
      process.cancel(sup)
    end },

    { "start_child answers nil, err for a duplicate id, a child that does not start, and past max_children", function()
      local sup = assert(supervisor.start { max_children = 2 })
      assert(supervisor.start_child(sup, child("a")))
      expect("started")
      local pid, err = supervisor.start_child(sup, child("a"))
      T.eq(pid, nil); T.match(err, "^exists")
      pid, err = supervisor.start_child(sup, { id = "x", entry = "fixtures.no_such_module" })
      T.eq(pid, nil); T.match(err, "^not_found: module 'fixtures%.no_such_module'")
      assert(supervisor.start_child(sup, child("b")))
      expect("started")
      pid, err = supervisor.start_child(sup, child("c"))
      T.eq(pid, nil); T.match(err, "^limit: max_children")
      T.eq(supervisor.count_children(sup).specs, 2)
      T.eq(process.info(sup) ~= nil, true, "the supervisor lives on")
      process.cancel(sup)
    end },

    { "a bad child spec raises invalid at the caller's line", function()
      local sup = assert(supervisor.start {})
      T.raises_here(function() supervisor.start_child(sup, { id = "x", entry = "fixtures.child", restrat = "temporary" }) end,
        "invalid: unknown option 'restrat'")
      T.raises_here(function() supervisor.start_child(sup, { id = "x" }) end, "invalid: child spec needs an entry string")
      T.raises_here(function() supervisor.start_child(sup, child("x", { shutdown = "soon" })) end, "invalid: child 'x': shutdown must be seconds")
      T.raises_here(function() supervisor.start_child(sup, child("x", { delay = -1 })) end, "invalid: child 'x': delay must be seconds")
      T.raises_here(function() supervisor.start { max_children = "many" } end, "invalid: max_children")
      process.cancel(sup)
    end },

    { "terminate_child stops a child by id or PID and forgets it: never restarted", function()
      local sup = assert(supervisor.start { children = { child("a"), child("b") } })
      local got = {}
      for _ = 1, 2 do
        local s = expect("started")
        got[s.id] = s.pid
      end
      local a, b = got.a, got.b
      local wa, wb = process.watch(a), process.watch(b)
      T.eq(supervisor.terminate_child(sup, "a"), true)
      wa:receive()
      T.eq(supervisor.terminate_child(sup, b), true)
      wb:receive()
      T.eq(process.receive(0.3), nil, "nothing restarted")
      T.eq(#supervisor.which_children(sup), 0)
      local ok, err = supervisor.terminate_child(sup, "a")
      T.eq(ok, nil); T.match(err, "^not_found")
      process.cancel(sup)
    end },

    { "start_child 1,000 times: every child runs, each counted once", function()
      local sup = assert(supervisor.start {})
      for i = 1, 1000 do
        assert(supervisor.start_child(sup, { id = i, entry = "fixtures.idle" }))
      end
      local n = supervisor.count_children(sup)
      T.eq(n.specs, 1000); T.eq(n.active, 1000)
      local kids = supervisor.which_children(sup)
      T.eq(#kids, 1000)
      for i = 1, 1000 do T.eq(kids[i].id, i) end
      local w = process.watch(sup)
      process.cancel(sup)
      w:receive()
      for i = 1, 1000, 97 do T.eq(process.info(kids[i].pid), nil, "child " .. i .. " stopped") end
    end },

    { "a stopping supervisor stops its children one by one in reverse start order", function()
      local sup = assert(supervisor.start { children = {
        { id = "first", entry = "fixtures.stopping_child", args = { me, "first", 0.05 } },
        { id = "second", entry = "fixtures.stopping_child", args = { me, "second", 0.05 } },
      } })
      expect("started"); expect("started")
      assert(supervisor.start_child(sup, { id = "third", entry = "fixtures.stopping_child", args = { me, "third", 0.05 } }))
      expect("started")
      local w = process.watch(sup)
      process.cancel(sup)
      local order = {}
      for i = 1, 3 do order[i] = expect("stopping") end
      T.eq(order[1].id, "third"); T.eq(order[2].id, "second"); T.eq(order[3].id, "first")
      -- One after another: each is cancelled once the one before has ended.
      T.ok(order[2].at - order[1].at >= 0.04, "second waited for third")
      T.ok(order[3].at - order[2].at >= 0.04, "first waited for second")
      w:receive()
    end },

    { "shutdown: a child that ignores its cancel is terminated after its seconds; brutal at once", function()
      local sup = assert(supervisor.start { children = {
        { id = "slow", entry = "fixtures.stopping_child", args = { me, "slow", "ignore" }, shutdown = 0.3 },
        { id = "brutal", entry = "fixtures.stopping_child", args = { me, "brutal", "ignore" }, shutdown = "brutal" },
      } })
      expect("started"); expect("started")
      local w = process.watch(sup)
      local t0 = time.now()
      process.cancel(sup)
      local s = expect("stopping")
      T.eq(s.id, "slow", "brutal was not cancelled, only terminated")
      w:receive()
      local took = time.now() - t0
      T.ok(took >= 0.25, "waited for slow's shutdown (" .. took .. " s)")
      T.ok(took < 3, "then terminated it (" .. took .. " s)")
      T.eq(process.receive(0.1), nil, "brutal got no cancel")
    end },

    { "delay: a restart waits its seconds, shown as restarting, and counts when it happens", function()
      local sup = assert(supervisor.start { intensity = 1, period = 1, children = { child("d", { delay = 0.4 }) } })
      local first = expect("started").pid
      local t0 = time.now()
      process.send(first, "crash", nil)
      T.eventually(function() return supervisor.which_children(sup)[1].status == "restarting" end, 2, "restarting")
      T.eq(supervisor.which_children(sup)[1].pid, nil)
      T.eq(supervisor.count_children(sup).active, 0)
      local again = expect("started", 3)
      T.ok(time.now() - t0 >= 0.35, "restarted after its delay")
      T.eq(supervisor.which_children(sup)[1].status, "running")
      -- Two crashes 0.4 s apart each restart after the delay: with
      -- intensity 1 in a 1 s period, the second restart gives up.
      local w = process.watch(sup)
      process.send(again.pid, "crash", nil)
      local ev = w:receive()
      T.match(ev.error, "restart intensity exceeded")
    end },
  }
end }
