// Tests of the value codec (bindings/codec.hpp): round trips, refusals with
// paths, a decoder that survives truncated and corrupted input, and tables
// read straight from LuaJIT's memory giving the C API walk's bytes.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <lua.hpp>

#include "bindings/codec.hpp"
#include "bindings/luajit/seam.hpp"
#include "bindings/string_cache.hpp"

using host::lua::decode_values;
using host::lua::encode_values;

namespace {

struct State {
  lua_State* L = luaL_newstate();
  State() { luaL_openlibs(L); }
  ~State() { lua_close(L); }
  // Runs a chunk that returns the values to encode; returns the encoding.
  std::string encode(const char* chunk, std::string* err = nullptr) {
    lua_settop(L, 0);
    REQUIRE(luaL_dostring(L, chunk) == 0);
    std::string out;
    std::string e = encode_values(L, 1, lua_gettop(L), out);
    if (err) *err = e;
    lua_settop(L, 0);
    return out;
  }
  // Encodes and decodes a chunk that returns a table and 'after' (which
  // checks that the bytes after the table are read right); the decoded
  // values become the globals t and after.
  void round_trip_table(const char* chunk) {
    std::string bytes = encode(chunk);
    REQUIRE(decode_values(L, bytes, nullptr) == 2);
    lua_setglobal(L, "after");
    lua_setglobal(L, "t");
  }
};

}  // namespace

TEST_CASE("values round-trip through the codec exactly") {
  State s;
  std::string bytes = s.encode(
      "local deep = {} local t = deep for i = 1, 200 do t.n = {} t = t.n end "
      "return nil, true, false, 0/0, 1/0, -0.0, 2^53, -2^63, 0.1, 'a\\0b', {1, 2, x = {y = 'z'}}, deep");
  std::string err;
  int n = decode_values(s.L, bytes, &err);
  REQUIRE(n == 12);
  lua_setglobal(s.L, "deep");
  lua_setglobal(s.L, "tbl");
  // Not "v" + ...: g++ 12 warns falsely about it (-Wrestrict).
  for (int i = 10; i >= 1; --i) lua_setglobal(s.L, std::string("v").append(std::to_string(i)).c_str());
  REQUIRE(luaL_dostring(s.L,
                        "assert(v1 == nil and v2 == true and v3 == false) "
                        "assert(v4 ~= v4 and v5 == 1/0 and 1/v6 == -1/0 and v7 == 2^53 and v8 == -2^63 and v9 == 0.1) "
                        "assert(v10 == 'a\\0b' and tbl[2] == 2 and tbl.x.y == 'z') "
                        "local d = 0 local t = deep while t.n do t = t.n d = d + 1 end assert(d == 200)") == 0);
}

TEST_CASE("a table with 128 or more keys besides its array part round-trips") {
  // The hash part's count is written after its entries: past 127 it takes
  // two bytes, in front of entries already written.
  State s;
  for (int keys : {127, 128, 300, 20000}) {
    CAPTURE(keys);
    lua_pushinteger(s.L, keys);
    lua_setglobal(s.L, "KEYS");
    s.round_trip_table("local t = {'a', 'b'} for i = 1, KEYS do t['k' .. i] = i end t[10] = 'ten' return t, 'after'");
    REQUIRE(luaL_dostring(s.L,
                          "assert(after == 'after' and t[1] == 'a' and t[2] == 'b' and t[10] == 'ten') "
                          "local n = 0 for k, v in pairs(t) do n = n + 1 end assert(n == KEYS + 3) "
                          "for i = 1, KEYS do assert(t['k' .. i] == i) end") == 0);
  }
}

TEST_CASE("an array part of 128 or more items, and keys outside it, round-trip") {
  // The array section is the keys 1, 2, ... that lua_next yields first;
  // its count, like the hash part's, is known only after its values: past
  // 127 it takes two bytes or more, in front of the values written.
  State s;
  for (int items : {0, 1, 127, 128, 129, 300, 20000}) {
    CAPTURE(items);
    lua_pushinteger(s.L, items);
    lua_setglobal(s.L, "ITEMS");
    for (const char* extra : {"", "t.x = 'x' t[ITEMS + 2] = 'past a hole'"}) {
      CAPTURE(extra);
      s.round_trip_table(
          (std::string("local t = {} for i = 1, ITEMS do t[i] = i * 2 end ") + extra + " return t, 'after'").c_str());
      REQUIRE(luaL_dostring(s.L,
                            "assert(after == 'after') "
                            "for i = 1, ITEMS do assert(t[i] == i * 2, i) end "
                            "assert(t[ITEMS + 1] == nil) "
                            "local n = 0 for _ in pairs(t) do n = n + 1 end "
                            "if t.x then assert(t.x == 'x' and t[ITEMS + 2] == 'past a hole' and n == ITEMS + 2) "
                            "else assert(n == ITEMS and #t == ITEMS) end") == 0);
    }
  }
  // Keys the array section cannot hold, in any order: zero, negatives,
  // fractions, holes, integer keys put in after the table was built.
  s.round_trip_table(
      "local t = {[0] = 'zero', 'a', 'b', nil, 'd', [-1] = 'neg', [1.5] = 'half', [1e300] = 'big'} "
      "t[7] = 'seven' t.k = 'key' return t, 'after'");
  REQUIRE(luaL_dostring(s.L,
                        "assert(after == 'after') "
                        "local want = {[0] = 'zero', [1] = 'a', [2] = 'b', [4] = 'd', [-1] = 'neg', [1.5] = 'half', "
                        "[1e300] = 'big', [7] = 'seven', k = 'key'} "
                        "for k, v in pairs(want) do assert(t[k] == v, tostring(k)) end "
                        "for k, v in pairs(t) do assert(want[k] == v, tostring(k)) end") == 0);
}

TEST_CASE("array items of every kind round-trip, written straight into the new table while the collector runs") {
  // Numbers and booleans go into the decoded table's array part directly,
  // strings and tables through the stack (stack_args::pop_into_array, or
  // lua_rawseti once the collector has traversed the table). A collector
  // made eager, and 20000 items with new strings among them, run it
  // through every phase during the decode; each item must come back.
  State s;
  REQUIRE(luaL_dostring(s.L, "collectgarbage('setpause', 100) collectgarbage('setstepmul', 400)") == 0);
  s.round_trip_table(
      "local t = {} "
      "for i = 1, 20000 do "
      "  local k = i % 9 "
      "  if k == 0 then t[i] = i elseif k == 1 then t[i] = -i * 1e10 elseif k == 2 then t[i] = i + 0.25 "
      "  elseif k == 3 then t[i] = (i % 2 == 0) elseif k == 4 then t[i] = 'item ' .. i "
      "  elseif k == 5 then t[i] = { i, tostring(i) } elseif k == 6 then t[i] = 0/0 "
      "  elseif k == 7 then t[i] = -0.0 else t[i] = 2^63 end "
      "end "
      "t[20001] = 'last' "
      "return t, 'after'");
  REQUIRE(luaL_dostring(s.L,
                        "assert(after == 'after') "
                        "collectgarbage() "
                        "for i = 1, 20000 do "
                        "  local k, v = i % 9, t[i] "
                        "  if k == 0 then assert(v == i, i) elseif k == 1 then assert(v == -i * 1e10, i) "
                        "  elseif k == 2 then assert(v == i + 0.25, i) elseif k == 3 then assert(v == (i % 2 == 0), i) "
                        "  elseif k == 4 then assert(v == 'item ' .. i, i) "
                        "  elseif k == 5 then assert(v[1] == i and v[2] == tostring(i) and #v == 2, i) "
                        "  elseif k == 6 then assert(v ~= v, i) elseif k == 7 then assert(v == 0 and 1/v < 0, i) "
                        "  else assert(v == 2^63, i) end "
                        "end "
                        "assert(t[20001] == 'last' and #t == 20001)") == 0);
  // Holes: nil items stay nil, and what follows them is in place.
  s.round_trip_table("return { 1, nil, true, nil, nil, 'x', false }, 'after'");
  REQUIRE(luaL_dostring(s.L,
                        "assert(t[1] == 1 and t[2] == nil and t[3] == true and t[4] == nil and t[5] == nil "
                        "and t[6] == 'x' and t[7] == false)") == 0);
}

TEST_CASE("a table's bytes: its array items, then its other keys") {
  State s;
  using host::kInt;
  using host::kString;
  using host::kTable;
  using host::kTrue;
  // One value; a table of 2 array items (10 and 20 as zigzag varints) and
  // 1 other key.
  const std::string want{1, host::kTable, 2, 1, host::kInt, 20, host::kInt, 40, host::kString, 1, 'k', host::kTrue};
  CHECK(s.encode("return {10, 20, k = true}") == want);
  std::string err;
  s.encode("return {1, 2, print}", &err);
  CHECK(err == "invalid: cannot send function at value[3]");
}

TEST_CASE("decoding through a string cache gives the same strings, past its slots and length") {
  State s;
  host::lua::StringCache cache;
  // More distinct strings than slots, the empty string, the longest cached
  // length and one more, a NUL inside, as values and as keys.
  std::string bytes = s.encode(
      "local w = {'', 'a', 'a\\0b', 'ping', 'pong', 'n', string.rep('x', 15), string.rep('x', 16)} "
      "for i = 1, 20 do w[#w + 1] = 'w' .. i end "
      "local keyed = {} for i, v in ipairs(w) do keyed[v] = i end "
      "return w, keyed");
  for (int round = 0; round < 3; ++round) {
    CAPTURE(round);
    REQUIRE(decode_values(s.L, bytes, nullptr, &cache) == 2);
    lua_setglobal(s.L, "keyed");
    lua_setglobal(s.L, "w");
    REQUIRE(luaL_dostring(s.L,
                          "local want = {'', 'a', 'a\\0b', 'ping', 'pong', 'n', string.rep('x', 15), string.rep('x', 16)} "
                          "for i = 1, 20 do want[#want + 1] = 'w' .. i end "
                          "assert(#w == #want) "
                          "for i, v in ipairs(want) do assert(w[i] == v, i) assert(keyed[v] == i, v) end") == 0);
  }
}

TEST_CASE("a string cache tells apart cached strings that differ in any one byte") {
  // The cache matches a string by words loaded from its start and its end:
  // every length it keeps, with one byte changed at each position in turn,
  // must come back as itself, through more strings than it has slots.
  State s;
  host::lua::StringCache cache;
  const char* make =
      "local w = {} "
      "for n = 0, 16 do "
      "  w[#w + 1] = string.rep('x', n) "
      "  for i = 1, n do w[#w + 1] = string.rep('x', i - 1) .. 'y' .. string.rep('x', n - i) end "
      "end "
      "return w";
  const std::string bytes = s.encode(make);
  for (int round = 0; round < 2; ++round) {
    CAPTURE(round);
    REQUIRE(decode_values(s.L, bytes, nullptr, &cache) == 1);
    lua_setglobal(s.L, "got");
    REQUIRE(luaL_loadstring(s.L, make) == 0);
    lua_call(s.L, 0, 1);
    lua_setglobal(s.L, "want");
    REQUIRE(luaL_dostring(s.L, "assert(#got == #want) for i, v in ipairs(want) do assert(got[i] == v, i) end") == 0);
  }
}

TEST_CASE("StringCache::same tells equal bytes from strings that differ in any one byte, at every length") {
  for (std::size_t n = 0; n <= 20; ++n) {
    const std::string base(n, 'x');
    CHECK(host::lua::StringCache::same(base, std::string(n, 'x')));
    CHECK_FALSE(host::lua::StringCache::same(base, std::string(n + 1, 'x')));
    for (std::size_t i = 0; i < n; ++i) {
      std::string other = base;
      other[i] = 'y';
      CAPTURE(n);
      CAPTURE(i);
      CHECK_FALSE(host::lua::StringCache::same(base, other));
      CHECK_FALSE(host::lua::StringCache::same(other, base));
    }
  }
}

TEST_CASE("one simple value takes the short paths, with the full encoder's bytes and the decoder's value") {
  State s;
  host::lua::StringCache cache;
  const struct {
    const char* chunk;
    bool simple;
  } cases[] = {
      {"return nil", true},       {"return true", true},     {"return false", true},
      {"return 0", true},         {"return 63", true},       {"return -64", true},
      {"return 64", true},        {"return -65", true},      {"return 200000", true},
      {"return -2^63", true},     {"return 1.5", true},      {"return -0.0", true},
      {"return 0/0", true},       {"return 2^53", true},     {"return ''", true},
      {"return 'ping'", true},    {"return string.rep('x', 15)", true},  // the longest of the short-string path
      {"return string.rep('y', 16)", true},                 {"return '\\0\\255\\n'", true},
      {"return string.rep('x', 127)", true},
      {"return string.rep('x', 128)", false},               {"return {}", false},
      {"return 1, 2", false},     {"return", false},
  };
  for (const auto& c : cases) {
    CAPTURE(c.chunk);
    const std::string bytes = s.encode(c.chunk);
    if (c.simple) {
      // One value takes the encoder's short path; with a second, the full
      // encoder writes it: the same bytes.
      const std::string pair = s.encode((std::string(c.chunk) + ", nil").c_str());
      std::string want = "\x01";  // appended, not +: g++ 12 warns falsely (-Wrestrict) on that
      want.append(pair, 1, pair.size() - 2);
      CHECK(bytes == want);
    }
    for (host::lua::StringCache* strings : {static_cast<host::lua::StringCache*>(nullptr), &cache}) {
      lua_settop(s.L, 0);
      REQUIRE(host::lua::push_simple_value(s.L, bytes, strings) == c.simple);
      REQUIRE(lua_gettop(s.L) == (c.simple ? 1 : 0));
      if (!c.simple) continue;
      REQUIRE(decode_values(s.L, bytes, nullptr, strings) == 1);
      CHECK(lua_type(s.L, 1) == lua_type(s.L, 2));
      // NaN equals nothing, -0.0 equals 0.0: numbers compare by their bits.
      if (lua_type(s.L, 1) == LUA_TNUMBER) {
        const double a = lua_tonumber(s.L, 1), b = lua_tonumber(s.L, 2);
        CHECK(std::memcmp(&a, &b, sizeof a) == 0);
      } else {
        CHECK(lua_rawequal(s.L, 1, 2));
      }
    }
  }
  // Bytes that only look simple go to the decoder, which names the fault.
  for (std::string bad : {std::string("\x01\x03", 2), std::string("\x01\x05\x05" "ab", 5), std::string("\x01\x05\x02" "abX", 6),
                          std::string("\x01\x00\x00", 3),
                          std::string("\x01\x03\x80", 3), std::string("\x01\x03\x02\x00", 4),
                          std::string("\x01\x04\x00\x00", 4), std::string(12, '\x80').replace(0, 2, "\x01\x03"),
                          std::string("\x01", 1), std::string("\x02\x00", 2), std::string("\x01\x05", 2)}) {
    CAPTURE(bad.size());
    lua_settop(s.L, 0);
    CHECK_FALSE(host::lua::push_simple_value(s.L, bad, &cache));
    CHECK(lua_gettop(s.L) == 0);
    std::string err;
    CHECK(decode_values(s.L, bad, &err) < 0);
    CHECK(err.rfind("invalid: corrupt value", 0) == 0);
  }
}

TEST_CASE("unsendable values are refused with the path of the offending value") {
  State s;
  std::string err;
  CHECK(s.encode("return {handler = function() end}", &err).empty());
  CHECK(err == "invalid: cannot send function at value.handler");
  s.encode("local t = {} t.a = {b = {t}} return t", &err);
  CHECK(err == "invalid: cannot send a table with a cycle at value.a.b[1]");
  s.encode("return 1, coroutine.create(print)", &err);
  CHECK(err == "invalid: cannot send coroutine at value2");
  s.encode("return {['a key'] = io.stdout}", &err);
  CHECK(err == "invalid: cannot send userdata at value[\"a key\"]");
  s.encode("local t = {} local c = t for i = 1, 300 do c.n = {} c = c.n end return t", &err);
  CHECK(err.rfind("invalid: cannot send a table nested deeper than", 0) == 0);
}

TEST_CASE("a cycle is found through any ancestor; a table met again outside its own subtree is not one") {
  // The encoder takes its ancestors' addresses only when a nested table
  // asks: the root's, a middle one's, a sibling's slot reused.
  State s;
  std::string err;
  s.encode("local t = {} t.self = t return t", &err);
  CHECK(err == "invalid: cannot send a table with a cycle at value.self");
  s.encode("local t = {x = {}} t.x.y = {z = t.x} return t", &err);
  CHECK(err == "invalid: cannot send a table with a cycle at value.x.y.z");
  s.encode("local t = {{}, {}} t[2][1] = {t[2]} return t", &err);
  CHECK(err == "invalid: cannot send a table with a cycle at value[2][1][1]");
  s.round_trip_table("local t = {a = {}} t.b = {c = t.a, d = {e = t.a}} t.a.f = 1 return t, 'end'");
  REQUIRE(luaL_dostring(s.L,
                        "assert(after == 'end') assert(t.a.f == 1 and t.b.c.f == 1 and t.b.d.e.f == 1) "
                        "assert(t.a ~= t.b.c and t.b.c ~= t.b.d.e)") == 0);
  s.round_trip_table("local s = {1} return {s, {s, {s}}, s}, 'end'");
  REQUIRE(luaL_dostring(s.L, "assert(after == 'end') assert(t[1][1] == 1 and t[2][1][1] == 1 and t[2][2][1][1] == 1 "
                             "and t[3][1] == 1)") == 0);
  // x, whose address its nested table asked for, then inside its sibling.
  s.round_trip_table("local x = {{7}} return {x, {x}}, 'end'");
  REQUIRE(luaL_dostring(s.L, "assert(after == 'end') assert(t[1][1][1] == 7 and t[2][1][1][1] == 7)") == 0);
}

TEST_CASE("encode_value encodes a missing argument as nil and names a refused value as value") {
  // process.send's path: its payload argument may be left out.
  State s;
  lua_settop(s.L, 0);
  lua_pushstring(s.L, "topic");
  std::string out = "x";
  REQUIRE(host::lua::encode_value(s.L, 2, out).empty());
  CHECK(out == std::string("x\x01\x00", 3));  // appended: one value, nil
  lua_pushnumber(s.L, 7);
  std::string seven;
  REQUIRE(host::lua::encode_value(s.L, 2, seven).empty());
  REQUIRE(luaL_dostring(s.L, "return 7") == 0);
  CHECK(seven == s.encode("return 7"));
  lua_settop(s.L, 0);
  REQUIRE(luaL_dostring(s.L, "return {f = print}") == 0);
  std::string bad = "kept";
  CHECK(host::lua::encode_value(s.L, 1, bad) == "invalid: cannot send function at value.f");
  CHECK(bad == "kept");
}

TEST_CASE("a decoded table key that is nil or NaN is refused; a table key holding nil is not") {
  State s;
  // One value, a table: no array part, one entry whose key is the first
  // value after the counts. Tags: 0 nil, 4 double, 5 string, 6 table.
  const std::string nan_bits("\x00\x00\x00\x00\x00\x00\xf8\x7f", 8);
  const std::string one = std::string("\x01\x06\x00\x01", 4);
  for (const std::string& key : {std::string(1, '\x00'), "\x04" + nan_bits}) {
    std::string err;
    const int top = lua_gettop(s.L);
    CHECK(decode_values(s.L, one + key + "\x05\x01v", &err) == -1);
    CHECK(err == "invalid: corrupt value: table key is nil or NaN");
    CHECK(lua_gettop(s.L) == top);
  }
  // A table key whose array part ends in a nil ({1, nil} as a key; 1
  // zigzags to 2).
  std::string err;
  std::string key_table = std::string("\x06\x02\x00\x03\x02\x00", 6);
  REQUIRE(decode_values(s.L, one + key_table + "\x05\x01v", &err) == 1);
  CHECK(err.empty());
  lua_pushnil(s.L);
  REQUIRE(lua_next(s.L, -2));
  CHECK(lua_istable(s.L, -2));
  lua_settop(s.L, 0);
  // A NaN value (not a key) is a value like any other.
  CHECK(decode_values(s.L, std::string("\x01\x04", 2) + nan_bits, &err) == 1);
  lua_settop(s.L, 0);
}

TEST_CASE("every truncation of a valid encoding is an error, never a crash") {
  State s;
  std::string bytes = s.encode("return {1, 'two', {three = 3.5, [4] = {true, false}}, 'x'}, 2^40, 'tail'");
  for (std::size_t cut = 0; cut < bytes.size(); ++cut) {
    std::string err;
    int top = lua_gettop(s.L);
    CHECK(decode_values(s.L, std::string_view(bytes).substr(0, cut), &err) == -1);
    CHECK(err.rfind("invalid: corrupt value", 0) == 0);
    CHECK(lua_gettop(s.L) == top);
  }
  std::string err;
  CHECK(decode_values(s.L, bytes + "x", &err) == -1);  // trailing bytes
}

TEST_CASE("random and corrupted bytes never crash the decoder") {
  State s;
  std::mt19937 rng(12345);
  std::string valid = s.encode("return {1, 'two', {three = 3.5, [4] = {true, false}}, 'x'}, 2^40, 'tail'");
  int decoded = 0;
  for (int i = 0; i < 200000; ++i) {
    std::string bytes;
    if (i % 2 == 0) {
      bytes.resize(rng() % 64);
      for (auto& c : bytes) c = static_cast<char>(rng());
    } else {
      bytes = valid;
      for (int k = 0, flips = 1 + static_cast<int>(rng() % 4); k < flips; ++k)
        bytes[rng() % bytes.size()] = static_cast<char>(rng());
    }
    std::string err;
    int n = decode_values(s.L, bytes, &err);
    if (n >= 0) {
      ++decoded;
      lua_pop(s.L, n);
    } else {
      CHECK(!err.empty());
    }
    REQUIRE(lua_gettop(s.L) == 0);
  }
  CHECK(decoded > 0);  // some corruptions are still valid values
}

TEST_CASE("tables read straight from LuaJIT's memory give the C API walk's bytes, for tables of every shape") {
  // On this LuaJIT the layout check passes: were it to fail silently, every
  // table would take the slower walk and this would say so. (Built without
  // the seam, every table takes it, and the comparison below is of the C
  // API's walk with itself.)
  CHECK(host::lua::reads_tables_raw() == host::lua::seam::kBuilt);
  State s;
  // Random tables: arrays with holes and a key 0, keys of every sendable
  // type, strings from empty to past 256 bytes (with NUL bytes), numbers of
  // every kind, tables shared and nested, counts past 127, tables grown and
  // shrunk by assignment (their parts resized), chains nested to 250.
  REQUIRE(luaL_dostring(s.L, R"lua(
    local random = math.random
    math.randomseed(7)
    local strings = { "", "n", "\0x\0", "hello", string.rep("ab", 40), string.rep("z", 300) }
    local numbers = { 0, -0.0, 1, -1, 127, 128, -129, 2^31, 2^53, 2^63, -2^63, 2^70, 0.5, -1e-300, 1/0, -1/0, 0/0 }
    local function scalar()
      local r = random(4)
      if r == 1 then return strings[random(#strings)] .. (random(2) == 1 and tostring(random(100)) or "") end
      if r == 2 then return numbers[random(#numbers)] end
      if r == 3 then return random(2) == 1 end
      return random(-1000, 1000)
    end
    local function key()
      local r = random(5)
      if r == 1 then return random(0, 40) end
      if r == 2 then return random(-5, 5) + 0.25 end
      if r == 3 then return random(2) == 1 end
      return scalar() == scalar() and "k" or "k" .. random(300)
    end
    local shared = { 1, x = "shared" }
    function make(depth)
      local t = {}
      local shape = random(6)
      if shape == 1 then for i = 1, random(0, 200) do t[i] = scalar() end
      elseif shape == 2 then for i = 1, random(0, 40) do t[i] = scalar() end for i = 1, 40, random(2, 5) do t[i] = nil end
      elseif shape == 3 then for _ = 1, random(0, 160) do local k = key() if k == k then t[k] = scalar() end end
      elseif shape == 4 then t[0] = scalar() for i = 1, random(0, 10) do t[i] = scalar() end t.x = scalar()
      elseif shape == 5 then for i = 1, random(0, 30) do t[i] = scalar() end for i = random(0, 30), 1, -1 do t[i] = nil end t.after = true
      else t = { scalar(), scalar(), name = scalar(), [scalar() == 1 and 1.5 or 2.5] = scalar() } end
      if depth < 4 then
        for _ = 1, random(0, 3) do t[key()] = make(depth + 1) end
        if random(3) == 1 then t.shared, t[#t + 1] = shared, shared end
      end
      return t
    end
    function chain(n) local t = {} local c = t for i = 1, n do c.next = { i } c = c.next end return t end
    -- Small flat tables, the short path's (put_small_table): up to 9
    -- string keys of 0 to 17 bytes, values of every scalar kind with
    -- strings of 0 to 17 bytes; some with an array item, some made with an
    -- array part then emptied, some holding a nested table.
    function flat()
      local t = random(4) == 1 and { 1, 2 } or {}
      if t[1] and random(2) == 1 then t[1], t[2] = nil, nil end
      for _ = 1, random(0, 9) do
        local k = string.rep(string.char(random(0, 255)), random(0, 17))
        local r = random(5)
        if r == 1 then t[k] = string.rep("v", random(0, 17))
        elseif r == 2 then t[k] = numbers[random(#numbers)]
        elseif r == 3 then t[k] = random(2) == 1
        elseif r == 4 then t[k] = random(-2^40, 2^40)
        else t[k] = random(20) == 1 and {} or random(-1000, 1000) end
      end
      return t
    end
  )lua") == 0);
  const auto same = [&](const char* what) {
    const int top = lua_gettop(s.L);
    std::string raw, api;
    REQUIRE(encode_values(s.L, 1, top, raw).empty());
    REQUIRE(host::lua::encode_values_through_api(s.L, 1, top, api).empty());
    INFO(what);
    CHECK(raw == api);
    lua_settop(s.L, 0);
    return raw == api;
  };
  for (int i = 0; i < 400; ++i) {
    lua_settop(s.L, 0);
    REQUIRE(luaL_dostring(s.L, "return make(0)") == 0);
    if (!same("random table")) break;
  }
  for (int i = 0; i < 2000; ++i) {
    lua_settop(s.L, 0);
    REQUIRE(luaL_dostring(s.L, "return flat()") == 0);
    if (!same("small flat table")) break;
  }
  REQUIRE(luaL_dostring(s.L, "return make(0), 'two', make(1)") == 0);
  same("several values");
  REQUIRE(luaL_dostring(s.L, "return chain(250)") == 0);
  same("a chain 250 deep");
  // Each encodes as the walk found it, and decodes back to equal tables.
  REQUIRE(luaL_dostring(s.L, "return { 1, nil, 3, [0] = 0, [-1] = -1, x = { y = { 'z' } }, [true] = false }") == 0);
  std::string bytes;
  REQUIRE(encode_values(s.L, 1, 1, bytes).empty());
  lua_settop(s.L, 0);
  REQUIRE(decode_values(s.L, bytes, nullptr) == 1);
  lua_setglobal(s.L, "t");
  CHECK(luaL_dostring(s.L, "assert(t[1] == 1 and t[2] == nil and t[3] == 3 and t[0] == 0 and t[-1] == -1 "
                           "and t.x.y[1] == 'z' and t[true] == false)") == 0);
}

TEST_CASE("a refusal found by the raw walk is named by the C API walk, as before") {
  // The raw walk gives up at a function, a cycle or nesting too deep, deep
  // inside a table whose other parts it already wrote: the result is the
  // C API walk's error, and nothing is left in the output.
  State s;
  std::string out = "prefix";
  REQUIRE(luaL_dostring(s.L, "return { 1, 2, { a = 'x', b = { 'y', f = print } } }") == 0);
  CHECK(encode_values(s.L, 1, 1, out) == "invalid: cannot send function at value[3].b.f");
  CHECK(out == "prefix");
  lua_settop(s.L, 0);
  REQUIRE(luaL_dostring(s.L, "local t = { n = 1 } t.inner = { list = { 1, 2, t } } return t") == 0);
  CHECK(encode_values(s.L, 1, 1, out) == "invalid: cannot send a table with a cycle at value.inner.list[3]");
  CHECK(out == "prefix");
}

namespace {

// Sets the globals `null` (the NULL light userdata, JSON's null as
// lua-cjson makes it) and `other` (a light userdata of another pointer),
// `other` first: each state interns a light userdata's pointer in a map of
// its own, so NULL's TValue differs from one state to another.
int other_pointer;
void set_light_userdata_globals(lua_State* L) {
  lua_pushlightuserdata(L, &other_pointer);
  lua_setglobal(L, "other");
  lua_pushlightuserdata(L, nullptr);
  lua_setglobal(L, "null");
}

}  // namespace

TEST_CASE("the NULL light userdata (JSON's null) crosses as itself, alone, in arrays, in hash parts and as a key") {
  State from, to;
  set_light_userdata_globals(from.L);
  lua_pushlightuserdata(to.L, &other_pointer);  // `to` interns another pointer first, and no NULL yet
  lua_setglobal(to.L, "other");
  const std::string alone = from.encode("return null");
  CHECK(alone == std::string{1, static_cast<char>(host::kNullPointer)});
  const std::string bytes = from.encode(
      "return null, { 1, null, 3, null }, { a = null, [null] = 'key', n = { null, { deep = null } } }, null");
  std::string err;
  REQUIRE(decode_values(to.L, bytes, &err) == 4);
  CHECK(err.empty());
  lua_setglobal(to.L, "d");
  lua_setglobal(to.L, "c");
  lua_setglobal(to.L, "b");
  lua_setglobal(to.L, "a");
  lua_pushlightuserdata(to.L, nullptr);
  lua_setglobal(to.L, "null");
  CHECK(luaL_dostring(to.L, R"lua(
    assert(type(null) == "userdata" and a == null and d == null and a ~= other)
    assert(#b == 4 and b[1] == 1 and b[2] == null and b[3] == 3 and b[4] == null)
    assert(c.a == null and c[null] == "key" and c.n[1] == null and c.n[2].deep == null)
  )lua") == 0);
  // Through the short path's decline to the decoder.
  lua_settop(to.L, 0);
  host::lua::StringCache cache;
  CHECK_FALSE(host::lua::push_simple_value(to.L, alone, &cache));
  CHECK(lua_gettop(to.L) == 0);
}

TEST_CASE("tables holding the NULL light userdata give the same bytes through the raw walk and the C API walk") {
  State s;
  set_light_userdata_globals(s.L);
  for (const char* chunk : {"return { null }", "return { a = null }", "return { 1, 2, { x = { null, 'y' } }, n = 'n' }",
                            "return { [null] = 1, [2] = null }", "return { null, nil, null, [10] = null }"}) {
    CAPTURE(chunk);
    lua_settop(s.L, 0);
    REQUIRE(luaL_dostring(s.L, chunk) == 0);
    std::string raw, api;
    REQUIRE(encode_values(s.L, 1, 1, raw).empty());
    REQUIRE(host::lua::encode_values_through_api(s.L, 1, 1, api).empty());
    CHECK(raw == api);
    CHECK(raw.find(static_cast<char>(host::kNullPointer)) != std::string::npos);
  }
}

TEST_CASE("a light userdata other than NULL is still refused with its path, by both walks") {
  State s;
  set_light_userdata_globals(s.L);
  std::string err;
  CHECK(s.encode("return other", &err).empty());
  CHECK(err == "invalid: cannot send userdata at value");
  s.encode("return { null, { a = other } }", &err);
  CHECK(err == "invalid: cannot send userdata at value[2].a");
  lua_settop(s.L, 0);
  REQUIRE(luaL_dostring(s.L, "return { null, { [other] = 1 } }") == 0);
  std::string out;
  CHECK(host::lua::encode_values_through_api(s.L, 1, 1, out) == "invalid: cannot send userdata at value1[2][<userdata key>]");
  CHECK(out.empty());
}

TEST_CASE("corrupt bytes around the NULL light userdata are errors, never a crash") {
  State s;
  set_light_userdata_globals(s.L);
  const std::string bytes = s.encode("return { null, a = { null } }, null");
  for (std::size_t cut = 0; cut < bytes.size(); ++cut) {
    std::string err;
    CHECK(decode_values(s.L, std::string_view(bytes).substr(0, cut), &err) == -1);
    CHECK(err.rfind("invalid: corrupt value", 0) == 0);
    CHECK(lua_gettop(s.L) == 0);
  }
  std::string err;
  // A null with bytes after it where it should end the payload.
  const std::string tail{1, static_cast<char>(host::kNullPointer), 0};
  CHECK(decode_values(s.L, tail, &err) == -1);
  CHECK(err == "invalid: corrupt value: trailing bytes");
  // A null as a table key is a valid key (unlike nil and NaN).
  const std::string keyed = s.encode("return { [null] = true }");
  CHECK(decode_values(s.L, keyed, &err) == 1);
  lua_settop(s.L, 0);
  // The tag past the last one is still unknown.
  const std::string unknown{1, static_cast<char>(host::kNullPointer + 1)};
  CHECK(decode_values(s.L, unknown, &err) == -1);
  CHECK(err == "invalid: corrupt value: unknown tag");
}
