-- The exec module, through the host as a user runs it.
local T = require("t")

return { main = function()
  return T.run {
    { "exec is a global and require('exec') is the same table", function()
      T.eq(require("exec"), exec)
    end },
    { "run gives the exit code and both outputs", function()
      local r = assert(exec.run { "sh", "-c", "echo out; echo err >&2; exit 3" })
      T.eq(r.code, 3)
      T.eq(r.signal, nil)
      T.eq(r.stdout, "out\n")
      T.eq(r.stderr, "err\n")
      T.eq(exec.run({ "true" }).code, 0)
    end },
    { "no shell: arguments pass as they are", function()
      local r = assert(exec.run { "printf", "%s|", "a b", "$HOME", "*" })
      T.eq(r.stdout, "a b|$HOME|*|")
    end },
    { "a program with a slash is run from that path", function()
      T.eq(exec.run({ "/bin/echo", "hi" }).stdout, "hi\n")
    end },
    { "stdin, cwd and env", function()
      T.eq(exec.run({ "cat" }, { stdin = "piped in" }).stdout, "piped in")
      T.eq(exec.run({ "pwd" }, { cwd = "/tmp" }).stdout, "/tmp\n")
      local r = exec.run({ "sh", "-c", "echo $HOST_T1,$HOST_T2,${PATH:+path}" }, { env = { HOST_T1 = "one", HOST_T2 = 2 } })
      T.eq(r.stdout, "one,2,path\n", "added to the inherited environment")
      T.eq(exec.run({ "cat" }).stdout, "", "no stdin: the program reads end of file")
    end },
    { "a program that does not read its stdin costs the host nothing (no SIGPIPE)", function()
      local r = assert(exec.run({ "true" }, { stdin = ("x"):rep(4 * 1024 * 1024) }))
      T.eq(r.code, 0)
      local p = assert(exec.start { "true" })
      p:wait()
      local v, err
      for _ = 1, 10 do
        v, err = p.stdin:send(("y"):rep(1024 * 1024))
        if not v then break end
      end
      T.eq(err, "closed")
    end },
    { "large output arrives whole", function()
      local r = exec.run { "head", "-c", "3000000", "/dev/zero" }
      T.eq(#r.stdout, 3000000)
    end },
    { "a missing program is not_found: PATH", function()
      local v, err = exec.run { "no-such-program-here" }
      T.eq(v, nil)
      T.eq(err, "not_found: no-such-program-here")
      v, err = exec.start { "/no/such/program" }
      T.eq(err, "not_found: /no/such/program")
      v, err = exec.run({ "true" }, { cwd = "/no/such/dir" })
      T.eq(err, "not_found: /no/such/dir")
    end },
    { "a timeout kills the program and returns nil, timeout", function()
      local t0 = time.now()
      local v, err = exec.run({ "sleep", "10" }, { timeout = 0.2 })
      T.eq(v, nil)
      T.eq(err, "timeout")
      T.ok(time.now() - t0 < 2, "returned at the timeout")
    end },
    { "a signal that ends the program is reported", function()
      local r = exec.run { "sh", "-c", "kill -9 $$" }
      T.eq(r.signal, 9)
      T.eq(r.code, 137)
    end },
    { "start: talk to a program through its pipes", function()
      local p = assert(exec.start { "cat" })
      T.eq(type(p.pid), "number")
      T.eq(p.stdin:send("line one\nline two\r\n"), 19)
      T.eq(p.stdout:receive(), "line one")
      T.eq(p.stdout:receive("*l"), "line two")
      p.stdin:send("abcdef")
      T.eq(p.stdout:receive(3), "abc")
      T.eq(p.stdin:close(), true)
      T.eq(p.stdout:receive("*a"), "def")
      local v, err = p.stdout:receive()
      T.eq(v, nil)
      T.eq(err, "closed")
      local st = p:wait()
      T.eq(st.code, 0)
      T.eq(p:wait().code, 0, "wait again after the end")
    end },
    { "a partial line at the end comes with closed", function()
      local p = assert(exec.start { "printf", "no newline" })
      local v, err, partial = p.stdout:receive()
      T.eq(v, nil)
      T.eq(err, "closed")
      T.eq(partial, "no newline")
      p:wait()
    end },
    { "stderr of a started program", function()
      local p = assert(exec.start { "sh", "-c", "echo oops >&2" })
      T.eq(p.stderr:receive(), "oops")
      T.eq(p:wait().code, 0)
    end },
    { "wait with a timeout, kill with SIGTERM by default or a named signal", function()
      local p = assert(exec.start { "sleep", "10" })
      local v, err = p:wait(0.05)
      T.eq(v, nil)
      T.eq(err, "timeout")
      T.eq(p:kill(), true)
      local st = p:wait(5)
      T.eq(st.signal, 15)
      local q = assert(exec.start { "sleep", "10" })
      T.eq(q:kill("KILL"), true)
      T.eq(q:wait(5).signal, 9)
    end },
    { "a program's wait suspends only its task", function()
      local ticks = 0
      local done = false
      coroutine.spawn(function()
        while not done do ticks = ticks + 1; time.sleep(0.01) end
      end)
      exec.run { "sleep", "0.3" }
      done = true
      T.ok(ticks >= 5, "the other task ran while the program ran: " .. ticks)
    end },
    { "many programs at once from many tasks", function()
      local results = channel.new(20)
      for i = 1, 20 do
        coroutine.spawn(function()
          local r = exec.run { "sh", "-c", "echo " .. i }
          results:send(tonumber(r.stdout))
        end)
      end
      local sum = 0
      for _ = 1, 20 do sum = sum + results:receive() end
      T.eq(sum, 210)
    end },
    { "wrong argument types raise, naming the argument", function()
      T.raises(function() exec.run("ls") end, "bad argument #1 to 'exec.run'")
      T.raises(function() exec.run({ "ls", 3 }) end, "argv%[2%]")
      T.raises(function() exec.run({ "ls" }, { timeout = "1s" }) end, "bad argument #2")
      T.raises(function() exec.start({ "cat" }, { stdin = "x" }) end, "stdin is for exec.run")
      local p = assert(exec.start { "true" })
      T.raises(function() p.stdout:send("x") end, "cannot send")
      T.raises(function() p.stdin:receive() end, "cannot receive")
      T.raises(function() p:kill("NOPE") end, "unknown signal")
      p:wait()
    end },
    { "a program left running is killed when its process ends", function()
      local child = assert(process.spawn_monitored("fixtures.io_owner:start_and_return"))
      local ev = T.next_event("exit", 5)
      local a, b = ev.result:match("(%d+),(%d+)")
      -- Gone (killed and reaped) shortly after.
      local deadline = time.now() + 5
      local alive
      repeat
        time.sleep(0.02)
        alive = exec.run({ "kill", "-0", a }).code == 0 or exec.run({ "kill", "-0", b }).code == 0
      until not alive or time.now() > deadline
      T.eq(alive, false, "its programs were killed")
    end },
  }
end }
