// Coordinates idling workers: who may spin looking for work, who parks, and
// when a parked worker is woken. Threads: all workers, and every thread that
// makes work available (through notify_work_available).
//
// The rule (Go's wakep): a thread that makes work available wakes a parked
// worker only when no worker is spinning, since a spinner will find the work;
// a spinner that finds work and was the last one spinning wakes one more, so
// a burst wakes workers one at a time instead of all at once. At most half of
// the busy workers spin at a time.
//
// Parking is two-phase, to close the race with a thread that adds work just
// as a worker gives up (the submit / spin-down barrier):
//   worker:    prepare_park() [parked++]; fence; recheck all queues;
//              then cancel_park() if it found work, else commit_park().
//   submitter: push work; fence; if spinning == 0 && parked > 0: wake one.
// With both fences sequentially consistent, either the worker's recheck sees
// the work or the submitter sees the parked count and leaves a wake token.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>

namespace host {

class IdleWorkers {
 public:
  static constexpr int kMaxExtraThreads = 8;  // helper workers (runaway_monitor.hpp) park here too

  explicit IdleWorkers(int workers) : workers_(workers) {}

  // May the caller start spinning? False when half the busy workers already do.
  [[nodiscard]] bool try_begin_spinning() {
    int spinning = spinning_.load(std::memory_order_relaxed);
    int busy = workers_ - parked_.load(std::memory_order_relaxed);
    if (2 * spinning >= busy && spinning > 0) return false;
    spinning_.fetch_add(1, std::memory_order_seq_cst);
    return true;
  }

  // A spinning worker stops spinning. Returns true when it was the last
  // spinner: if it stopped because it found work, the caller must then call
  // notify_work_available() so the rest of a burst is picked up.
  bool end_spinning() { return spinning_.fetch_sub(1, std::memory_order_seq_cst) == 1; }

  void prepare_park() {
    parked_.fetch_add(1, std::memory_order_seq_cst);
    std::atomic_thread_fence(std::memory_order_seq_cst);  // partner: the fence in notify_work_available
  }
  void cancel_park() { parked_.fetch_sub(1, std::memory_order_seq_cst); }
  // Sleeps until woken by a token or by stop(); returns false once stopped.
  bool commit_park() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return tokens_ > 0 || stopped_; });
    if (tokens_ > 0) --tokens_;
    parked_.fetch_sub(1, std::memory_order_seq_cst);
    return !stopped_;
  }

  // Called after work was made available (pushed to any queue).
  void notify_work_available() {
    std::atomic_thread_fence(std::memory_order_seq_cst);  // partner: the fence in prepare_park
    if (spinning_.load(std::memory_order_seq_cst) != 0) return;
    if (parked_.load(std::memory_order_seq_cst) == 0) return;
    wake_one();
  }

  void wake_one() {
    {
      std::lock_guard lock(mu_);
      if (tokens_ >= workers_ + kMaxExtraThreads) return;
      ++tokens_;
    }
    cv_.notify_one();
  }

  // Wakes every parked worker (helpers that must re-check whether to retire).
  void wake_all() {
    {
      std::lock_guard lock(mu_);
      tokens_ = std::max(tokens_, parked_.load(std::memory_order_relaxed));
    }
    cv_.notify_all();
  }

  void stop() {
    {
      std::lock_guard lock(mu_);
      stopped_ = true;
    }
    cv_.notify_all();
  }

  int spinning() const { return spinning_.load(std::memory_order_relaxed); }
  int parked() const { return parked_.load(std::memory_order_relaxed); }

 private:
  const int workers_;
  alignas(64) std::atomic<int> spinning_{0};
  std::atomic<int> parked_{0};  // workers between prepare_park and the end of commit/cancel
  std::mutex mu_;
  std::condition_variable cv_;
  int tokens_ = 0;       // guarded by mu_: wakeups not yet consumed
  bool stopped_ = false; // guarded by mu_
};

}  // namespace host
