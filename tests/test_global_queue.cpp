// Tests of the global run queue (host/global_queue.hpp): FIFO order, batch
// transfer into a local deque, and exactly-once delivery under contention.
#include <doctest/doctest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "host/global_queue.hpp"
#include "tests/watchdog.hpp"

using host::GlobalQueue;
using host::WorkDeque;

TEST_CASE("the global queue is FIFO") {
  GlobalQueue<std::uint64_t> q;
  CHECK_FALSE(q.pop().has_value());
  for (std::uint64_t i = 0; i < 5; ++i) q.push(i);
  for (std::uint64_t i = 0; i < 5; ++i) CHECK(*q.pop() == i);
  CHECK(q.empty_approx());
}

TEST_CASE("pop_batch returns the oldest and moves up to the batch size into the deque in order") {
  GlobalQueue<std::uint64_t> q;
  WorkDeque<std::uint64_t> local;
  for (std::uint64_t i = 0; i < 40; ++i) q.push(i);
  CHECK(*q.pop_batch(local, 16) == 0);
  CHECK(local.size_approx() == 16);
  CHECK(q.size_approx() == 23);
  for (std::uint64_t i = 1; i <= 16; ++i) CHECK(*local.pop() == i);
  CHECK(*q.pop() == 17);
}

TEST_CASE("every item pushed by many producers is popped exactly once by many consumers") {
  host::testing::Watchdog dog("global queue exactly-once", std::chrono::seconds(120));
  const int producers = 3, consumers = 3;
  const std::uint64_t per = static_cast<std::uint64_t>(host::testing::scaled(200000));
  const std::uint64_t total = per * producers;
  GlobalQueue<std::uint64_t> q;
  std::vector<std::atomic<std::uint8_t>> seen(total);
  std::atomic<std::uint64_t> taken{0};
  std::vector<std::thread> threads;
  for (int p = 0; p < producers; ++p)
    threads.emplace_back([&, p] {
      for (std::uint64_t i = 0; i < per; ++i) q.push(p * per + i);
    });
  for (int c = 0; c < consumers; ++c)
    threads.emplace_back([&, c] {
      WorkDeque<std::uint64_t> local;
      while (taken.load() < total) {
        std::optional<std::uint64_t> v = (c % 2) ? q.pop() : q.pop_batch(local, 16);
        if (v) {
          seen[*v].fetch_add(1);
          taken.fetch_add(1);
        }
        while (auto l = local.pop()) {
          seen[*l].fetch_add(1);
          taken.fetch_add(1);
        }
      }
    });
  for (auto& t : threads) t.join();
  std::uint64_t bad = 0;
  for (auto& s : seen) bad += s.load() != 1;
  CHECK(bad == 0);
  CHECK(taken.load() == total);
}
