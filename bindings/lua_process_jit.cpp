// The JIT probe: a process starts interpreted, and a count hook, armed on
// its first steps and then on sampled ones, turns its compiler on once it
// has run enough bytecode and its steps are long or it runs often on its
// core (config.hpp's kJit*). The same hook stops a module's top-level
// code at the time limit while Init runs it. Threads: the one running the
// process.
#include <atomic>
#include <bit>
#include <chrono>
#include <cstdint>

#include <lua.hpp>

#include "bindings/lua_process_internal.hpp"
#include "host/config.hpp"
#include "host/worker.hpp"

namespace host::lua {

namespace {
// The next thread tag (ThreadSteps::tag).
std::atomic<std::uint8_t> thread_tags{0};
}  // namespace

// The count hook of the JIT probe (config::kJitProbeSteps, armed by
// LuaProcess::probe_jit), every kJitHookInterval bytecodes of an armed
// step: adds them to the estimate of what the process has run (32 times
// over in a sampled step, which stands for the 32 steps since the last).
// Once that passes kJitWarmupInstructions, the process has run long
// enough to be worth compiling, if this step is a long computation or
// two of the last four armed steps were long (config::kJitLongStepFirings
// says why), it compiles the process. It fires at once in a step that
// probe_jit found hot.
//
// In Init (no step yet) it only watches the time limit: a module's
// top-level code runs inside the spawn call, outside any step the
// runaway monitor can stop, so the hook raises "limit: time" past
// t_load_deadline itself, and compiles nothing (compiled loops run no
// hooks).
void Primitives::jit_probe_hook(lua_State* L, lua_Debug*) {
  Worker::park_if_abandoned();  // a spawn's Init on a thread given up (Scheduler::spawn)
  auto* p = &of(L);
  if (p->interrupted_.load(std::memory_order_acquire)) luaL_error(L, "limit: time");
  if (p->steps_ == 0) [[unlikely]] {
    using Clock = std::chrono::steady_clock;
    if (t_load_deadline == Clock::time_point::max()) return;  // not in Init (Prepare's setup)
    const auto now = Clock::now();
    if (t_load_deadline == Clock::time_point::min()) {  // the first firing: the clock starts
      const double limit = p->rt_.options().time_limit;
      t_load_deadline = limit < 1e9 ? now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(limit))
                                    : Clock::time_point::max() - Clock::duration(1);
    } else if (now > t_load_deadline) {
      p->interrupted_.store(true, std::memory_order_release);
      luaL_error(L, "limit: time");
    }
    return;
  }
  if (p->jit_hot_samples_ >= config::kJitHotSamples) return compile(L, p);  // see probe_jit
  if (p->jit_fired_step_ != p->steps_) {  // the first firing in this step: a long one
    p->jit_fired_step_ = p->steps_;
    p->jit_step_firings_ = 0;
    p->jit_long_history_ |= 1;
  }
  if (p->jit_step_firings_ < 255) ++p->jit_step_firings_;
  const std::uint32_t weight = p->steps_ <= config::kJitProbeSteps ? 1 : config::kJitSampleSteps;
  if (p->jit_estimate_ < config::kJitWarmupInstructions) {  // (so that it cannot wrap)
    p->jit_estimate_ += std::uint32_t{config::kJitHookInterval} * weight;
    if (p->jit_estimate_ < config::kJitWarmupInstructions) return;
  }
  if (p->jit_step_firings_ < config::kJitLongStepFirings &&
      std::popcount(static_cast<unsigned>(p->jit_long_history_ & 0xF)) < 2)
    return;
  compile(L, p);
}

// The JIT probe's verdict: the hook removes itself and opens jit, which
// switches the compiler on.
void Primitives::compile(lua_State* L, LuaProcess* p) {
  lua_sethook(L, nullptr, 0, 0);
  // The runaway monitor may have armed its hook just before ours was
  // cleared: arm it again.
  if (p->interrupted_.load(std::memory_order_acquire)) {
    p->Interrupt();
    luaL_error(L, "limit: time");
  }
  open_lib(L, "jit");
}

// With the compiler on, process.receive's Lua fast path pays (see
// TaskKernel::push_receive).
void Primitives::jit_opened(lua_State* L) {
  auto& p = of(L);
  p.jit_on_ = true;
  p.kernel_.enable_fast_receive();
  if (has_own_assert(L)) open_base(L, p);  // compiled code calls LuaJIT's inline
}

// Arms the JIT probe's count hook for this step or disarms it (see
// config::kJitProbeSteps): armed from Prepare through the first steps, then
// on one step in kJitSampleSteps. A sampled step also tells whether the
// process is hot (config::kJitHotShare): then the hook is armed to fire at
// the step's first bytecode, and compiles.
void LuaProcess::probe_jit(std::uint32_t steps_here) {
  const std::uint32_t step = steps_;
  count_step();
  const bool arm = step < config::kJitProbeSteps || step % config::kJitSampleSteps == 0;
  int hook_count = config::kJitHookInterval;
  if (arm) jit_long_history_ = static_cast<std::uint8_t>(jit_long_history_ << 1);
  if (step % config::kJitSampleSteps == 0) {
    std::uint8_t& tag = this_thread_steps.tag;
    while (tag == 0) tag = thread_tags.fetch_add(1, std::memory_order_relaxed) + 1;  // (skips 0 on wrapping)
    if (tag != jit_hot_thread_) {
      // Its first sample, or it moved: the steps since the last sample
      // were another thread's. This one says nothing.
      jit_hot_thread_ = tag;
    } else if (steps_here - jit_hot_stamp_ <= config::kJitSampleSteps * config::kJitHotShare) {
      if (jit_hot_samples_ < config::kJitHotSamples) ++jit_hot_samples_;
    } else {
      jit_hot_samples_ = 0;
    }
    jit_hot_stamp_ = steps_here;
    if (jit_hot_samples_ >= config::kJitHotSamples) hook_count = 1;
  }
  // (A hot sample re-arms the hook with its count of 1, armed or not.)
  if (arm == jit_probe_armed_ && hook_count == config::kJitHookInterval) return;
  jit_probe_armed_ = arm;
  if (arm) lua_sethook(L_, Primitives::jit_probe_hook, LUA_MASKCOUNT, hook_count);
  else lua_sethook(L_, nullptr, 0, 0);
  // The runaway monitor may have armed its own hook just before: arm it again.
  if (interrupted_.load(std::memory_order_acquire)) Interrupt();
}

}  // namespace host::lua
