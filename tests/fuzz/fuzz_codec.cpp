// libFuzzer target for the value decoder: any bytes must decode to values
// or to an error, never crash, and whatever decodes must encode again and
// decode to the same number of values.
//   scripts/dev fuzz [SECONDS]
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <lua.hpp>

#include "bindings/codec.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static lua_State* L = luaL_newstate();
  lua_settop(L, 0);
  std::string err;
  int n = host::lua::decode_values(L, std::string_view(reinterpret_cast<const char*>(data), size), &err);
  if (n < 0) {
    if (err.rfind("invalid: corrupt value", 0) != 0) __builtin_trap();
    if (lua_gettop(L) != 0) __builtin_trap();
    return 0;
  }
  std::string again;
  if (!host::lua::encode_values(L, 1, n, again).empty()) __builtin_trap();
  lua_settop(L, 0);
  if (host::lua::decode_values(L, again, &err) != n) __builtin_trap();
  lua_settop(L, 0);
  lua_gc(L, LUA_GCSTEP, 0);
  return 0;
}
