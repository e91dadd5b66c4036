// require before the package library opens. LuaJIT's package opener
// (its paths from the environment, its loaders, its functions) was a
// tenth of a new HTTP connection's cost, for processes that only
// require modules our searcher finds. So the global `require` is the
// host's own (require) until the script names `package` or `module`
// (lazy_global opens the library then, which brings LuaJIT's require and
// module): it does what LuaJIT's does, with the same loading mark in
// package.loaded (LuaJIT's own, found once per host: loading_mark),
// so that a load that opens the library half way (module(...,
// package.seeall), a module naming package) meets the same mark in
// LuaJIT's require, and loops and earlier errors read the same either
// way. A name our searcher does not find opens the library and goes to
// LuaJIT's require, as does a copy of ours once the library is open.
// Threads: the one running the process; the mark's discovery, any (once).
#include <cstring>

#include <lua.hpp>

#include "bindings/lua_process_internal.hpp"

namespace host::lua {
namespace {

// Registry key of LuaJIT's require, kept as the package library opens
// (open_package), for copies of ours taken before.
char kLuaJitRequire;

// LuaJIT's loading mark: the value its require puts in
// package.loaded[name] while the module's chunk runs. A private constant
// of LuaJIT's package library (a light userdata in LuaJIT 2.1's sources,
// a number with fixed bits in OpenResty's branch), not in its API: read
// once from a scratch state, by a preload function that looks at its
// own entry while LuaJIT's require runs it. Unknown (kind 0) where it is
// neither: then require opens the library as before.
struct Mark {
  int kind = 0;  // LUA_TLIGHTUSERDATA, LUA_TNUMBER, or 0
  void* pointer = nullptr;
  lua_Number number = 0;  // compared bit for bit (is_mark)
};

Mark find_loading_mark() {
  Mark mark;
  lua_State* L = luaL_newstate();
  if (!L) return mark;
  const int rc = lua_cpcall(L, [](lua_State* S) -> int {
    Mark* out = static_cast<Mark*>(lua_touserdata(S, 1));
    lua_pushcfunction(S, luaopen_package);
    lua_call(S, 0, 0);
    lua_getfield(S, LUA_GLOBALSINDEX, "package");
    lua_getfield(S, -1, "preload");
    lua_pushlightuserdata(S, out);
    lua_pushcclosure(S, [](lua_State* T) -> int {
      Mark& m = *static_cast<Mark*>(lua_touserdata(T, lua_upvalueindex(1)));
      lua_getfield(T, LUA_REGISTRYINDEX, "_LOADED");
      lua_getfield(T, -1, "host.mark");
      m.kind = lua_type(T, -1);
      if (m.kind == LUA_TLIGHTUSERDATA) m.pointer = lua_touserdata(T, -1);
      else if (m.kind == LUA_TNUMBER) m.number = lua_tonumber(T, -1);
      else m.kind = 0;
      return 0;
    }, 1);
    lua_setfield(S, -2, "host.mark");
    lua_getfield(S, LUA_GLOBALSINDEX, "require");
    lua_pushliteral(S, "host.mark");
    lua_call(S, 1, 0);
    return 0;
  }, &mark);
  lua_close(L);
  if (rc != 0) mark.kind = 0;
  return mark;
}

const Mark& loading_mark() {
  static const Mark mark = find_loading_mark();
  return mark;
}

void push_mark(lua_State* L, const Mark& m) {
  if (m.kind == LUA_TLIGHTUSERDATA) lua_pushlightuserdata(L, m.pointer);
  else lua_pushnumber(L, m.number);  // LuaJIT keeps a number's bits (only NaNs are made canonical)
}

bool is_mark(lua_State* L, int idx, const Mark& m) {
  if (lua_type(L, idx) != m.kind) return false;
  if (m.kind == LUA_TLIGHTUSERDATA) return lua_touserdata(L, idx) == m.pointer;
  const lua_Number n = lua_tonumber(L, idx);
  return std::memcmp(&n, &m.number, sizeof n) == 0;
}

}  // namespace

bool Primitives::own_require_ready() { return loading_mark().kind != 0; }

// LuaJIT's require, kept in the registry as the package library opens
// (open_package): for copies of ours, and as the mark that it is open
// (the global `package` is the script's to replace).
void Primitives::keep_luajit_require(lua_State* L) {
  lua_pushlightuserdata(L, &kLuaJitRequire);
  raw_global(L, "require");
  lua_rawset(L, LUA_REGISTRYINDEX);
}

bool Primitives::package_open(lua_State* L) {
  lua_pushlightuserdata(L, &kLuaJitRequire);
  lua_rawget(L, LUA_REGISTRYINDEX);
  const bool opened = !lua_isnil(L, -1);
  lua_pop(L, 1);
  return opened;
}

// The global `require` lazy_global gives: ours while the package library
// is closed and the mark is known, else LuaJIT's (the library opened).
void Primitives::push_require(lua_State* L) {
  if (package_open(L) || !own_require_ready()) {
    open_package(L);  // if need be
    raw_global(L, "require");
    return;
  }
  lua_pushcfunction(L, require);
  lua_pushvalue(L, -1);
  lua_setfield(L, LUA_GLOBALSINDEX, "require");  // rawset: _G has no __newindex
}

// LuaJIT's require (lib_package.c's), step for step, with our searcher
// for its loaders: what it returns, what package.loaded holds during and
// after, and the loop's message are the same.
int Primitives::require(lua_State* L) {
  const char* name = luaL_checkstring(L, 1);
  lua_settop(L, 1);
  if (!package_open(L) && std::strcmp(name, "package") != 0) {
    const Mark& mark = loading_mark();
    of(L).push_loaded(L);  // 2
    lua_getfield(L, 2, name);
    if (lua_toboolean(L, -1)) {
      if (is_mark(L, -1, mark)) return luaL_error(L, "loop or previous error loading module '%s'", name);
      return 1;
    }
    lua_pop(L, 1);
    lua_pushcfunction(L, searcher);
    lua_pushvalue(L, 1);
    lua_call(L, 1, 1);  // 3: the loader, or why our searcher has none
    if (lua_isfunction(L, 3)) {
      push_mark(L, mark);
      lua_setfield(L, 2, name);
      lua_pushvalue(L, 1);
      lua_call(L, 1, 1);
      if (!lua_isnil(L, -1)) lua_setfield(L, 2, name);
      lua_getfield(L, 2, name);
      if (is_mark(L, -1, mark)) {  // it set no value: true
        lua_pushboolean(L, 1);
        lua_pushvalue(L, -1);
        lua_setfield(L, 2, name);
      }
      return 1;
    }
    lua_settop(L, 1);
  }
  // Only LuaJIT's searchers (package.preload, the paths) can find it,
  // or the library is open: LuaJIT's require, with its messages.
  open_package(L);
  lua_pushlightuserdata(L, &kLuaJitRequire);
  lua_rawget(L, LUA_REGISTRYINDEX);
  lua_insert(L, 1);
  lua_call(L, 1, 1);
  return 1;
}

}  // namespace host::lua
