// The lazy environment: a process starts with no library open, not even
// the base library, and an empty _G whose metatable (lazy_global) opens
// a standard library, builds an API table or opens the base library the
// first time a script names it; assert is the host's own until then;
// getmetatable and setmetatable see a plain _G (plain). Also print,
// os.exit, the marks that a state must be closed with lua_close, and
// kernel_ext.lua's loader (KernelHost's push_ext_chunk) with H, its C
// primitives. Threads: the one running the process.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include <lua.hpp>

#include "bindings/lua_process_internal.hpp"
#include "host/getrandom_batch.hpp"
#include "host/log.hpp"

namespace host::lua {

// print(...) goes to the log at info level, tab-separated like Lua's.
int Primitives::print(lua_State* L) {
  int n = lua_gettop(L);
  std::string line;
  base_global(L, "tostring");
  for (int i = 1; i <= n; ++i) {
    lua_pushvalue(L, -1);
    lua_pushvalue(L, i);
    lua_call(L, 1, 1);
    std::size_t len;
    const char* s = lua_tolstring(L, -1, &len);
    if (!s) return luaL_error(L, "'tostring' must return a string to 'print'");
    if (i > 1) line += '\t';
    line.append(s, len);
    lua_pop(L, 1);
  }
  log::logger().info("{}", line);
  return 0;
}

// Pushes the base library's global name (raw: the process may have
// replaced it), opening the library first if need be.
void Primitives::base_global(lua_State* L, const char* name) {
  open_base(L, of(L));
  raw_global(L, name);
}

// __index of _G: opens a standard library, or builds an API table, the
// first time a script names it, so an idle process pays only for what it
// used.
int Primitives::lazy_global(lua_State* L) {
  // Strings share _G's metatable until the string library opens and
  // installs theirs (install_globals): ("x"):upper() comes here first.
  // It opens without the global `string` (which comes when the script
  // names it): a method call inside a pairs(_G) loop must not add a key
  // to the table being walked, which can make next skip a key
  // (tests/lua/test_processes.lua).
  if (lua_type(L, 1) == LUA_TSTRING) {
    push_string_lib(L);
    lua_pushvalue(L, 2);
    lua_gettable(L, -2);
    return 1;
  }
  auto& p = of(L);
  if (lua_type(L, 2) != LUA_TSTRING) return 0;
  const char* k = lua_tostring(L, 2);
  if (!std::strcmp(k, "require")) {
    push_require(L);  // the host's own until the package library opens (lua_process_require.cpp)
    return 1;
  }
  if (!std::strcmp(k, "module")) {  // the package library's, as in plain LuaJIT
    open_package(L);
    raw_global(L, "module");
    return 1;
  }
  // ffi is only require'd, as in plain LuaJIT.
  if (opener(k) && std::strcmp(k, "ffi") != 0) {
    // Opened already without its global (a string method, require):
    // the global is the same table.
    p.push_loaded(L);
    lua_getfield(L, -1, k);
    if (lua_istable(L, -1)) {
      lua_pushvalue(L, -1);
      lua_setfield(L, LUA_GLOBALSINDEX, k);  // rawset: _G has no __newindex
      return 1;
    }
    lua_pop(L, 2);
    if (!std::strcmp(k, "package")) open_package(L);
    else open_lib(L, k);
    lua_rawget(L, 1);
    return 1;
  }
  if (const ModuleLine* m = p.rt_.find_module(k); m && m->global) {
    push_module(L, p, *m);
    return 1;
  }
  if (is_metatable_call(k)) {
    install_metatable_calls(L, p);
    lua_pushvalue(L, 2);
    lua_rawget(L, 1);
    return 1;
  }
  // Any other name the process lacks may be the base library's (print's
  // tostring, pairs, _G, ...): open it and look again. assert alone, the
  // one base function of many short processes (assert(process.spawn(..))),
  // is the host's own until then.
  if (p.base_open_) return 0;
  if (!std::strcmp(k, "assert")) {
    lua_pushcfunction(L, assert_);
    lua_pushvalue(L, -1);
    lua_setfield(L, LUA_GLOBALSINDEX, "assert");  // rawset: _G has no __newindex
    return 1;
  }
  open_base(L, p);
  lua_pushvalue(L, 2);
  lua_rawget(L, 1);
  return 1;
}

// assert until the base library opens: LuaJIT's behaviour to the letter
// (what it returns, and each error's text and position: the caller's
// file and line before a message that is a string or a number, as
// lj_err_callermsg adds them; any other message is raised as it is, and,
// as in LuaJIT, that is the last argument). Opening the base library for
// it was a large share of a spawn's cost (BENCHMARKS.md's source figures). It is a
// plain C function, not one of LuaJIT's fast functions that compiled
// code calls inline, so the library replaces it when it opens, and opens
// when the compiler comes on (jit_opened).
int Primitives::assert_(lua_State* L) {
  const int n = lua_gettop(L);
  if (n == 0) luaL_checkany(L, 1);
  if (lua_toboolean(L, 1)) return n;
  if (n == 1) {
    luaL_where(L, 1);
    lua_pushliteral(L, "assertion failed!");
    lua_concat(L, 2);
  } else if (lua_type(L, 2) == LUA_TSTRING || lua_type(L, 2) == LUA_TNUMBER) {
    luaL_where(L, 1);
    lua_pushvalue(L, 2);
    lua_concat(L, 2);
  }
  return lua_error(L);
}

bool Primitives::has_own_assert(lua_State* L) {
  raw_global(L, "assert");
  const bool own = lua_tocfunction(L, -1) == assert_;
  lua_pop(L, 1);
  return own;
}

// Opens LuaJIT's base library (about 45 functions, a large share of a spawn's
// work and of an idle process's memory: BENCHMARKS.md's source figures) the first time a process
// names a global it lacks. It must not replace what the process already
// has: the globals defined before it (ours, such as print and the API
// tables, and the script's own) are put back afterwards, and coroutine
// stays the kernel's, while LuaJIT's own library goes to the kernel.
void Primitives::open_base(lua_State* L, LuaProcess& p) {
  if (p.base_open_) return;
  p.base_open_ = true;
  const int base = lua_gettop(L);
  p.push_loaded(L);
  lua_getfield(L, -1, "coroutine");  // base + 2: the kernel's wrapper, if built
  if (has_own_assert(L)) {  // LuaJIT's replaces it; a script's own stays
    lua_pushnil(L);
    lua_setfield(L, LUA_GLOBALSINDEX, "assert");
  }
  int saved = 0;
  lua_pushnil(L);
  while (lua_next(L, LUA_GLOBALSINDEX)) {
    luaL_checkstack(L, 3, "opening the base library");
    lua_pushvalue(L, -2);
    ++saved;
  }
  lua_pushcfunction(L, luaopen_base);
  lua_call(L, 0, 0);
  // print is ours (install_globals), or gone if the script removed it.
  lua_pushnil(L);
  lua_setfield(L, LUA_GLOBALSINDEX, "print");
  raw_global(L, "coroutine");
  p.kernel_.set_coroutine_lib(L);
  lua_pushnil(L);
  lua_setfield(L, LUA_GLOBALSINDEX, "coroutine");  // rawset: _G has no __newindex
  lua_pushvalue(L, base + 2);
  lua_setfield(L, base + 1, "coroutine");
  wrap_needs_close(L, LUA_GLOBALSINDEX, "newproxy");
  // getmetatable and setmetatable wait in the registry until the script
  // names one (install_metatable_calls).
  for (const char* name : kMetatableCalls) {
    raw_global(L, name);
    lua_setfield(L, LUA_REGISTRYINDEX, name);
    lua_pushnil(L);
    lua_setfield(L, LUA_GLOBALSINDEX, name);  // rawset: _G has no __newindex
  }
  for (int i = 0; i < saved; ++i) lua_rawset(L, LUA_GLOBALSINDEX);
  lua_settop(L, base);
}

// Pushes the string library, opening it if need be without the global
// `string` (lazy_global sets that when the script names it): for string
// methods and log's format, which a script may call inside a pairs(_G)
// loop, where a new key in the table being walked can make next skip
// one (tests/lua/test_processes.lua).
void Primitives::push_string_lib(lua_State* L) {
  of(L).push_loaded(L);
  lua_getfield(L, -1, "string");
  if (!lua_istable(L, -1)) {
    // LuaJIT's opener fills the table package.loaded already holds, and
    // then leaves the globals alone (lib_create_table).
    lua_pop(L, 1);
    lua_newtable(L);
    lua_pushvalue(L, -1);
    lua_setfield(L, -3, "string");
    open_lib(L, "string");
  }
  lua_remove(L, -2);
}

void Primitives::open_lib(lua_State* L, const char* name) {
  const bool jit = !std::strcmp(name, "jit");
  auto& p = of(L);
  // Named in a module's top-level code (Init), the compiler stays off
  // until the load ends (LuaProcess::Init): compiled code runs no hook,
  // and the hook is what stops that code at the time limit.
  const bool loading = jit && p.steps_ == 0 && t_load_deadline != std::chrono::steady_clock::time_point::max();
  if (jit && !loading && lua_gethook(L) == jit_probe_hook) lua_sethook(L, nullptr, 0, 0);
  run_opener(L, name, 0);
  if (!jit) return;
  if (loading) {
    luaJIT_setmode(L, 0, LUAJIT_MODE_ENGINE | LUAJIT_MODE_OFF);
    p.jit_after_load_ = true;
  }
  jit_opened(L);
}

// Calls the standard library's opener. io and ffi make userdata with
// finalizers, and jit machine code that only lua_close frees: from then
// on the state must be closed (LuaProcess::Close).
void Primitives::run_opener(lua_State* L, const char* name, int nresults) {
  if (!std::strcmp(name, "io") || !std::strcmp(name, "ffi") || !std::strcmp(name, "jit")) of(L).needs_close_ = true;
  lua_pushcfunction(L, opener(name));
  lua_pushstring(L, name);
  lua_call(L, 1, nresults);
  if (!std::strcmp(name, "os")) {  // os.exit ends the process (exit)
    raw_global(L, "os");
    lua_pushcfunction(L, exit);
    lua_setfield(L, -2, "exit");
    lua_pop(L, 1);
  } else if (!std::strcmp(name, "debug")) {
    raw_global(L, "debug");
    wrap_metatable_calls(L, -1);
    lua_pop(L, 1);
  } else if (!std::strcmp(name, "math")) {
    seed_random(L);
  }
}

// LuaJIT starts every state's math.random from the same seed, so every
// process drew the same numbers. Each process's starts from kernel
// randomness instead (a batch per thread: no system call per process),
// once, as its math library opens; math.randomseed(n) still makes a
// sequence reproducible.
void Primitives::seed_random(lua_State* L) {
  std::uint64_t bits = 0;
  if (!take_batched_random(&bits, sizeof bits)) {
    // The kernel gave too little: still one sequence a process, from
    // the clock and the process's address.
    bits = static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) * 0x9E3779B97F4A7C15ull ^
           reinterpret_cast<std::uintptr_t>(&of(L));
  }
  raw_global(L, "math");
  lua_getfield(L, -1, "randomseed");
  lua_remove(L, -2);
  lua_pushnumber(L, static_cast<lua_Number>(bits >> 11));  // 53 bits: every one a distinct double
  lua_call(L, 1, 0);
}

// The globals and the libraries a process has not named yet come from
// _G's metatable (lazy_global), which strings share until the string
// library opens. Code that reads or replaces those metatables (a strict
// mode, as LuaJIT's etc/strict.lua and penlight's pl.strict install;
// getmetatable("").__index to extend strings) would find or break ours.
// So getmetatable and setmetatable (the base library's, through
// bindings/metatable_calls.lua, and debug's) call plain first for _G or
// a string: _G becomes what it is in plain LuaJIT, every library, API
// table and global there and no metatable; a string's metatable, the
// string library's.
int Primitives::plain(lua_State* L) {
  if (lua_type(L, 1) == LUA_TSTRING) {
    push_string_lib(L);  // installs the strings' own metatable
    return 0;
  }
  lua_pushvalue(L, LUA_GLOBALSINDEX);
  if (lua_rawequal(L, 1, -1)) plain_globals(L);
  return 0;
}

bool Primitives::is_metatable_call(const char* k) {
  return !std::strcmp(k, kMetatableCalls[0]) || !std::strcmp(k, kMetatableCalls[1]);
}

void Primitives::install_metatable_calls(lua_State* L, LuaProcess& p) {
  open_base(L, p);
  const std::string& bc = p.rt_.metatable_calls_bytecode();
  if (luaL_loadbuffer(L, bc.data(), bc.size(), "=metatable_calls") != 0) lua_error(L);
  for (const char* name : kMetatableCalls) lua_getfield(L, LUA_REGISTRYINDEX, name);
  lua_pushvalue(L, LUA_GLOBALSINDEX);
  raw_global(L, "type");
  lua_pushcfunction(L, plain);
  lua_call(L, 5, 2);
  lua_setfield(L, LUA_GLOBALSINDEX, kMetatableCalls[1]);  // rawset: _G has no __newindex
  lua_setfield(L, LUA_GLOBALSINDEX, kMetatableCalls[0]);
}

// debug's: upvalue 1 the original call.
int Primitives::metatable_call(lua_State* L) {
  lua_pushcfunction(L, plain);
  lua_pushvalue(L, 1);
  lua_call(L, 1, 0);
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
  return lua_gettop(L);
}

void Primitives::wrap_metatable_calls(lua_State* L, int idx) {
  if (idx < 0 && idx > LUA_REGISTRYINDEX) idx = lua_gettop(L) + idx + 1;
  for (const char* name : kMetatableCalls) {
    lua_getfield(L, idx, name);
    lua_pushcclosure(L, metatable_call, 1);
    lua_setfield(L, idx, name);
  }
}

// Every name lazy_global would give, made now, and _G's metatable gone.
void Primitives::plain_globals(lua_State* L) {
  if (!lua_getmetatable(L, LUA_GLOBALSINDEX)) return;  // plain already
  lua_pop(L, 1);
  auto& p = of(L);
  open_base(L, p);
  auto name_global = [L](const char* name) {
    lua_getfield(L, LUA_GLOBALSINDEX, name);  // through lazy_global
    lua_pop(L, 1);
  };
  for (const auto& [name, open] : kLibraries)
    if (std::strcmp(name, "ffi") != 0) name_global(name);  // ffi is only require'd, as in plain LuaJIT
  name_global("require");
  name_global("module");
  for (const ModuleLine& m : p.rt_.module_lines())
    if (m.global) name_global(m.name);
  lua_pushnil(L);
  lua_setmetatable(L, LUA_GLOBALSINDEX);
}

// os.exit([code]): see TaskKernel::request_exit. true, nil or 0 is a
// success; false or any other number a failure.
int Primitives::exit(lua_State* L) {
  int code = 0;
  if (lua_type(L, 1) == LUA_TBOOLEAN) code = lua_toboolean(L, 1) ? 0 : 1;
  else if (!lua_isnoneornil(L, 1)) code = static_cast<int>(luaL_checkinteger(L, 1));
  return of(L).kernel_.request_exit(L, code == 0, code);
}

// Upvalue 1 called with the arguments, after marking the state as one to
// close with lua_close: for newproxy and the C module loaders, which can
// make userdata with finalizers.
int Primitives::needs_close(lua_State* L) {
  of(L).needs_close_ = true;
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
  return lua_gettop(L);
}

// Replaces t[key] (t at idx) by needs_close over it.
void Primitives::wrap_needs_close(lua_State* L, int idx, const char* key) {
  if (idx < 0 && idx > LUA_REGISTRYINDEX) idx = lua_gettop(L) + idx + 1;  // not a pseudo-index
  lua_getfield(L, idx, key);
  lua_pushcclosure(L, needs_close, 1);
  lua_setfield(L, idx, key);
}

// Pushes module m's table (or value), made the way its registry line says,
// and records it in package.loaded (under its alias too) and, for a global
// one, as the global, so that require("time") and time are one table.
void Primitives::push_module(lua_State* L, LuaProcess& p, const ModuleLine& m) {
  switch (m.kind) {
    case ModuleKind::kProcess: p.push_process_api(L); break;
    case ModuleKind::kLog: push_log_api(L); break;
    case ModuleKind::kTime: push_time_api(L); break;
    case ModuleKind::kKernel: push_ext_api(L, p, m.name); break;
    case ModuleKind::kLuaHalf: push_lua_half(L, p, m); break;
    case ModuleKind::kHostCall: lua_pushcfunction(L, wait_call); break;
    case ModuleKind::kHostCommands: push_host_commands(L, p); break;
    case ModuleKind::kHostStats: lua_pushcfunction(L, host_stats); break;
    case ModuleKind::kNative: m.open(L); break;
    case ModuleKind::kHostReloaded:  // the set reload events fill (deliver_events), made here if none came yet
      lua_getfield(L, LUA_REGISTRYINDEX, kReloadedKey);
      if (!lua_istable(L, -1)) {
        lua_pop(L, 1);
        lua_newtable(L);
        lua_pushvalue(L, -1);
        lua_setfield(L, LUA_REGISTRYINDEX, kReloadedKey);
      }
      break;
    case ModuleKind::kService:  // its Lua side is a stdlib module: never looked up here
      HOST_ASSERT(false, "a service-only module has no table");
      lua_pushnil(L);
      return;
  }
  if (m.global) {
    lua_pushvalue(L, -1);
    lua_setfield(L, LUA_GLOBALSINDEX, m.name);  // rawset: _G has no __newindex
  }
  p.push_loaded(L);
  lua_pushvalue(L, -2);
  lua_setfield(L, -2, m.name);
  if (m.alias) {
    lua_pushvalue(L, -2);
    lua_setfield(L, -2, m.alias);
  }
  lua_pop(L, 1);
}

void Primitives::push_ext_api(lua_State* L, LuaProcess& p, const char* name) {
  p.kernel_.push_ext(L);
  lua_getfield(L, -1, "api");
  lua_pushstring(L, name);
  lua_call(L, 1, 1);
  lua_remove(L, -2);
}

int Primitives::describe(lua_State* L) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s: %p", luaL_typename(L, 1), lua_topointer(L, 1));
  lua_pushstring(L, buf);
  return 1;
}

void LuaProcess::push_ext_chunk(lua_State* L) {
  // kernel_ext.lua keeps base functions as upvalues, and wraps LuaJIT's
  // coroutine library, which comes with the base library.
  Primitives::open_base(L, *this);
  const std::string& bc = rt_.kernel_ext_bytecode();
  if (luaL_loadbuffer(L, bc.data(), bc.size(), "=kernel_ext") != 0) lua_error(L);
  // H: the primitives kernel_ext.lua uses.
  static const luaL_Reg prims[] = {
      {"now", Primitives::now},
      {"duration", Primitives::duration},
      {"demonitor", Primitives::demonitor},
      {"describe", Primitives::describe},
      {"load_entry", Primitives::load_entry},
      {nullptr, nullptr},
  };
  lua_createtable(L, 0, 11);
  luaL_setfuncs(L, prims, 0);
  push_closure(L, Primitives::monitor, 1);  // process.watch's: also returns the ref
  lua_setfield(L, -2, "watch_monitor");
}

void LuaProcess::install_globals() {
  lua_State* L = L_;
  // coroutine becomes the kernel's wrapper (blocking calls reach the
  // scheduler) on first use, through lazy_global or require; the base
  // library's functions come on first use too (open_base). print is made
  // here, not on first use: a script's print = nil must stay nil.
  lua_pushcfunction(L, Primitives::print);
  lua_setfield(L, LUA_GLOBALSINDEX, "print");
  // _G's __index opens libraries and API tables on first use.
  lua_createtable(L, 0, 1);
  lua_pushcfunction(L, Primitives::lazy_global);
  lua_setfield(L, -2, "__index");
  // Strings get their methods once the string library opens (it installs
  // their own metatable); until then a method call opens it, through the
  // same __index: a metatable of their own cost every spawn time
  // and memory (BENCHMARKS.md's source figures).
  lua_pushliteral(L, "");
  lua_pushvalue(L, -2);
  lua_setmetatable(L, -2);
  lua_pop(L, 1);
  lua_setmetatable(L, LUA_GLOBALSINDEX);
}

}  // namespace host::lua
