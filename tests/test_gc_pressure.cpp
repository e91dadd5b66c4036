// gc_pressure: near the memory limit the collector starts its cycles
// sooner, so that a heap of live data plus garbage stays under the limit.
#include <doctest/doctest.h>

#include <cstddef>

#include <lua.hpp>

#include "bindings/luajit/gc_pressure.hpp"

namespace gp = host::lua::gc_pressure;

namespace {

std::size_t heap_bytes(lua_State* L) {
  return static_cast<std::size_t>(lua_gc(L, LUA_GCCOUNT, 0)) * 1024 + static_cast<std::size_t>(lua_gc(L, LUA_GCCOUNTB, 0));
}

// Keeps about 1.5 MB alive, then makes 30 MB of garbage strings, calling
// collect_sooner as LuaProcess's allocator does (past half the limit) when
// `pressure`; returns the largest heap seen.
std::size_t peak_heap(bool pressure, std::size_t* limit_out) {
  lua_State* L = luaL_newstate();
  REQUIRE(L);
  lua_gc(L, LUA_GCSETPAUSE, 300);
  lua_createtable(L, 20000, 0);
  for (int i = 1; i <= 20000; ++i) {
    lua_pushfstring(L, "kept string number %d, long enough to weigh something", i);
    lua_rawseti(L, 1, i);
  }
  lua_gc(L, LUA_GCCOLLECT, 0);
  const std::size_t live = heap_bytes(L);
  const std::size_t limit = live * 2;  // the pause alone lets the heap reach 3x
  *limit_out = limit;
  std::size_t peak = 0;
  for (int i = 0; i < 300000; ++i) {
    lua_pushfstring(L, "garbage %d, made to be collected, of about a hundred bytes each", i);
    lua_settop(L, 1);
    const std::size_t now = heap_bytes(L);
    if (now > peak) peak = now;
    if (pressure && now > limit / 2) gp::collect_sooner(L, limit);
  }
  // What was kept is all there.
  lua_rawgeti(L, 1, 20000);
  CHECK(lua_isstring(L, -1));
  lua_close(L);
  return peak;
}

}  // namespace

TEST_CASE("gc_pressure: past half the limit, cycles start soon enough that garbage does not take the heap past it") {
  if (!host::lua::seam::kBuilt) {
    CHECK_FALSE(gp::available());  // built without the seam: LuaJIT's own pacing
    return;
  }
  REQUIRE(gp::available());
  std::size_t limit = 0;
  const std::size_t paced = peak_heap(false, &limit);
  CHECK(paced > limit);  // LuaJIT's own pacing: what the test guards against
  const std::size_t pressed = peak_heap(true, &limit);
  CHECK(pressed <= limit);
}

TEST_CASE("gc_pressure: a stopped collector stays stopped") {
  if (!host::lua::seam::kBuilt) return;
  REQUIRE(gp::available());
  lua_State* L = luaL_newstate();
  REQUIRE(L);
  lua_gc(L, LUA_GCCOLLECT, 0);
  lua_gc(L, LUA_GCSTOP, 0);
  const std::size_t before = heap_bytes(L);
  for (int i = 0; i < 20000; ++i) {
    lua_pushfstring(L, "garbage %d", i);
    lua_pop(L, 1);
    gp::collect_sooner(L, before);  // far past its limit, were it running
  }
  CHECK(heap_bytes(L) > before + 20000 * 24);  // nothing was collected
  lua_close(L);
}
