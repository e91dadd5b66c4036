-- JSON: require("json") on lua-cjson, bad input as
-- nil, "invalid: ...", json.null crossing between processes as itself, and
-- the empty-array convention.
local T = require("t")
local json = require("json")

-- Decodes text, failing the test with decode's error if it is refused.
local function decode(text)
  local v, err = json.decode(text)
  if v == nil and err then error("decode of " .. text .. ": " .. err, 2) end
  return v
end

-- Checks that a call's results (last, all of them) are nil and an
-- "invalid: ..." error that matches pattern.
local function invalid(pattern, what, v, err)
  T.eq(v, nil, what)
  T.match(err, "^invalid: ", what)
  if pattern then T.match(err, pattern, what) end
end

return { main = function()
  return T.run {
    { "require('json') is one module with encode, decode, null and the empty-array marks", function()
      T.eq(require("json"), json)
      T.eq(type(json.encode), "function")
      T.eq(type(json.decode), "function")
      T.eq(json.null, require("cjson").null)
      T.eq(type(json.null), "userdata")
      T.eq(type(json.array_mt), "table")
      T.eq(type(json.empty_array), "table")
    end },

    { "every JSON type encodes and decodes", function()
      T.eq(json.encode(true), "true")
      T.eq(json.encode(false), "false")
      T.eq(json.encode(json.null), "null")
      T.eq(json.encode(nil), "null")
      T.eq(json.encode(12), "12")
      T.eq(json.encode("a\"b\\c\n/"), [["a\"b\\c\n\/"]])
      T.eq(json.encode({ 1, 2, 3 }), "[1,2,3]")
      T.eq(json.encode({ k = "v" }), [[{"k":"v"}]])
      T.eq(decode("true"), true)
      T.eq(decode("false"), false)
      T.eq(decode("null"), json.null)
      T.eq(decode("-2.5e3"), -2500)
      T.eq(decode([["x\ty"]]), "x\ty")
      local a = decode("[1, \"two\", true, null, {\"k\": [ ]}]")
      T.eq(#a, 5)
      T.eq(a[1], 1)
      T.eq(a[2], "two")
      T.eq(a[3], true)
      T.eq(a[4], json.null)
      T.eq(next(a[5].k), nil)
    end },

    { "nested values round-trip", function()
      local v = { name = "n", list = { 1, { x = { y = { z = "deep" } } }, "s" }, flag = false }
      local back = decode(json.encode(v))
      T.eq(back.name, "n")
      T.eq(back.flag, false)
      T.eq(back.list[1], 1)
      T.eq(back.list[2].x.y.z, "deep")
      T.eq(back.list[3], "s")
      local deep, t = {}, nil
      t = deep
      for i = 1, 200 do t.n = { i = i } t = t.n end
      local d = decode(json.encode(deep))
      for i = 1, 200 do d = d.n T.eq(d.i, i, "depth " .. i) end
    end },

    { "unicode escapes decode to UTF-8, and UTF-8 encodes as itself", function()
      T.eq(decode([["\u00e9\u4e2d"]]), "\195\169\228\184\173")
      T.eq(decode([["\ud83d\ude00"]]), "\240\159\152\128")  -- a surrogate pair
      T.eq(decode([["\u0000"]]), "\0")
      T.eq(json.encode("\195\169"), "\"\195\169\"")
      T.eq(json.encode("\0\31"), [["\u0000\u001f"]])
      invalid("unicode", "lone surrogate", json.decode([["\ud83d"]]))
    end },

    { "numbers: integers, floats and huge ones", function()
      T.eq(json.encode(0), "0")
      T.eq(json.encode(-7), "-7")
      T.eq(json.encode(1e14), "1e+14")
      T.eq(json.encode(99999999999999), "99999999999999")
      T.eq(json.encode(0.5), "0.5")
      T.eq(json.encode(-1.25e-300), "-1.25e-300")
      T.eq(json.encode(1e300), "1e+300")
      T.eq(decode("99999999999999"), 99999999999999)
      T.eq(decode("9007199254740993"), 2^53)  -- the nearest double
      T.eq(decode("1e400"), math.huge)
      T.eq(decode("0.1"), 0.1)
      for _, n in ipairs { 0.1, 1 / 3, 123456.789, -2^52 } do
        T.ok(math.abs(decode(json.encode(n)) - n) <= math.abs(n) * 1e-13, "14 digits of " .. n)
      end
      invalid("NaN", "NaN", json.encode(0 / 0))
      invalid("Inf", "inf", json.encode(math.huge))
    end },

    { "text that is not JSON is nil, 'invalid: ...' naming the position", function()
      for _, text in ipairs { "", "[1,", "{\"a\" 1}", "{a: 1}", "[1] x", "tru", "\"open", "[1,]", "NaN",
                              "Infinity", "0x10", "01", "{\"a\":}" } do
        local v, err = json.decode(text)
        invalid(nil, text, v, err)
        T.ok(not err:find("stdlib"), "no source position in " .. err)
      end
      local _, err = json.decode("[1, 2, ?]")
      T.match(err, "character 8", "position")
      T.raises(function() json.decode(42) end, "string expected, got number")
      T.raises(function() json.decode() end, "string expected, got nil")
    end },

    { "values JSON cannot hold are nil, 'invalid: ...' naming what", function()
      invalid("function", "a function", json.encode(print))
      invalid("function", "a nested function", json.encode({ a = { b = print } }))
      invalid("thread", "a coroutine", json.encode(coroutine.create(print)))
      invalid("table key", "a table key", json.encode({ [{}] = 1 }))
      local cyclic = { a = {} }
      cyclic.a.back = cyclic
      invalid("cycle", "a cycle", json.encode(cyclic))
      local sparse = {}
      sparse[1000] = 1
      invalid("sparse", "a sparse array", json.encode(sparse))
      -- Deep but acyclic beyond cjson's depth limit: not called a cycle.
      local deep, t = {}, nil
      t = deep
      for _ = 1, 1100 do t.n = {} t = t.n end
      local _, err = json.encode(deep)
      T.match(err, "^invalid: .*nesting", "too deep")
    end },

    { "json.null round-trips in one process", function()
      local v = decode([[{"a": null, "list": [1, null, 3]}]])
      T.eq(v.a, json.null)
      T.eq(v.list[2], json.null)
      T.eq(#v.list, 3)
      T.eq(json.encode(v.list), "[1,null,3]")
      T.eq(json.encode({ json.null }), "[null]")
    end },

    { "a decoded table with nulls goes to another process and back, its nulls json.null", function()
      local doc = decode([[{"url": "/", "referrer": null, "list": [1, null, "x"], "n": {"m": null}}]])
      local peer = assert(process.spawn("fixtures.json_peer"))
      T.eq(process.send(peer, "doc", doc), true)
      local m = assert(process.receive(5))
      T.eq(m.payload.null_is_json_null, true, "nulls there")
      T.eq(m.payload.null_type, "userdata")
      local back = m.payload.payload
      T.eq(back.referrer, json.null, "referrer back here")
      T.eq(back.list[2], json.null)
      T.eq(back.list[3], "x")
      T.eq(back.n.m, json.null)
      T.eq(decode(m.payload.text).referrer, json.null, "encoded there")
      T.eq(process.send(peer, "stop", nil), true)
    end },

    { "json.null crosses as a spawn argument and as a process's result", function()
      local pid = assert(process.spawn_monitored("fixtures.json_peer:returns_args", json.null, { n = json.null }))
      local ev = T.next_event("exit")
      T.eq(ev.from, pid)
      T.eq(ev.result.a_is_json_null, true, "the argument there")
      T.eq(ev.result.a, json.null, "the result back here")
      T.eq(ev.result.b.n, json.null)
    end },

    { "cjson, a C module, in many processes: each gets its own, and searches the same as LuaJIT's", function()
      for i = 1, 20 do
        local pid = assert(process.spawn_monitored("fixtures.c_module_user:encode", { n = i }))
        local ev = T.next_event("exit")
        T.eq(ev.from, pid)
        T.eq(ev.error, nil)
        T.eq(ev.result.text, '{"n":' .. i .. '}')
        T.eq(ev.result.loaded, true, "package.loaded holds it")
        T.eq(ev.result.again, true, "a second require gives the same table")
      end
      -- A name no searcher finds fails as before, the second time too,
      -- with LuaJIT's list of the files it tried.
      for _ = 1, 2 do
        assert(process.spawn_monitored("fixtures.c_module_user:missing", "no_such_module_q7"))
        local r = T.next_event("exit").result
        T.eq(r.ok, false)
        T.match(r.err, "no module 'no_such_module_q7' in the script directory or stdlib")
        T.match(r.err, "no file '[^']*no_such_module_q7%.so'")
      end
      -- A preload entry wins over the library on package.cpath.
      assert(process.spawn_monitored("fixtures.c_module_user:preloaded"))
      T.eq(T.next_event("exit").result, "the preload's")
    end },

    { "require('json') loads cjson and its codec only at its first use: json.null, encode or decode", function()
      local want = { null = "userdata", encode = '{"a":[]}', decode = true }
      for _, first in ipairs({ "null", "encode", "decode" }) do
        assert(process.spawn_monitored("fixtures.c_module_user:json_first", first))
        local ev = T.next_event("exit")
        T.eq(ev.error, nil, first)
        T.eq(ev.result.before, false, first .. ": not loaded by require")
        T.eq(ev.result.after, true, first .. ": loaded by its first use")
        T.eq(ev.result.codec_before, false, first .. ": the codec not loaded by require")
        T.eq(ev.result.codec_after, true, first .. ": the codec loaded by its first use")
        T.eq(ev.result.got, want[first], first)
      end
    end },

    { "json.null alone and as a table key crosses as itself", function()
      local echo = assert(process.spawn("fixtures.echo"))
      process.send(echo, "n", json.null)
      T.eq(assert(process.receive(5)).payload, json.null)
      process.send(echo, "k", { [json.null] = "v" })
      T.eq(assert(process.receive(5)).payload[json.null], "v")
      process.send(echo, "stop", nil)
    end },

    { "other light userdata and userdata are still refused with their path", function()
      local ok, err = process.send(process.pid(), "x", { a = { io.stdout } })
      T.eq(ok, nil)
      T.eq(err, "invalid: cannot send userdata at value.a[1]")
    end },

    { "[] round-trips as [], {} as {}", function()
      local v = decode("[]")
      T.eq(getmetatable(v), json.array_mt)
      T.eq(json.encode(v), "[]")
      T.eq(json.encode(decode("{}")), "{}")
      T.eq(json.encode(decode("[ \n\t]")), "[]", "whitespace inside")
      local text = [==[{"a":[],"b":{},"c":[[],[1]],"d":"[]","e":"\"[]"}]==]
      local back = decode(text)
      T.eq(getmetatable(back.a), json.array_mt)
      T.eq(getmetatable(back.b), nil)
      T.eq(getmetatable(back.c[1]), json.array_mt)
      T.eq(back.d, "[]", "[] inside a string")
      T.eq(back.e, "\"[]", "[] after an escaped quote")
      T.eq(json.encode(back.c), "[[],[1]]")
      T.eq(json.encode(back.a), "[]")
      T.eq(json.encode(back.b), "{}")
      T.eq(json.encode(setmetatable({}, json.array_mt)), "[]")
      T.eq(json.encode({ json.empty_array, {} }), "[[],{}]")
      T.eq(json.encode(json.empty_array), "[]")
      T.raises(function() json.empty_array[1] = 1 end, "read%-only")
      -- A string that holds what encode writes for a moment comes out as it was.
      T.eq(json.encode({ "\1json.empty_array\1", json.empty_array }), [==[["\u0001json.empty_array\u0001",[]]]==])
      T.eq(next(json.empty_array), nil, "empty_array left empty")
    end },

    { "an empty array sent to another process arrives as a plain empty table", function()
      local echo = assert(process.spawn("fixtures.echo"))
      process.send(echo, "a", decode([[{"items": []}]]))
      local got = assert(process.receive(5)).payload
      process.send(echo, "stop", nil)
      T.eq(next(got.items), nil)
      T.eq(getmetatable(got.items), nil, "the metatable stays behind")
      T.eq(json.encode(got), [[{"items":{}}]])
      T.eq(json.encode(setmetatable(got.items, json.array_mt)) , "[]")
    end },
  }
end }
