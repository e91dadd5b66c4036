// Tests of the work-stealing deque (host/deque.hpp): semantics, growth, and
// every item taken exactly once while the owner pushes and pops and thieves
// steal single items and halves, chained through each other's deques.
#include <doctest/doctest.h>

#include <atomic>
#include <random>
#include <thread>
#include <vector>

#include "host/deque.hpp"
#include "tests/watchdog.hpp"

using host::WorkDeque;
using host::testing::scaled;
using host::testing::Watchdog;

TEST_CASE("the owner pops LIFO and a thief steals FIFO") {
  WorkDeque<std::uint64_t> d(4);
  for (std::uint64_t i = 1; i <= 10; ++i) d.push(i);
  CHECK(d.size_approx() == 10);
  CHECK(*d.pop() == 10);
  CHECK(*d.steal() == 1);
  CHECK(*d.pop() == 9);
  CHECK(*d.steal() == 2);
  CHECK(d.size_approx() == 6);
  while (d.pop()) {
  }
  CHECK_FALSE(d.pop().has_value());
  CHECK_FALSE(d.steal().has_value());
  CHECK(d.empty_approx());
}

TEST_CASE("the deque grows past its initial capacity and keeps every item") {
  WorkDeque<std::uint64_t> d(2);
  for (std::uint64_t i = 0; i < 1000; ++i) d.push(i);
  CHECK(d.capacity() >= 1000);
  for (std::uint64_t i = 1000; i-- > 0;) CHECK(*d.pop() == i);
  CHECK_FALSE(d.pop().has_value());
}

TEST_CASE("steal_half_into moves half, rounded up, oldest first") {
  WorkDeque<std::uint64_t> src, dst;
  for (std::uint64_t i = 0; i < 9; ++i) src.push(i);
  CHECK(src.steal_half_into(dst) == 5);
  CHECK(src.size_approx() == 4);
  CHECK(dst.size_approx() == 5);
  CHECK(*dst.steal() == 0);  // oldest of the stolen half
  CHECK(*dst.pop() == 4);
  CHECK(*src.steal() == 5);
  WorkDeque<std::uint64_t> one, into;
  one.push(42);
  CHECK(one.steal_half_into(into) == 1);
  CHECK(*into.pop() == 42);
  CHECK(one.steal_half_into(into) == 0);
}

TEST_CASE("the index arithmetic survives a long-running deque") {
  // The top index is kept modulo 2^32: cross that boundary with a small live range.
  WorkDeque<std::uint64_t> d(2), sink(2);
  std::uint64_t next = 0, expect = 0;
  for (int round = 0; round < 3; ++round) {
    for (std::uint64_t i = 0; i < 1500000; ++i) {
      d.push(next++);
      CHECK_FALSE(d.empty_approx());
      auto got = d.steal();
      REQUIRE(got.has_value());
      REQUIRE(*got == expect++);
    }
  }
  d.push(7);
  d.push(8);
  CHECK(d.steal_half_into(sink) == 1);
  CHECK(*d.pop() == 8);
}

namespace {

// One run of the exactly-once stress: the owner of deques[0] pushes every
// item (popping some back), thieves steal from any deque, single or half,
// into their own, and drain their own by popping.
void run_exactly_once(int thieves, std::int64_t capacity, std::uint64_t items) {
  std::vector<std::unique_ptr<WorkDeque<std::uint64_t>>> deques;
  for (int i = 0; i <= thieves; ++i) deques.push_back(std::make_unique<WorkDeque<std::uint64_t>>(capacity));
  std::vector<std::atomic<std::uint8_t>> seen(items);
  std::atomic<std::uint64_t> taken{0};
  std::atomic<bool> producing{true};
  auto take = [&](std::uint64_t v) {
    REQUIRE(v < items);
    seen[v].fetch_add(1, std::memory_order_relaxed);
    taken.fetch_add(1, std::memory_order_relaxed);
  };

  std::vector<std::thread> threads;
  for (int t = 1; t <= thieves; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(t);
      WorkDeque<std::uint64_t>& mine = *deques[t];
      while (producing.load(std::memory_order_acquire) || taken.load() < items) {
        auto& victim = *deques[rng() % deques.size()];
        if (&victim != &mine) {
          if (rng() % 3 == 0) {
            if (auto v = victim.steal()) take(*v);
          } else {
            victim.steal_half_into(mine);
          }
        }
        // Drain part of our own deque, leaving some for other thieves to take.
        for (int k = 0; k < 3; ++k) {
          auto v = mine.pop();
          if (!v) break;
          take(*v);
        }
        if (!producing.load(std::memory_order_acquire)) {
          while (auto v = mine.pop()) take(*v);
        }
      }
    });
  }
  std::mt19937_64 rng(99);
  WorkDeque<std::uint64_t>& own = *deques[0];
  for (std::uint64_t i = 0; i < items; ++i) {
    own.push(i);
    if (rng() % 3 == 0)
      if (auto v = own.pop()) take(*v);
  }
  while (auto v = own.pop()) take(*v);
  producing.store(false, std::memory_order_release);
  for (auto& th : threads) th.join();
  for (auto& d : deques)
    while (auto v = d->pop()) take(*v);

  std::uint64_t lost = 0, duplicated = 0;
  for (auto& s : seen) {
    if (s.load() == 0) ++lost;
    if (s.load() > 1) ++duplicated;
  }
  CHECK(lost == 0);
  CHECK(duplicated == 0);
  CHECK(taken.load() == items);
}

}  // namespace

TEST_CASE("every item is taken exactly once under owner pops, steals and steal-halves") {
  Watchdog dog("deque exactly-once sweep", std::chrono::seconds(300));
  const std::uint64_t items = static_cast<std::uint64_t>(scaled(1000000));
  for (int thieves : {1, 2, 4}) {
    for (std::int64_t capacity : {std::int64_t{2}, std::int64_t{256}}) {
      CAPTURE(thieves);
      CAPTURE(capacity);
      run_exactly_once(thieves, capacity, items);
    }
  }
}
