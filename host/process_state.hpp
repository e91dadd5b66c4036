// The run state of one process in one atomic word, and its transitions.
// Threads: the worker running the process (begin_running, end_step_*,
// mark_complete) and any thread delivering an event (on_event_arrived).
//
// The word holds a State in its low bits and a wakeup bit. An event that
// arrives while the process is Running cannot make it Ready (it is on a
// worker), so it sets the wakeup bit instead; the worker sees the bit when
// the step ends and re-queues the process rather than parking it. Every CAS
// loop here retries when it failed only because the wakeup bit changed: the
// reference runtime lost about one wakeup in 300 runs until it did.
#pragma once

#include <atomic>
#include <cstdint>

namespace host {

enum class RunState : std::uint32_t { Ready = 0, Running = 1, Blocked = 2, Idle = 3, Complete = 4 };

class ProcessState {
 public:
  static constexpr std::uint32_t kWakeup = 8;
  static constexpr std::uint32_t kStateMask = 7;

  // Fresh slot: the caller is about to queue it.
  void reset_ready() { word_.store(static_cast<std::uint32_t>(RunState::Ready), std::memory_order_release); }

  RunState state() const { return static_cast<RunState>(word_.load(std::memory_order_acquire) & kStateMask); }

  // Worker, on dequeuing: Ready -> Running. A Ready word never holds the
  // wakeup bit (the events it announced will be drained by this very step).
  // A plain store, not a CAS (a locked instruction on every step): while the
  // process is Ready and queued, only the worker that dequeued it writes the
  // word (on_event_arrived leaves a Ready word alone; finish marks only a
  // process that runs or that shutdown holds with no worker left). A sender
  // that reads Ready late still loses nothing: it reads under the slot's
  // lock, which the worker takes after this store to drain the events, so
  // either its event is drained by this step or it sees Running and sets
  // the wakeup bit.
  [[nodiscard]] bool begin_running() {
    if ((word_.load(std::memory_order_acquire) & kStateMask) != static_cast<std::uint32_t>(RunState::Ready))
      return false;
    word_.store(static_cast<std::uint32_t>(RunState::Running), std::memory_order_release);
    return true;
  }

  enum class AfterStep { Parked, Requeue };

  // Worker, after a step that waits (Blocked or Idle) and after its yields
  // were dispatched. Requeue means an event arrived during the step: the
  // caller must queue the process again (it is now Ready).
  [[nodiscard]] AfterStep end_step_waiting(RunState waiting) {
    std::uint32_t s = word_.load(std::memory_order_acquire);
    for (;;) {
      const bool woken = (s & kWakeup) != 0;
      std::uint32_t next = static_cast<std::uint32_t>(woken ? RunState::Ready : waiting);
      // acq_rel: pairs with on_event_arrived's CAS, so an event pushed before
      // the wakeup bit was set is visible to the step that follows.
      if (word_.compare_exchange_weak(s, next, std::memory_order_acq_rel, std::memory_order_acquire))
        return woken ? AfterStep::Requeue : AfterStep::Parked;
      // Failed: the wakeup bit was set meanwhile (or spurious): retry.
    }
  }

  // Worker, after a step that asked to run again (Status::Continue): the
  // caller must queue it.
  void end_step_runnable() { word_.store(static_cast<std::uint32_t>(RunState::Ready), std::memory_order_release); }

  // Scheduler::finish, with the slot's lock held (on_event_arrived relies
  // on it for a waiting process). No transition leaves Complete.
  void mark_complete() { word_.store(static_cast<std::uint32_t>(RunState::Complete), std::memory_order_release); }

  enum class Wake { None, Schedule, Queued };

  // Any thread, after pushing an event to the process's queue, with the
  // slot's lock held (Scheduler::post). Schedule: the
  // process went Blocked/Idle -> Ready and the caller must queue it. Queued:
  // it was Ready already, waiting in a queue for a worker.
  [[nodiscard]] Wake on_event_arrived() {
    std::uint32_t s = word_.load(std::memory_order_acquire);
    for (;;) {
      auto st = static_cast<RunState>(s & kStateMask);
      std::uint32_t next;
      switch (st) {
        case RunState::Running:
          if (s & kWakeup) return Wake::None;
          next = s | kWakeup;
          break;
        case RunState::Blocked:
        case RunState::Idle:
          // A plain store, not a CAS (a locked instruction on most
          // messages): a waiting word is written only by a caller of this
          // function, who holds the slot's lock, and by Scheduler::finish,
          // which marks it Complete under that lock too. The worker that
          // parked the process wrote it last before it was read here.
          word_.store(static_cast<std::uint32_t>(RunState::Ready), std::memory_order_release);
          return Wake::Schedule;
        case RunState::Ready:  // it will drain the event when it runs
          return Wake::Queued;
        default:  // Complete: dropped
          return Wake::None;
      }
      if (word_.compare_exchange_weak(s, next, std::memory_order_acq_rel, std::memory_order_acquire))
        return st == RunState::Running ? Wake::None : Wake::Schedule;
    }
  }

 private:
  std::atomic<std::uint32_t> word_{static_cast<std::uint32_t>(RunState::Complete)};
};

}  // namespace host
