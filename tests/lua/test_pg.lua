-- stdlib/pg: process groups.
local T = require("t")
local pg = require("pg")
local request = require("request")

local function has(list, pid)
  for _, p in ipairs(list) do if p == pid then return true end end
  return false
end

return { main = function()
  local me = process.pid()
  return T.run {
    { "join is a set; members lists each once; leave of a non-member is true", function()
      T.eq(pg.join("g1"), true)
      T.eq(pg.join("g1"), true)
      local m = pg.members("g1")
      T.eq(#m, 1)
      T.eq(m[1], me)
      T.eq(pg.leave("g1"), true)
      T.eq(#pg.members("g1"), 0)
      T.eq(pg.leave("g1"), true)
      T.eq(#pg.members("never-joined"), 0)
    end },

    { "send reaches every member once and answers how many", function()
      local a = assert(process.spawn("fixtures.echo"))
      local b = assert(process.spawn("fixtures.echo"))
      T.eq(pg.join("echoes", a), true)
      T.eq(pg.join("echoes", b), true)
      T.eq(pg.join("echoes", a), true)
      T.eq(pg.send("echoes", "ping", 7), 2)
      local from = {}
      for _ = 1, 2 do
        local m = assert(process.receive(5))
        T.eq(m.topic, "ping")
        T.eq(m.payload, 7)
        from[m.from] = (from[m.from] or 0) + 1
      end
      T.eq(from[a], 1)
      T.eq(from[b], 1)
      T.eq(process.receive(0.1), nil)
      process.send(a, "stop", nil)
      process.send(b, "stop", nil)
    end },

    { "a process leaves its groups when it ends, whatever ends it", function()
      local a = assert(process.spawn("fixtures.echo"))
      local b = assert(process.spawn("fixtures.echo"))
      pg.join("mortal", a)
      pg.join("mortal", b)
      pg.join("other", a)
      local wa, wb = process.watch(a), process.watch(b)
      process.send(a, "stop", nil)
      wa:receive()
      local m = pg.members("mortal")
      T.eq(#m, 1)
      T.eq(m[1], b)
      T.eq(#pg.members("other"), 0)
      process.terminate(b)
      wb:receive()
      T.eq(#pg.members("mortal"), 0)
      T.eq(pg.send("mortal", "x", 1), 0)
    end },

    { "join of a PID that is not alive answers not_found", function()
      local a = assert(process.spawn("fixtures.echo"))
      local w = process.watch(a)
      process.send(a, "stop", nil)
      w:receive()
      local ok, err = pg.join("g", a)
      T.eq(ok, nil)
      T.match(err, "^not_found")
      T.raises(function() pg.join({}) end, "group name expected")
      T.raises(function() pg.send("g", 1) end, "topic string expected")
    end },

    { "1 and \"1\" are different groups", function()
      pg.join(1)
      T.eq(#pg.members(1), 1)
      T.eq(#pg.members("1"), 0)
      pg.leave(1)
    end },

    { "another node's events merge into its own part; members lists both; its nodedown takes its part out", function()
      local a = assert(process.spawn("fixtures.echo"))
      T.eq(pg.join("spread", a), true)
      local far = "<7.1.1>"  -- a PID of another node: never alive here
      T.eq(request.call("$pg", "remote", { node = "n7", events = {
        { kind = "join", group = "spread", pid = far },
        { kind = "join", group = "spread", pid = "<7.2.1>" },
        { kind = "leave", group = "spread", pid = "<7.2.1>" },
        { kind = "join", group = "far-only", pid = far } } }), true)
      local m = pg.members("spread")
      T.eq(#m, 2); T.ok(has(m, a), "this node's member"); T.ok(has(m, far), "the other node's member")
      T.eq(#pg.members("far-only"), 1)
      T.eq(pg.leave("spread", far), true)  -- leave names this node's part only
      T.eq(#pg.members("spread"), 2)
      T.eq(request.call("$pg", "nodedown", "n7"), true)
      m = pg.members("spread")
      T.eq(#m, 1); T.eq(m[1], a)
      T.eq(#pg.members("far-only"), 0)
      process.send(a, "stop", nil)
    end },

    { "joins from many processes at once all land", function()
      local done = channel.new(50)
      local pids = {}
      for i = 1, 50 do
        pids[i] = assert(process.spawn("fixtures.echo"))
        coroutine.spawn(function() done:send(pg.join("crowd", pids[i])) end)
      end
      for _ = 1, 50 do T.eq(done:receive(), true) end
      local m = pg.members("crowd")
      T.eq(#m, 50)
      for i = 1, 50 do T.ok(has(m, pids[i]), "member " .. i) end
      T.eq(pg.send("crowd", "stop", nil), 50)
    end },

    { "a subscriber gets this node's part as joins, then each join and leave as an event another node applies", function()
      local a = assert(process.spawn("fixtures.echo"))
      T.eq(pg.join("watched", a), true)
      local snap = assert(request.call("$pg", "subscribe", nil))
      local found = false
      for _, ev in ipairs(snap) do
        if ev.kind == "join" and ev.group == "watched" and ev.pid == a then found = true end
      end
      T.ok(found, "the snapshot holds the join")
      local b = assert(process.spawn("fixtures.echo"))
      T.eq(pg.join("watched", b), true)
      T.eq(pg.leave("watched", a), true)
      local w = process.watch(b)
      process.send(b, "stop", nil)
      w:receive()
      T.eq(#pg.members("watched"), 0)
      local got = {}
      while #got < 3 do  -- (an earlier test's members may still be leaving "crowd")
        local m = assert(process.receive(5), "event " .. #got + 1)
        T.eq(m.topic, "$pg.event")
        if m.payload.group == "watched" then
          got[#got + 1] = m.payload.kind .. " " .. (m.payload.pid == a and "a" or m.payload.pid == b and "b" or "?")
        end
      end
      T.eq(table.concat(got, ", "), "join b, leave a, leave b")
      process.send(a, "stop", nil)
    end },
  }
end }
