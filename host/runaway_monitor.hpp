// Runaway protection (SPEC section 6): a monitor thread that stops a
// process whose step runs longer than the time limit, and keeps the other
// processes running meanwhile. Threads: its own; started and stopped by the
// Scheduler.
//
// How. Each worker publishes a step epoch (odd during a step) and the slot
// it runs; the monitor samples them every tick, never reading a clock on
// the workers' hot path (Go's sysmon does the same). A step whose epoch has
// not moved for the time limit is a runaway:
//   1. Interrupt(): the Lua process sets a count hook that raises
//      "limit: time"; interpreted code and C calls stop at once.
//   2. JIT-compiled loops never run hooks. If the step is still running a
//      moment later, the monitor signals the worker thread; if the thread is
//      executing JIT machine code (anonymous executable memory: no lock held,
//      no C++ frame to unwind), the handler parks it for good. The monitor
//      then fails the process with "limit: time", and gives the worker (its
//      deque included) a fresh thread. If the thread is in native code, the
//      monitor retries at the next tick.
//   A spawn's Init inside the step (the new module's top-level code) is
//   the new process's time, not the step's: it stops itself at the limit
//   (LuaProcess::Init). The monitor moves the step's start forward by the
//   ticks it saw such an Init running.
//   3. Handoff: once a step has run for kHandoffAfter with work queued
//      behind it, the monitor wakes a parked worker, or, if none is parked,
//      starts a helper worker thread, so the stuck worker's queue is stolen
//      and run even with --workers 1 (Go's sysmon hands a stuck thread's P
//      to a new thread the same way). Helpers retire when out of work.
// The parked thread's Lua state is left as it is (Abandon): freeing it from
// another thread could run finalizers on a state stopped mid-trace.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace host {

class Scheduler;

class RunawayMonitor {
 public:
  RunawayMonitor(Scheduler& scheduler, std::chrono::milliseconds limit);
  ~RunawayMonitor();
  RunawayMonitor(const RunawayMonitor&) = delete;
  void stop();

 private:
  struct Watch {
    std::uint64_t epoch = 0;
    std::chrono::steady_clock::time_point since;
    std::chrono::steady_clock::time_point last;  // this watch's last check
    bool interrupted = false;
    std::chrono::steady_clock::time_point interrupted_at;
  };
  void run();
  // Returns whether worker i is in a long step (for helper retirement).
  bool check(std::size_t i, std::chrono::steady_clock::time_point now);
  bool try_park(std::size_t i, std::uint64_t epoch);
  void hand_off();

  Scheduler& scheduler_;
  const std::chrono::milliseconds limit_;
  const std::chrono::milliseconds tick_;
  std::vector<Watch> watches_;  // monitor thread only
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;  // guarded by mu_
  std::thread thread_;
};

}  // namespace host
