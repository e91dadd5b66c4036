// A worker: one OS thread that finds ready processes and steps them.
// Threads: the deque's owner side and the run loop belong to the worker's
// own thread; other workers only steal from deque().
#pragma once

#include <pthread.h>

#include <time.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
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
  // Waits for the worker's thread to leave its loop (after the scheduler's
  // stopping_workers_ is set) until `deadline`. False when it did not: the
  // thread is then given up (detached, stuck in a step) and the worker gets
  // no thread again. Agrees with replace_thread and start_helper under
  // thread_mu_, so a thread the runaway monitor starts meanwhile is the one
  // waited for. Shutdown's thread only.
  bool join_until(std::chrono::steady_clock::time_point deadline);
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
    std::uint64_t messages = 0;     // messages sent from its thread
    std::uint64_t spawns = 0;       // processes spawned from its thread
    Counters& operator+=(const Counters& o) {
      steps += o.steps;
      messages += o.messages;
      spawns += o.spawns;
      steals += o.steals;
      parks += o.parks;
      batch_waits += o.batch_waits;
      return *this;
    }
  };
  Counters counters() const;
  // Called on this worker's thread (the inspector's counters).
  void note_message() { bump(messages_); }
  void note_spawn() { bump(spawns_); }
  PidTable::LocalFree& free_slots() { return free_slots_; }

  // Runaway detection. epoch_ is odd while a step runs; the runaway monitor
  // sets kBusy while it touches the running process, and the worker waits
  // for it to clear before it ends the step, so the process cannot be
  // finished and freed under the monitor. kClosing: the step's process
  // ended and is closing (Process::Close, its finalizers), set by the worker
  // when kBusy is clear: from then on the monitor does not Interrupt it
  // (the state is being freed), only stops it.
  static constexpr std::uint64_t kBusy = std::uint64_t{1} << 63;
  static constexpr std::uint64_t kClosing = std::uint64_t{1} << 62;
  std::atomic<std::uint64_t>& epoch() { return epoch_; }
  ProcessSlot* running() const { return running_.load(std::memory_order_acquire); }
  // Spawns whose Init runs inside the running step (a spawned module's
  // top-level code runs there): that time is the new process's, which
  // stops itself at the time limit (LuaProcess::Init), so the monitor does
  // not count an Init it sees running across a whole tick against the
  // step. init_epoch counts Inits begun and ended, so that many short ones
  // (a loop of spawns) look like the step's own work. Owner thread writes
  // (Scheduler::spawn).
  void begin_init() { bump_init(+1); }
  void end_init() { bump_init(-1); }
  std::uint32_t init_depth() const { return init_depth_.load(std::memory_order_relaxed); }
  std::uint64_t init_epoch() const { return init_epoch_.load(std::memory_order_relaxed); }
  // Odd while execute() runs, from taking a process to its last effect
  // (a wake, an exit event): Scheduler::nothing_can_run reads it.
  std::uint64_t activity() const { return activity_.load(std::memory_order_acquire); }
  int thread_id() const { return tid_.load(std::memory_order_acquire); }
  pthread_t native_handle() const { return handle_.load(std::memory_order_acquire); }
  // The CPU-time clock of the worker's current thread (the time limit
  // counts a step's CPU time, not time its thread sleeps in a system call).
  clockid_t cpu_clock() const { return cpu_clock_.load(std::memory_order_acquire); }
  // Monitor only, with kBusy held: gives the worker (its deque included) a
  // new thread. The old one is parked for good already (parked = true), or
  // is abandoned where it is: it parks itself at its next safe point (the
  // interrupt hook, the end of its step: park_if_abandoned) and never
  // touches the worker again.
  void replace_thread(bool parked);
  // Whether the calling thread is a worker thread the runaway monitor gave
  // up on; any thread. For the Lua interrupt hook.
  static bool current_thread_abandoned();
  // Whether the calling thread parked itself for good (park_forever); for
  // the monitor's signal handler.
  static bool current_thread_parked();
  // Parks the calling thread for good if it was abandoned.
  static void park_if_abandoned();
  [[noreturn]] static void park_forever();

 private:
  void run(std::uint64_t generation);
  // Starts a thread for the worker; thread_mu_ held.
  void start_locked();
  ProcessSlot* find_work();
  ProcessSlot* steal_work();
  // The idle poller (idle_poller.hpp): a look without blocking, true when
  // it found something (the processes it readied are on this worker's
  // queue); and the park in it, true when the caller took the poll role
  // (it is no longer counted parked when this returns).
  bool poll_ready();
  bool park_in_poller();
  void execute(ProcessSlot* slot);
  // See config::kStreamBatch. `mark` is the slot's arrivals when its step
  // took its events.
  void gather_batch(ProcessSlot* slot, std::uint32_t mark);
  std::uint64_t next_random();

  Scheduler& scheduler_;
  const unsigned id_;
  const bool helper_;
  WorkDeque<ProcessSlot*> deque_;
  // The worker's thread, and the handshake between the runaway monitor
  // (replace_thread, start_helper) and shutdown (join_until), all under
  // thread_mu_: thread_ itself; thread_gen_, which each new thread takes
  // (only the current generation's thread reports leaving); thread_left_,
  // set by that thread as its last act under the lock; given_up_, set by
  // join_until when its deadline passed, after which no thread is started.
  std::mutex thread_mu_;
  std::condition_variable thread_cv_;
  std::thread thread_;
  std::uint64_t thread_gen_ = 0;
  bool thread_left_ = true;
  bool given_up_ = false;
  // Set by the current thread as it starts; read by the monitor.
  std::atomic<pthread_t> handle_{};
  std::atomic<clockid_t> cpu_clock_{CLOCK_THREAD_CPUTIME_ID};
  // The current thread's abandoned flag (a thread_local of that thread,
  // alive as long as it is, which an abandoned thread is for good). Set by
  // the monitor before replace_thread publishes the new epoch (release);
  // the old thread reads it after it sees that epoch (acquire).
  std::atomic<std::atomic<bool>*> abandoned_flag_{nullptr};
  std::atomic<std::uint64_t> epoch_{0};
  std::atomic<std::uint64_t> activity_{0};
  std::atomic<ProcessSlot*> running_{nullptr};
  std::atomic<std::uint32_t> init_depth_{0};
  std::atomic<std::uint64_t> init_epoch_{0};
  void bump_init(int by) {
    init_depth_.store(init_depth_.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
    init_epoch_.store(init_epoch_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
  std::atomic<int> tid_{0};
  // Counters, written by the worker thread only (a relaxed load and store,
  // no locked instruction).
  std::atomic<std::uint64_t> batch_waits_{0};
  std::atomic<std::uint64_t> steps_{0};
  std::atomic<std::uint64_t> steals_{0};
  std::atomic<std::uint64_t> parks_{0};
  std::atomic<std::uint64_t> messages_{0};
  std::atomic<std::uint64_t> spawns_{0};
  void wake_for_fed();
  static void bump(std::atomic<std::uint64_t>& c) { c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed); }
  // --- owned by the worker thread ---
  std::uint32_t tick_ = 0;
  std::uint32_t fed_ = 0;  // fed_queued_process calls in this step
  std::uint32_t own_posts_ = 0;  // posted_to_running calls in this step
  PidTable::LocalFree free_slots_;
  std::uint64_t rng_;
  // The step's buffers: events, swapped with a slot's pending queue each
  // step, and the step's output. Behind a pointer: a thread given up inside
  // a step keeps its own (it may still read them), and the thread that
  // replaces it gets new ones (replace_thread).
  struct StepBuffers {
    std::vector<Event> events;
    StepOutput out;
  };
  std::unique_ptr<StepBuffers> step_ = std::make_unique<StepBuffers>();
};

}  // namespace host
