// A worker: one OS thread that finds ready processes and steps them.
// Threads: the deque's owner side and the run loop belong to the worker's
// own thread; other workers only steal from deque().
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "host/config.hpp"
#include "host/deque.hpp"
#include "host/pid_table.hpp"
#include "host/process.hpp"

namespace host {

class Scheduler;

class Worker {
 public:
  // A helper worker has no thread until the runaway monitor starts one to
  // take over the queue of a stuck worker; its thread ends when it runs out
  // of work instead of parking.
  Worker(Scheduler& scheduler, unsigned id, bool helper = false);
  Worker(const Worker&) = delete;

  void start();
  void join();
  bool helper() const { return helper_; }
  // Helpers only: starts the thread unless one runs. Monitor thread only.
  bool start_helper();

  // The worker running on this thread, or null on any other thread.
  static Worker* current();
  Scheduler& scheduler() { return scheduler_; }
  WorkDeque<ProcessSlot*>& deque() { return deque_; }
  // Owner thread only.
  void push_local(ProcessSlot* slot) { deque_.push(slot); }
  // Owner thread only: the running step sent to a process that waits in a
  // queue. A step that keeps feeding queued processes (a producer) wakes a
  // parked worker every config::kFeedsBeforeWake of them: schedule() wakes
  // none for a lone process, which would otherwise wait for the producer's
  // step to end while a core idles. Not once a step: the worker that takes
  // the consumer may park again when the consumer catches up, and the
  // consumer is readied into the producer's deque once more.
  // (Inline, its wake out of line: link-time optimisation had made it a
  // call on every send to a queued consumer.)
  void fed_queued_process() {
    if (++fed_ % config::kFeedsBeforeWake == 0) wake_for_fed();
  }
  // Owner thread only: the running step, or its dispatch completing a
  // command inline, posted to the process this worker runs (a send to
  // itself). Such an event readies it at the step's end, but is no stream
  // to gather a batch of (gather_batch would only wait kStreamQuiet).
  void posted_to_running() { ++own_posts_; }
  // What this worker did, for tests and diagnosis (the scheduler logs the
  // sums at debug level when it stops): written by its own thread only, read
  // by any.
  struct Counters {
    std::uint64_t steps = 0;        // processes stepped
    std::uint64_t steals = 0;       // successful steals from another worker's deque
    std::uint64_t parks = 0;        // times it slept in commit_park
    std::uint64_t batch_waits = 0;  // times it held a requeued process to gather a batch (gather_batch)
    Counters& operator+=(const Counters& o) {
      steps += o.steps;
      steals += o.steals;
      parks += o.parks;
      batch_waits += o.batch_waits;
      return *this;
    }
  };
  Counters counters() const;
  PidTable::LocalFree& free_slots() { return free_slots_; }

  // Runaway detection. epoch_ is odd while a step runs; the runaway monitor
  // sets kBusy while it touches the running process, and the worker waits
  // for it to clear before it ends the step, so the process cannot be
  // finished and freed under the monitor.
  static constexpr std::uint64_t kBusy = std::uint64_t{1} << 63;
  std::atomic<std::uint64_t>& epoch() { return epoch_; }
  ProcessSlot* running() const { return running_.load(std::memory_order_acquire); }
  // Spawns whose Init runs inside the running step (a spawned module's
  // top-level code runs there): that time is the new process's, which
  // stops itself at the time limit (LuaProcess::Init), so the monitor does
  // not count it against the step. Owner thread writes (Scheduler::spawn).
  std::atomic<std::uint32_t>& initializing() { return initializing_; }
  // Odd while execute() runs, from taking a process to its last effect
  // (a wake, an exit event): Scheduler::nothing_can_run reads it.
  std::uint64_t activity() const { return activity_.load(std::memory_order_acquire); }
  int thread_id() const { return tid_.load(std::memory_order_acquire); }
  pthread_t native_handle() { return thread_.native_handle(); }
  // Monitor only, with kBusy held and the old thread parked for good: gives
  // the worker (its deque included) a new thread.
  void replace_thread();

 private:
  void run();
  ProcessSlot* find_work();
  ProcessSlot* steal_work();
  void execute(ProcessSlot* slot);
  // See config::kStreamBatch. `mark` is the slot's arrivals when its step
  // took its events.
  void gather_batch(ProcessSlot* slot, std::uint32_t mark);
  std::uint64_t next_random();

  Scheduler& scheduler_;
  const unsigned id_;
  const bool helper_;
  std::atomic<bool> active_{false};  // helpers: a thread runs the loop
  WorkDeque<ProcessSlot*> deque_;
  std::thread thread_;
  std::vector<std::thread> abandoned_;  // parked threads, never joined (monitor only)
  std::atomic<std::uint64_t> epoch_{0};
  std::atomic<std::uint64_t> activity_{0};
  std::atomic<ProcessSlot*> running_{nullptr};
  std::atomic<std::uint32_t> initializing_{0};
  std::atomic<int> tid_{0};
  // Counters, written by the worker thread only (a relaxed load and store,
  // no locked instruction).
  std::atomic<std::uint64_t> batch_waits_{0};
  std::atomic<std::uint64_t> steps_{0};
  std::atomic<std::uint64_t> steals_{0};
  std::atomic<std::uint64_t> parks_{0};
  void wake_for_fed();
  static void bump(std::atomic<std::uint64_t>& c) { c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed); }
  // --- owned by the worker thread ---
  std::uint32_t tick_ = 0;
  std::uint32_t fed_ = 0;  // fed_queued_process calls in this step
  std::uint32_t own_posts_ = 0;  // posted_to_running calls in this step
  PidTable::LocalFree free_slots_;
  std::uint64_t rng_;
  std::vector<Event> events_;  // swapped with a slot's pending queue each step
  StepOutput out_;
};

}  // namespace host
