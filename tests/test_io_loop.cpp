// The I/O thread's loop (host/io/io_loop.hpp): jobs posted from many threads
// run once each, in each poster's order, on the loop's one thread; stop
// runs the stop jobs, ends the thread, and refuses later jobs.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "host/io/io_loop.hpp"
#include "tests/watchdog.hpp"

using namespace host;
using namespace host::testing;
using namespace std::chrono_literals;

TEST_CASE("an I/O loop that is never posted to starts no thread") {
  IoLoop loop;
  CHECK(!loop.started());
  loop.stop();
  CHECK(!loop.post([](uv_loop_t*) {}));
}

TEST_CASE("jobs posted from many threads each run once, in each poster's order, on one thread") {
  Watchdog dog("io loop posts", 60s);
  constexpr int kThreads = 4, kJobs = 20000;
  IoLoop loop;
  std::vector<int> last(kThreads, -1);  // the loop thread's alone
  std::atomic<int> ran{0}, out_of_order{0}, other_thread{0};
  std::thread::id loop_thread;
  std::atomic<bool> stop_job_ran{false};
  loop.on_stop([&](uv_loop_t*) { stop_job_ran = true; });
  std::vector<std::thread> posters;
  for (int t = 0; t < kThreads; ++t)
    posters.emplace_back([&, t] {
      for (int i = 0; i < kJobs; ++i)
        REQUIRE(loop.post([&, t, i](uv_loop_t*) {
          if (loop_thread == std::thread::id()) loop_thread = std::this_thread::get_id();
          if (std::this_thread::get_id() != loop_thread) ++other_thread;
          if (last[t] != i - 1) ++out_of_order;
          last[t] = i;
          ran.fetch_add(1, std::memory_order_relaxed);
        }));
    });
  for (auto& p : posters) p.join();
  while (ran.load() < kThreads * kJobs) std::this_thread::sleep_for(1ms);
  loop.stop();
  CHECK(ran.load() == kThreads * kJobs);
  CHECK(out_of_order.load() == 0);
  CHECK(other_thread.load() == 0);
  CHECK(stop_job_ran.load());
  CHECK(!loop.post([](uv_loop_t*) {}));
}

TEST_CASE("stopping while other threads post loses no job that post accepted") {
  Watchdog dog("io loop stop race", 60s);
  for (int round = 0; round < 50; ++round) {
    IoLoop loop;
    std::atomic<int> accepted{0}, ran{0};
    std::vector<std::thread> posters;
    for (int t = 0; t < 3; ++t)
      posters.emplace_back([&] {
        for (int i = 0; i < 500; ++i)
          if (loop.post([&](uv_loop_t*) { ran.fetch_add(1); })) accepted.fetch_add(1);
      });
    std::this_thread::sleep_for(std::chrono::microseconds(round * 20));
    loop.stop();
    for (auto& p : posters) p.join();
    CHECK(ran.load() == accepted.load());
  }
}

TEST_CASE("a timer started by a job fires on the loop, and stop waits for its close") {
  Watchdog dog("io loop timer", 30s);
  IoLoop loop;
  std::atomic<bool> fired{false};
  uv_timer_t timer;
  loop.post([&](uv_loop_t* l) {
    uv_timer_init(l, &timer);
    timer.data = &fired;
    uv_timer_start(&timer, [](uv_timer_t* t) {
      static_cast<std::atomic<bool>*>(t->data)->store(true);
      uv_close(reinterpret_cast<uv_handle_t*>(t), nullptr);
    }, 20, 0);
  });
  while (!fired.load()) std::this_thread::sleep_for(1ms);
  loop.stop();
  CHECK(fired.load());
}
