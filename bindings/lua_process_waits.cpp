// Time and the calls that wait: the time table (now and sleep in C, the
// rest kernel_ext.lua's), the waiting call (call(CMD, arg, ...), and
// start_waiting_call for C bindings: docs/ARCHITECTURE.md, "A call that
// waits"), and the sleep command of the kernel's timers (KernelHost; the
// timers themselves are TaskKernel's). Both go straight into the step's
// output. Threads: the one running the process.
#include <algorithm>
#include <cstdint>

#include <lua.hpp>

#include "bindings/codec.hpp"
#include "bindings/duration.hpp"
#include "bindings/lua_process_internal.hpp"
#include "host/error.hpp"

namespace host::lua {

int Primitives::now(lua_State* L) {
  lua_pushnumber(L, monotonic_seconds());
  return 1;
}

// time.sleep(d): C, so that a process which only sleeps never loads
// kernel_ext.lua (TaskKernel::block_in_sleep says why).
int Primitives::sleep(lua_State* L) {
  auto& p = of(L);
  const double secs = check_duration(L, 1, 1);
  p.kernel_.check_blockable(L);
  if (secs <= 0) return p.kernel_.yield_to_others(L, 0);  // behind the other processes
  return p.kernel_.block_in_sleep(L, secs);
}

// H.duration(d, level) -> seconds, for kernel_ext.lua's time calls.
int Primitives::duration(lua_State* L) {
  const double secs = check_duration(L, 1, static_cast<int>(luaL_checkinteger(L, 2)));
  lua_pushnumber(L, secs);
  return 1;
}

// The one way a binding waits on something outside the process:
// call(command, arg, ...) starts command `command` with the integer
// arg and the other arguments encoded as its bytes, and blocks the
// running task until the handler completes it (Scheduler::
// complete_yield, from any thread); its results become this call's
// returns, or nil, err when it failed (TaskKernel::complete_call).
// require("host.call") returns it; every module's Lua half gets it as its
// chunk's first argument (push_lua_half).
int Primitives::wait_call(lua_State* L) {
  const lua_Number id = luaL_checknumber(L, 1);
  if (id < cmd::kFirstUser || id >= 1u << 24 || id != static_cast<CommandId>(id))
    return luaL_argerror(L, 1, "not a command id");
  const lua_Number arg = luaL_optnumber(L, 2, 0);
  return start_call(L, static_cast<CommandId>(id), static_cast<std::int64_t>(arg), 3, lua_gettop(L) - 2);
}

// wait_call's body, for C bindings too: the n values from index first
// are the command's arguments.
int Primitives::start_call(lua_State* L, CommandId id, std::int64_t arg, int first, int n) {
  auto& p = of(L);
  p.kernel_.check_blockable(L);
  std::string bytes;
  if (n > 0) {
    std::string err = encode_values(L, first, n, bytes, "argument");
    if (!err.empty()) return luaL_error(L, "%s", err.c_str());
  }
  // Into the step's output at once (a task runs only inside a step): a
  // list of its own would make every process larger.
  const std::uint64_t tag = TaskKernel::kCallTagMark | ++p.c_timers_;
  Yield& y = p.step_out_->add_yield(id, tag);
  y.arg = arg;
  y.bytes = std::move(bytes);
  return p.kernel_.block_in_call(L, tag);
}

// time: now and sleep are C; the first other name (after, ticker,
// timer) brings in kernel_ext's calls.
void Primitives::push_time_api(lua_State* L) {
  lua_createtable(L, 0, 5);
  lua_pushcfunction(L, now);
  lua_setfield(L, -2, "now");
  lua_pushcfunction(L, sleep);
  lua_setfield(L, -2, "sleep");
  lua_createtable(L, 0, 1);
  lua_pushcfunction(L, [](lua_State* S) -> int {
    auto& p = of(S);
    // Copy kernel_ext's time calls in once, then look again.
    push_ext_api(S, p, "time");
    lua_pushnil(S);
    while (lua_next(S, -2)) {
      lua_pushvalue(S, -2);
      lua_insert(S, -2);
      lua_rawset(S, 1);
    }
    lua_pop(S, 1);
    lua_pushnil(S);
    lua_setmetatable(S, 1);
    lua_pushvalue(S, 2);
    lua_rawget(S, 1);
    return 1;
  });
  lua_setfield(L, -2, "__index");
  lua_setmetatable(L, -2);
}

int start_waiting_call(lua_State* L, CommandId command, int first, int n) {
  return Primitives::start_call(L, command, 0, first, n);
}

// The timers' command (KernelHost), straight into the step's output:
// TaskKernel::settle_timers starts and cancels it at the step's end. A
// count from kTimerTagMark, so that a tag is never one still out (a
// completion already on its way when its wait ended must not end the
// next).
std::uint64_t LuaProcess::start_timer(double secs) {
  const std::uint64_t tag = TaskKernel::kTimerTagMark | ++c_timers_;
  step_out_->add_yield(cmd::kSleep, tag).arg = static_cast<std::int64_t>(std::min(secs * 1e9, 9e18));
  return tag;
}

void LuaProcess::cancel_timer(std::uint64_t tag) { step_out_->cancel_yield(cmd::kSleep, tag); }

}  // namespace host::lua
