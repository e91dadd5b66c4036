// Tests of stack_args (bindings/stack_args.hpp): a C function's arguments
// read straight from LuaJIT's stack give what the C API gives, for every
// type, past the last argument, and after the stack has moved.
#include <doctest/doctest.h>

#include <string>

#include <lua.hpp>

#include "bindings/stack_args.hpp"

namespace sa = host::lua::stack_args;

namespace {

// Compares both readings of every argument (and two slots past the last);
// counts the arguments it compared in the global `compared`. Then grows
// the stack far enough to move it and compares again.
int compare_arguments(lua_State* L) {
  const int n = lua_gettop(L);
  auto compare = [&] {
    for (int i = 1; i <= n + 2; ++i) {
      CHECK(sa::type(L, i) == lua_type(L, i));
      std::size_t raw_len = 12345, api_len = 0;
      const char* raw = sa::string(L, i, &raw_len);
      if (lua_type(L, i) == LUA_TSTRING) {
        const char* api = lua_tolstring(L, i, &api_len);
        CHECK(raw == api);
        CHECK(raw_len == api_len);
      } else {
        CHECK(raw == nullptr);
        CHECK(raw_len == 12345);  // untouched
      }
    }
  };
  compare();
  // Above the arguments: pushed values are not arguments, but read at
  // their index they are what the C API reads there.
  REQUIRE(lua_checkstack(L, 5000));
  for (int i = 0; i < 5000; ++i) lua_pushinteger(L, i);
  for (int i = 1; i <= n; ++i) CHECK(sa::type(L, i) == lua_type(L, i));
  CHECK(sa::type(L, n + 1) == LUA_TNUMBER);
  CHECK(sa::type(L, n + 5001) == LUA_TNONE);
  lua_settop(L, n);
  compare();
  lua_pushinteger(L, n);
  lua_setglobal(L, "compared");
  return 0;
}

}  // namespace

TEST_CASE("this LuaJIT lays out a C function's arguments as stack_args reads them") {
  CHECK(sa::layout_matches());
}

TEST_CASE("arguments read from the stack are what lua_type and lua_tolstring give, for every type") {
  lua_State* L = luaL_newstate();
  luaL_openlibs(L);
  lua_register(L, "compare_arguments", compare_arguments);
  const char* chunk = R"lua(
    compare_arguments(nil, false, true, 0, -0.0, 1.5, 2^53, 0/0, 1/0, "", "inc", "12", "a\0b",
      string.rep("x", 1000), {}, print, coroutine.create(function() end), io.stdout, nil)
    assert(compared == 19, compared)
    compare_arguments()
    assert(compared == 0)
    local t = { "<0.1.2>", "topic" }
    compare_arguments(unpack(t))
    assert(compared == 2)
  )lua";
  const int rc = luaL_dostring(L, chunk);
  const std::string error = rc == 0 ? "" : lua_tostring(L, -1);
  INFO(error);
  CHECK(rc == 0);
  lua_close(L);
}
