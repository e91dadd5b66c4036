// What the files of a LuaProcess share, and no one else includes: the
// thread-locals that say which process this thread runs, small helpers of
// the C API, and Primitives, the C functions a process's Lua code calls
// (each file defines its group; the declarations below say which).
// Threads: the one running the process (a step, its start, its close, a
// spare's preparation).
//
// The files (docs/ARCHITECTURE.md, "A Lua process"):
//   lua_process.cpp           the state on its allocator, its start, its step, its end
//   lua_process_api.cpp       the process and log APIs' C functions
//   lua_process_waits.cpp     time, the waiting call, the timers' command (KernelHost's)
//   lua_process_env.cpp       the lazy environment: _G's metatable, the libraries, assert
//   lua_process_modules.cpp   require's searcher, the host's Lua modules, sockets
//   lua_process_require.cpp   require before the package library opens
//   lua_process_delivery.cpp  a step's events into the Lua state: hand-over, inbox, kernel
//   lua_process_jit.cpp       the JIT probe
#pragma once

#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <lua.hpp>

#include "bindings/codec.hpp"
#include "bindings/lua_process.hpp"
#include "bindings/module_registry.hpp"
#include "bindings/luajit/stack_args.hpp"
#include "host/assert.hpp"

namespace host::lua {

// The process whose state this thread runs (a step, its start, its close,
// a spare's preparation), for Primitives::of. Nested: a spawn runs the
// child's start inside the parent's step, and gives the parent back after
// (LuaProcess's RunningHere, which sets TaskKernel's running kernel too).
inline constinit thread_local LuaProcess* t_running = nullptr;

// While LuaProcess::Init runs a module's top-level code on this thread:
// when that code has run as long as a step may (jit_probe_hook); min until
// the hook first fires there. max otherwise.
inline constinit thread_local std::chrono::steady_clock::time_point t_load_deadline =
    std::chrono::steady_clock::time_point::max();

// The Lua steps taken on this thread (LuaProcess::Step counts them), and
// the thread's tag (1-255, given at its first sampled step; 0 until
// then): probe_jit's measure of a process's share of its core.
// Constant-initialized, so that reading them needs no guard.
struct ThreadSteps {
  std::uint32_t count = 0;
  std::uint8_t tag = 0;
};
inline constinit thread_local ThreadSteps this_thread_steps;

// The process whose state L is, by the public API (its allocator's data).
inline LuaProcess* owner_by_api(lua_State* L) {
  void* ud = nullptr;
  lua_getallocf(L, &ud);
  return static_cast<LuaProcess*>(ud);
}

// Globals are read raw here: _G's __index is lazy_global itself.
inline void raw_global(lua_State* L, const char* name) {
  lua_pushstring(L, name);
  lua_rawget(L, LUA_GLOBALSINDEX);
}

// The registry key of require("host.reloaded")'s set: the names of the
// modules reload events named since its code last cleared them.
inline constexpr const char* kReloadedKey = "host.reloaded";

// LuaJIT's standard libraries, by name.
inline constexpr std::pair<const char*, lua_CFunction> kLibraries[] = {
    {"string", luaopen_string}, {"table", luaopen_table}, {"math", luaopen_math},
    {"io", luaopen_io},         {"os", luaopen_os},       {"debug", luaopen_debug},
    {"bit", luaopen_bit},       {"ffi", luaopen_ffi},     {"package", luaopen_package},
    {"jit", luaopen_jit}};

// The opener of a standard library; null for any other name.
inline lua_CFunction opener(const char* name) {
  for (auto& [n, f] : kLibraries)
    if (std::strcmp(n, name) == 0) return f;
  return nullptr;
}

// Pushes nil, err and returns 2: the "fails for reasons outside the caller's
// code" convention (docs/LUA_API.md, Errors, PIDs and messages).
inline int push_fail(lua_State* L, const std::string& err) {
  lua_pushnil(L);
  lua_pushlstring(L, err.data(), err.size());
  return 2;
}

// Pushes exactly one value decoded from bytes (nil when they hold none, the
// first when several); on bad bytes pushes nothing and returns false.
inline bool push_one_value(lua_State* L, const std::string& bytes, std::string* err, StringCache* strings = nullptr) {
  int n = decode_values(L, bytes, err, strings);
  if (n < 0) return false;
  if (n == 0) lua_pushnil(L);
  else if (n > 1) lua_pop(L, n - 1);
  return true;
}

// Argument idx (>= 1) must be a string (numbers are not coerced: a PID, a
// name or a topic given as a number is a programming error). Raises "bad
// argument #idx to 'fname' (string expected, got TYPE)". Read from the
// stack directly (stack_args.hpp): a send checks two.
[[gnu::cold, gnu::noinline]] inline void raise_not_string(lua_State* L, int idx) { luaL_typerror(L, idx, "string"); }
inline const char* check_string(lua_State* L, int idx, std::size_t* len = nullptr) {
  const char* s = stack_args::string(L, idx, len);
  if (!s) raise_not_string(L, idx);
  return s;
}

// Pushes fn and, where variant is not negative, makes it a closure over
// the variant (upvalue 1). Each function finds its process with
// Primitives::of.
inline void push_closure(lua_State* L, lua_CFunction fn, int variant = -1) {
  if (variant < 0) {
    lua_pushcfunction(L, fn);
    return;
  }
  lua_pushinteger(L, variant);
  lua_pushcclosure(L, fn, 1);
}

// The C functions behind the process API (made lazily by process_field),
// log and time.now, the globals' and the package searcher's hooks, and H,
// the table of primitives kernel_ext.lua gets. Each finds its LuaProcess
// with of(L).
struct Primitives {
  // The process whose state L is: the one this thread runs (one load,
  // where the C API's lua_getallocf was a call), else the
  // allocator's data. Debug builds check that L is that process's: a
  // state is touched only by the thread running it.
  static LuaProcess& of(lua_State* L) {
    LuaProcess* p = t_running;
    if (!p) [[unlikely]] p = owner_by_api(L);
    HOST_ASSERT(p == owner_by_api(L), "a process's state is used only on the thread running it");
    return *p;
  }

  // getmetatable and setmetatable as globals: bindings/metatable_calls.lua's
  // over the base library's, made when the script first names one (about
  // 1 KB of heap that a process which never does is spared).
  static constexpr const char* kMetatableCalls[] = {"getmetatable", "setmetatable"};

  // lua_process_api.cpp: the process API (process.*, log.*).
  // for_send: a { name, node } of another node is sent to there and then
  // (send_to_node's result in nret), as only a send can reach it.
  static bool resolve(lua_State* L, LuaProcess& p, int idx, Pid& out, int& nret, bool for_send = false);
  static bool resolve_new(lua_State* L, LuaProcess& p, int idx, std::string_view dest, Pid& out, int& nret);
  template <typename F> static int on_target(lua_State* L, F&& fn, bool for_send = false);
  // The cluster's calls (bindings/lua_cluster_api.cpp).
  [[gnu::cold]] static bool resolve_not_string(lua_State* L, int idx, Pid& out, int& nret, bool for_send);
  static int send_to_node(lua_State* L, LuaProcess& p, std::string_view name, std::string_view node);
  // A send to a PID of another node, or (node not empty) to a name there:
  // the value encoded straight into the message's bytes
  // (RemoteNodes::begin_message).
  [[gnu::noinline, gnu::cold]] static int send_remote(lua_State* L, LuaProcess& p, const Pid& to,
                                                      std::string_view name = {}, std::string_view node = {});
  [[gnu::cold]] static int send_elsewhere(lua_State* L, LuaProcess& p, const Pid& to, std::string_view topic,
                                          std::string_view payload, const std::string& err);
  static int node(lua_State* L);
  static int nodes(lua_State* L);
  static int monitor_node(lua_State* L);
  // process.monitor, unmonitor and watch's demonitor of { name, node };
  // link and unlink's refusal of a table.
  [[gnu::cold]] static int monitor_named(lua_State* L);
  [[gnu::cold]] static int unmonitor_named(lua_State* L);
  [[gnu::cold]] static int demonitor_named(lua_State* L);
  [[gnu::cold]] static int refuse_named(lua_State* L, const char* fname);
  static int monitored(lua_State* L, LuaProcess& p, const Pid& key, std::uint64_t ref);
  static int spawn_on(lua_State* L);
  static int ok_or_fail(lua_State* L, const std::string& err);
  static void push_pids(lua_State* L, const std::vector<Pid>& pids);
  static int list(lua_State* L);
  static int info(lua_State* L);
  static int host_stats(lua_State* L);
  static int pid(lua_State* L);
  static int memory(lua_State* L);
  static int send(lua_State* L);
  static int spawn(lua_State* L);
  static int link(lua_State* L);
  static int unlink(lua_State* L);
  static int monitor(lua_State* L);
  static int demonitor(lua_State* L);
  static int unmonitor(lua_State* L);
  static int cancel(lua_State* L);
  static int terminate(lua_State* L);
  static int register_name(lua_State* L);
  static int lookup(lua_State* L);
  static int unregister(lua_State* L);
  static int load_entry(lua_State* L);
  static int process_field(lua_State* L);
  static int log_at(lua_State* L);
  static void push_log_api(lua_State* L);

  // lua_process_waits.cpp: time and the calls that wait (time.*, the
  // waiting call).
  static int now(lua_State* L);
  static int sleep(lua_State* L);
  static int duration(lua_State* L);
  static int wait_call(lua_State* L);
  static int start_call(lua_State* L, CommandId id, std::int64_t arg, int first, int n);
  static void push_time_api(lua_State* L);

  // lua_process_env.cpp: the lazy environment (_G's metatable, the
  // libraries, assert, the API tables, kernel_ext's H).
  static int print(lua_State* L);
  static void base_global(lua_State* L, const char* name);
  static int lazy_global(lua_State* L);
  static int assert_(lua_State* L);
  static bool has_own_assert(lua_State* L);
  static void open_base(lua_State* L, LuaProcess& p);
  static void push_string_lib(lua_State* L);
  static void open_lib(lua_State* L, const char* name);
  static void run_opener(lua_State* L, const char* name, int nresults);
  static void seed_random(lua_State* L);
  static int plain(lua_State* L);
  static bool is_metatable_call(const char* k);
  static void install_metatable_calls(lua_State* L, LuaProcess& p);
  static int metatable_call(lua_State* L);
  static void wrap_metatable_calls(lua_State* L, int idx);
  static void plain_globals(lua_State* L);
  static int exit(lua_State* L);
  static int needs_close(lua_State* L);
  static void wrap_needs_close(lua_State* L, int idx, const char* key);
  static void push_module(lua_State* L, LuaProcess& p, const ModuleLine& m);
  static void push_ext_api(lua_State* L, LuaProcess& p, const char* name);
  static int describe(lua_State* L);

  // lua_process_modules.cpp: require's searcher, the registry's Lua
  // halves, sockets in a process.
  static void push_lua_half(lua_State* L, LuaProcess& p, const ModuleLine& m);
  static void push_host_commands(lua_State* L, LuaProcess& p);
  static void push_loaded_module(lua_State* L, LuaProcess& p, const ModuleLine& m);
  static void push_socket_module(lua_State* L, LuaProcess& p);
  static void claim_socket(lua_State* L, std::uint64_t id);
  static void give_socket(lua_State* L, std::uint64_t id);
  static void drop_socket(lua_State* L, std::uint64_t id);
  // lua_process_io_waits.cpp: waits a C continuation takes (lua_process.hpp's io_wait).
  static void io_start(LuaProcess& p, IoWaitCall& call, void* owner, IoContinuation cont, bool watch = false);
  static std::uint64_t io_call_tag(lua_State* L);
  static int io_wait(lua_State* L, IoWaitCall call, void* owner, IoContinuation cont);
  static void io_rewait(lua_State* L, lua_State* co, IoWaitCall call, void* owner, IoContinuation cont);
  static void io_resume(lua_State* L, lua_State* co, int n);
  static void io_forget(lua_State* L, void* owner);
  static void io_watch(lua_State* L, IoWaitCall call, void* owner, IoContinuation cont);
  static void io_unwatch(lua_State* L, std::uint64_t tag);
  static bool io_expire(lua_State* L, std::uint64_t tag);
  static void cancel_self(lua_State* L, std::string reason);
  static std::size_t memory_room(lua_State* L);
  static void check_blockable(lua_State* L);
  static bool blockable(lua_State* L);
  static io::IoServices& io_services(lua_State* L);
  static Pid self_pid(lua_State* L);
  static bool post_self(lua_State* L, std::string_view topic, double value);
  static void track_finalizer(lua_State* L, HostFinalizer* f, HostFinalizer::Run run, void* object);
  static void run_finalizer(lua_State* L, HostFinalizer* f);
  static int wall_time(lua_State* L);
  static void open_package(lua_State* L);
  static int load_std(lua_State* L);
  static int load_api(lua_State* L);
  static int searcher(lua_State* L);

  // lua_process_require.cpp: require before the package library opens.
  static bool own_require_ready();
  static void keep_luajit_require(lua_State* L);
  static bool package_open(lua_State* L);
  static void push_require(lua_State* L);
  static int require(lua_State* L);

  // lua_process_jit.cpp: the JIT probe.
  static void jit_probe_hook(lua_State* L, lua_Debug*);
  static void compile(lua_State* L, LuaProcess* p);
  static void jit_opened(lua_State* L);
};

}  // namespace host::lua
