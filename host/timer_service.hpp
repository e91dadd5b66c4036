// The timer service: one thread that owns a TimerWheel and completes the
// yields of processes whose sleeps or timeouts are due. Threads: schedule
// and cancel from any thread; the callback runs on the timer thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "host/pid.hpp"
#include "host/timer_wheel.hpp"

namespace host {

class TimerService {
 public:
  using Fire = std::function<void(Pid, std::uint64_t tag)>;
  explicit TimerService(Fire fire);
  ~TimerService();
  TimerService(const TimerService&) = delete;

  void start();
  // Stops the thread; timers still pending never fire. Returns how many.
  std::size_t stop();

  // Calls fire(pid, tag) once `delay` has passed (never earlier; rounded up
  // to the next tick boundary; a delay of 0 fires at once). A (pid, tag)
  // pair may be pending once at a time.
  void schedule(Pid pid, std::uint64_t tag, std::chrono::nanoseconds delay);
  // False when it already fired or was never scheduled.
  bool cancel(Pid pid, std::uint64_t tag);
  std::size_t pending() const;

  // What shutdown needs to know that no timer can wake a process before its
  // deadline: when the earliest pending timer is due (none: max), and how many
  // timers have been taken from the wheel to fire, with whether any are
  // still firing (taken, their callback not yet returned).
  struct Outlook {
    std::chrono::steady_clock::time_point next_due = std::chrono::steady_clock::time_point::max();
    std::uint64_t taken = 0;
    bool firing = false;
    bool operator==(const Outlook&) const = default;
  };
  Outlook outlook() const;

 private:
  struct Key {
    Pid pid;
    std::uint64_t tag;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    std::size_t operator()(const Key& k) const noexcept { return std::hash<Pid>{}(k.pid) * 31 ^ k.tag; }
  };
  struct Handle {
    TimerEntry* entry;
    std::uint64_t id;
  };

  // Whole ticks from the start to t, or ticks begun (round_up).
  std::uint64_t ticks_since_start(std::chrono::steady_clock::time_point t, bool round_up) const;
  void run();

  const Fire fire_;
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  mutable std::mutex mu_;
  std::condition_variable cv_;
  TimerWheel wheel_;                                  // guarded by mu_
  std::unordered_map<Key, Handle, KeyHash> handles_;  // guarded by mu_
  bool stopping_ = false;                             // guarded by mu_
  std::uint64_t sleeping_until_ = UINT64_MAX;         // guarded by mu_: the tick the thread waits for
  std::uint64_t taken_ = 0;                           // guarded by mu_: timers taken to fire, ever
  std::size_t firing_ = 0;                            // guarded by mu_: taken, callback not yet done
  std::thread thread_;
};

}  // namespace host
