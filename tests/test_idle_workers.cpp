// The idle protocol of host/idle_workers.hpp on its own: consumer threads
// follow the worker's spin / prepare_park / recheck / commit_park steps
// against producer threads that add work and notify, so a lost wakeup shows
// as work left undone (the watchdog fails the test instead of hanging), and
// stop() and wake_all() must release every parked thread. Runs under TSan.
#include <doctest/doctest.h>

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

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

// A consumer that took an item: it ends the wake in flight (it was woken)
// or its spinning, and wakes the next if more is there (Worker::run).
void found_work(IdleWorkers& idle, std::atomic<long>& available, bool& spinning, bool& waking) {
  if (waking) {
    waking = false;
    idle.end_waking();
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (available.load(std::memory_order_seq_cst) > 0) idle.notify_work_available();
  } else if (spinning) {
    spinning = false;
    if (idle.end_spinning() && available.load(std::memory_order_seq_cst) > 0) idle.notify_work_available();
  }
}

// The worker loop's look at the poller without blocking, before it spins:
// true when the look found I/O (and dispatched it, readying work).
bool poll_without_blocking(IdlePoller& poller) {
  IdlePoller::Batch batch;
  poller.wait(batch, false);
  if (batch.n == 0) return false;
  poller.dispatch(batch);
  return true;
}

// The park in the poller (Worker::park_in_poller), for a consumer that
// claimed the poll role: it blocks only with no wake token and nothing
// available. False once stop() was called.
bool park_in_poller(IdleWorkers& idle, IdlePoller& poller, std::atomic<long>& available) {
  IdlePoller::Batch batch;
  const bool block = !idle.take_token() && !idle.stopped() && available.load(std::memory_order_seq_cst) == 0;
  if (block) poller.wait(batch, true);
  idle.release_poll();
  idle.cancel_park();
  if (block) (void)idle.take_token();
  if (batch.n > 0) poller.dispatch(batch);
  return !idle.stopped();
}

// A consumer that runs the worker loop's idle protocol until stop(),
// waking included (a woken consumer ends the wake in flight when it finds
// work, then wakes the next if more is there, or when it starts spinning).
// With a poller, the loop's poll steps too: a look without blocking before
// spinning, and the park in the poller before the futex's.
void consume(IdleWorkers& idle, std::atomic<long>& available, std::atomic<long>& done, IdlePoller* poller = nullptr) {
  bool spinning = false, waking = false;
  for (int rounds = 0;;) {
    if (take(available)) {
      found_work(idle, available, spinning, waking);
      done.fetch_add(1, std::memory_order_acq_rel);
      rounds = 0;
      continue;
    }
    if (poller && rounds == 0 && !idle.poll_held() && poll_without_blocking(*poller)) continue;
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
    if (poller && idle.try_claim_poll()) {
      if (!park_in_poller(idle, *poller, available)) return;
    } else if (!idle.commit_park()) {
      return;
    }
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

namespace {

// A poller for the poll role's test: "I/O" is a count producers add to an
// eventfd, seen only by polling it; interrupt() writes another eventfd,
// drained only by a blocking wait (as host/io/netpoll.cpp's). Dispatching
// makes the I/O work available as the netpoller's completions ready
// processes.
struct CountingPoller final : IdlePoller {
  IdleWorkers& idle;
  std::atomic<long>& available;
  int iofd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  int wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  CountingPoller(IdleWorkers& i, std::atomic<long>& a) : idle(i), available(a) {}
  ~CountingPoller() override {
    close(iofd);
    close(wakefd);
  }
  void wait(Batch& batch, bool block) override {
    pollfd fds[2] = {{iofd, POLLIN, 0}, {wakefd, POLLIN, 0}};
    while (::poll(fds, 2, block ? -1 : 0) < 0) {
    }
    std::uint64_t n = 0;
    if (block && (fds[1].revents & POLLIN)) (void)!read(wakefd, &n, sizeof n);
    batch.n = 0;
    if (read(iofd, &n, sizeof n) == sizeof n) {
      batch.data[0] = n;
      batch.n = 1;
    }
  }
  void dispatch(const Batch& batch) override {
    for (int i = 0; i < batch.n; ++i) available.fetch_add(static_cast<long>(batch.data[i]), std::memory_order_seq_cst);
    idle.notify_work_available();
  }
  void interrupt() override { (void)!write(wakefd, &kOne, sizeof kOne); }
  bool waiting() const override { return true; }
  void add_io(std::uint64_t n) { (void)!write(iofd, &n, sizeof n); }
  static constexpr std::uint64_t kOne = 1;
};

// consumers threads, one of them blocked in the poller at each round's
// start; with one, every wake must reach it through the poll.
void race_with_poller(int consumers_n) {
  constexpr int kRounds = 100;
  constexpr long kItems = 300;  // per producer and round
  IdleWorkers idle(consumers_n);
  std::atomic<long> available{0}, done{0};
  CountingPoller poller(idle, available);
  idle.set_poller(&poller);
  std::vector<std::thread> consumers;
  for (int i = 0; i < consumers_n; ++i) consumers.emplace_back([&] { consume(idle, available, done, &poller); });
  for (int round = 1; round <= kRounds; ++round) {
    // Every round starts with one consumer blocked in the poller and the
    // rest asleep: a notify the poll never hears, or an edge nobody polls,
    // hangs here.
    wait_until_parked(idle, consumers_n);
    REQUIRE(idle.poll_held());
    std::vector<std::thread> producers;
    producers.emplace_back([&] {  // messages: a notify each
      for (long i = 0; i < kItems; ++i) {
        available.fetch_add(1, std::memory_order_seq_cst);
        idle.notify_work_available();
        if (i % 61 == 0) std::this_thread::sleep_for(20us);
      }
    });
    producers.emplace_back([&] {  // readiness: only the poller sees it
      for (long i = 0; i < kItems; ++i) {
        poller.add_io(1);
        if (i % 53 == 0) std::this_thread::sleep_for(20us);
      }
    });
    for (auto& t : producers) t.join();
    while (done.load(std::memory_order_acquire) < round * (2 * kItems + 1) - 1) std::this_thread::sleep_for(100us);
    // Then one message alone, with the poller blocked again: its notify
    // must reach the poll (with one consumer, nothing else would).
    wait_until_parked(idle, consumers_n);
    REQUIRE(idle.poll_held());
    available.fetch_add(1, std::memory_order_seq_cst);
    idle.notify_work_available();
    while (done.load(std::memory_order_acquire) < round * (2 * kItems + 1)) std::this_thread::sleep_for(100us);
  }
  wait_until_parked(idle, consumers_n);
  idle.stop();
  for (auto& t : consumers) t.join();
  CHECK(done.load() == kRounds * (2 * kItems + 1));
  CHECK(available.load() == 0);
  CHECK(idle.parked() == 0);
}

}  // namespace

TEST_CASE("idle workers with a poller: no wakeup is lost, whether work comes by a notify or by the poller") {
  Watchdog dog("idle workers with a poller: every item consumed", 60s);
  SUBCASE("one consumer: every wake goes through the poll") { race_with_poller(1); }
  SUBCASE("three consumers: the poll and the futex") { race_with_poller(3); }
}

TEST_CASE("idle workers with a poller: the role stays with an interrupted holder until it leaves the poller") {
  // A wake interrupts the holder's poll. Were the role free at once, the
  // next parker could claim it and block beside the holder before that one
  // returned; the poller's wake-up would then go to either, and the other
  // would sleep on in the poller with no role, out of reach of every wake
  // and of stop() (a shutdown gave such a thread up).
  IdleWorkers idle(2);
  std::atomic<long> available{0};
  CountingPoller poller(idle, available);
  idle.set_poller(&poller);
  auto interrupts = [&] {
    std::uint64_t n = 0;
    (void)!read(poller.wakefd, &n, sizeof n);
    return n;
  };
  idle.prepare_park();
  REQUIRE(idle.try_claim_poll());  // A, about to block
  CHECK(idle.wake_one());          // interrupts A's poll
  CHECK(idle.poll_held());
  idle.prepare_park();
  CHECK_FALSE(idle.try_claim_poll());  // B parks on the futex instead
  CHECK(idle.wake_one());              // a second wake: to the futex, not A's poll again
  CHECK(interrupts() == 1);
  CHECK(idle.commit_park());  // B takes a token
  CHECK(idle.take_token());   // A leaves its poll and takes the other
  idle.release_poll();
  idle.cancel_park();
  CHECK_FALSE(idle.poll_held());
  idle.prepare_park();
  REQUIRE(idle.try_claim_poll());  // B, back to park, blocks in the poller
  idle.stop();                     // and stop() reaches its poll
  CHECK(interrupts() == 1);
  idle.release_poll();
  idle.cancel_park();
  CHECK(idle.parked() == 0);
}
