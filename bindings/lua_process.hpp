// LuaProcess: a Process whose code is a Lua module, run in its own LuaJIT
// state. Threads: one at a time (the worker stepping it, or the spawner
// during Init).
//
// Init creates the state on its own arena (bindings/state_arena.hpp) behind
// a counting allocator (the per-process memory figure and limit), opens only
// the base library (the others open on first use; jit once the process has
// run a while, see config::kJitWarmupInstructions), loads the process kernel
// (bindings/kernel.lua; kernel_ext.lua comes on first use) and the entry
// module from the shared bytecode cache, and starts the entry method as the
// main task. Step makes one call into the kernel, which takes the events that
// arrived and runs its ready tasks; their waits on timers come back as sleep
// yields.
#pragma once

#include <atomic>
#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "bindings/lua_runtime.hpp"
#include "bindings/state_arena.hpp"
#include "host/process.hpp"

struct lua_State;

namespace host::lua {

class LuaProcess final : public Process {
 public:
  explicit LuaProcess(LuaRuntime& runtime);
  ~LuaProcess() override;

  std::string Init(const ProcessContext& ctx, const std::string& entry, std::string input) override;
  void Step(std::span<Event> events, StepOutput& out) override;
  void Close() override;
  void Interrupt() override;
  const char* Name() const override { return entry_.c_str(); }
  void Abandon() override;

  std::size_t memory_used() const { return used_; }

 private:
  friend struct Primitives;
  static void* allocate(void* ud, void* ptr, std::size_t osize, std::size_t nsize);

  // Pushes on L (the main state or one of its coroutines) the entry's method
  // function, loading the newest module version; or returns the error (SPEC
  // section 2) and pushes nothing.
  std::string push_entry(lua_State* L, const std::string& entry);
  void install_primitives();
  void install_globals();
  // Calls the kernel function pushed below its nargs arguments; on failure
  // sets out to Failed and returns false.
  bool call_kernel(int nargs, int nresults, StepOutput& out);
  void fail_from_lua(StepOutput& out, const char* what);
  void flush_commands(StepOutput& out);

  LuaRuntime& rt_;
  StateArena arena_;  // declared before L_'s users: it outlives the state
  lua_State* L_ = nullptr;
  std::size_t used_ = 0;
  std::size_t limit_;
  bool mem_exceeded_ = false;
  std::atomic<bool> interrupted_{false};  // set by the runaway monitor
  bool abandoned_ = false;
  ProcessContext ctx_;
  std::string self_;    // this PID as a string
  std::string entry_;   // "module:method" it runs
  enum Ref { kStep, kApi, kStart, kRefCount };  // kernel functions kept in the registry
  int refs_[kRefCount] = {};
  std::span<Event> step_events_;   // the events of the running Step, for H.next_event
  std::size_t step_cursor_ = 0;    // how many of them K.step has taken
  std::vector<std::pair<std::uint64_t, std::int64_t>> pending_sleeps_;  // (tag, ns) since the last step
  std::vector<std::uint64_t> pending_cancels_;
  std::vector<std::string> script_modules_;  // loaded from the script dir or stdlib, for upgrade
  std::uint64_t next_monitor_ref_ = 0;
  std::unordered_map<std::string, std::vector<std::uint64_t>> monitors_;  // target PID -> refs
};

}  // namespace host::lua
