// libFuzzer target for the value decoder: any bytes must decode to values
// or to an error, never crash, and whatever decodes must encode again and
// decode to the same values ("the same": equal bytes once encoded, or,
// where a table is a key somewhere, whose place in its table's hash part
// follows its address, equal canonical forms: keys sorted by their own).
//   scripts/dev fuzz [SECONDS]
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <lua.hpp>

#include "bindings/codec.hpp"
#include "bindings/string_cache.hpp"

namespace {
// A value's canonical form (canon(v) in L's globals): tables with their
// entries sorted, so that equal contents give equal strings whatever
// their hash parts' order.
lua_State* new_state() {
  lua_State* L = luaL_newstate();
  luaL_openlibs(L);
  if (luaL_dostring(L, R"lua(
    function canon(v)
      local t = type(v)
      if t == "table" then
        local parts = {}
        for k, x in pairs(v) do parts[#parts + 1] = canon(k) .. "=" .. canon(x) end
        table.sort(parts)
        return "{" .. table.concat(parts, ",") .. "}"
      elseif t == "string" then return string.format("%q", v)
      elseif t == "number" then
        if v ~= v then return "nan" end
        if v == 0 then return 1 / v > 0 and "0" or "-0" end
        return string.format("%.17g", v)
      end
      return tostring(v)
    end
  )lua") != 0)
    __builtin_trap();
  return L;
}

// canon() of the one value bytes encode.
std::string canonical(lua_State* L, const std::string& bytes) {
  const int top = lua_gettop(L);
  std::string err;
  lua_getglobal(L, "canon");
  if (host::lua::decode_values(L, bytes, &err) != 1 || lua_pcall(L, 1, 1, 0) != 0) __builtin_trap();
  std::string out = lua_tostring(L, -1);
  lua_settop(L, top);
  return out;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static lua_State* L = new_state();
  static host::lua::StringCache* kept = new host::lua::StringCache;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  lua_settop(L, 0);
  std::string err;
  int n = host::lua::decode_values(L, bytes, &err, kept);
  if (n < 0) {
    if (err.rfind("invalid: corrupt value", 0) != 0) __builtin_trap();
    if (lua_gettop(L) != 0) __builtin_trap();
  } else {
    // What decodes encodes again, and that decodes to as many values; one
    // value to the same one (equal bytes, or equal canonical forms where
    // its tables order their keys by address: a table as a key).
    std::string again, twice;
    if (!host::lua::encode_values(L, 1, n, again).empty()) __builtin_trap();
    lua_settop(L, 0);
    if (host::lua::decode_values(L, again, &err) != n) __builtin_trap();
    if (!host::lua::encode_values(L, 1, n, twice).empty()) __builtin_trap();
    lua_settop(L, 0);
    if (n == 1 && twice != again && canonical(L, twice) != canonical(L, again)) __builtin_trap();
  }
  lua_settop(L, 0);
  lua_gc(L, LUA_GCSTEP, 0);
  return 0;
}
