// Waits whose completion a C continuation takes (lua_process.hpp, io_wait):
// how a socket method on the worker waits for its descriptor's readiness,
// and retries its read or write in the step that hears of it, before the
// task sees any result. Threads: the one running the process.
#include <algorithm>

#include "bindings/codec.hpp"
#include "bindings/lua_process_internal.hpp"
#include "host/io/io_services.hpp"

namespace host::lua {

// Adds the wait's yields to the step's output and records it.
void Primitives::io_start(LuaProcess& p, IoWaitCall& call, void* owner, IoContinuation cont, bool watch) {
  StepOutput& out = *p.step_out_;
  Yield& y = out.add_yield(call.command, call.tag);
  y.arg = call.arg;
  y.bytes = std::move(call.bytes);
  const bool timer = call.timeout >= 0;
  if (timer) out.add_yield(cmd::kSleep, call.tag).arg = static_cast<std::int64_t>(std::min(call.timeout * 1e9, 9e18));
  if (!p.io_waits_) p.io_waits_ = std::make_unique<IoWaits>();
  p.io_waits_->add(call.tag, IoWaits::Wait{owner, cont, call.command, timer, watch});
}

std::uint64_t Primitives::io_call_tag(lua_State* L) { return TaskKernel::kCallTagMark | ++of(L).c_timers_; }

int Primitives::io_wait(lua_State* L, IoWaitCall call, void* owner, IoContinuation cont) {
  LuaProcess& p = of(L);
  p.kernel_.check_blockable(L);
  const std::uint64_t tag = call.tag;
  io_start(p, call, owner, cont);
  return p.kernel_.block_in_call(L, tag);
}

void Primitives::io_rewait(lua_State* L, lua_State* co, IoWaitCall call, void* owner, IoContinuation cont) {
  LuaProcess& p = of(L);
  const std::uint64_t tag = call.tag;
  io_start(p, call, owner, cont);
  p.kernel_.rewait_call(L, tag, co);
}

void Primitives::io_resume(lua_State* L, lua_State* co, int n) { of(L).kernel_.wake_call(L, co, n); }

void Primitives::io_forget(lua_State* L, void* owner) {
  LuaProcess* p = owner_by_api(L);
  if (p && p->io_waits_) p->io_waits_->forget(owner);
}

void Primitives::io_watch(lua_State* L, IoWaitCall call, void* owner, IoContinuation cont) {
  io_start(of(L), call, owner, cont, /*watch=*/true);
}

void Primitives::io_unwatch(lua_State* L, std::uint64_t tag) {
  LuaProcess& p = of(L);
  IoWaits::Wait wait;
  if (!p.io_waits_ || !p.io_waits_->take(tag, &wait)) return;
  if (!p.step_out_->drop_yield(wait.command, tag)) p.step_out_->cancel_yield(wait.command, tag);
  if (wait.timer && !p.step_out_->drop_yield(cmd::kSleep, tag)) p.step_out_->cancel_yield(cmd::kSleep, tag);
}

bool Primitives::io_expire(lua_State* L, std::uint64_t tag) {
  LuaProcess& p = of(L);
  if (!p.io_waits_) return false;
  const IoWaits::Wait* found = p.io_waits_->find(tag);
  if (!found || found->watch) return false;
  IoWaits::Wait wait;
  (void)p.io_waits_->take(tag, &wait);
  // A wait made earlier in this step is taken back before it starts (a
  // cancel would come before it in dispatch, and miss it).
  if (!p.step_out_->drop_yield(wait.command, tag)) p.step_out_->cancel_yield(wait.command, tag);
  if (wait.timer && !p.step_out_->drop_yield(cmd::kSleep, tag)) p.step_out_->cancel_yield(cmd::kSleep, tag);
  lua_State* co = p.kernel_.take_call(L, tag);
  if (!co) return true;  // its task is gone
  wait.cont(L, co, wait.owner, tag, false, {});
  return true;
}

void Primitives::cancel_self(lua_State* L, std::string reason) {
  LuaProcess& p = of(L);
  (void)p.rt_.scheduler().cancel(p.ctx_.self, std::move(reason), p.ctx_.self);
}

std::size_t Primitives::memory_room(lua_State* L) {
  LuaProcess& p = of(L);
  const std::size_t limit = p.rt_.options().mem_limit;
  const std::size_t used = static_cast<std::size_t>(lua_gc(L, LUA_GCCOUNT, 0)) * 1024;
  return used < limit ? limit - used : 0;
}

io::IoServices& Primitives::io_services(lua_State* L) { return of(L).rt_.io(); }

void Primitives::check_blockable(lua_State* L) { of(L).kernel_.check_blockable(L); }
bool Primitives::blockable(lua_State* L) { return of(L).kernel_.blockable(L); }

Pid Primitives::self_pid(lua_State* L) { return of(L).ctx_.self; }

bool Primitives::post_self(lua_State* L, std::string_view topic, double value) {
  LuaProcess& p = of(L);
  std::string bytes;
  lua_pushnumber(L, value);
  const std::string err = encode_value(L, lua_gettop(L), bytes);
  lua_pop(L, 1);
  return err.empty() && p.rt_.scheduler().send(p.ctx_.self, topic, std::move(bytes), p.ctx_.self).empty();
}

std::uint64_t io_call_tag(lua_State* L) { return Primitives::io_call_tag(L); }
int io_wait(lua_State* L, IoWaitCall call, void* owner, IoContinuation cont) {
  return Primitives::io_wait(L, std::move(call), owner, cont);
}
void io_rewait(lua_State* L, lua_State* co, IoWaitCall call, void* owner, IoContinuation cont) {
  Primitives::io_rewait(L, co, std::move(call), owner, cont);
}
void io_resume(lua_State* L, lua_State* co, int n) { Primitives::io_resume(L, co, n); }
void io_forget(lua_State* L, void* owner) { Primitives::io_forget(L, owner); }
void io_watch(lua_State* L, IoWaitCall call, void* owner, IoContinuation cont) {
  Primitives::io_watch(L, std::move(call), owner, cont);
}
void io_unwatch(lua_State* L, std::uint64_t tag) { Primitives::io_unwatch(L, tag); }
bool io_expire(lua_State* L, std::uint64_t tag) { return Primitives::io_expire(L, tag); }
void cancel_self(lua_State* L, std::string reason) { Primitives::cancel_self(L, std::move(reason)); }
std::size_t memory_room(lua_State* L) { return Primitives::memory_room(L); }
void check_blockable(lua_State* L) { Primitives::check_blockable(L); }
bool blockable(lua_State* L) { return Primitives::blockable(L); }
io::IoServices& io_services(lua_State* L) { return Primitives::io_services(L); }
Pid self_pid(lua_State* L) { return Primitives::self_pid(L); }
bool post_self(lua_State* L, std::string_view topic, double value) { return Primitives::post_self(L, topic, value); }

// A completion of one of the waits above: its continuation runs, and the
// other half of the wait (the readiness or the sleep that bounds it) is
// cancelled. False: no such wait (an ordinary waiting call's).
bool LuaProcess::io_wait_completed(lua_State* L, const Event& ev) {
  IoWaits::Wait wait;
  if (!io_waits_->take(ev.tag, &wait)) return false;
  lua_State* co = wait.watch ? nullptr : kernel_.take_call(L, ev.tag);
  // The sleep's completion has an empty payload; the call's never does
  // (a failure carries its error).
  const bool timed_out = !ev.failed && ev.payload.empty();
  if (wait.timer && !timed_out) step_out_->cancel_yield(cmd::kSleep, ev.tag);
  if (timed_out) step_out_->cancel_yield(wait.command, ev.tag);
  if (!co && !wait.watch) return true;  // its task is gone
  wait.cont(L, co, wait.owner, ev.tag, ev.failed, ev.payload);
  return true;
}

}  // namespace host::lua
