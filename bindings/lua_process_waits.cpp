// Time and the calls that wait: the time table (now and sleep in C, the
// rest kernel_ext.lua's), the waiting call (call(CMD, arg, ...), and
// start_waiting_call for C bindings: docs/ARCHITECTURE.md, "A call that
// waits"), the C timers TaskKernel asks for (KernelHost), kernel_ext's
// sleep and cancel commands and its timed selects' shared timer. A step's
// sleeps and cancels gather here and join its output at its end
// (flush_commands); waiting calls go into the output at once. Threads:
// the one running the process.
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

// A sleep command for flush_commands, its nanoseconds bounded.
void Primitives::add_sleep(LuaProcess& p, std::uint64_t tag, double secs) {
  p.pending_sleeps_.emplace_back(tag, static_cast<std::int64_t>(std::min(secs * 1e9, 9e18)));
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
// require("host.call") returns it; fs.lua and exec.lua get it as their
// chunks' argument.
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

int Primitives::sleep_cmd(lua_State* L) {
  const auto tag = static_cast<std::uint64_t>(luaL_checknumber(L, 1));
  add_sleep(of(L), tag, luaL_checknumber(L, 2));
  return 0;
}

int Primitives::cancel_cmd(lua_State* L) {
  auto& p = of(L);
  p.pending_cancels_.push_back(static_cast<std::uint64_t>(luaL_checknumber(L, 1)));
  return 0;
}

// The timed selects' shared timer (LuaProcess::select_timer_), for
// kernel_ext.lua's channel_select.
// H.sel_wait(secs, tag, due) -> the shared timer's tag, now with a
// select waiting on it, and the select's deadline (monotonic_seconds);
// or 0 when that deadline comes before the shared timer's (due, which
// kernel_ext keeps): the select then starts a timer of its own. With
// none armed, it starts one with tag (kernel_ext's next) for this
// select's deadline.
int Primitives::sel_wait(lua_State* L) {
  auto& p = of(L);
  const double secs = luaL_checknumber(L, 1);
  const double deadline = monotonic_seconds() + secs;
  if (p.select_timer_ == 0) {
    p.select_timer_ = static_cast<std::uint64_t>(luaL_checknumber(L, 2));
    add_sleep(p, p.select_timer_, secs);
  } else if (deadline < luaL_checknumber(L, 3)) {
    lua_pushinteger(L, 0);
    return 1;
  }
  p.select_timer_idle_ = false;
  lua_pushnumber(L, static_cast<lua_Number>(p.select_timer_));
  lua_pushnumber(L, deadline);
  return 2;
}

// H.sel_idle(): no select waits on the shared timer any more; the step's
// end drops it unless one comes first (LuaProcess::settle_select_timer).
int Primitives::sel_idle(lua_State* L) {
  of(L).select_timer_idle_ = true;
  return 0;
}

// H.sel_timer(tag, secs): the shared timer fired (or went with
// process.upgrade): a new one, tag (kernel_ext's next), for the selects
// still waiting, or 0 for none.
int Primitives::sel_timer(lua_State* L) {
  auto& p = of(L);
  p.select_timer_ = static_cast<std::uint64_t>(luaL_checknumber(L, 1));
  p.select_timer_idle_ = false;
  if (p.select_timer_ != 0) add_sleep(p, p.select_timer_, luaL_checknumber(L, 2));
  return 0;
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

// TaskKernel's C timers' commands (KernelHost): a count from kTimerTagMark,
// so that a tag is never one still out (a completion already on its way
// when its receive got a message must not end the task's next wait).
std::uint64_t LuaProcess::start_timer(double secs) {
  const std::uint64_t tag = TaskKernel::kTimerTagMark | ++c_timers_;
  Primitives::add_sleep(*this, tag, secs);
  return tag;
}

// A timer started in this step is only dropped: its command is not out
// yet (flush_commands sends cancels before new sleeps).
void LuaProcess::cancel_timer(std::uint64_t tag) {
  if (std::erase_if(pending_sleeps_, [tag](const auto& s) { return s.first == tag; }) == 0)
    pending_cancels_.push_back(tag);
}

void LuaProcess::flush_commands(StepOutput& out) {
  for (auto tag : pending_cancels_) out.cancel_yield(cmd::kSleep, tag);
  for (auto& [tag, ns] : pending_sleeps_) out.add_yield(cmd::kSleep, tag).arg = ns;
  pending_cancels_.clear();
  pending_sleeps_.clear();
}

void LuaProcess::settle_select_timer() {
  if (select_timer_ == 0 || !select_timer_idle_) return;
  cancel_timer(select_timer_);
  select_timer_ = 0;
}

}  // namespace host::lua
