// Runaway protection (docs/LUA_API.md, Limits): a monitor thread that stops a
// process whose step runs longer than the time limit, and keeps the other
// processes running meanwhile. Threads: its own; started and stopped by the
// Scheduler.
//
// How. Each worker publishes a step epoch (odd during a step), the slot
// it runs and its thread's CPU-time clock; the monitor samples them every
// tick, never reading a clock on the workers' hot path (Go's sysmon does the
// same). The time limit counts the CPU time the step's thread spends, so a
// step blocked in a system call (io.read on a quiet pipe, os.execute) is not
// running Lua and is never stopped for it. A step is ended when it has used
// the time limit's CPU time, or when its process was terminated:
//   1. Interrupt(): the Lua process sets a count hook that raises
//      "limit: time"; interpreted code stops at once, a C call when it
//      returns to Lua (the worker then fails it with "terminated" if that
//      was why).
//   2. Code that runs no hook (a JIT-compiled loop; a __gc finalizer,
//      during which LuaJIT switches hooks off; a C call that does not
//      return): if the step is still running a moment later, the monitor
//      signals the worker thread; if the thread is executing JIT machine
//      code (anonymous executable memory: no lock held, no C++ frame to
//      unwind), the handler parks it for good. Else the thread is given up
//      where it is (abandoned): it parks itself at its next safe point
//      (back in Lua, in the interrupt hook; at the end of its step:
//      Worker::park_if_abandoned), and the monitor signals it every tick
//      meanwhile, parking it once it is in JIT code or in the Lua VM
//      (which holds no lock). Either way the monitor fails the process
//      ("limit: time" or "terminated"), and gives the worker (its deque
//      included) a fresh thread.
//   A spawn's Init inside the step (the new module's top-level code) is
//   the new process's time, not the step's: it stops itself at the limit
//   (LuaProcess::Init). The monitor leaves out of the step's time each
//   tick through which one Init ran, up to the limit (an Init that did not
//   stop itself by then is the step's again); a loop of short spawns is
//   the step's.
//   3. Handoff: once a step has run for kHandoffAfter (wall time) with work
//      queued behind it, the monitor wakes a parked worker, or, if none is
//      parked, starts a helper worker thread, so the stuck worker's queue is
//      stolen and run even with --workers 1 (Go's sysmon hands a stuck
//      thread's P to a new thread the same way). Helpers retire when out of
//      work.
// The stopped process's Lua state and object are left as they are
// (Abandon, Scheduler::finish): freeing them from another thread could run
// finalizers on a state stopped mid-trace, or pull them from under a thread
// still inside them.
#pragma once

#include <pthread.h>

#include <chrono>
#include <cstdint>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace host {

class Scheduler;

class RunawayMonitor {
 public:
  // vm_code: an address in the Lua VM's code (its shared library), where
  // an abandoned thread holds no lock and may be parked; null for none.
  RunawayMonitor(Scheduler& scheduler, std::chrono::milliseconds limit, const void* vm_code);
  ~RunawayMonitor();
  RunawayMonitor(const RunawayMonitor&) = delete;
  // Stops the monitor thread; returns how many threads it gave up that are
  // not parked yet (still in a C call or native code).
  std::size_t stop();

 private:
  using Clock = std::chrono::steady_clock;
  struct Watch {
    std::uint64_t epoch = 0;
    Clock::time_point since;  // wall clock: the handoff's
    std::int64_t cpu_start = 0;  // the step's thread's CPU time (ns) at its start, moved by Inits
    std::int64_t cpu_last = 0;
    std::int64_t init_cpu = 0;  // CPU time left out for the Init running now
    std::uint64_t init_epoch = 0;
    bool interrupted = false;
    bool terminated = false;  // interrupted because the process was terminated
    Clock::time_point interrupted_at;
  };
  // A worker thread given up inside a step and not parked yet.
  struct Adrift {
    pthread_t handle;
    int tid;
  };
  void run();
  // Returns whether worker i is in a long step (for helper retirement).
  bool check(std::size_t i, Clock::time_point now);
  // Ends worker i's step (epoch e): parks its thread or gives it up, fails
  // the process, gives the worker a new thread. False when the step ended
  // meanwhile.
  bool stop_step(std::size_t i, std::uint64_t epoch, bool terminated);
  // Signals thread tid (whose handle is h) and waits briefly; true when it
  // is parked.
  bool signal_park(pthread_t h, int tid, std::chrono::milliseconds wait);
  void hand_off();

  Scheduler& scheduler_;
  const std::uintptr_t vm_code_;
  const std::chrono::milliseconds limit_;
  const std::chrono::milliseconds tick_;
  // How long after its interrupt a step that has not ended is stopped by
  // parking or giving up its thread.
  const std::chrono::milliseconds stop_grace_;
  std::vector<Watch> watches_;  // monitor thread only
  std::vector<Adrift> adrift_;  // monitor thread only
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;  // guarded by mu_
  std::thread thread_;
};

}  // namespace host
