// Tests of stack_args (bindings/luajit/stack_args.hpp): a C function's arguments
// read straight from LuaJIT's stack give what the C API gives, for every
// type, past the last argument, and after the stack has moved.
#include <doctest/doctest.h>

#include <string>

#include <lua.hpp>

#include "bindings/luajit/stack_args.hpp"

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

TEST_CASE("this LuaJIT lays out a C function's arguments as stack_args reads them (in a build with the seam)") {
  CHECK(sa::layout_matches() == host::lua::seam::kBuilt);
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

TEST_CASE("push_object pushes what a registry read of the same object pushes, and the stack grows around it") {
  lua_State* L = luaL_newstate();
  luaL_openlibs(L);
  // A string, a table and a function, each kept alive by a registry slot,
  // as the process's caches keep theirs.
  lua_pushliteral(L, "ping");
  const char* text = lua_tostring(L, -1);
  const int str_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  lua_createtable(L, 0, 0);
  const void* table = lua_topointer(L, -1);
  const int tab_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  lua_pushcfunction(L, compare_arguments);
  const void* fn = lua_topointer(L, -1);
  const int fn_ref = luaL_ref(L, LUA_REGISTRYINDEX);

  // Far more pushes than the stack first has room for: where it has none,
  // push_object declines (pushing nothing), and the caller's fallback, the
  // registry read, grows it.
  int declined = 0;
  for (int i = 0; i < 3000; ++i) {
    const int before = lua_gettop(L);
    const int kind = i % 3;
    const bool pushed = kind == 0   ? sa::push_string_object(L, text)
                        : kind == 1 ? sa::push_object(L, table, sa::Object::kTable)
                                    : sa::push_object(L, fn, sa::Object::kFunction);
    if (!pushed) {
      ++declined;
      REQUIRE(lua_gettop(L) == before);
      lua_rawgeti(L, LUA_REGISTRYINDEX, kind == 0 ? str_ref : kind == 1 ? tab_ref : fn_ref);
    }
    REQUIRE(lua_gettop(L) == before + 1);
    // Compared without pushing anything, so that only the fallback grows
    // the stack.
    CHECK(lua_type(L, -1) == (kind == 0 ? LUA_TSTRING : kind == 1 ? LUA_TTABLE : LUA_TFUNCTION));
    if (kind == 0) CHECK(lua_tostring(L, -1) == text);
    else CHECK(lua_topointer(L, -1) == (kind == 1 ? table : fn));
  }
  // The same values as the registry reads give.
  for (int i = 1; i <= 3; ++i) {
    lua_rawgeti(L, LUA_REGISTRYINDEX, i == 1 ? str_ref : i == 2 ? tab_ref : fn_ref);
    CHECK(lua_rawequal(L, -1, i));
    lua_pop(L, 1);
  }
  CHECK(declined > 0);  // the stack ran out at least once
  if (!sa::layout_matches()) {
    CHECK(declined == 3000);  // without the seam, every push is the registry read
    lua_close(L);
    return;
  }
  CHECK(declined < 100);
  // What was pushed survives a full collection, and is usable from Lua.
  lua_gc(L, LUA_GCCOLLECT, 0);
  CHECK(std::string(lua_tostring(L, 1)) == "ping");
  CHECK(lua_topointer(L, 2) == table);
  lua_settop(L, 0);
  REQUIRE(sa::push_string_object(L, text));
  lua_setglobal(L, "pushed");
  CHECK(luaL_dostring(L, "assert(pushed .. '!' == 'ping!')") == 0);
  lua_close(L);
}

TEST_CASE("move hands values to a coroutine as lua_xmove does, and the coroutine's stack grows around it") {
  lua_State* L = luaL_newstate();
  luaL_openlibs(L);
  lua_State* co = lua_newthread(L);
  const int co_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  int declined = 0;
  for (int i = 0; i < 2000; ++i) {
    // A from, a topic and a value, as a message's three.
    lua_pushfstring(L, "<0.%d.1>", i % 7);
    lua_pushliteral(L, "ping");
    lua_pushinteger(L, i);
    const int l_top = lua_gettop(L);
    const int co_top = lua_gettop(co);
    if (!sa::move(L, co, 3)) {
      ++declined;
      REQUIRE(lua_gettop(L) == l_top);  // nothing moved
      REQUIRE(lua_gettop(co) == co_top);
      REQUIRE(lua_checkstack(co, 3));
      lua_xmove(L, co, 3);
    }
    REQUIRE(lua_gettop(L) == l_top - 3);
    REQUIRE(lua_gettop(co) == co_top + 3);
    CHECK(lua_tointeger(co, -1) == i);
    CHECK(std::string(lua_tostring(co, -2)) == "ping");
  }
  CHECK(declined > 0);  // the coroutine's stack ran out at least once
  if (!sa::layout_matches()) {
    CHECK(declined == 2000);  // without the seam, every move is lua_xmove
    lua_close(L);
    return;
  }
  // A state and itself: nothing moves.
  lua_pushinteger(L, 42);
  const int top = lua_gettop(L);
  CHECK(sa::move(L, L, 1));
  CHECK(lua_gettop(L) == top);
  CHECK(lua_tointeger(L, -1) == 42);
  // What was moved survives a full collection.
  lua_gc(L, LUA_GCCOLLECT, 0);
  CHECK(std::string(lua_tostring(co, 3 * 1999 + 1)) == "<0.4.1>");
  CHECK(lua_tointeger(co, 3) == 0);
  luaL_unref(L, LUA_REGISTRYINDEX, co_ref);
  lua_close(L);
}

namespace {
// Pushes 6 values above its 3 arguments, drops to 2 and then to 0, and
// pushes again: each step's stack as lua_settop would leave it.
int drop_in_frame(lua_State* L) {
  REQUIRE(lua_gettop(L) == 3);
  for (int i = 0; i < 6; ++i) lua_pushinteger(L, 100 + i);
  sa::drop_to(L, 2);
  REQUIRE(lua_gettop(L) == 2);
  CHECK(std::string(lua_tostring(L, 1)) == "a");
  CHECK(lua_tointeger(L, 2) == 2);
  CHECK(lua_isnone(L, 3));
  sa::drop_to(L, 2);  // to the top itself: nothing changes
  REQUIRE(lua_gettop(L) == 2);
  sa::drop_to(L, 0);
  REQUIRE(lua_gettop(L) == 0);
  lua_pushliteral(L, "after");
  return 1;
}
}  // namespace

TEST_CASE("drop_to drops a C function's values to an index as lua_settop does") {
  lua_State* L = luaL_newstate();
  lua_pushliteral(L, "below");  // the caller's: not the function's to drop
  lua_pushcfunction(L, drop_in_frame);
  lua_pushliteral(L, "a");
  lua_pushinteger(L, 2);
  lua_pushboolean(L, 1);
  REQUIRE(lua_pcall(L, 3, 1, 0) == 0);
  REQUIRE(lua_gettop(L) == 2);
  CHECK(std::string(lua_tostring(L, 1)) == "below");
  CHECK(std::string(lua_tostring(L, 2)) == "after");
  // At the state's own level too, and what is left survives a collection.
  for (int i = 0; i < 50; ++i) lua_pushfstring(L, "s%d", i);
  sa::drop_to(L, 3);
  REQUIRE(lua_gettop(L) == 3);
  lua_gc(L, LUA_GCCOLLECT, 0);
  CHECK(std::string(lua_tostring(L, 3)) == "s0");
  lua_close(L);
}

TEST_CASE("pop_into_array writes as lua_rawseti does, and what it writes survives a collection in every phase") {
  // The only reference to each string is the table's: a value written into
  // a black table without a barrier would be collected under it (a
  // use-after-free that ASan reports, and a changed string here). The
  // table is an inbox's buffer in use: long-lived, so the collector
  // traverses it in every cycle, and the stepping below stops in every
  // phase of several.
  REQUIRE(sa::layout_matches() == host::lua::seam::kBuilt);
  lua_State* L = luaL_newstate();
  REQUIRE(L);
  constexpr int kKeys = 3000;
  lua_createtable(L, kKeys, 0);
  int written = 0, refused = 0;
  for (int k = 1; k <= kKeys; k += 3) {
    for (int i = 0; i < 3; ++i) lua_pushfstring(L, "value %d", k + i);
    if (sa::pop_into_array(L, 1, k, 3)) {
      ++written;
    } else {
      ++refused;
      for (int i = 2; i >= 0; --i) lua_rawseti(L, 1, k + i);
    }
    CHECK(lua_gettop(L) == 1);
    for (int j = 0; j < 200; ++j) lua_pushfstring(L, "garbage %d", j);  // work for the collector
    lua_settop(L, 1);
    lua_gc(L, LUA_GCSTEP, 0);
  }
  CHECK((written > 0) == sa::layout_matches());  // without the seam, the C API takes every write
  CHECK(refused > 0);  // the table was seen black, and the C API took over
  lua_gc(L, LUA_GCCOLLECT, 0);
  for (int k = 1; k <= kKeys; ++k) {
    lua_rawgeti(L, 1, k);
    const char* s = lua_tostring(L, -1);
    REQUIRE(s);
    CHECK(std::string(s) == "value " + std::to_string(k));
    lua_pop(L, 1);
  }
  CHECK(lua_objlen(L, 1) == static_cast<std::size_t>(kKeys));
  // Keys past the array part, and a slot that holds no table, are refused.
  lua_pushnil(L);
  CHECK_FALSE(sa::pop_into_array(L, 1, kKeys + 1, 1));
  CHECK_FALSE(sa::pop_into_array(L, 2, 1, 1));
  lua_close(L);
}
