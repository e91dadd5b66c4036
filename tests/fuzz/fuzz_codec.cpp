// libFuzzer target for the value decoder: any bytes must decode to values
// or to an error, never crash, and whatever decodes must encode again and
// decode to the same number of values. The hand-over's decoder
// (push_value_of_kept_strings, strings only from a cache) must, on the
// same bytes, either decline with the stack as it was or make the value
// the full decoder made.
//   scripts/dev fuzz [SECONDS]
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <lua.hpp>

#include "bindings/codec.hpp"
#include "bindings/string_cache.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static lua_State* L = luaL_newstate();
  static host::lua::StringCache* kept = new host::lua::StringCache;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  lua_settop(L, 0);
  std::string err;
  int n = host::lua::decode_values(L, bytes, &err, kept);
  if (n < 0) {
    if (err.rfind("invalid: corrupt value", 0) != 0) __builtin_trap();
    if (lua_gettop(L) != 0) __builtin_trap();
  } else {
    std::string again;
    if (!host::lua::encode_values(L, 1, n, again).empty()) __builtin_trap();
    lua_settop(L, 0);
    if (host::lua::decode_values(L, again, &err) != n) __builtin_trap();
  }
  lua_settop(L, 0);
  lua_pushinteger(L, 7);
  if (host::lua::push_value_of_kept_strings(L, bytes, *kept)) {
    // One value, which the full decoder makes the same.
    if (n != 1 || lua_gettop(L) != 2) __builtin_trap();
    std::string made, full;
    if (!host::lua::encode_values(L, 2, 1, made).empty()) __builtin_trap();
    lua_settop(L, 1);
    if (host::lua::decode_values(L, bytes, &err) != 1) __builtin_trap();
    if (!host::lua::encode_values(L, 2, 1, full).empty() || made != full) __builtin_trap();
  } else if (lua_gettop(L) != 1) {
    __builtin_trap();
  }
  lua_settop(L, 0);
  lua_gc(L, LUA_GCSTEP, 0);
  return 0;
}
