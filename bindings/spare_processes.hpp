// SpareProcesses: Lua processes made ahead of time by idle workers (state,
// kernel, globals: LuaProcess::Prepare), with the module the
// last spawn asked for already loaded (not run: loading runs no script
// code), so that a spawn only runs its module and starts its entry.
// Threads: any; a mutex guards the list, and making a spare happens outside
// it.
//
// Why: a spawn used to make all of that on the spawner's thread, about half
// of its cost. A process that spawns in a loop (fork-join, a process per
// call) kept one core busy while the others waited for work; now the idle
// cores make the states, between processes (Scheduler::set_idle_job).
//
// How many: none until a spawn finds the list empty. Each such miss doubles
// the number kept, up to kMaxSpares, and each spawn that finds one lowers
// it by one, down to kFirstTarget (the spares past it are not made again
// as spawns take them): a burst soon has what it needs, and a program that
// spawns at a pace the idle workers keep up with holds a few, not the
// most an early burst wanted. A spare holds 15-40 KB (with its module).
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace host::lua {

class LuaProcess;
class LuaRuntime;

class SpareProcesses {
 public:
  static constexpr std::size_t kFirstTarget = 4;
  static constexpr std::size_t kMaxSpares = 64;

  explicit SpareProcesses(LuaRuntime& runtime);
  ~SpareProcesses();
  SpareProcesses(const SpareProcesses&) = delete;
  SpareProcesses& operator=(const SpareProcesses&) = delete;

  // A prepared process, or null when there is none (which raises the
  // number kept): one that loaded `module` when there is one. `module` (the
  // entry's) is what the next spares load.
  std::unique_ptr<LuaProcess> take(std::string_view module);
  // Makes one spare if fewer than the target exist or are being made. False
  // when there were enough (or memory ran out): the idle job's contract.
  bool make_one();

 private:
  LuaRuntime& rt_;
  std::mutex mu_;
  std::vector<std::unique_ptr<LuaProcess>> spares_;  // guarded by mu_
  std::size_t target_ = 0;                            // guarded by mu_
  std::size_t making_ = 0;                            // guarded by mu_: being made outside the lock
  std::string module_;                                // guarded by mu_: the last spawn's module
};

}  // namespace host::lua
