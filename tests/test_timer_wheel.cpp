// Tests of the hierarchical timing wheel (host/timer_wheel.hpp) and the
// timer service around it (host/timer_service.hpp).
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "host/timer_service.hpp"
#include "host/timer_wheel.hpp"
#include "tests/watchdog.hpp"

using host::Pid;
using host::TimerEntry;
using host::TimerWheel;

TEST_CASE("each timer fires at the first advance that reaches its deadline, never before") {
  TimerWheel wheel;
  std::mt19937_64 rng(7);
  std::map<std::uint64_t, std::uint64_t> deadline_of;  // tag -> when
  for (std::uint64_t tag = 1; tag <= 3000; ++tag) {
    // Spread over every level: 0..~20 days of ticks.
    std::uint64_t when = rng() % (std::uint64_t{1} << (6 + (tag % 26)));
    deadline_of[tag] = when;
    wheel.insert(when, Pid{0, 1, 1}, tag);
  }
  std::uint64_t prev = 0, now = 0, step = 1;
  std::size_t fired = 0;
  while (wheel.size() > 0) {
    prev = now;
    now += step;
    step = std::min<std::uint64_t>(step * 2, 1 << 20);  // coarse steps still must not fire early
    wheel.advance(now, [&](const TimerEntry& e) {
      CHECK(deadline_of[e.tag] <= now);
      CHECK((prev == 0 || deadline_of[e.tag] > prev));  // and not later than the advance that reached it
      ++fired;
    });
  }
  CHECK(fired == 3000);
}

TEST_CASE("tick-by-tick advance fires each timer exactly at its tick") {
  TimerWheel wheel;
  for (std::uint64_t w : {0ull, 1ull, 63ull, 64ull, 65ull, 4095ull, 4096ull, 4097ull, 300000ull})
    wheel.insert(w, Pid{0, 1, 1}, w);
  std::vector<std::pair<std::uint64_t, std::uint64_t>> fired;
  for (std::uint64_t now = 0; now <= 300001; ++now)
    wheel.advance(now, [&](const TimerEntry& e) { fired.emplace_back(e.tag, now); });
  REQUIRE(fired.size() == 9);
  for (auto& [tag, at] : fired) CHECK(tag == at);
}

TEST_CASE("earliest() is the smallest pending deadline, at every level, as time moves and timers go") {
  TimerWheel wheel;
  CHECK_FALSE(wheel.earliest().has_value());
  std::mt19937_64 rng(11);
  std::multimap<std::uint64_t, TimerEntry*> pending;  // when -> entry
  for (std::uint64_t tag = 1; tag <= 2000; ++tag) {
    std::uint64_t when = 1 + rng() % (std::uint64_t{1} << (1 + (tag % 30)));
    pending.emplace(when, wheel.insert(when, Pid{0, 1, 1}, tag));
  }
  std::uint64_t now = 0;
  while (!pending.empty()) {
    REQUIRE(wheel.earliest().has_value());
    CHECK(*wheel.earliest() == pending.begin()->first);
    // Cancel one at random now and then, fire what is due otherwise.
    if (rng() % 4 == 0) {
      auto it = std::next(pending.begin(), static_cast<long>(rng() % pending.size()));
      CHECK(wheel.cancel(it->second, it->second->id));
      pending.erase(it);
      continue;
    }
    now = std::max(now + 1, pending.begin()->first - (pending.begin()->first - now) / 3);
    wheel.advance(now, [&](const TimerEntry& e) {
      for (auto it = pending.begin(); it != pending.end() && it->first <= now; ++it)
        if (it->second->tag == e.tag) {
          pending.erase(it);
          break;
        }
    });
  }
  CHECK_FALSE(wheel.earliest().has_value());
}

TEST_CASE("a cancelled timer never fires and a stale handle is refused") {
  TimerWheel wheel;
  TimerEntry* a = wheel.insert(100, Pid{0, 1, 1}, 1);
  std::uint64_t a_id = a->id;
  TimerEntry* b = wheel.insert(100, Pid{0, 1, 1}, 2);
  CHECK(wheel.cancel(a, a_id));
  CHECK_FALSE(wheel.cancel(a, a_id));
  std::vector<std::uint64_t> fired;
  wheel.advance(200, [&](const TimerEntry& e) { fired.push_back(e.tag); });
  CHECK(fired == std::vector<std::uint64_t>{2});
  (void)b;
}

TEST_CASE("deadlines beyond the wheel's range are kept and fire on time") {
  TimerWheel wheel;
  const std::uint64_t far = TimerWheel::kMaxDelay * 3 + 12345;
  wheel.insert(far, Pid{0, 1, 1}, 9);
  std::uint64_t fired_at = 0;
  for (std::uint64_t now = 0; now <= far + (1 << 16) && !fired_at; now += 1 << 16) {
    wheel.advance(now, [&](const TimerEntry&) { fired_at = now; });
  }
  CHECK(fired_at >= far);
  CHECK(fired_at < far + (1 << 16));
}

TEST_CASE("a million pending timers insert, cancel and fire without trouble") {
  TimerWheel wheel;
  const std::uint64_t n = static_cast<std::uint64_t>(host::testing::scaled(1000000));
  std::vector<std::pair<TimerEntry*, std::uint64_t>> handles;
  handles.reserve(n);
  for (std::uint64_t i = 0; i < n; ++i) {
    TimerEntry* e = wheel.insert(1 + (i * 7919) % 600000, Pid{0, 1, 1}, i);
    handles.emplace_back(e, e->id);
  }
  CHECK(wheel.size() == n);
  std::uint64_t cancelled = 0;
  for (std::uint64_t i = 0; i < n; i += 3) cancelled += wheel.cancel(handles[i].first, handles[i].second);
  std::uint64_t fired = 0;
  wheel.advance(600001, [&](const TimerEntry& e) {
    CHECK(e.tag % 3 != 0);
    ++fired;
  });
  CHECK(fired + cancelled == n);
  CHECK(wheel.size() == 0);
}

TEST_CASE("the timer service fires after the delay, and a cancel stops it") {
  host::testing::Watchdog dog("timer service", std::chrono::seconds(30));
  std::atomic<int> fired{0};
  std::atomic<std::uint64_t> last_tag{0};
  host::TimerService service([&](Pid, std::uint64_t tag) {
    last_tag = tag;
    fired.fetch_add(1);
  });
  service.start();
  auto t0 = std::chrono::steady_clock::now();
  service.schedule(Pid{0, 1, 1}, 1, std::chrono::milliseconds(30));
  service.schedule(Pid{0, 1, 1}, 2, std::chrono::milliseconds(10));
  CHECK(service.cancel(Pid{0, 1, 1}, 2));
  CHECK_FALSE(service.cancel(Pid{0, 1, 1}, 2));
  while (fired.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK(std::chrono::steady_clock::now() - t0 >= std::chrono::milliseconds(30));
  CHECK(last_tag.load() == 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  CHECK(fired.load() == 1);
  service.schedule(Pid{0, 1, 1}, 3, std::chrono::hours(1));
  CHECK(service.stop() == 1);  // reported as dropped
}

TEST_CASE("the timer service never fires a delay shorter than its tick early, and fires a delay of 0 at once") {
  // Sub-tick delays at many points within a tick: each must take at least
  // its delay (the wheel once advanced to the next tick boundary, which
  // made most of them due at once).
  host::testing::Watchdog dog("sub-tick timers", std::chrono::seconds(30));
  std::mutex mu;
  std::condition_variable cv;
  std::uint64_t fired_tag = 0;
  host::TimerService service([&](Pid, std::uint64_t tag) {
    std::lock_guard lock(mu);
    fired_tag = tag;
    cv.notify_all();
  });
  service.start();
  auto wait_fired = [&](std::uint64_t tag) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(5), [&] { return fired_tag == tag; });
  };
  for (std::uint64_t i = 1; i <= 40; ++i) {
    const auto delay = std::chrono::microseconds(50 + 23 * i);  // 73 us to 970 us
    CAPTURE(delay.count());
    const auto t0 = std::chrono::steady_clock::now();
    service.schedule(Pid{0, 1, 1}, i, delay);
    REQUIRE(wait_fired(i));
    CHECK(std::chrono::steady_clock::now() - t0 >= delay);
    std::this_thread::sleep_for(std::chrono::microseconds(37 * i % 400));  // another point in the tick
  }
  // A delay of 0 is due at the tick boundary already passed, not at the
  // next one (up to a tick later): time.sleep(0) is a yield.
  host::TimerService idle([](Pid, std::uint64_t) {});  // not started: nothing fires
  idle.schedule(Pid{0, 1, 1}, 1, std::chrono::nanoseconds(0));
  CHECK(idle.outlook().next_due <= std::chrono::steady_clock::now());
  service.stop();
}
