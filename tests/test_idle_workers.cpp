// The idle protocol of host/idle_workers.hpp on its own: consumer threads
// follow the worker's spin / prepare_park / recheck / commit_park steps
// against producer threads that add work and notify, so a lost wakeup shows
// as work left undone (the watchdog fails the test instead of hanging), and
// stop() and wake_all() must release every parked thread. Runs under TSan.
#include <doctest/doctest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "host/idle_workers.hpp"
#include "tests/watchdog.hpp"

using namespace host;
using namespace host::testing;
using namespace std::chrono_literals;

namespace {

// Work items are a counter: producers add, consumers take one at a time.
bool take(std::atomic<long>& available) {
  long n = available.load(std::memory_order_acquire);
  while (n > 0)
    if (available.compare_exchange_weak(n, n - 1, std::memory_order_acq_rel)) return true;
  return false;
}

// A consumer that runs the worker loop's idle protocol until stop(),
// waking included (a woken consumer ends the wake in flight when it finds
// work, then wakes the next if more is there, or when it starts spinning).
void consume(IdleWorkers& idle, std::atomic<long>& available, std::atomic<long>& done) {
  bool spinning = false, waking = false;
  for (int rounds = 0;;) {
    if (take(available)) {
      if (waking) {
        waking = false;
        idle.end_waking();
        std::atomic_thread_fence(std::memory_order_seq_cst);
        if (available.load(std::memory_order_seq_cst) > 0) idle.notify_work_available();
      } else if (spinning) {
        spinning = false;
        if (idle.end_spinning() && available.load(std::memory_order_seq_cst) > 0) idle.notify_work_available();
      }
      done.fetch_add(1, std::memory_order_acq_rel);
      rounds = 0;
      continue;
    }
    if (!spinning && rounds == 0) {
      spinning = idle.try_begin_spinning();
      if (waking) {
        waking = false;
        idle.end_waking();
      }
    }
    if (spinning && rounds++ < 8) {
      std::this_thread::yield();
      continue;
    }
    if (spinning) {
      spinning = false;
      (void)idle.end_spinning();
    }
    idle.prepare_park();
    if (available.load(std::memory_order_seq_cst) > 0) {
      idle.cancel_park();
      rounds = 0;
      continue;
    }
    if (!idle.commit_park()) return;
    rounds = 0;
    waking = true;
  }
}

// Waits until n threads have stayed parked for a while: each has used up
// any wake token left over and sleeps.
void wait_until_parked(IdleWorkers& idle, int n) {
  for (int settled = 0; settled < 3;) {
    std::this_thread::sleep_for(200us);
    settled = idle.parked() >= n ? settled + 1 : 0;
  }
}

// n threads that each park once, counting those woken (commit_park true)
// and those stopped; returns once all n sleep.
std::vector<std::thread> park_each_once(IdleWorkers& idle, int n, std::atomic<int>& woken, std::atomic<int>& stopped) {
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i)
    threads.emplace_back([&] {
      idle.prepare_park();
      (idle.commit_park() ? woken : stopped).fetch_add(1);
    });
  wait_until_parked(idle, n);
  return threads;
}

}  // namespace

TEST_CASE("idle workers: no wakeup is lost while producers race parking consumers") {
  Watchdog dog("idle workers: every item consumed", 120s);
  constexpr int kConsumers = 4, kProducers = 3, kRounds = 100;
  constexpr long kItems = 300;  // per producer and round
  IdleWorkers idle(kConsumers);
  std::atomic<long> available{0}, done{0};
  std::vector<std::thread> consumers;
  for (int i = 0; i < kConsumers; ++i) consumers.emplace_back([&] { consume(idle, available, done); });
  for (int round = 1; round <= kRounds; ++round) {
    // Every round starts with all consumers asleep and no wake token left,
    // so the round's first notify must wake one: a lost wake hangs here.
    wait_until_parked(idle, kConsumers);
    std::vector<std::thread> producers;
    for (int p = 0; p < kProducers; ++p)
      producers.emplace_back([&, p] {
        for (long i = 0; i < kItems; ++i) {
          available.fetch_add(1, std::memory_order_seq_cst);
          idle.notify_work_available();
          // Bursts and pauses, so consumers park and wake within a round too.
          if ((i + p) % 61 == 0) std::this_thread::sleep_for(20us);
        }
      });
    for (auto& t : producers) t.join();
    while (done.load(std::memory_order_acquire) < round * kProducers * kItems) std::this_thread::sleep_for(100us);
  }
  wait_until_parked(idle, kConsumers);
  idle.stop();
  for (auto& t : consumers) t.join();
  CHECK(done.load() == kRounds * kProducers * kItems);
  CHECK(available.load() == 0);
  CHECK(idle.parked() == 0);
  CHECK(idle.spinning() == 0);
}

TEST_CASE("idle workers: stop releases every parked thread, and commit_park reports it") {
  Watchdog dog("idle workers: stop", 60s);
  constexpr int kThreads = 6;
  IdleWorkers idle(kThreads);
  std::atomic<int> woken{0}, stopped{0};
  auto threads = park_each_once(idle, kThreads, woken, stopped);
  idle.stop();
  for (auto& t : threads) t.join();
  CHECK(stopped.load() == kThreads);
  // After stop, parking returns at once and wakes are ignored.
  idle.wake_one();
  idle.prepare_park();
  CHECK_FALSE(idle.commit_park());
}

TEST_CASE("idle workers: wake_all releases every parked thread, wake_one exactly one") {
  Watchdog dog("idle workers: wake_all", 60s);
  constexpr int kThreads = 5;
  IdleWorkers idle(kThreads);
  std::atomic<int> woken{0}, stopped{0};
  auto threads = park_each_once(idle, kThreads, woken, stopped);
  idle.wake_one();
  while (woken.load() < 1) std::this_thread::sleep_for(1ms);
  std::this_thread::sleep_for(20ms);
  CHECK(woken.load() == 1);  // one token wakes one thread
  CHECK(idle.parked() == kThreads - 1);
  idle.wake_all();
  for (auto& t : threads) t.join();
  CHECK(woken.load() == kThreads);
  CHECK(idle.parked() == 0);
  idle.stop();
}

TEST_CASE("idle workers: one wake in flight at a time, until the woken thread ends it") {
  Watchdog dog("idle workers: one wake in flight", 60s);
  constexpr int kThreads = 4;
  IdleWorkers idle(kThreads);
  std::atomic<int> woken{0}, stopped{0};
  auto threads = park_each_once(idle, kThreads, woken, stopped);
  // A producer readying work again and again before the woken thread runs:
  // one wake (one futex call), not one a notify.
  for (int i = 0; i < 100; ++i) idle.notify_work_available();
  while (woken.load() < 1) std::this_thread::sleep_for(1ms);
  for (int i = 0; i < 100; ++i) idle.notify_work_available();
  std::this_thread::sleep_for(20ms);
  CHECK(idle.wakes() == 1);
  CHECK(woken.load() == 1);
  // The woken thread found work (or began to spin): the next notify wakes
  // the next thread.
  idle.end_waking();
  idle.notify_work_available();
  while (woken.load() < 2) std::this_thread::sleep_for(1ms);
  CHECK(idle.wakes() == 2);
  // A spinner searching: no wake at all.
  idle.end_waking();
  REQUIRE(idle.try_begin_spinning());
  idle.notify_work_available();
  CHECK(idle.wakes() == 2);
  (void)idle.end_spinning();
  idle.stop();
  for (auto& t : threads) t.join();
  CHECK(woken.load() == 2);
  CHECK(stopped.load() == kThreads - 2);
}
