// Coordinates idling workers: who may spin looking for work, who parks, and
// when a parked worker is woken. Threads: all workers, and every thread that
// makes work available (through notify_work_available).
//
// The rule (Go's wakep): a thread that makes work available wakes a parked
// worker only when no worker is spinning, since a spinner will find the work;
// a spinner that finds work and was the last one spinning wakes one more, so
// a burst wakes workers one at a time instead of all at once. At most half of
// the busy workers spin at a time. And one wake is in flight at a time: from
// the wake until the woken worker spins or finds work (end_waking), no other
// is woken. A woken thread takes microseconds to run, and a producer readies
// processes far more often than that: without the rule, each of its sends in
// that window found no spinner and paid a futex call for one more wake (on
// 16 cores it halved the wakes of Chameneos and Fork-Join throughput at 4-16
// workers, and took about a fifth off Chameneos at 8-16: BENCHMARKS.md).
//
// Parking is two-phase, to close the race with a thread that adds work just
// as a worker gives up (the submit / spin-down barrier):
//   worker:    prepare_park() [parked++]; fence; recheck all queues;
//              then cancel_park() if it found work, else commit_park().
//   submitter: push work; fence; if spinning == 0 && parked > 0: wake one
//              unless a wake is in flight.
// With both fences sequentially consistent, either the worker's recheck sees
// the work or the submitter sees the parked count and leaves a wake token.
// A submitter that sees a wake in flight leaves none: the woken worker
// clears the flag (seq_cst) before it searches, or, finding work first,
// clears it, fences, and wakes the next one if any queue still holds work
// (Worker::run).
//
// With a poller attached (idle_poller.hpp), one parking worker at a time
// blocks in the poller instead of the futex (the poll role). A wake then
// leaves its token as always and, where the role is held and its poll not
// yet interrupted, interrupts the poll instead of the futex:
//   poller:    prepare_park(); recheck; try_claim_poll() [role = held];
//              fence; take_token() or recheck the queues; else block in
//              the poller; release_poll(); cancel_park().
//   submitter: as above; wake_one(): token++; if the role is held and not
//              interrupted, mark it interrupted and interrupt the poll,
//              else wake the futex.
// The role stays with its holder until it leaves the poller, interrupted
// or not: so at most one thread ever blocks in the poller, and each
// interrupt reaches the one it was meant for. (When a wake took the role
// away at once, the next parker could claim it and block before the
// interrupted holder had returned; the poller's wake then went to either
// thread, and the other slept on in the poller with no role, where neither
// a wake nor stop() would reach it: shutdown gave its thread up.)
// The token's add and the role's claim are both sequentially consistent
// read-modify-writes, each followed by a read of the other: either the
// poller sees the token and does not block, or the submitter sees the role
// and interrupts it (both: one poll that returns at once).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "host/idle_poller.hpp"

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
    int t = tokens_.load(std::memory_order_acquire);
    for (;;) {
      if (t & kStopped) break;
      if (t == 0) {
        tokens_.wait(0, std::memory_order_acquire);  // a futex wait; returns once the word changed
        t = tokens_.load(std::memory_order_acquire);
        continue;
      }
      if (tokens_.compare_exchange_weak(t, t - 1, std::memory_order_acq_rel, std::memory_order_acquire)) break;
    }
    parked_.fetch_sub(1, std::memory_order_seq_cst);
    return !(t & kStopped);
  }

  // Called after work was made available (pushed to any queue).
  void notify_work_available() {
    std::atomic_thread_fence(std::memory_order_seq_cst);  // partner: the fence in prepare_park
    if (spinning_.load(std::memory_order_seq_cst) != 0) return;
    if (parked_.load(std::memory_order_seq_cst) == 0) return;
    if (waking_.load(std::memory_order_seq_cst) != 0) return;
    if (waking_.exchange(true, std::memory_order_seq_cst)) return;
    if (!wake_one()) waking_.store(false, std::memory_order_seq_cst);
  }

  // A worker woken from commit_park has begun spinning or found work.
  void end_waking() { waking_.store(false, std::memory_order_seq_cst); }

  // Leaves a wake token and wakes a parked worker (the one blocked in the
  // poller, if one is); false when none was left (stopped, or every parker
  // already has one).
  bool wake_one() {
    int t = tokens_.load(std::memory_order_relaxed);
    do {
      if (t & kStopped || t >= workers_ + kMaxExtraThreads) return false;
    } while (!tokens_.compare_exchange_weak(t, t + 1, std::memory_order_seq_cst, std::memory_order_relaxed));
    wakes_.fetch_add(1, std::memory_order_relaxed);
    if (!interrupt_poll()) tokens_.notify_one();
    return true;
  }

  // The poll role (see the top). The poller, attached once before the
  // workers may park in it, outlives them.
  void set_poller(IdlePoller* poller) { poller_.store(poller, std::memory_order_release); }
  IdlePoller* poller() const { return poller_.load(std::memory_order_acquire); }
  // True when the caller now holds the role; it must then check for a
  // token (take_token) and work before it blocks.
  [[nodiscard]] bool try_claim_poll() {
    int free = kPollFree;
    if (!poll_role_.compare_exchange_strong(free, kPollHeld, std::memory_order_seq_cst)) return false;
    std::atomic_thread_fence(std::memory_order_seq_cst);  // partner: the token's add in wake_one
    return true;
  }
  // The holder gives the role up once it has left the poller.
  void release_poll() { poll_role_.store(kPollFree, std::memory_order_seq_cst); }
  // Whether some worker blocks (or is about to) in the poller: others
  // need not poll it too.
  bool poll_held() const { return poll_role_.load(std::memory_order_relaxed) != kPollFree; }
  // Consumes a wake token if one is left; false when none (or stopped).
  bool take_token() {
    int t = tokens_.load(std::memory_order_acquire);
    while (t > 0 && !(t & kStopped))
      if (tokens_.compare_exchange_weak(t, t - 1, std::memory_order_acq_rel, std::memory_order_acquire)) return true;
    return false;
  }
  bool stopped() const { return (tokens_.load(std::memory_order_acquire) & kStopped) != 0; }

  // Wakes every parked worker (helpers that must re-check whether to retire).
  void wake_all() {
    int t = tokens_.load(std::memory_order_relaxed);
    int want;
    do {
      if (t & kStopped) return;
      want = std::max(t, parked_.load(std::memory_order_relaxed));
    } while (!tokens_.compare_exchange_weak(t, want, std::memory_order_release, std::memory_order_relaxed));
    tokens_.notify_all();
  }

  void stop() {
    tokens_.fetch_or(kStopped, std::memory_order_seq_cst);
    tokens_.notify_all();
    (void)interrupt_poll();
  }

  int spinning() const { return spinning_.load(std::memory_order_relaxed); }
  int parked() const { return parked_.load(std::memory_order_relaxed); }
  // Tokens left by wake_one (a futex call each), for tests and diagnosis.
  std::uint64_t wakes() const { return wakes_.load(std::memory_order_relaxed); }

 private:
  // Interrupts the poll of the worker that holds the role, once: false when
  // none holds it, or its poll was interrupted already (that interrupt
  // still ends it; this wake goes to the futex, for another worker).
  bool interrupt_poll() {
    int held = kPollHeld;
    if (poll_role_.load(std::memory_order_seq_cst) != kPollHeld ||
        !poll_role_.compare_exchange_strong(held, kPollInterrupted, std::memory_order_seq_cst))
      return false;
    poller_.load(std::memory_order_acquire)->interrupt();
    return true;
  }

  const int workers_;
  alignas(64) std::atomic<int> spinning_{0};
  std::atomic<int> parked_{0};  // workers between prepare_park and the end of commit/cancel
  std::atomic<bool> waking_{false};  // a woken worker has not yet spun or found work
  // Wakeups not yet consumed, and kStopped once stop() ran. Parked workers
  // sleep on this word itself (a futex, through std::atomic::wait): a wake
  // is one atomic add and one futex call, with no lock that the parking
  // workers contend for.
  static constexpr int kStopped = 1 << 30;
  alignas(64) std::atomic<int> tokens_{0};
  std::atomic<std::uint64_t> wakes_{0};
  std::atomic<IdlePoller*> poller_{nullptr};
  // The poll role: free, held by a worker that blocks (or is about to) in
  // poller_, or held with that poll interrupted.
  static constexpr int kPollFree = 0, kPollHeld = 1, kPollInterrupted = 2;
  alignas(64) std::atomic<int> poll_role_{kPollFree};
};

}  // namespace host
