// What require finds: the package searcher put first (the script
// directory's and stdlib's modules from the shared bytecode cache, the
// standard libraries by name, and the registry's modules: the API tables,
// the Lua halves over waiting calls, host.call, host.commands and
// host.stats), the Lua halves' loading, and a process's side of the
// sockets it holds (claim, give, drop: socket_object.cpp calls them).
// Threads: the one running the process.
#include <cstdint>
#include <cstring>
#include <ctime>
#include <iterator>
#include <string>

#include <lua.hpp>

#include "bindings/codec.hpp"
#include "bindings/lua_process_internal.hpp"
#include "bindings/socket_object.hpp"
#include "bindings/socket_ref.hpp"

namespace host::lua {

// A kLuaHalf module: its chunk, compiled at the runtime's first use of it,
// called with the waiting call, its command, the wall clock and the TCP
// socket constructor (every Lua half is written against these).
void Primitives::push_lua_half(lua_State* L, LuaProcess& p, const ModuleLine& m) {
  std::string err;
  const std::string* bc = p.rt_.module_chunk(m, &err);
  if (!bc) luaL_error(L, "%s", err.c_str());
  if (luaL_loadbuffer(L, bc->data(), bc->size(), (std::string("=") + m.name).c_str()) != 0) lua_error(L);
  lua_pushcfunction(L, wait_call);
  lua_pushinteger(L, m.command);
  lua_pushcfunction(L, wall_time);
  lua_pushcfunction(L, new_tcp_socket);  // the socket module's TCP constructor (socket_tcp.cpp)
  lua_call(L, 4, 1);
}

// require("host.commands"): every registry line's command by its module's
// name (a stdlib module whose line is kService finds its command this way).
void Primitives::push_host_commands(lua_State* L, LuaProcess& p) {
  lua_createtable(L, 0, 4);
  for (const ModuleLine& m : p.rt_.module_lines()) {
    if (m.command == 0) continue;
    lua_pushinteger(L, m.command);
    lua_setfield(L, -2, m.name);
  }
}

// Module m's table in this process, made if need be: the one under its
// name in package.loaded when it is there (require("socket.core") after
// require("socket")), else a new one (push_module records it).
void Primitives::push_loaded_module(lua_State* L, LuaProcess& p, const ModuleLine& m) {
  p.push_loaded(L);
  lua_getfield(L, -1, m.name);
  lua_remove(L, -2);
  if (lua_istable(L, -1) || lua_isfunction(L, -1)) return;  // else nil, or require's mark that it is loading
  lua_pop(L, 1);
  push_module(L, p, m);
}

// The socket module's table in this process (a socket that arrived in a
// message needs its methods).
void Primitives::push_socket_module(lua_State* L, LuaProcess& p) {
  const ModuleLine* m = p.rt_.find_module("socket");
  HOST_ASSERT(m, "the registry has the socket module");
  push_loaded_module(L, p, *m);
}

void Primitives::claim_socket(lua_State* L, std::uint64_t id) {
  auto& p = of(L);
  p.rt_.io().sockets.claim(id, p.ctx_.self);
}

void Primitives::give_socket(lua_State* L, std::uint64_t id) {
  auto& p = of(L);
  p.rt_.io().sockets.give(id, p.ctx_.self);
}

void Primitives::drop_socket(lua_State* L, std::uint64_t id) {
  auto& p = of(L);
  p.rt_.io().sockets.drop(id, p.ctx_.self);
}

void Primitives::track_finalizer(lua_State* L, HostFinalizer* f, HostFinalizer::Run run, void* object) {
  of(L).finalizers_.track(f, run, object);
}

void Primitives::run_finalizer(lua_State* L, HostFinalizer* f) { of(L).finalizers_.run_once(L, f); }

// Seconds since the epoch, with their fraction (LuaSocket's gettime).
int Primitives::wall_time(lua_State* L) {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  lua_pushnumber(L, static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9);
  return 1;
}

// Opens package and puts our searcher first: modules of the script
// directory and stdlib/ come from the shared bytecode cache; the host's
// API and LuaJIT's libraries by name; then LuaJIT's own searchers, whose
// path is LUA_PATH/LUA_CPATH if set, else LuaJIT's default.
void Primitives::open_package(lua_State* L) {
  if (package_open(L)) return;
  // The opener sets the globals require, module and package. The library
  // opens late (when named: lazy_global), so a script may have set its
  // own before (a require wrapper, a global named module): those stay, as
  // they would have with the library open from the start; our own require
  // gives way to LuaJIT's. A script's package is put aside while it opens
  // (LuaJIT's opener would add its functions to that table, or raise).
  static constexpr const char* kSetByOpener[] = {"require", "module", "package"};
  const int saved = lua_gettop(L) + 1;
  for (const char* name : kSetByOpener) {
    raw_global(L, name);
    lua_pushstring(L, name);
    lua_pushnil(L);
    lua_rawset(L, LUA_GLOBALSINDEX);
  }
  open_lib(L, "package");
  keep_luajit_require(L);
  for (int i = 0; i < static_cast<int>(std::size(kSetByOpener)); ++i) {
    const int v = saved + i;
    if (lua_isnil(L, v) || (i == 0 && lua_tocfunction(L, v) == require)) continue;
    lua_pushstring(L, kSetByOpener[i]);
    lua_pushvalue(L, v);
    lua_rawset(L, LUA_GLOBALSINDEX);
  }
  lua_settop(L, saved - 1);
  of(L).push_loaded(L);
  lua_getfield(L, -1, "package");  // the library's table, whatever the global
  lua_remove(L, -2);
  lua_getfield(L, -1, "loaders");
  // Shift the loaders up by one and put ours at 1 (before preload). The
  // others run only for modules outside the script directory and stdlib,
  // which may be native code (LUA_CPATH), as may loadlib's.
  int n = static_cast<int>(lua_objlen(L, -1));
  for (int i = n; i >= 1; --i) {
    lua_rawgeti(L, -1, i);
    lua_pushcclosure(L, needs_close, 1);
    lua_rawseti(L, -2, i + 1);
  }
  lua_pushcfunction(L, searcher);
  lua_rawseti(L, -2, 1);
  lua_pop(L, 1);
  wrap_needs_close(L, -1, "loadlib");
  lua_pop(L, 1);
}

int Primitives::load_std(lua_State* L) {
  const char* name = lua_tostring(L, lua_upvalueindex(1));
  run_opener(L, name, 1);
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    raw_global(L, name);
  }
  return 1;
}

int Primitives::load_api(lua_State* L) {
  auto& p = of(L);
  const ModuleLine* m = p.rt_.find_module(lua_tostring(L, lua_upvalueindex(1)));
  HOST_ASSERT(m, "the searcher gives load_api only a registry module's name");
  push_loaded_module(L, p, *m);
  return 1;
}

int Primitives::searcher(lua_State* L) {
  auto& p = of(L);
  std::string name = luaL_checkstring(L, 1);
  if (opener(name.c_str()) && name != "package") {  // package is already loaded when require runs
    lua_pushstring(L, name.c_str());
    lua_pushcclosure(L, load_std, 1);
    return 1;
  }
  if (name == "_G") {  // as in plain LuaJIT, where the base library is always open
    open_base(L, p);
    lua_pushcfunction(L, [](lua_State* S) -> int {
      lua_pushvalue(S, LUA_GLOBALSINDEX);
      return 1;
    });
    return 1;
  }
  // A registry module (a service-only one's Lua side is a stdlib module).
  if (const ModuleLine* m = p.rt_.find_module(name); m && m->kind != ModuleKind::kService) {
    lua_pushstring(L, name.c_str());
    lua_pushcclosure(L, load_api, 1);
    return 1;
  }
  std::string err;
  bool absent = false;
  auto mod = p.rt_.modules().find(name, &absent, &err);
  if (absent) {
    // A C module on package.cpath: its opener, found and loaded once per
    // runtime (c_modules.hpp); else LuaJIT's searchers go on.
    if (lua_CFunction opener = p.rt_.c_modules().find(L, name.c_str())) {
      // As LuaJIT's C loaders do here (wrap_needs_close): a C module may
      // make userdata whose finalizers free its own memory (cjson's
      // buffers), so the state ends with lua_close, not dropped whole.
      p.needs_close_ = true;
      lua_pushcfunction(L, opener);
      return 1;
    }
    lua_pushfstring(L, "\n\tno module '%s' in the script directory or stdlib", name.c_str());
    return 1;
  }
  if (!mod) return luaL_error(L, "error loading module '%s': %s", name.c_str(), err.c_str());
  if (luaL_loadbuffer(L, mod->bytecode.data(), mod->bytecode.size(), name.c_str()) != 0) return lua_error(L);
  p.rt_.note_module_use(p.ctx_.self, name);
  p.script_modules_.push_back(name);
  return 1;
}

void install_moved_value_hooks() {
  moved_value_hooks.encode = &encode_socket;
  moved_value_hooks.decode = &decode_socket;
}

void claim_socket(lua_State* L, std::uint64_t id) { Primitives::claim_socket(L, id); }

void give_socket(lua_State* L, std::uint64_t id) { Primitives::give_socket(L, id); }

void drop_socket(lua_State* L, std::uint64_t id) { Primitives::drop_socket(L, id); }

void track_finalizer(lua_State* L, HostFinalizer* f, HostFinalizer::Run run, void* object) {
  Primitives::track_finalizer(L, f, run, object);
}

void run_finalizer(lua_State* L, HostFinalizer* f) { Primitives::run_finalizer(L, f); }

}  // namespace host::lua
