-- stdlib/server: gen_server's shape.
local T = require("t")
local server = require("server")

local me

-- The next message on `topic` (skipping none), or an error after secs.
local expect = T.expect

local function nothing_more(secs)
  local m = process.receive(secs or 0.1)
  T.ok(m == nil, "no other message (got " .. tostring(m and m.topic) .. ")")
end

local function start_kv(extra, opts)
  local args = { observer = me }
  for k, v in pairs(extra or {}) do args[k] = v end
  return server.start("fixtures.kv_server", args, opts)
end

return { main = function()
  me = process.pid()
  process.set_options { trap_links = true }
  return T.run {
    { "start returns the PID once init returned; calls answer; casts change the state", function()
      local pid = assert(start_kv())
      T.match(pid, "^<")
      T.eq(server.call(pid, { op = "put", key = "a", value = 1 }), true)
      T.eq(server.call(pid, { op = "get", key = "a" }), 1)
      T.eq(server.cast(pid, { op = "clear" }), true)
      T.eq(server.call(pid, { op = "get", key = "a" }), nil)
      T.eq(server.stop(pid), true)
      T.eq(expect("terminate").reason, "normal")
    end },

    { "a name registers the server; calls by name; a taken name answers exists", function()
      local pid = assert(start_kv(nil, { name = "kv" }))
      T.eq(process.registry.lookup("kv"), pid)
      T.eq(server.call("kv", { op = "put", key = "k", value = "v" }), true)
      T.eq(server.call("kv", { op = "get", key = "k" }), "v")
      local again, err = start_kv(nil, { name = "kv" })
      T.eq(again, nil)
      T.match(err, "^exists")
      T.eq(server.stop("kv", "done"), true)
      T.eq(expect("terminate").reason, "done")
      T.eq(process.registry.lookup("kv"), nil)
    end },

    { "init that refuses, raises or takes too long makes start answer nil, err", function()
      local pid, err = start_kv { refuse = "no thanks" }
      T.eq(pid, nil)
      T.eq(err, "refused: no thanks")
      pid, err = start_kv { raise = true }
      T.eq(pid, nil)
      T.match(err, "init raised on purpose")
      local before = #process.list()
      pid, err = server.start("fixtures.kv_server", { slow = 10 }, { timeout = 0.2 })
      T.eq(pid, nil)
      T.eq(err, "timeout")
      T.eventually(function() return #process.list() <= before end, 2, "the slow server terminated")
      pid, err = server.start("fixtures.no_such_module", {})
      T.eq(pid, nil)
      T.match(err, "no_such_module")
    end },

    { "a call that times out answers timeout, and its late reply never reaches a later call", function()
      local pid = assert(start_kv())
      local r, err = server.call(pid, { op = "sleep", secs = 0.3 }, 0.05)
      T.eq(r, nil)
      T.eq(err, "timeout")
      T.eq(server.call(pid, { op = "put", key = "x", value = 7 }), true)
      T.eq(server.call(pid, { op = "get", key = "x" }), 7)
      server.stop(pid)
      expect("terminate")
    end },

    { "a nil reply is nil with no error", function()
      local pid = assert(start_kv())
      local r, err = server.call(pid, { op = "nil" })
      T.eq(r, nil)
      T.eq(err, nil)
      server.stop(pid)
      expect("terminate")
    end },

    { "noreply and a later server.reply from another process answer the call", function()
      local pid = assert(start_kv())
      local answerer = assert(process.spawn("fixtures.answerer"))
      T.eq(server.call(pid, { op = "defer", answerer = answerer }), "answered by " .. answerer)
      server.stop(pid)
      expect("terminate")
    end },

    { "a server that fails in a callback answers its callers exit and runs terminate with the error", function()
      local pid = assert(start_kv())
      local r, err = server.call(pid, { op = "crash" })
      T.eq(r, nil)
      T.match(err, "^exit: .*handle_call crashed on purpose")
      T.match(expect("terminate").reason, "handle_call crashed on purpose")
      r, err = server.call(pid, { op = "get", key = "a" })
      T.eq(r, nil)
      T.match(err, "^not_found")
    end },

    { "a call to a server gone before it answers not_found; to an unknown name not_found", function()
      local pid = assert(start_kv())
      server.stop(pid)
      expect("terminate")
      local r, err = server.call(pid, { op = "get" })
      T.eq(r, nil)
      T.match(err, "^not_found")
      r, err = server.call("no-such-server", { op = "get" })
      T.eq(r, nil)
      T.match(err, "^not_found")
      T.match(select(2, server.stop(pid)), "^not_found")
    end },

    { "a cancel runs terminate with canceled and ends the server", function()
      local pid = assert(start_kv())
      local ev = process.watch(pid)
      process.cancel(pid)
      T.eq(expect("terminate").reason, "canceled")
      local exit = ev:receive()
      T.eq(exit.kind, "exit")
    end },

    { "handle_info gets other messages and events", function()
      local pid = assert(start_kv())
      process.send(pid, "hello", 1)
      local info = expect("info")
      T.eq(info.topic, "hello")
      local short = assert(process.spawn("fixtures.idle"))
      T.eq(server.call(pid, { op = "monitor", pid = short }), true)
      process.send(short, "exit", nil)
      info = expect("info")
      T.eq(info.kind, "exit")
      server.stop(pid)
      expect("terminate")
    end },

    { "link = true links the server to its caller", function()
      local pid = assert(start_kv(nil, { link = true }))
      local info = process.info(pid)
      T.eq(info.links[1], me)
      server.stop(pid)
      expect("terminate")
      pid = assert(start_kv())
      T.eq(#process.info(pid).links, 0)
      server.stop(pid)
      expect("terminate")
    end },

    { "an unknown option raises invalid naming the option and the caller's line", function()
      local ok, err = pcall(server.start, "fixtures.kv_server", {}, { nmae = "x" })
      T.eq(ok, false)
      T.match(err, "invalid: unknown option 'nmae'")
      local line = debug.getinfo(1, "l").currentline + 1
      ok, err = pcall(function() server.start("fixtures.kv_server", {}, { tiemout = 1 }) end)
      T.match(err, "test_server.lua:" .. line .. ": invalid: unknown option 'tiemout'")
      T.raises(function() server.call(42, {}) end, "PID or registered name expected")
    end },

    { "server:serve runs a server as a supervisor's child: restarted with a fresh state after a crash", function()
      local supervisor = require("supervisor")
      local sup = assert(supervisor.start { children = {
        { id = "kv", entry = "server:serve", args = { "fixtures.kv_server", { observer = me } }, name = "kv.sup" } } })
      local first = process.registry.lookup("kv.sup")
      T.match(first, "^<")
      T.eq(server.call("kv.sup", { op = "put", key = "a", value = 1 }), true)
      T.eq(server.call("kv.sup", { op = "get", key = "a" }), 1)
      local v, err = server.call("kv.sup", { op = "crash" })
      T.eq(v, nil); T.match(err, "^exit: .*handle_call crashed on purpose")
      T.match(expect("terminate").reason, "handle_call crashed on purpose")
      local second
      T.eventually(function()
        second = process.registry.lookup("kv.sup")
        return second ~= nil and second ~= first
      end, 5, "the supervisor restarted the server under its name")
      T.eq(server.call("kv.sup", { op = "get", key = "a" }), nil)  -- init's state, not the old one
      T.eq(supervisor.terminate_child(sup, "kv"), true)
      T.eq(expect("terminate").reason, "canceled")
      process.cancel(sup)
    end },

    { "server:serve fails its process when the module does not load or init refuses", function()
      local function exit_of(pid)  -- skips other events (a link_down of an earlier test's supervisor)
        local deadline = time.now() + 5
        while true do
          local r = channel.select { process.events():case_receive(), time.after(deadline - time.now()):case_receive() }
          if r.channel ~= process.events() then error("no exit event from " .. pid) end
          if r.value.kind == "exit" and r.value.from == pid then return r.value end
        end
      end
      local ev = exit_of(assert(process.spawn_monitored("server:serve", "fixtures.no_such_module")))
      T.match(ev.error, "fixtures.no_such_module")
      ev = exit_of(assert(process.spawn_monitored("server:serve", "fixtures.kv_server", { refuse = "no thanks" })))
      T.match(ev.error, "refused: no thanks")
    end },

    { "concurrent calls from many tasks each get their own reply", function()
      local pid = assert(start_kv())
      local done = channel.new(10)
      for t = 1, 10 do
        coroutine.spawn(function()
          for i = 1, 20 do
            local key = t * 100 + i
            server.call(pid, { op = "put", key = key, value = key * 2 })
            if server.call(pid, { op = "get", key = key }) ~= key * 2 then done:send(false) return end
          end
          done:send(true)
        end)
      end
      for _ = 1, 10 do T.ok(done:receive(), "each task read its own writes") end
      server.stop(pid)
      expect("terminate")
      nothing_more()
    end },
  }
end }
