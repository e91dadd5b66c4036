-- Channels, select and coroutines inside one process.
local T = require("t")

return { main = function()
  return T.run {
    { "an unbuffered channel hands a value from sender to receiver", function()
      local ch = channel.new()
      local order = {}
      coroutine.spawn(function() order[#order + 1] = "send"; ch:send("v"); order[#order + 1] = "sent" end)
      local v, ok = ch:receive()
      T.eq(v, "v"); T.eq(ok, true)
      time.sleep(0)
      T.eq(table.concat(order, ","), "send,sent")
    end },
    { "a buffered channel holds up to its capacity, then blocks the sender", function()
      local ch = channel.new(2)
      ch:send(1); ch:send(2)
      local third_sent = false
      coroutine.spawn(function() ch:send(3); third_sent = true end)
      time.sleep(0)
      T.eq(third_sent, false)
      T.eq(ch:receive(), 1)
      time.sleep(0)
      T.eq(third_sent, true)
      T.eq(ch:receive(), 2); T.eq(ch:receive(), 3)
    end },
    { "close drains then reports closed; send on a closed channel raises", function()
      local ch = channel.new(3)
      ch:send("a")
      T.eq(ch:close(), true)
      local v, ok = ch:receive(); T.eq(v, "a"); T.eq(ok, true)
      v, ok = ch:receive(); T.eq(v, nil); T.eq(ok, false)
      T.raises(function() ch:send("b") end, "send on a closed channel")
      local waiting = channel.new()
      local got = "unset"
      coroutine.spawn(function() local x, o = waiting:receive(); got = tostring(x) .. "/" .. tostring(o) end)
      time.sleep(0)
      waiting:close()
      time.sleep(0)
      T.eq(got, "nil/false")
    end },
    { "select picks a ready case and returns the very channel object", function()
      local a, b = channel.new(1), channel.new(1)
      b:send("from b")
      local r = channel.select { a:case_receive(), b:case_receive() }
      T.ok(r.channel == b, "the chosen channel"); T.eq(r.value, "from b"); T.eq(r.ok, true)
      r = channel.select { a:case_send("into a") }
      T.ok(r.channel == a, "send case"); T.eq(a:receive(), "into a")
    end },
    { "select takes the first ready case in the order given", function()
      local a, b = channel.new(100), channel.new(100)
      for i = 1, 100 do a:send(i); b:send(i) end
      for i = 1, 100 do
        local r = channel.select { b:case_receive(), a:case_receive() }
        T.ok(r.channel == b, "b first"); T.eq(r.value, i)
      end
      local r = channel.select { b:case_receive(), a:case_receive() }
      T.ok(r.channel == a, "then a"); T.eq(r.value, 1)
    end },
    { "select with default never blocks", function()
      local a = channel.new()
      local r = channel.select { a:case_receive(), default = true }
      T.eq(r.default, true)
    end },
    { "select blocks until a case is ready", function()
      local a, b = channel.new(), channel.new()
      coroutine.spawn(function() time.sleep(0.02); b:send(7) end)
      local r = channel.select { a:case_receive(), b:case_receive() }
      T.ok(r.channel == b); T.eq(r.value, 7)
      coroutine.spawn(function() time.sleep(0.01); T.eq(a:receive(), "x") end)
      r = channel.select { a:case_send("x") }
      T.ok(r.channel == a)
    end },
    { "selects over a channel that never fires leave nothing behind in it", function()
      -- Each select left a stale waiter in every channel it did not take
      -- from: a server loop over its inbox and a quit channel (or events())
      -- grew by one for each message, for good.
      local function heap() collectgarbage(); collectgarbage(); return process.memory() end
      local quit, work = channel.new(), channel.new()
      local inbox, events = process.inbox(), process.events()
      local n = 20000
      coroutine.spawn(function() for i = 1, n do work:send(i) end end)
      local before = heap()
      local sum = 0
      for _ = 1, n do
        local r = channel.select { work:case_receive(), quit:case_receive(), events:case_receive() }
        sum = sum + r.value
      end
      for i = 1, 2000 do
        process.send(process.pid(), "n", i)
        local r = channel.select { inbox:case_receive(), quit:case_receive() }
        sum = sum + r.value.payload
      end
      local grown = heap() - before
      T.eq(sum, n * (n + 1) / 2 + 2000 * 2001 / 2)
      T.ok(grown < 256 * 1024, "22000 selects kept " .. grown .. " bytes")
      -- quit still works after all that pruning
      coroutine.spawn(function() quit:send("stop") end)
      local r = channel.select { work:case_receive(), quit:case_receive() }
      T.ok(r.channel == quit); T.eq(r.value, "stop")
    end },
    { "several tasks selecting on one channel: none is lost, the channel stays small", function()
      local function heap() collectgarbage(); collectgarbage(); return process.memory() end
      local quit, done = channel.new(), channel.new(3)
      local feeds, counts = {}, {}
      for k = 1, 3 do
        feeds[k] = channel.new()
        counts[k] = 0
        coroutine.spawn(function()
          while true do
            local r = channel.select { feeds[k]:case_receive(), quit:case_receive() }
            if r.channel == quit then done:send(k); return end
            counts[k] = counts[k] + 1
          end
        end)
      end
      local before = heap()
      for i = 1, 6000 do feeds[i % 3 + 1]:send(i) end
      local grown = heap() - before
      T.ok(grown < 256 * 1024, "6000 selects kept " .. grown .. " bytes")
      quit:close()  -- wakes every waiter: the live ones were kept
      local seen = 0
      for _ = 1, 3 do seen = seen + done:receive() end
      T.eq(seen, 6)
      T.eq(counts[1] + counts[2] + counts[3], 6000)  -- each took its last value before quit
    end },
    { "timed receives that time out leave the inbox working", function()
      process.listen("elsewhere")  -- the inbox on kernel_ext's paths
      for _ = 1, 50 do T.eq(select(2, process.receive(0.001)), "timeout") end
      process.send(process.pid(), "back", 1)
      T.eq(process.receive(1).topic, "back")
    end },
    { "select with a timeout: the ready case, or { timeout = true } once it passes", function()
      local a, b = channel.new(), channel.new(1)
      local t0 = time.now()
      local r = channel.select { a:case_receive(), timeout = 0.03 }
      T.eq(r.timeout, true); T.eq(r.channel, nil)
      T.ok(time.now() - t0 >= 0.025, "waited for the timeout")
      b:send(1)
      r = channel.select { a:case_receive(), b:case_receive(), timeout = "1s" }
      T.ok(r.channel == b); T.eq(r.value, 1)
      T.eq(channel.select { a:case_receive(), timeout = 0 }.timeout, true)
      T.eq(channel.select { timeout = "5ms" }.timeout, true)
      -- A select that got its value stops its timer: nothing wakes this
      -- task later, and a value sent after the timeout is still there.
      coroutine.spawn(function() time.sleep(0.01); a:send("x") end)
      r = channel.select { a:case_receive(), timeout = 0.05 }
      T.eq(r.value, "x")
      coroutine.spawn(function() time.sleep(0.08); b:send("later") end)
      T.eq(b:receive(), "later")
      T.raises(function() return channel.select { a:case_receive(), timeout = "soon" } end, 'invalid duration: "soon"')
    end },
    { "timed selects share one timer: each still times out at its own deadline", function()
      -- The process's timers share one sleep command (TaskKernel::
      -- settle_timers): a select with a later deadline waits on it and
      -- the command is armed again when it fires; an earlier deadline
      -- gets it armed again at once.
      local a = channel.new()
      -- 200 selects that a value ends long before their 5 s: the shared
      -- timer stays, and ends none of them early.
      for i = 1, 200 do
        coroutine.spawn(function() a:send(i) end)
        local r = channel.select { a:case_receive(), timeout = 5 }
        T.eq(r.value, i)
      end
      -- Three at once, the first with the shortest timeout (its deadline
      -- arms the shared timer, the last one gone with the step that left
      -- it idle) and two later ones on it: each times out at its own
      -- deadline, in order.
      time.sleep(0.01)
      local done = channel.new(3)
      local t0 = time.now()
      for _, secs in ipairs({ 0.05, 0.15, 0.25 }) do
        coroutine.spawn(function()
          local r = channel.select { channel.new():case_receive(), timeout = secs }
          done:send({ secs = secs, timeout = r.timeout, at = time.now() - t0 })
        end)
      end
      for _, secs in ipairs({ 0.05, 0.15, 0.25 }) do
        -- (time.after: a timer of its own, so a lost timeout fails here)
        local r = channel.select { done:case_receive(), time.after(2):case_receive() }
        T.ok(r.channel == done, "the select of " .. secs .. " s never timed out")
        local d = r.value
        T.eq(d.secs, secs); T.eq(d.timeout, true)
        T.ok(d.at >= secs - 0.005, "timed out at " .. d.at .. " s, not before its " .. secs .. " s")
        T.ok(d.at < secs + 0.5, "timed out at " .. d.at .. " s, long after its " .. secs .. " s")
      end
      -- A shorter timeout than a waiting select's: a timer of its own.
      coroutine.spawn(function() channel.select { channel.new():case_receive(), timeout = 5 } end)
      local t1 = time.now()
      T.eq(channel.select { a:case_receive(), timeout = 0.03 }.timeout, true)
      local took = time.now() - t1
      T.ok(took >= 0.025 and took < 1, "the short select took " .. took .. " s")
    end },
    { "timers of every kind share one table and fire in deadline order", function()
      -- time.sleep, a timed receive, a select's timeout and time.after are
      -- entries in one table with one sleep command (TaskKernel::
      -- settle_timers); started in any order, they end by deadline.
      local order, done = {}, channel.new(4)
      local function note(what) order[#order + 1] = what; done:send(true) end
      coroutine.spawn(function() time.sleep(0.08); note("sleep") end)
      coroutine.spawn(function()
        local m, err = process.receive(0.02)
        note(m == nil and err == "timeout" and "receive" or "receive got a message")
      end)
      coroutine.spawn(function()
        local r = channel.select { channel.new():case_receive(), timeout = 0.05 }
        note(r.timeout and "select" or "select got a value")
      end)
      coroutine.spawn(function() time.after(0.11):receive(); note("after") end)
      for _ = 1, 4 do done:receive() end
      T.eq(table.concat(order, " "), "receive select sleep after")
    end },
    { "select on a closed channel receives nil, false", function()
      local a = channel.new(); a:close()
      local r = channel.select { a:case_receive() }
      T.eq(r.ok, false); T.eq(r.value, nil)
    end },
    { "bad channel arguments raise", function()
      T.raises(function() channel.new(-1) end, "capacity")
      T.raises(function() channel.select("x") end, "table expected")
      T.raises(function() channel.select {} end, "block forever")
    end },
    { "a blocking call inside a user coroutine suspends the process task", function()
      local co = coroutine.create(function(x)
        time.sleep(0.01)
        local y = coroutine.yield(x + 1)
        time.sleep(0.01)
        return y * 2
      end)
      local ok, v = coroutine.resume(co, 1)
      T.eq(ok, true); T.eq(v, 2, "coroutine.yield returned to its resumer")
      ok, v = coroutine.resume(co, 10)
      T.eq(ok, true); T.eq(v, 20)
      T.eq(coroutine.status(co), "dead")
    end },
    { "a blocking call inside coroutine.wrap works, and errors propagate", function()
      local gen = coroutine.wrap(function()
        for i = 1, 3 do time.sleep(0.001); coroutine.yield(i) end
      end)
      T.eq(gen(), 1); T.eq(gen(), 2); T.eq(gen(), 3)
      local bad = coroutine.wrap(function() time.sleep(0.001); error("inside wrap") end)
      T.raises(bad, "inside wrap")
    end },
    { "a blocking call inside pcall works", function()
      local ok, v = pcall(function() time.sleep(0.01); return "slept" end)
      T.eq(ok, true); T.eq(v, "slept")
      local ok2, err = pcall(function() time.sleep(0.001); error("after sleep") end)
      T.eq(ok2, false); T.match(err, "after sleep")
    end },
    { "a blocking call across a C boundary gives a clear error", function()
      local t = { 3, 1, 2 }
      T.raises(function() table.sort(t, function(a, b) time.sleep(0); return a < b end) end, "C function boundary")
    end },
    { "a timer started in a step that also yields still fires", function()
      local woke = false
      coroutine.spawn(function() time.sleep(0.02); woke = true end)
      time.sleep(0)  -- this step ends runnable, with the other task's timer started
      for _ = 1, 200 do
        if woke then break end
        time.sleep(0.005)
      end
      T.ok(woke, "the sleeping task woke")
    end },
    { "coroutine.spawn runs functions concurrently", function()
      local done = channel.new(10)
      for i = 1, 5 do coroutine.spawn(function(k) time.sleep(0.01 * (6 - k)); done:send(k) end, i) end
      local seen = {}
      for _ = 1, 5 do seen[#seen + 1] = done:receive() end
      T.eq(table.concat(seen, ","), "5,4,3,2,1")
    end },
    { "time: sleep durations, after, ticker, now", function()
      local t0 = time.now()
      time.sleep("20ms")
      T.ok(time.now() - t0 >= 0.019, "slept 20ms")
      local ch = time.after(0.01)
      T.eq(type(ch:receive()), "number")
      local tk = time.ticker("5ms")
      for _ = 1, 3 do tk.channel:receive() end
      T.eq(tk.stop(), true)
      T.eq(time.parse_duration("1m30s"), 90); T.eq(time.parse_duration("250ms"), 0.25)
      T.eq(time.parse_duration("1h"), 3600); T.eq(time.parse_duration(1.5), 1.5)
      T.raises(function() time.sleep("soon") end, "invalid duration")
      T.raises(function() time.sleep(-1) end, "invalid duration")
      T.raises(function() time.sleep({}) end, "bad duration")
      -- A bad duration's error names the line of the call (not a tail call
      -- here: a tail call drops the caller's frame from any traceback).
      T.raises(function() local s = time.parse_duration("soon"); return s end, "test_channels%.lua:%d+: invalid duration")
      T.raises(function() time.sleep("soon"); return 1 end, "test_channels%.lua:%d+: invalid duration")
      T.raises(function() local c = time.after(-1); return c end, "test_channels%.lua:%d+: invalid duration")
      T.raises(function() local c = channel.new(-1); return c end,
        "test_channels%.lua:%d+: bad argument #1 to 'channel.new' %(capacity must be a non%-negative integer%)")
      T.raises(function() local c = channel.new(1.5); return c end, "test_channels%.lua:%d+: bad argument #1 to 'channel.new'")
    end },
    { "time.timer fires like time.after unless stopped first", function()
      local t = time.timer(0.01)
      T.eq(type(t.channel:receive()), "number")
      T.eq(t.stop(), false, "stopped after it fired")
      local s = time.timer(0.02)
      T.eq(s.stop(), true)
      T.eq(s.stop(), false, "stopped twice")
      time.sleep(0.05)
      local r = channel.select { s.channel:case_receive(), default = true }
      T.eq(r.default, true, "a stopped timer never delivers")
      T.raises(function() local c = time.timer("soon"); return c end, "test_channels%.lua:%d+: invalid duration")
    end },
    { "require returns the same API tables as the globals", function()
      T.ok(require("time") == time); T.ok(require("process") == process)
      T.ok(require("channel") == channel); T.ok(require("log") == log)
      T.ok(require("string") == string); T.ok(require("ffi") ~= nil)
      T.ok(type(jit.version) == "string")
    end },
    { "log functions format like string.format", function()
      log.info("formatted %d %s", 42, "ok")
      log.debug("not shown at info level")
      T.raises(function() log.info("%d", "x") end, "number expected")
      T.raises(function() log.warn("%d", "x"); return 1 end,
        "test_channels%.lua:%d+: bad argument #2 to 'log%.warn' %(number expected, got string%)")
    end },
  }
end }
