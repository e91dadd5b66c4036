-- Messages and values: send/receive, the envelope,
-- exact values, refused values, dead PIDs and names, the registry, listen,
-- ordering across 10k processes.
local T = require("t")

local function roundtrip(v)
  local echo = assert(process.spawn("fixtures.echo"))
  assert(process.send(echo, "v", v))
  local m = assert(process.receive(5))
  process.send(echo, "stop", nil)
  return m.payload
end

-- Whether b is a copy of a (NaN and -0.0 by what they print as); raises
-- naming the path where they differ.
local function same(a, b, path)
  if type(a) ~= type(b) then error(path .. ": " .. type(b) .. " instead of " .. type(a), 0) end
  if type(a) == "number" then
    if a ~= b or 1 / a ~= 1 / b then T.eq(tostring(b), tostring(a), path) end
    return
  end
  if type(a) ~= "table" then T.eq(b, a, path); return end
  for k, v in pairs(a) do same(v, b[k], path .. "." .. tostring(k)) end
  for k in pairs(b) do if a[k] == nil then error(path .. ": extra key " .. tostring(k), 0) end end
end

local function deep(n)
  local root = {}
  local t = root
  for i = 1, n do t.next = { depth = i }; t = t.next end
  return root
end

-- 60 messages to fixtures.envelopes, each answered before the next (so
-- each reaches a task that waits), payload(i) each: every envelope must
-- look alike, and the receiver must end with receive's Lua form (its
-- waiting form). early_ext: the receiver loads the Lua kernel first.
local function ping_pong_envelopes(payload, payload_type, early_ext)
  local n = 60
  local pid = assert(process.spawn("fixtures.envelopes", process.pid(), n, true, early_ext))
  for i = 1, n do
    process.send(pid, "t", payload(i))
    T.eq(assert(process.receive(5)).payload, i, "ack")
  end
  local seen = assert(process.receive(5)).payload
  for i = 1, n do T.eq(seen[i], "from,payload,topic|t|" .. payload_type .. "|nil|true", "envelope " .. i) end
  T.eq(seen.receive, "waiting", "the receiver's process.receive at the end")
end

return { main = function()
  return T.run {
    { "sends alternating between two PIDs reach each, and replies name their sender", function()
      local a, b = assert(process.spawn("fixtures.echo")), assert(process.spawn("fixtures.echo"))
      for i = 1, 6 do
        local to = i % 2 == 1 and a or b
        T.eq(process.send(to, "n", i), true)
        local m = assert(process.receive(5))
        T.eq(m.from, to, "reply " .. i .. " sender"); T.eq(m.payload, i)
      end
      T.match(select(2, process.send("<0.1.x>", "n", 1)), "^invalid: not a PID")
      process.send(a, "stop", nil); process.send(b, "stop", nil)
    end },
    { "a message handed to a task waiting in receive: every way its step can end", function()
      -- fixtures.handed_over's steps, once warm, take the hand-over
      -- (LuaProcess::hand_over) for nil, booleans, numbers and kept
      -- strings, and for small tables of kept strings; a new string, or a
      -- table that holds one, takes the protected body. Through each form
      -- of receive: "local" waits in the C function process.receive was
      -- at the start, whose tables the hand-over makes by a constructor.
      local function ask(pid, cmd)
        assert(process.send(pid, "cmd", cmd))
        local m = assert(process.receive(5), "no answer to " .. tostring(cmd))
        T.eq(m.from, pid); T.eq(m.topic, "cmd")
        return m.payload
      end
      local function start(via)
        local pid = assert(process.spawn_monitored("fixtures.handed_over", "!", via))
        for i = 1, 40 do T.eq(ask(pid, 1), "cmd", "answer " .. i) end
        return pid
      end
      for _, via in ipairs({ "receive", "local", "inbox", "timed" }) do
        local p = start(via)
        T.eq(ask(p, nil), nil); T.eq(ask(p, true), true); T.eq(ask(p, false), false)
        T.eq(ask(p, "cmd"), "cmd"); T.eq(ask(p, "new text"), "new text")
        for i = 1, 3 do  -- tables and new strings, one after another
          local t = ask(p, 6); T.eq(t.n, 6); T.eq(t.text, "xxx!", via .. ": table " .. i)
          T.eq(ask(p, "text " .. i), "text " .. i, via .. ": new string " .. i)
        end
        for i = 1, 300 do
          local cmd = 1 + i % 3  -- answers itself, from a new task, after a yield
          T.eq(ask(p, cmd), ({ "cmd", "from a task", "after a yield" })[cmd],
            via .. ": answer to " .. cmd .. ", round " .. i)
        end
        assert(process.send(p, "cmd", 5))
        local ev = T.next_event("exit")
        T.eq(ev.from, p); T.eq(ev.result, "returned from a handed-over step"); T.eq(ev.error, nil)
        p = start(via)
        assert(process.send(p, "cmd", 4))
        ev = T.next_event("exit")
        T.eq(ev.from, p); T.match(ev.error, "handed_over%.lua:%d+: failed in a handed%-over step")
      end
    end },
    { "small tables handed to a waiting task arrive whole, with strings it keeps or new ones", function()
      -- Once warm, fixtures.echo's steps (and this process's) take a small
      -- table whose strings the process keeps without the step's protected
      -- body (LuaProcess::hand_over); a table with a string it does not
      -- keep, or over 256 bytes, goes the protected way, and so do the
      -- tables after a declined one for a while. Every shape must come back
      -- equal, whichever way each round took.
      local array40, array200 = {}, {}
      for i = 1, 40 do array40[i] = i end
      for i = 1, 200 do array200[i] = i * 1000 end
      local shapes = {
        { n = 1 },
        {},
        { 1, 2, nil, 4, true, false, -0.0, 0/0, 1/0, -1/0, 2^53, 0.1, n = 3 },
        { a = { b = { c = { d = "n" } } }, [1.5] = "x", [true] = false, [-7] = 0 },
        { n = "ping", ping = "n", [7] = "ok", empty = "", fifteen = ("x"):rep(15) },
        { sixteen = ("y"):rep(16) },  -- longer than the strings a process keeps
        array40, array200,            -- about 80 bytes, and over 256
        { { {}, {} }, { { { 1 } } } },
      }
      local echo = assert(process.spawn("fixtures.echo"))
      for round = 1, 400 do
        local i = (round - 1) % (#shapes + 1) + 1
        local v = shapes[i] or { fresh = "s" .. round }  -- a string new to both
        assert(process.send(echo, "t", v))
        local m = assert(process.receive(5), "no echo in round " .. round)
        T.eq(m.from, echo); T.eq(m.topic, "t")
        same(v, m.payload, "round " .. round .. ", shape " .. i)
      end
      process.send(echo, "stop", nil)
    end },
    { "tables of a shape a process keeps receiving arrive whole, through each form of receive", function()
      -- A flat table of 1 to 4 string keys with numbers, booleans or kept
      -- strings as values, seen twice in a row, gets a constructor of its
      -- shape (bindings/shape_cache.hpp), which makes the message in the
      -- receiving task when it is handed over. Each shape comes 70 times
      -- in a row (the first ones made in the step's protected call, which
      -- keeps their strings and compiles the shape's constructor the
      -- second time it is seen; then the constructor makes the rest), in
      -- two rounds of more shapes than a process keeps (4:
      -- replaced in turn), with keys of any bytes, and among shapes no
      -- constructor takes (5 keys, a nested table, an array part, a long
      -- key, a string value new each time). "local" receives with the C
      -- function process.receive was at the echo's start, which takes the
      -- message that constructor made (LuaProcess::hand_over_inside).
      local shapes = {
        { n = 1 }, { n = 2.5 }, { n = 0/0 }, { n = -0.0 }, { n = 1/0 }, { n = -2^53 },
        { ok = true }, { ok = false },
        { x = 1, y = "t" }, { a = "u", b = "n" },
        { ["\0"] = 1, ["a\"b"] = 2, ["\\"] = 3, ["\n]]"] = 4 },
        { [("k"):rep(15)] = "v", ["\255\1"] = 0.5 },
        { w = 1, x = 2, y = 3, z = 4 },
        { v = 1, w = 2, x = 3, y = 4, z = 5 },
        { n = { 1 } }, { 1, n = 2 },
        { [("k"):rep(16)] = 1 },
        false,  -- { s = <a string new each time> }
      }
      for _, config in ipairs { { "receive" }, { "local" }, { "timed" }, { "inbox" }, { "receive", true }, { "local", true },
                                { "inbox", true } } do
        local echo = assert(process.spawn("fixtures.shape_echo", config[1], config[2]))
        local sent = 0
        for round = 1, 2 do
          for i, shape in ipairs(shapes) do
            for k = 1, 70 do
              sent = sent + 1
              local v = shape or { s = "new" .. sent }
              local topic = k == 2 and "u" or "t"
              assert(process.send(echo, topic, v))
              local m = assert(process.receive(5), "no echo")
              local where = config[1] .. (config[2] and "+gc" or "") .. ", round " .. round .. ", shape " .. i .. ", copy " .. k
              T.eq(m.from, echo, where); T.eq(m.topic, topic, where)
              same(v, m.payload, where)
            end
          end
        end
        process.send(echo, "stop", nil)
      end
    end },
    { "tables of a shape a process keeps receiving arrive whole when a step delivers them: queued or to a listener", function()
      -- Messages that come while their receiver is busy, or that go to a
      -- listener's channel, become Lua values inside the receiving step;
      -- there a flat table of a cached shape is made by its shape's payload
      -- constructor, one call into Lua (LuaProcess::push_shaped_payload).
      -- Each shape is sent 70 times at once, so that the copies queue, and
      -- the echoes come back the same way to this process; to an echo
      -- that receives with process.receive() and to one that listens to
      -- "t", with a third of the copies on topic "u" (the inbox).
      local shapes = {
        { n = 1 }, { n = -0.0 }, { n = 0/0 }, { ok = false },
        { x = 1, y = "t" }, { ref = 7, value = 2^53 },
        { ["\0"] = 1, ["a\"b"] = 2, ["\\"] = 3, ["\n]]"] = 4 },
        { w = 1, x = 2, y = 3, z = 4 }, { v = 1, w = 2, x = 3, y = 4, z = 5 },
        { n = { 1 } }, { a = "u", b = "n" },
        false,  -- { s = <a string new each time> }
      }
      for _, via in ipairs { "receive", "listen" } do
        local echo = assert(process.spawn("fixtures.shape_echo", via))
        local sent = 0
        for round = 1, 2 do
          for i, shape in ipairs(shapes) do
            local values, topics = {}, {}
            for k = 1, 70 do
              sent = sent + 1
              values[k] = shape or { s = "new" .. sent }
              topics[k] = k % 3 == 0 and "u" or "t"
              assert(process.send(echo, topics[k], values[k]))
            end
            -- (A listener's messages and the inbox's keep their own order.)
            local got = { t = {}, u = {} }
            for _ = 1, 70 do
              local m = assert(process.receive(5), "no echo")
              T.eq(m.from, echo)
              table.insert(got[m.topic], m.payload)
            end
            local next_of = { t = 1, u = 1 }
            for k = 1, 70 do
              local where = via .. ", round " .. round .. ", shape " .. i .. ", copy " .. k
              local v = got[topics[k]][next_of[topics[k]]]
              next_of[topics[k]] = next_of[topics[k]] + 1
              same(values[k], v, where)
            end
          end
        end
        process.send(echo, "stop", nil)
      end
    end },
    { "two-key tables arrive whole while the receiver's string cache churns and it collects", function()
      -- Five words as values and, every fourth message, one of eight rare
      -- topics, against the string cache's eight slots: its strings come
      -- and go, so some tables are made by their shape's constructor and
      -- others, declined (a string not kept), the protected way, while the
      -- echo runs a full collection before each wait (the shape cache's
      -- scratch table holds a message's strings only until its
      -- constructor runs: shape_cache.hpp). Each must come back whole, on
      -- its own topic.
      local words = { "w1", "w2", "w3", "w4", "w5" }
      local echo = assert(process.spawn("fixtures.shape_echo", "receive", true))
      for round = 1, 3000 do
        local topic = round % 4 == 0 and "x" .. round % 8 or "t"
        local v = { a = words[round % 5 + 1], b = words[round * 3 % 5 + 1] }
        assert(process.send(echo, topic, v))
        local m = assert(process.receive(5), "no echo in round " .. round)
        T.eq(m.topic, topic, "round " .. round)
        same(v, m.payload, "round " .. round)
      end
      process.send(echo, "stop", nil)
    end },
    { "a receiver whose garbage has failing finalizers fails by them, whatever its messages", function()
      -- A collection step runs the finalizers, whose error fails the
      -- process where the step ran: inside a protected call (the task's
      -- resume, the step's body, or the hand-over's own collection step,
      -- which makes a table's objects only far below the collector's
      -- threshold). The fixture's heap is at the threshold when its next
      -- message comes: the run must end in the finalizer's own error,
      -- where one raised outside protection ended the step as an unknown
      -- exception, and one the hand-over's step swallowed left the last
      -- run's process answering. Runs 5-8 receive through the C function
      -- kept in a local (the hand-over's constructor call, protected).
      local inbox, events = process.inbox(), process.events()
      for run = 1, 8 do
        -- (Each fourth run's fixture raises once: see its `once`.)
        local via = run > 4 and "local" or "receive"
        local pid = assert(process.spawn_monitored("fixtures.finalizer_errors", run % 4 == 0, via))
        local ev
        for i = 1, 20000 do
          if not process.send(pid, "t", { n = i, k = "n" }) then break end
          local r = channel.select { inbox:case_receive(), events:case_receive(), timeout = 5 }
          T.ok(not r.timeout, "no answer in round " .. i)
          if r.channel == events then ev = r.value; break end
          T.eq(r.value.payload.n, i)
        end
        ev = ev or T.next_event("exit")
        T.eq(ev.kind, "exit"); T.eq(ev.from, pid)
        T.match(ev.error, "boom", "run " .. run .. ", " .. via)
      end
    end },
    { "a message that arrives while its receiver sleeps waits for its next receive", function()
      local echo = assert(process.spawn("fixtures.echo"))
      local pid = assert(process.spawn_monitored("fixtures.late_arrivals", echo))
      local ok, ev = pcall(T.next_event, "exit")
      process.send(echo, "stop", nil)
      if not ok then
        process.terminate(pid)  -- still waiting for a reply it was sent
        error("a reply was lost: " .. tostring(ev), 0)
      end
      T.eq(ev.result, true)
    end },
    { "a message carries topic, from and payload", function()
      local echo = assert(process.spawn("fixtures.echo"))
      T.eq(process.send(echo, "hello", { a = 1 }), true, "send result")
      local m = process.receive(5)
      T.eq(m.topic, "hello"); T.eq(m.from, echo); T.eq(m.payload.a, 1)
      process.send(echo, "stop", nil)
    end },
    { "envelopes look the same from a process's first message to its hundredth", function()
      -- The kernel builds the first few envelopes through the C API and the
      -- rest with a Lua constructor (bindings/inbox.lua): no difference
      -- may show.
      -- Sent all at once (they queue, and process.receive becomes
      -- bindings/inbox.lua's form with its drain loop) and one at a time (each
      -- reaches a receiver that waits, whose process.receive becomes the
      -- waiting form, which never reads the inbox's buffer itself); both
      -- make the table of a message handed to them while they wait.
      local n = 100
      local payloads = { n = 5, nil, false, 0, "s", { 1 } }
      local types = { "nil", "boolean", "number", "string", "table" }
      for _, ack in ipairs({ false, true }) do
        local pid = assert(process.spawn("fixtures.envelopes", process.pid(), n, ack))
        for i = 1, n do
          process.send(pid, "t" .. i, payloads[(i - 1) % payloads.n + 1])
          if ack then T.eq(assert(process.receive(5)).payload, i, "ack") end
        end
        local seen = assert(process.receive(5)).payload
        for i = 1, n do
          local p = (i - 1) % 5 + 1
          local keys = p == 1 and "from,topic" or "from,payload,topic"
          T.eq(seen[i], keys .. "|t" .. i .. "|" .. types[p] .. "|nil|true", "envelope " .. i .. " (ack: " .. tostring(ack) .. ")")
        end
        -- (Whether the flood's receiver switched depends on how the
        -- messages fell into its steps; fixtures.receivers' warm-up pins it.)
        if ack then T.eq(seen.receive, "waiting", "process.receive of a receiver that always waits") end
      end
    end },
    { "a receiver that always waits takes inbox.lua's form, also when its payloads are tables of one shape", function()
      -- A message for a task waiting in the C function process.receive
      -- is handed over (LuaProcess::hand_over_inside) only once
      -- inbox.lua's constructor is loaded, at the 16th message the step
      -- delivers: tables of a cached shape, which the hand-over could make
      -- earlier, must not keep the count from getting there (the process
      -- would keep the C function, about 85 instructions more a message).
      ping_pong_envelopes(function(i) return { n = i } end, "table", false)
    end },
    { "a receiver that loaded the Lua kernel early still takes receive's Lua form at its 16th message", function()
      -- process.inbox() loads kernel_ext.lua, and with it the inbox's Lua
      -- half (bindings/inbox.lua) before any message: the count of
      -- messages that gives the process the Lua receive must go on all
      -- the same (a task waiting in the C function is handed messages
      -- only after it, or they would skip the count).
      ping_pong_envelopes(function(i) return i end, "number", true)
    end },
    { "strings new to a waiting receiver arrive whole, of every length and byte", function()
      -- A string payload the receiver does not keep (new, or over 15
      -- bytes) is made for a waiting task in the step's protected call
      -- (LuaProcess::hand_over_inside), and so is one of 128 bytes or
      -- more. Each string here is new
      -- (its round in it), of lengths 0 to 140, with NUL and high bytes.
      local echo = assert(process.spawn("fixtures.echo"))
      for round = 1, 3 do
        for len = 0, 140 do
          local bytes = {}
          for i = 1, len do bytes[i] = string.char((i * 37 + round + len) % 256) end
          local v = table.concat(bytes)
          if len >= 4 then v = string.char(0, round, len % 256, 255) .. v:sub(5) end
          assert(process.send(echo, "t", v))
          local m = assert(process.receive(5), "no echo")
          T.eq(#m.payload, #v, "round " .. round .. ", length " .. len)
          T.ok(m.payload == v, "round " .. round .. ", length " .. len .. ": bytes differ")
        end
      end
      process.send(echo, "stop", nil)
    end },
    { "long topics arrive exactly, also two that differ only in their middle bytes", function()
      -- A topic of 16 to 64 bytes is kept apart from the short strings
      -- (StringCache::find_topic), found by its first and last 8 bytes and
      -- its length, then by all its bytes: two topics alike at both ends
      -- must stay apart. One at a time (each handed to the echo as it
      -- waits, and to this process), then in runs (they queue); more long
      -- topics than the cache's 4 slots, and one over 64 bytes.
      local topics = {
        "abcdefgh_X_ijklmnop", "abcdefgh_Y_ijklmnop", ("t"):rep(16), ("t"):rep(64), ("t"):rep(65),
        "order_status_changed", "order_status_changes", "0123456789abcdef0123456789abcdef", "short",
      }
      local echo = assert(process.spawn("fixtures.echo"))
      for round = 1, 60 do
        for i, topic in ipairs(topics) do
          assert(process.send(echo, topic, round * 100 + i))
          local m = assert(process.receive(5), "no echo")
          T.eq(m.topic, topic, "round " .. round .. ", topic " .. i)
          T.eq(m.payload, round * 100 + i)
        end
      end
      for run = 1, 20 do
        for i, topic in ipairs(topics) do assert(process.send(echo, topic, i)) end
        for i, topic in ipairs(topics) do
          local m = assert(process.receive(5), "no echo")
          T.eq(m.topic, topic, "run " .. run .. ", topic " .. i)
          T.eq(m.payload, i)
        end
      end
      -- Two long topics, alike at both ends, alternating: each hop's
      -- message is handed over once the receivers are warm.
      for i = 1, 200 do
        local topic = topics[1 + i % 2]
        assert(process.send(echo, topic, i))
        T.eq(assert(process.receive(5)).topic, topic, "alternating, message " .. i)
      end
      process.send(echo, "stop", nil)
    end },
    { "numbers cross exactly: NaN, inf, -0.0, 2^53, floats", function()
      local v = roundtrip({ 0/0, math.huge, -math.huge, -0.0, 2^53, 2^53 + 2, 0.1, -123456789, 1e308, 5e-324 })
      T.ok(v[1] ~= v[1], "NaN")
      T.eq(v[2], math.huge); T.eq(v[3], -math.huge)
      T.eq(1 / v[4], -math.huge, "-0.0 keeps its sign")
      T.eq(v[5], 2^53); T.eq(v[6], 2^53 + 2); T.eq(v[7], 0.1); T.eq(v[8], -123456789)
      T.eq(v[9], 1e308); T.eq(v[10], 5e-324)
    end },
    { "strings cross with any bytes", function()
      local bytes = {}
      for i = 0, 255 do bytes[#bytes + 1] = string.char(i) end
      local s = table.concat(bytes) .. "\0tail"
      T.eq(roundtrip(s), s)
      T.eq(roundtrip(""), "")
      local big = string.rep("ab\0", 100000)
      T.eq(roundtrip(big), big)
    end },
    { "nil, booleans and mixed tables cross", function()
      local v = roundtrip({ true, false, "x", [10] = "sparse", k = { nested = { 1, 2 } }, [1.5] = "float key", [true] = "bool key" })
      T.eq(v[1], true); T.eq(v[2], false); T.eq(v[3], "x"); T.eq(v[10], "sparse")
      T.eq(v.k.nested[2], 2); T.eq(v[1.5], "float key"); T.eq(v[true], "bool key")
      T.eq(roundtrip(nil), nil)
    end },
    { "a send without its payload argument delivers a nil payload", function()
      local echo = assert(process.spawn("fixtures.echo"))
      T.eq(process.send(echo, "bare"), true)
      local m = assert(process.receive(5))
      T.eq(m.topic, "bare"); T.eq(m.payload, nil); T.eq(m.from, echo)
      process.send(echo, "stop")
    end },
    { "a 200-deep nested table round-trips", function()
      local v = roundtrip(deep(200))
      local n = 0
      while v.next do v = v.next; n = n + 1 end
      T.eq(n, 200); T.eq(v.depth, 200)
    end },
    { "a table referenced twice without a cycle arrives as two copies", function()
      local shared = { 1, 2 }
      local v = roundtrip({ a = shared, b = shared })
      T.eq(v.a[2], 2); T.eq(v.b[2], 2); T.ok(v.a ~= v.b, "two copies")
    end },
    { "unsendable values are refused with their path and nothing is sent", function()
      local echo = assert(process.spawn("fixtures.echo"))
      local ok, err = process.send(echo, "x", { handler = function() end })
      T.eq(ok, nil); T.eq(err, "invalid: cannot send function at value.handler")
      ok, err = process.send(echo, "x", { list = { 1, 2, io.stdout } })
      T.eq(err, "invalid: cannot send userdata at value.list[3]")
      ok, err = process.send(echo, "x", coroutine.create(function() end))
      T.eq(err, "invalid: cannot send coroutine at value")
      ok, err = process.send(echo, "x", { n = require("ffi").new("int64_t", 1) })
      T.eq(err, "invalid: cannot send cdata at value.n")
      local cyc = { a = { } }; cyc.a.back = cyc
      ok, err = process.send(echo, "x", cyc)
      T.eq(err, "invalid: cannot send a table with a cycle at value.a.back")
      T.eq(process.receive(0.05), nil, "nothing was sent")
      process.send(echo, "stop", nil)
    end },
    { "sends to a dead PID or an unknown name return not_found", function()
      local pid = assert(process.spawn_monitored("fixtures.crash", "none"))
      T.next_event("exit")
      local ok, err = process.send(pid, "x", 1)
      T.eq(ok, nil); T.match(err, "^not_found")
      ok, err = process.send("no-such-name", "x", 1)
      T.eq(ok, nil); T.match(err, "^not_found: no process registered as 'no%-such%-name'")
      ok, err = process.send("<0.999999.7>", "x", 1)
      T.match(err, "^not_found")
      -- Written as Erlang's PIDs are, ending in 0: well formed, and no
      -- process has it (the dead process's own index included).
      for _, text in ipairs { "<0.999999.0>", (pid:gsub("%.%d+>$", ".0>")) } do
        ok, err = process.send(text, "x", 1)
        T.eq(ok, nil); T.match(err, "^not_found", text)
        -- A monitor of it ends at once, as Erlang's DOWN noproc.
        T.eq(process.monitor(text), true, "monitor " .. text)
        T.eq(T.next_event("exit").error, "noproc", "monitor " .. text)
        T.match(select(2, process.link(text)), "^not_found", "link " .. text)
      end
      T.raises(function() process.send(42, "x", 1) end, "bad argument #1")
      T.raises(function() process.send(pid, nil, 1) end, "bad argument #2")
      -- Read straight from the stack (bindings/luajit/stack_args.hpp): a number
      -- is not a string, and a missing argument is named as such.
      T.raises(function() process.send(pid, 7, 1) end, "bad argument #2 to 'send' %(string expected, got number%)")
      T.raises(function() process.send(pid) end, "bad argument #2 to 'send' %(string expected, got no value%)")
      T.raises(function() process.send() end, "bad argument #1 to 'send' %(string expected, got no value%)")
    end },
    { "the registry names a process, refuses a taken name and releases names on exit", function()
      local echo = assert(process.spawn("fixtures.echo"))
      T.eq(process.registry.register("echo-srv", echo), true)
      local ok, err = process.registry.register("echo-srv", process.pid())
      T.eq(ok, nil); T.match(err, "^exists: ")
      T.eq(process.registry.lookup("echo-srv"), echo)
      T.eq(process.send("echo-srv", "by-name", 7), true)
      T.eq(process.receive(5).payload, 7)
      process.monitor(echo)
      process.send(echo, "stop", nil)
      local ev = T.next_event("exit")
      T.eq(ev.from, echo)
      -- By the time the monitor sees the exit, the PID and the name are gone.
      local _, lerr = process.registry.lookup("echo-srv")
      T.match(lerr, "^not_found")
      T.match(select(2, process.send("echo-srv", "x", 1)), "^not_found: no process registered as 'echo%-srv'")
      T.match(select(2, process.send(echo, "x", 1)), "^not_found")
      T.eq(process.registry.register("me"), true)
      T.eq(process.registry.lookup("me"), process.pid())
      -- A name that process.send would read as a PID, or no name at all.
      T.match(select(2, process.registry.register("")), "^invalid: bad name ''")
      T.match(select(2, process.registry.register("<0.1.1>")), "^invalid: bad name '<0%.1%.1>'")
      T.eq(process.registry.unregister("me"), true)
      T.match(select(2, process.registry.unregister("me")), "^not_found")
    end },
    { "sends to a name follow the registry as it changes, before and after many peers", function()
      local a, b = assert(process.spawn("fixtures.echo")), assert(process.spawn("fixtures.echo"))
      T.eq(process.registry.register("moving", a), true)
      local function via_name(i)
        T.eq(process.send("moving", "n", i), true)
        local m = assert(process.receive(5))
        T.eq(m.payload, i)
        return m.from
      end
      T.eq(via_name(1), a); T.eq(via_name(2), a)
      T.eq(process.registry.unregister("moving"), true)
      T.match(select(2, process.send("moving", "n", 0)), "^not_found: no process registered as 'moving'")
      T.eq(process.registry.register("moving", b), true)
      T.eq(via_name(3), b)
      -- A send to a PID between two to the name.
      T.eq(process.send(a, "n", 4), true); T.eq(assert(process.receive(5)).from, a)
      T.eq(via_name(5), b)
      -- 70 new senders while the name is the last destination: this process
      -- starts keeping many peers' strings (after 64), which must not keep
      -- the name as if it were a PID.
      for i = 1, 70 do assert(process.spawn("fixtures.relay", process.pid(), 1, i)) end
      for _ = 1, 70 do T.eq(assert(process.receive(5)).topic, "seq") end
      T.eq(process.registry.unregister("moving"), true)
      T.eq(process.registry.register("moving", a), true)
      T.eq(via_name(6), a)
      T.eq(process.send(b, "n", 7), true); T.eq(assert(process.receive(5)).from, b)
      T.eq(process.registry.unregister("moving"), true)
      T.eq(process.registry.register("moving", b), true)
      T.eq(via_name(8), b)
      process.send(a, "stop"); process.send(b, "stop")
    end },
    { "inbox() and events() return the same channel on every call", function()
      T.ok(process.inbox() == process.inbox(), "inbox"); T.ok(process.events() == process.events(), "events")
    end },
    { "receive with a timeout returns nil, timeout", function()
      local t0 = time.now()
      local m, err = process.receive(0.05)
      T.eq(m, nil); T.eq(err, "timeout")
      T.ok(time.now() - t0 >= 0.045, "waited the timeout")
      T.eq(select(2, process.receive("10ms")), "timeout")
      T.eq(select(2, process.receive(0)), "timeout")
    end },
    { "listen takes its topic out of the inbox without reordering the rest", function()
      local me = process.pid()
      for i, topic in ipairs({ "a", "side", "b", "side", "c" }) do process.send(me, topic, i) end
      local side = process.listen("side")
      T.ok(side == process.listen("side"), "same channel")
      process.send(me, "side", 6)
      T.eq(process.receive(1).topic, "a"); T.eq(process.receive(1).topic, "b"); T.eq(process.receive(1).topic, "c")
      T.eq(side:receive().payload, 2); T.eq(side:receive().payload, 4); T.eq(side:receive().payload, 6)
    end },
    { "a closed listener stops listening: what it holds drains, its topic goes to the inbox again", function()
      local me = process.pid()
      local side = process.listen("side")
      process.send(me, "side", 1)
      T.eq(side:receive().payload, 1)
      process.send(me, "side", 2)
      time.sleep(0)  -- 2 reaches the listener before it closes
      T.eq(side:close(), true)
      process.send(me, "side", 3)
      process.send(me, "other", 4)
      local v, ok = side:receive()
      T.eq(v.payload, 2); T.eq(ok, true)
      v, ok = side:receive()
      T.eq(v, nil); T.eq(ok, false)
      local m = process.receive(1)
      T.eq(m.topic, "side"); T.eq(m.payload, 3)
      T.eq(process.receive(1).payload, 4)
      -- Listening again: a new channel, which takes what waits in the inbox.
      process.send(me, "side", 5)
      time.sleep(0)
      local again = process.listen("side")
      T.ok(again ~= side, "a new channel")
      process.send(me, "side", 6)
      T.eq(again:receive().payload, 5); T.eq(again:receive().payload, 6)
      T.eq(again:close(), true)
      T.eq(process.receive(0.05), nil)
    end },
    { "waiters on the inbox get messages oldest first, each with its own returns", function()
      -- Each way twice: in a fresh process (the C receive) and after 20
      -- messages (bindings/inbox.lua's form over it, which makes the table of a
      -- message handed to a waiting task itself).
      for _, warm in ipairs({ false, true }) do
        local function run(method)
          assert(process.spawn_monitored("fixtures.receivers:" .. method, warm and "warm" or nil))
          local ev = T.next_event("exit")
          T.eq(ev.error, nil, method .. " error (warm: " .. tostring(warm) .. ")")
          return ev.result
        end
        -- process.receive (parked), inbox:receive (message, true), process.receive.
        T.eq(run("order"), "A1/1 B2/2/true C3/1")
        T.eq(run("listen_while_parked"), "Ay2/1 x=1")
        T.eq(run("parked_then_select"), "receive=1 select=2")
        T.eq(run("one_value"), "1 1 1")
        T.eq(run("timeout_behind_parked"), "parked=1 timed=nil,timeout")
        T.eq(run("inbox_as_channel"), "Adirect/1 B1 Cfrom a task Dnil")
        T.match(run("receive_in_sort"), "^false [^ ]*receivers%.lua:%d+: blocking call inside a C function boundary")
        T.match(run("bad_timeout"), "^[^ ]*receivers%.lua:%d+: invalid duration")
        T.match(run("top_level"), "^[^|]*receivers%.lua:%d+: blocking call outside a process task|[^|]*receivers%.lua:%d+: blocking call outside a process task$")
      end
    end },
    { "stress: tasks taking from the inbox four ways each get every message once", function()
      assert(process.spawn_monitored("fixtures.receivers:stress", 4, 3000))
      local ev = T.next_event("exit", 30)
      T.eq(ev.error, nil, "stress error"); T.eq(ev.result, "ok")
    end },
    { "a flood sent in one step arrives whole and in order, received three ways", function()
      -- More messages than a step hands the kernel at once (config::kDeliverBatch),
      -- so the receiver's ways of receiving change between and within batches.
      local n = 5000
      local r = assert(process.spawn_monitored("fixtures.flood_receiver", n))
      for i = 1, n do assert(process.send(r, "n", i)) end
      local ev = T.next_event("exit", 30)
      T.eq(ev.error, nil, "receiver error"); T.eq(ev.result, n)
    end },
    { "messages queued before a select or listen on the inbox keep their order and values", function()
      -- They wait in the inbox's buffer as three values each until the
      -- channel code needs it as message tables (TaskKernel::flat_inbox_).
      local r = assert(process.spawn_monitored("fixtures.queued_then_channel", process.pid()))
      local sends = { { "a", 1 }, { "b", 2 }, { "a", nil }, { "b", { k = 4 } }, { "c", "five" },
        { "b", nil }, { "a", 7.5 }, { "c", { k = "eight" } }, { "b", 9 }, { "a", false } }
      for _, s in ipairs(sends) do assert(process.send(r, s[1], s[2])) end
      local ev = T.next_event("exit")
      T.eq(ev.error, nil, "receiver error")
      T.eq(ev.result, "receive:a:1 select:b:2 receive:a:nil receive:c:five receive:a:7.5 receive:c:{eight} "
        .. "receive:a:false listen:b:{4} listen:b:nil listen:b:9")
    end },
    { "a queued stream from two senders keeps each message's sender, topic and value", function()
      -- One run of queued messages, the same sender and topic over and over
      -- with changes of both in between, in a flat inbox and in one that
      -- holds message tables.
      for _, tables in ipairs { false, true } do
        local mine = { { "x", 1 }, { "x", 2 }, { "y", 3 }, { "y", nil }, { "x", "five" } }
        local relayed = 5
        local total = #mine * 2 + relayed
        local r = assert(process.spawn_monitored("fixtures.stream_receiver", total, tables))
        time.sleep(0.05)  -- it is asleep, its inbox ready
        for _, s in ipairs(mine) do assert(process.send(r, s[1], s[2])) end
        local relay = assert(process.spawn("fixtures.relay", r, relayed, "R"))
        for _, s in ipairs(mine) do assert(process.send(r, s[1], s[2])) end
        local ev = T.next_event("exit", 10)
        T.eq(ev.error, nil, "receiver error")
        local me, from_me, from_relay = process.pid(), {}, {}
        for entry in ev.result:gmatch("%S+") do
          local from, topic, payload = entry:match("^(.-)|(.-)|(.*)$")
          if from == me then from_me[#from_me + 1] = topic .. ":" .. payload
          elseif from == relay then from_relay[#from_relay + 1] = topic .. ":" .. payload
          else error("a message from " .. from) end
        end
        local want_me = {}
        for round = 1, 2 do
          for _, s in ipairs(mine) do want_me[#want_me + 1] = s[1] .. ":" .. tostring(s[2]) end
        end
        T.eq(table.concat(from_me, " "), table.concat(want_me, " "), "mine, tables " .. tostring(tables))
        T.eq(table.concat(from_relay, " "), "seq:1 seq:2 seq:3 seq:4 seq:5", "relayed, tables " .. tostring(tables))
      end
    end },
    { "a listen with more messages queued than a Lua stack holds keeps them all, in order", function()
      local n = 30000
      local r = assert(process.spawn_monitored("fixtures.long_queue_then_listen", n))
      for i = 1, n do assert(process.send(r, "n", i)) end
      assert(process.send(r, "end", nil))
      local ev = T.next_event("exit", 30)
      T.eq(ev.error, nil, "receiver error"); T.eq(ev.result, n)
    end },
    { "timed receives racing their messages: each message once and in order, no timeout early", function()
      -- The timer of a receive that got its message is stopped, but its
      -- completion may be on its way: it must not end the next wait.
      local n = 400
      local r = assert(process.spawn_monitored("fixtures.timed_receiver", n))
      for i = 1, n do
        assert(process.send(r, "n", i))
        if i % 3 ~= 0 then time.sleep(0.001 * (i % 4)) end  -- gaps of 0 to 3 ms, around its 2 ms
      end
      local ev = T.next_event("exit", 30)
      T.eq(ev.error, nil, "receiver error")
      for i = 1, n do T.eq(ev.result.got[i], i, "message " .. i) end
      T.ok(ev.result.timeouts > 0, "some waits timed out")
      T.ok(ev.result.shortest >= 0.0019, "a wait of 2 ms timed out after " .. ev.result.shortest)
    end },
    { "timed receives in several tasks share timers and each ends at its own time", function()
      -- The earliest deadline gets a timer of its own, a later one shares
      -- it and is timed again when it fires, and a message ends the wait
      -- of the task that waits first: none ends early, none is lost.
      local pid = assert(process.spawn_monitored("fixtures.timed_waiters", process.pid()))
      T.eq(assert(process.receive(5)).topic, "waiting")
      assert(process.send(pid, "m", "hello"))
      local r = T.next_event("exit", 10).result
      T.eq(r["0.3"].got, "hello", "the first waiter's message")
      T.eq(r["0.1"].got, "timeout"); T.eq(r["0.2"].got, "timeout")
      T.ok(r["0.1"].waited >= 0.099, "0.1 s wait ended after " .. r["0.1"].waited)
      T.ok(r["0.2"].waited >= 0.199, "0.2 s wait ended after " .. r["0.2"].waited)
      T.ok(r["0.2"].waited > r["0.1"].waited, "the 0.2 s wait ended after the 0.1 s one")
    end },
    { "a step that hands over more queued messages than a Lua stack holds keeps them all", function()
      -- A receiver that yields has its step's remaining events handed over
      -- at once; an inbox of message tables took a run of them as one
      -- call's arguments, past LuaJIT's stack limit ("stack overflow
      -- (queued messages)", the receiver failed).
      local n = 40000
      local r = assert(process.spawn_monitored("fixtures.flood_yielder", process.pid(), n))
      T.eq(process.receive(5).topic, "ready")
      for i = 1, n do assert(process.send(r, "n", i)) end
      local ev = T.next_event("exit", 30)
      T.eq(ev.error, nil, "receiver error"); T.eq(ev.result, n)
    end },
    { "a process that talks to hundreds names each sender and reaches each PID, old and reused", function()
      -- More peers than PeerStrings's cache has slots of either kind, in a
      -- shuffled order, so that its entries are replaced; then processes
      -- exit one by one, each right after its reply, and new ones take
      -- their slots (the same index, a new generation), which a cache
      -- keyed by index alone would confuse.
      local n = 300
      local pids = {}
      local function start(i) pids[i] = assert(process.spawn("fixtures.echo")) end
      local function ping(i, what)
        T.eq(process.send(pids[i], "i", i), true, what .. " send to " .. i)
        local m = assert(process.receive(5), what .. ": no reply from " .. i)
        T.eq(m.payload, i, what .. " reply"); T.eq(m.from, pids[i], what .. " sender of reply " .. i)
      end
      local rng = 12345
      local function round(what)
        for _ = 1, 2 * n do
          rng = (rng * 1103515245 + 12345) % 2147483648
          ping(rng % n + 1, what)
        end
      end
      local function index(pid) return pid:match("^<%d+%.(%d+)%.") end
      for i = 1, n do start(i) end
      round("first")
      local dead, reused = {}, 0
      for i = 1, n, 2 do
        local p = pids[i]
        ping(i, "last")
        process.monitor(p)
        process.send(p, "stop", nil)
        T.eq(T.next_event("exit").from, p, "exit of " .. i)
        dead[#dead + 1] = p
        start(i)
        if index(pids[i]) == index(p) then reused = reused + 1 end
        ping(i, "new")
      end
      T.ok(reused > 0, "a new process in a dead one's slot")
      round("after reuse")
      -- The dead PIDs' strings were cached as destinations: they still name
      -- no process.
      for _, p in ipairs(dead) do T.match(select(2, process.send(p, "i", 0)), "^not_found", "send to dead " .. p) end
      for i = 1, n do process.send(pids[i], "stop", nil) end
    end },
    { "10k processes: each sender's messages arrive once and in order", function()
      local senders, per = 10000, 5
      for s = 1, senders do assert(process.spawn("fixtures.relay", process.pid(), per, s)) end
      local next_i, total = {}, 0
      while total < senders * per do
        local m = assert(process.receive(30), "messages stopped arriving")
        local p = m.payload
        local want = (next_i[p.from] or 0) + 1
        if p.i ~= want then error("sender " .. p.from .. ": got " .. p.i .. ", expected " .. want) end
        next_i[p.from] = want
        total = total + 1
      end
      T.eq(total, senders * per)
      T.eq(select(2, process.receive(0.05)), "timeout", "no duplicates")
    end },
  }
end }
