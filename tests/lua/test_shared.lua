-- shared tables: every call, its errors, TTL, LRU eviction, the codec's
-- values, and atomic incr from processes on every worker.
local T = require("t")
local shared = require("shared")

local unique = 0
local function fresh(opts)
  unique = unique + 1
  return assert(shared.table("test_shared_" .. unique, opts))
end

return { main = function()
  return T.run {
    { "require gives the module; it is not a global", function()
      T.eq(rawget(_G, "shared"), nil)
      T.eq(type(shared.table), "function")
    end },
    { "set, get, add, replace, delete", function()
      local t = fresh()
      T.eq(t:get("a"), nil)
      T.eq(t:set("a", 1), true)
      T.eq(t:get("a"), 1)
      local ok, err = t:add("a", 2)
      T.eq(ok, nil); T.eq(err, "exists")
      T.eq(t:add("b", 2), true)
      T.eq(t:get("b"), 2)
      T.eq(t:replace("a", "x"), true)
      T.eq(t:get("a"), "x")
      ok, err = t:replace("zz", 1)
      T.eq(ok, nil); T.eq(err, "not_found")
      T.eq(t:get("zz"), nil)
      T.eq(t:delete("a"), true)
      T.eq(t:get("a"), nil)
      T.eq(t:delete("a"), true)
      T.eq(t:size(), 1)
    end },
    { "a table opened twice by name is one table", function()
      local a = assert(shared.table("test_shared_same"))
      local b = assert(shared.table("test_shared_same"))
      a:set("k", "v")
      T.eq(b:get("k"), "v")
    end },
    { "1 and \"1\" are different keys", function()
      local t = fresh()
      t:set(1, "number"); t:set("1", "string")
      T.eq(t:get(1), "number"); T.eq(t:get("1"), "string")
      T.eq(t:size(), 2)
      t:set(2.5, "float")
      T.eq(t:get(2.5), "float")
    end },
    { "incr: adds, init, not_found, not a number", function()
      local t = fresh()
      local v, err = t:incr("n", 1)
      T.eq(v, nil); T.eq(err, "not_found")
      T.eq(t:incr("n", 5, 10), 15)
      T.eq(t:incr("n", -3), 12)
      T.eq(t:incr("n", 0.5), 12.5)
      T.eq(t:get("n"), 12.5)
      t:set("s", "text")
      v, err = t:incr("s", 1)
      T.eq(v, nil); T.match(err, "^invalid: ")
      T.eq(t:incr("ttl", 1, 0, 0.05), 1)
      time.sleep(0.15)
      T.eq(t:get("ttl"), nil)
    end },
    { "cas: changed, not_found, swap", function()
      local t = fresh()
      local ok, err = t:cas("k", 1, 2)
      T.eq(ok, nil); T.eq(err, "not_found")
      t:set("k", 1)
      ok, err = t:cas("k", 5, 2)
      T.eq(ok, nil); T.eq(err, "changed")
      T.eq(t:cas("k", 1, "two"), true)
      T.eq(t:get("k"), "two")
      T.eq(t:cas("k", "two", { 1, 2 }), true)
      T.eq(t:get("k")[2], 2)
    end },
    { "keys, size, flush", function()
      local t = fresh()
      for i = 1, 10 do t:set(i, i * i) end
      t:set("x", true)
      local keys = t:keys()
      T.eq(#keys, 11)
      local seen = {}
      for _, k in ipairs(keys) do seen[k] = true end
      for i = 1, 10 do T.ok(seen[i], "key " .. i) end
      T.ok(seen.x, "key x")
      T.eq(#t:keys(3), 3)
      T.eq(t:size(), 11)
      T.eq(t:flush(), true)
      T.eq(t:size(), 0)
      T.eq(#t:keys(), 0)
      T.eq(t:get(1), nil)
    end },
    { "ttl: expired keys are gone from get, keys and size; 0 and negative never expire", function()
      local t = fresh()
      t:set("short", 1, 0.05)
      t:set("zero", 2, 0)
      t:set("neg", 3, -1)
      t:set("long", 4, 60)
      T.eq(t:add("short2", 5, 0.05), true)
      T.eq(t:get("short"), 1)
      time.sleep(0.15)
      T.eq(t:get("short"), nil)
      T.eq(t:get("zero"), 2); T.eq(t:get("neg"), 3); T.eq(t:get("long"), 4)
      T.eq(t:size(), 3)
      for _, k in ipairs(t:keys()) do T.ok(k ~= "short2", "an expired key listed") end
      -- An expired key is missing for add and replace too.
      t:set("gone", 1, 0.05)
      time.sleep(0.15)
      local ok, err = t:replace("gone", 2)
      T.eq(ok, nil); T.eq(err, "not_found")
      T.eq(t:add("gone", 3), true)
      T.eq(t:get("gone"), 3)
    end },
    { "values of every codec type are copied in and out", function()
      local t = fresh()
      local nested = { a = { b = { c = "deep" } }, list = { 1, 2, 3 }, flag = false }
      t:set("nested", nested)
      local got = t:get("nested")
      T.ok(got ~= nested, "a copy")
      T.eq(got.a.b.c, "deep"); T.eq(got.list[3], 3); T.eq(got.flag, false)
      nested.a.b.c = "changed"
      T.eq(t:get("nested").a.b.c, "deep")
      t:set("nan", 0 / 0)
      local nan = t:get("nan")
      T.ok(nan ~= nan, "NaN")
      t:set("negzero", -0.0)
      T.eq(1 / t:get("negzero"), -math.huge)
      t:set("inf", math.huge); T.eq(t:get("inf"), math.huge)
      t:set("big", 2 ^ 53); T.eq(t:get("big"), 2 ^ 53)
      t:set("bytes", "a\0b\255"); T.eq(t:get("bytes"), "a\0b\255")
      local large = string.rep("x", 100000)
      t:set("large", large); T.eq(t:get("large"), large)
      t:set("true", true); T.eq(t:get("true"), true)
      t:set("false", false); T.eq(t:get("false"), false)
      local json = require("json")
      t:set("null", json.null); T.eq(t:get("null"), json.null)
      T.raises(function() t:set("f", print) end, "invalid: cannot send")
      T.eq(t:set("nested", nil), true)
      T.eq(t:get("nested"), nil)
    end },
    { "max_bytes: sizes with suffixes; another max_bytes is invalid", function()
      T.ok(shared.table("test_shared_sized", { max_bytes = "64K" }))
      T.ok(shared.table("test_shared_sized", { max_bytes = 65536 }))
      T.ok(shared.table("test_shared_sized"))
      local t, err = shared.table("test_shared_sized", { max_bytes = "1M" })
      T.eq(t, nil); T.match(err, "^invalid: ")
      T.ok(shared.table("test_shared_m", { max_bytes = "2M" }))
      T.ok(shared.table("test_shared_g", { max_bytes = "1G" }))
      T.raises(function() shared.table("test_shared_bad", { max_bytes = "lots" }) end, "invalid: max_bytes")
      T.raises(function() shared.table("test_shared_bad", { max_bytes = -1 }) end, "invalid: max_bytes")
    end },
    { "an unknown option is an error at the caller's line", function()
      T.raises_here(function() shared.table("test_shared_opt", { max_byte = 10 }) end, "invalid: unknown option 'max_byte'")
    end },
    { "bad argument types raise naming the argument", function()
      local t = fresh()
      T.raises(function() t:get({}) end, "key")
      T.raises(function() t:get(nil) end, "key")
      T.raises(function() t:set(true, 1) end, "key")
      T.raises(function() t:set("k", 1, "soon") end, "ttl")
      T.raises(function() t:incr("k", "one") end, "n: a number")
      T.raises(function() t:incr("k", 1, "zero") end, "init")
      T.raises(function() t:keys("all") end, "limit")
      T.raises(function() shared.table(42) end, "name")
      T.raises(function() t.get("k") end, "':'")
    end },
    { "a value larger than the table is refused with limit", function()
      local t = fresh({ max_bytes = 100 })
      local ok, err = t:set("big", string.rep("x", 200))
      T.eq(ok, nil); T.match(err, "^limit: ")
      ok, err = t:add("big", string.rep("x", 200))
      T.eq(ok, nil); T.match(err, "^limit: ")
      T.eq(t:get("big"), nil)
      local large = fresh({ max_bytes = "4M" })
      for i = 1, 100 do large:set(i, string.rep("y", 10000)) end
      T.eq(large:set("most", string.rep("x", 3 * 1024 * 1024)), true)
      T.eq(#large:get("most"), 3 * 1024 * 1024)
      ok, err = large:set("all", string.rep("x", 4 * 1024 * 1024))
      T.eq(ok, nil); T.match(err, "^limit: ")
    end },
    { "past max_bytes the least recently used go first; get counts as a use", function()
      local t = fresh({ max_bytes = 100 })
      local v = string.rep("v", 25)  -- each entry 30 bytes encoded: three fit in 100, four do not
      t:set("a", v); t:set("b", v); t:set("c", v)
      T.eq(t:size(), 3)
      T.eq(t:get("a"), v)  -- now b is the least recently used
      t:set("d", v)
      T.eq(t:get("b"), nil)
      T.eq(t:get("a"), v); T.eq(t:get("c"), v); T.eq(t:get("d"), v)
      t:set("e", v)  -- the order is now a, c, d, e: a goes
      T.eq(t:get("a"), nil)
      T.eq(t:size(), 3)
    end },
    { "8 processes x 20000 incr on one key: none lost", function()
      local name = "test_shared_counter"
      local t = assert(shared.table(name))
      t:flush()
      local procs, n = 8, 20000
      for _ = 1, procs do assert(process.spawn("fixtures.shared_incr", process.pid(), name, n)) end
      for _ = 1, procs do
        local m = assert(process.receive(60))
        T.eq(m.topic, "done")
      end
      T.eq(t:get("hits"), procs * n)
    end },
  }
end }
