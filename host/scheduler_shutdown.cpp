// The scheduler's shutdown: cancel every process, wait for them within the
// grace period (or until none can run again before it ends), stop the
// workers, close the rest, stop the services.
#include <algorithm>

#include "host/log.hpp"
#include "host/runaway_monitor.hpp"
#include "host/scheduler.hpp"
#include "host/worker.hpp"

namespace host {

bool Scheduler::nothing_can_run(std::chrono::steady_clock::time_point deadline) {
  // Why one pass suffices: a process can become runnable only by an event.
  // Events come from steps (inside a worker's execute, which its activity
  // count brackets), from the timer thread (which counts the timers it
  // takes to fire), from the blocking pool (only for processes with a
  // non-timer yield outstanding, which never count as waiting here; a
  // completion's event and count change together under the slot's lock),
  // or from the reloader and signal threads, which shutdown does not wait
  // for. So if no worker was in or entered execute, and no timer fired,
  // while the slots were read, a process seen waiting with nothing queued
  // and at most timers outstanding stays so until the first timer is due.
  const TimerService::Outlook timers_before = timers_.outlook();
  if (timers_before.firing) return false;
  std::vector<std::uint64_t> before;
  before.reserve(workers_.size());
  for (const auto& w : workers_) {
    const std::uint64_t a = w->activity();
    if (a & 1) return false;
    before.push_back(a);
  }
  bool sleeping = false;
  for (std::uint32_t i = 0, n = table_.index_limit(); i < n; ++i) {
    ProcessSlot* slot = table_.slot_at(i);
    std::lock_guard lock(slot->mu);
    if (!slot->alive) continue;
    const RunState st = slot->state.state();
    const std::int32_t sleeps = slot->outstanding_sleeps.load(std::memory_order_relaxed);
    if ((st != RunState::Idle && st != RunState::Blocked) || !slot->pending.empty() ||
        slot->outstanding_yields.load(std::memory_order_relaxed) != sleeps)
      return false;
    sleeping |= sleeps > 0;
  }
  for (std::size_t i = 0; i < workers_.size(); ++i)
    if (workers_[i]->activity() != before[i]) return false;
  if (timers_.outlook() != timers_before) return false;
  return !sleeping || timers_before.next_due > deadline;
}

ShutdownReport Scheduler::shutdown(std::chrono::milliseconds grace) {
  std::lock_guard guard(shutdown_mu_);
  if (shut_down_.load(std::memory_order_acquire)) return report_;
  const auto deadline = std::chrono::steady_clock::now() + grace;

  // 1. Cancel every live process (spawn cancels the ones that come later).
  cancelling_.store(true, std::memory_order_release);
  std::vector<Pid> live;
  for (std::uint32_t i = 0, n = table_.index_limit(); i < n; ++i) {
    ProcessSlot* slot = table_.slot_at(i);
    std::lock_guard lock(slot->mu);
    if (slot->alive) live.push_back(slot->pid());
  }
  for (const Pid& pid : live) cancel(pid, "shutdown");

  // 2. Wait for them within the grace period, or until none of them can
  // run again before it ends (each waits for an event nothing will send
  // in time: a receive loop that never reads its events, its timeout
  // further off than the deadline): the grace could change nothing.
  // By its argument one pass of nothing_can_run is enough; shutdown still
  // wants two in a row, a poll apart, before it closes anything, which
  // costs milliseconds. Polled at 2 ms, backing off to 100 ms.
  auto poll = std::chrono::milliseconds(2);
  for (int idle_passes = 0;;) {
    const auto now = std::chrono::steady_clock::now();
    if (wait_all_exited(std::min(deadline, now + poll)) || std::chrono::steady_clock::now() >= deadline) break;
    idle_passes = nothing_can_run(deadline) ? idle_passes + 1 : 0;
    if (idle_passes == 2) {
      report_.none_could_run = true;
      break;
    }
    poll = std::min(poll * 2, std::chrono::milliseconds(100));
  }
  std::size_t still = 0;
  for (const Pid& pid : live) still += alive(pid);
  report_.exited_in_grace = live.size() - still;

  // 3. Stop the workers. A step in progress may finish within the rest of
  // the grace (at least kJoinAllowance, for workers leaving their loops);
  // a worker whose thread is stuck past it is given up.
  stopping_workers_.store(true, std::memory_order_release);
  idle_.stop();
  const auto join_deadline = std::max(deadline, std::chrono::steady_clock::now() + config::kJoinAllowance);
  for (auto& w : workers_) report_.threads_given_up += !w->join_until(join_deadline);
  if (runaway_monitor_) {
    report_.threads_given_up += runaway_monitor_->stop();  // kept until now: it unsticks workers being joined
    // A helper it started meanwhile sees the stop flag and leaves.
    for (auto& w : workers_) report_.threads_given_up += !w->join_until(join_deadline);
  }
  if (log::logger().should_log(spdlog::level::debug)) {
    const Counters c = counters();
    log::logger().debug("scheduler: {} steps, {} steals, {} parks, {} wakes, {} batch waits", c.workers.steps,
                        c.workers.steals, c.workers.parks, c.wakes, c.workers.batch_waits);
  }

  // 4. Close what is left. No worker runs now, so every slot is ours;
  // unless a worker's thread was given up: it may still end its step and
  // finish its process while we would close the same one. Then nothing is
  // closed: the caller exits the program (ShutdownReport::threads_given_up).
  if (report_.threads_given_up > 0) {
    log::logger().warn("shutdown: {} thread(s) still inside processes (stuck in a step past the grace period, "
                       "or given up in a C call); the processes are left as they are",
                       report_.threads_given_up);
    report_.timers_dropped = timers_.stop();
    report_.blocking_jobs_dropped = pool_.stop();
    shut_down_.store(true, std::memory_order_release);
    return report_;
  }
  // Each one left is named up to kNamedLeft; past that one line counts
  // the rest, so that a host of many processes does not flood its log (a
  // reader that stops reading it would hold the exit up).
  constexpr std::size_t kNamedLeft = 20;
  std::size_t unnamed = 0;
  for (std::uint32_t i = 0, n = table_.index_limit(); i < n; ++i) {
    ProcessSlot* slot = table_.slot_at(i);
    {
      std::lock_guard lock(slot->mu);
      if (!slot->alive) continue;
    }
    ++report_.force_closed;
    const int pending = std::max(0, slot->outstanding_yields.load(std::memory_order_relaxed));
    report_.yields_never_completed += static_cast<std::size_t>(pending);
    if (report_.none_could_run)
      log::logger().debug("shutdown: {} was waiting for an event nothing could send in time; closed",
                          slot->pid().to_string());
    else if (report_.force_closed <= kNamedLeft)
      log::logger().warn("shutdown: {} did not exit within the grace period; closed with {} command(s) pending",
                         slot->pid().to_string(), pending);
    else
      ++unnamed;
    finish(slot, true, {}, "killed: shutdown");
  }
  if (unnamed > 0)
    log::logger().warn("shutdown: {} more process(es) did not exit within the grace period; closed", unnamed);

  // 5. Stop the services.
  report_.timers_dropped = timers_.stop();
  report_.blocking_jobs_dropped = pool_.stop();
  shut_down_.store(true, std::memory_order_release);
  return report_;
}

}  // namespace host
