// The timer thread: advance the wheel, fire what is due outside the lock,
// sleep until the next slot comes due or an earlier timer is added.
#include "host/timer_service.hpp"

#include "host/config.hpp"

namespace host {

TimerService::TimerService(Fire fire) : fire_(std::move(fire)) {}

TimerService::~TimerService() { stop(); }

void TimerService::start() {
  std::lock_guard lock(mu_);
  if (thread_.joinable() || stopping_) return;
  thread_ = std::thread([this] { run(); });
}

std::size_t TimerService::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::lock_guard lock(mu_);
  return wheel_.size();
}

std::uint64_t TimerService::ticks_since_start(std::chrono::steady_clock::time_point t, bool round_up) const {
  const auto d = std::chrono::duration_cast<std::chrono::nanoseconds>(t - start_).count();
  const auto tick = std::chrono::duration_cast<std::chrono::nanoseconds>(config::kTimerTick).count();
  return static_cast<std::uint64_t>((d + (round_up ? tick - 1 : 0)) / tick);
}

void TimerService::schedule(Pid pid, std::uint64_t tag, std::chrono::nanoseconds delay) {
  // A deadline is the first tick boundary at or after now + delay, and the
  // wheel is advanced to the last boundary passed: a timer never fires
  // early. (Advanced to the next boundary, a delay shorter than a tick was
  // due at once most of the time: time.sleep(0.0005) returned almost at once.) A
  // delay of 0 is due at the boundary passed: time.sleep(0) is a yield.
  const auto now = std::chrono::steady_clock::now();
  std::uint64_t when = delay > std::chrono::nanoseconds::zero() ? ticks_since_start(now + delay, true)
                                                                 : ticks_since_start(now, false);
  bool wake = false;
  {
    std::lock_guard lock(mu_);
    Key key{pid, tag};
    if (auto it = handles_.find(key); it != handles_.end()) wheel_.cancel(it->second.entry, it->second.id);
    TimerEntry* e = wheel_.insert(when, pid, tag);
    handles_[key] = Handle{e, e->id};
    wake = when < sleeping_until_;
  }
  if (wake) cv_.notify_one();
}

bool TimerService::cancel(Pid pid, std::uint64_t tag) {
  std::lock_guard lock(mu_);
  auto it = handles_.find(Key{pid, tag});
  if (it == handles_.end()) return false;
  bool removed = wheel_.cancel(it->second.entry, it->second.id);
  handles_.erase(it);
  return removed;
}

std::size_t TimerService::pending() const {
  std::lock_guard lock(mu_);
  return wheel_.size();
}

TimerService::Outlook TimerService::outlook() const {
  std::lock_guard lock(mu_);
  Outlook o;
  if (auto next = wheel_.earliest()) o.next_due = start_ + config::kTimerTick * static_cast<std::int64_t>(*next);
  o.taken = taken_;
  o.firing = firing_ > 0;
  return o;
}

void TimerService::run() {
  std::vector<Key> due;
  std::unique_lock lock(mu_);
  while (!stopping_) {
    due.clear();
    wheel_.advance(ticks_since_start(std::chrono::steady_clock::now(), false), [&](const TimerEntry& e) {
      due.push_back(Key{e.pid, e.tag});
      handles_.erase(Key{e.pid, e.tag});
    });
    if (!due.empty()) {
      taken_ += due.size();
      firing_ = due.size();
      lock.unlock();
      for (const Key& k : due) fire_(k.pid, k.tag);
      lock.lock();
      firing_ = 0;
      continue;  // time moved while firing
    }
    auto next = wheel_.next_deadline();
    sleeping_until_ = next ? *next : UINT64_MAX;
    if (next) {
      cv_.wait_until(lock, start_ + config::kTimerTick * static_cast<std::int64_t>(*next));
    } else {
      cv_.wait(lock);
    }
    sleeping_until_ = UINT64_MAX;
  }
}

}  // namespace host
