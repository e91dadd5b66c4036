// The worker's run loop: find work (local, global, steal), step it, and
// follow the idle protocol of idle_workers.hpp when there is none.
#include "host/worker.hpp"

#include <pthread.h>
#include <unistd.h>

#include <chrono>
#include <exception>

#include "host/config.hpp"
#include "host/log.hpp"
#include "host/scheduler.hpp"
#include "host/spin_lock.hpp"

namespace host {
namespace {

thread_local Worker* tls_worker = nullptr;
// Set by the runaway monitor when it gives up on this thread (see
// Worker::abandoned_flag_). Initial-exec TLS: read by a signal handler too.
thread_local std::atomic<bool> tls_abandoned{false};
thread_local std::atomic<bool> tls_parked{false};

}  // namespace

Worker::Worker(Scheduler& scheduler, unsigned id, bool helper)
    : scheduler_(scheduler), id_(id), helper_(helper), rng_(0x9E3779B97F4A7C15ull * (id + 1)) {}

void Worker::start() {
  std::lock_guard lock(thread_mu_);
  start_locked();
}

void Worker::start_locked() {
  const std::uint64_t gen = ++thread_gen_;
  thread_left_ = false;
  thread_ = std::thread([this, gen] { run(gen); });
}

bool Worker::start_helper() {
  std::lock_guard lock(thread_mu_);
  if (given_up_ || !thread_left_) return false;  // a helper thread still runs its loop
  if (thread_.joinable()) thread_.join();  // it has left its loop and only returns now
  start_locked();
  return true;
}

void Worker::replace_thread(bool parked) {
  std::lock_guard lock(thread_mu_);
  // Parked or abandoned inside a step: it never touches the worker again.
  if (thread_.joinable()) thread_.detach();
  running_.store(nullptr, std::memory_order_relaxed);
  // The old thread may still read its step's buffers: they are its for good.
  (void)step_.release();
  step_ = std::make_unique<StepBuffers>();
  if (!parked) {
    if (std::atomic<bool>* flag = abandoned_flag_.load(std::memory_order_acquire))
      flag->store(true, std::memory_order_release);  // before the epoch below: partner in execute
  }
  std::uint64_t e = epoch_.load(std::memory_order_relaxed) & ~(kBusy | kClosing);
  activity_.store((activity_.load(std::memory_order_relaxed) | 1) + 1, std::memory_order_release);  // nor in execute
  epoch_.store((e | 1) + 1, std::memory_order_release);  // even: not in a step
  // Shutdown no longer waits for this worker (join_until gave up): no thread.
  if (!given_up_) start_locked();
}

bool Worker::join_until(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(thread_mu_);
  if (!thread_cv_.wait_until(lock, deadline, [&] { return !thread_.joinable() || thread_left_; })) {
    given_up_ = true;
    thread_.detach();
    return false;
  }
  if (thread_.joinable()) thread_.join();  // it has left its loop and only returns now
  return true;
}

bool Worker::current_thread_abandoned() { return tls_abandoned.load(std::memory_order_acquire); }

void Worker::park_if_abandoned() {
  if (tls_abandoned.load(std::memory_order_acquire)) park_forever();
}

bool Worker::current_thread_parked() { return tls_parked.load(std::memory_order_relaxed); }

void Worker::park_forever() {
  tls_parked.store(true, std::memory_order_relaxed);
  for (;;) pause();
}

Worker* Worker::current() { return tls_worker; }

Worker::Counters Worker::counters() const {
  Counters c;
  c.steps = steps_.load(std::memory_order_relaxed);
  c.steals = steals_.load(std::memory_order_relaxed);
  c.parks = parks_.load(std::memory_order_relaxed);
  c.batch_waits = batch_waits_.load(std::memory_order_relaxed);
  c.messages = messages_.load(std::memory_order_relaxed);
  c.spawns = spawns_.load(std::memory_order_relaxed);
  return c;
}

std::uint64_t Worker::next_random() {
  // xorshift64*: victim choice needs speed, not quality.
  rng_ ^= rng_ >> 12;
  rng_ ^= rng_ << 25;
  rng_ ^= rng_ >> 27;
  return rng_ * 0x2545F4914F6CDD1Dull;
}

void Worker::run(std::uint64_t generation) {
  tls_worker = this;
  tid_.store(static_cast<int>(gettid()), std::memory_order_release);
  handle_.store(pthread_self(), std::memory_order_release);
  clockid_t clock;
  if (pthread_getcpuclockid(pthread_self(), &clock) == 0) cpu_clock_.store(clock, std::memory_order_release);
  abandoned_flag_.store(&tls_abandoned, std::memory_order_release);
  IdleWorkers& idle = scheduler_.idle_;
  bool spinning = false;
  // Woken from a park and not yet searching as a spinner or running: the
  // wake in flight of IdleWorkers (Go's wakep). Until it ends, threads that
  // make work wake no other worker; it ends when this one finds work (and
  // then wakes the next if more is queued, so a burst is taken up one
  // worker at a time) or starts spinning.
  bool waking = false;
  int rounds = 0;
  while (!scheduler_.stopping_workers_.load(std::memory_order_acquire)) {
    if (ProcessSlot* slot = find_work()) {
      // The woken worker, or the last spinner, found work: another searches
      // for the rest, if there is any left to see. (Go wakes one either way;
      // a timer's process readied on an idle scheduler then cost two wakes,
      // one of them for nothing.) No wake is lost: the flag or count goes
      // down (seq_cst) before the queues are read, and a thread that queues
      // work meanwhile either is seen here or sees it down and wakes one.
      bool wake_next = false;
      if (waking) {
        waking = false;
        idle.end_waking();
        wake_next = true;
      } else if (spinning) {
        spinning = false;
        wake_next = idle.end_spinning();
      }
      if (wake_next) {
        std::atomic_thread_fence(std::memory_order_seq_cst);  // partner: the fence in notify_work_available
        if (scheduler_.any_work_visible()) idle.notify_work_available();
      }
      rounds = 0;
      execute(slot);
      continue;
    }
    // Nothing to run: first what the poller has ready, then the idle job, a
    // unit at a time with a look for processes between units; spin and
    // park once it has nothing to do.
    if (rounds == 0 && poll_ready()) continue;
    if (rounds == 0 && !spinning && !helper_ && scheduler_.run_idle_job()) continue;
    if (!spinning && rounds < config::kYieldRounds) {
      if (idle.try_begin_spinning()) spinning = true;
      else rounds = config::kYieldRounds;  // enough others search: park
      if (waking) {  // after counting itself a spinner, so no wake is lost between
        waking = false;
        idle.end_waking();
      }
    }
    if (rounds < config::kSpinRounds) {
      cpu_relax();
      ++rounds;
      continue;
    }
    if (rounds < config::kYieldRounds) {
      std::this_thread::yield();
      ++rounds;
      continue;
    }
    if (spinning) {
      spinning = false;
      (void)idle.end_spinning();
    }
    // A helper parks like any worker while some worker is still stuck (the
    // monitor wakes it when none is), and retires once none is.
    if (helper_ && scheduler_.stuck_workers_.load(std::memory_order_acquire) == 0) break;
    idle.prepare_park();
    if (scheduler_.any_work_visible() || scheduler_.stopping_workers_.load(std::memory_order_acquire)) {
      idle.cancel_park();
      rounds = 0;
      continue;
    }
    if (!helper_ && park_in_poller()) {
      rounds = 0;
      waking = true;
      continue;
    }
    bump(parks_);
    if (!idle.commit_park()) break;
    rounds = 0;
    waking = true;
  }
  if (waking) idle.end_waking();
  if (spinning) (void)idle.end_spinning();
  tls_worker = nullptr;
  std::lock_guard lock(thread_mu_);
  if (generation == thread_gen_) {
    thread_left_ = true;
    thread_cv_.notify_all();
  }
}

ProcessSlot* Worker::find_work() {
  auto& global = scheduler_.global_;
  if (++tick_ % config::kGlobalFairnessTick == 0) {
    // Readiness is seen while every worker is busy, too: each looks now and
    // then (what it readies queues behind its own work).
    (void)poll_ready();
    if (auto g = global.pop_batch(deque_, config::kGlobalBatch)) return *g;
  }
  if (auto local = deque_.pop()) return *local;
  if (auto g = global.pop_batch(deque_, config::kGlobalBatch)) return *g;
  return steal_work();
}

ProcessSlot* Worker::steal_work() {
  auto& workers = scheduler_.workers_;
  const std::size_t n = workers.size();
  if (n < 2) return nullptr;
  std::size_t start = next_random() % n;
  for (std::size_t i = 0; i < n; ++i) {
    Worker& victim = *workers[(start + i) % n];
    if (&victim == this) continue;
    if (victim.deque_.steal_half_into(deque_) > 0) {
      bump(steals_);
      if (auto got = deque_.pop()) return *got;
    }
  }
  return nullptr;
}

bool Worker::poll_ready() {
  IdleWorkers& idle = scheduler_.idle_;
  IdlePoller* poller = idle.poller();
  // Not while another worker blocks in it (its edges wake that one), nor
  // with nothing waiting on it (a system call for nothing).
  if (!poller || idle.poll_held() || !poller->waiting()) return false;
  IdlePoller::Batch batch;
  poller->wait(batch, false);
  if (batch.n == 0) return false;
  poller->dispatch(batch);
  return true;
}

bool Worker::park_in_poller() {
  IdleWorkers& idle = scheduler_.idle_;
  IdlePoller* poller = idle.poller();
  if (!poller || !idle.try_claim_poll()) return false;
  // The role's claim, then the token and the queues (idle_workers.hpp): a
  // wake that came before the claim is seen here, one after it interrupts
  // the wait.
  IdlePoller::Batch batch;
  const bool block = !idle.take_token() && !idle.stopped() && !scheduler_.any_work_visible() &&
                     !scheduler_.stopping_workers_.load(std::memory_order_acquire);
  if (block) {
    bump(parks_);
    poller->wait(batch, true);
  }
  // Off the role and the parked count before the completions ready
  // processes, so that their wakes reach other workers.
  idle.release_poll();
  idle.cancel_park();
  if (block) (void)idle.take_token();  // the wake that interrupted it, if one did
  if (batch.n > 0) poller->dispatch(batch);
  return true;
}

void Worker::wake_for_fed() { scheduler_.idle_.notify_work_available(); }

void Worker::execute(ProcessSlot* slot) {
  Scheduler& s = scheduler_;
  std::vector<Event>& events = step_->events;
  StepOutput& out = step_->out;
  // Two steps, each overlapping what the worker does meanwhile: the process
  // object's first line now, then (through it) what its step reads first,
  // before the slot's lock and the events' swap.
  Process* process = slot->process.get();
  __builtin_prefetch(process);
  // Only this thread writes activity_. The release stores order the mark
  // before the slot's first change (begin_running's release store publishes it)
  // and after its last.
  struct ActivityMark {
    std::atomic<std::uint64_t>& a;
    explicit ActivityMark(std::atomic<std::uint64_t>& x) : a(x) { bump(); }
    ~ActivityMark() { bump(); }
    void bump() { a.store(a.load(std::memory_order_relaxed) + 1, std::memory_order_release); }
  } mark(activity_);
  if (!slot->state.begin_running()) {
    log::logger().error("scheduler: process {} was queued but not ready", slot->pid().to_string());
    return;
  }
  log::set_current_pid(slot->pid(), process);
  // Terminated while it waited: not stepped, only closed, below (under the
  // runaway monitor's watch, as any close).
  const bool terminated = slot->terminate_requested.load(std::memory_order_acquire);
  if (!terminated) {
    process->Prefetch();
    bump(steps_);
  }
  std::uint32_t taken_mark;
  {
    std::lock_guard lock(slot->mu);
    events.swap(slot->pending);
    taken_mark = slot->arrivals.load(std::memory_order_relaxed);
  }
  out.reset();
  fed_ = 0;
  own_posts_ = 0;
  running_.store(slot, std::memory_order_relaxed);
  epoch_.store(epoch_.load(std::memory_order_relaxed) + 1, std::memory_order_release);  // odd: in a step
  try {
    if (terminated) out.status = Status::Failed;  // "terminated", below
    else process->Step(events, out);
  } catch (const std::exception& e) {
    out.status = Status::Failed;
    out.error = std::string("step raised an exception: ") + e.what();
  } catch (...) {
    out.status = Status::Failed;
    out.error = "step raised an unknown exception";
  }
  const bool ended = out.status == Status::Done || out.status == Status::Failed;
  // A terminate that came during the step (the runaway monitor interrupted
  // it for that) ends it so, whatever the step itself said.
  if (ended && slot->terminate_requested.load(std::memory_order_acquire)) {
    out.status = Status::Failed;
    out.error = "terminated";
  }
  // A process that ended closes within its step (kClosing), under the
  // runaway monitor's watch: its finalizers count against the time limit,
  // and a Close that never ends is stopped like a step (its thread parked
  // or given up; the monitor then finishes the process). Each change of
  // the epoch waits while the monitor holds kBusy on this step. If it gave
  // up on this thread meanwhile (the step outlived a terminate or the time
  // limit in a C call), the worker has another thread and the process is
  // finished: this one stops there, touching nothing.
  auto set_epoch = [this](auto next) {
    for (std::uint64_t e = epoch_.load(std::memory_order_acquire);;) {
      park_if_abandoned();  // partner: the release store in replace_thread
      if (e & kBusy) {
        std::this_thread::yield();
        e = epoch_.load(std::memory_order_acquire);
        continue;
      }
      if (epoch_.compare_exchange_weak(e, next(e), std::memory_order_acq_rel, std::memory_order_acquire)) return;
    }
  };
  if (ended) {
    set_epoch([](std::uint64_t e) { return e | kClosing; });
    process->Close();
  }
  set_epoch([](std::uint64_t e) { return (e & ~kClosing) + 1; });  // even again
  const std::size_t taken = events.size();
  events.clear();
  switch (out.status) {
    case Status::Done:
    case Status::Failed:
      if (!out.cancels().empty()) s.cancel_yields(slot, out);  // no new yields: it has ended
      if (out.status == Status::Done) s.finish(slot, false, std::move(out.result), {}, Scheduler::Ending::Closed);
      else s.finish(slot, true, {}, std::move(out.error), Scheduler::Ending::Closed);
      break;
    case Status::Continue:
      // One task yielded while others started commands (a timer): those
      // must start too.
      if (out.has_commands()) s.dispatch(slot, out);
      slot->state.end_step_runnable();
      s.push_global(slot);  // behind the others: a voluntary yield is a fair one
      break;
    case Status::Blocked:
    case Status::Idle: {
      if (out.has_commands()) s.dispatch(slot, out);
      RunState waiting = out.status == Status::Blocked ? RunState::Blocked : RunState::Idle;
      if (slot->state.end_step_waiting(waiting) == ProcessState::AfterStep::Requeue) {
        // Only for events from elsewhere: those the process sent itself
        // (or its commands' inline completions) are all there already.
        const std::uint32_t arrived = slot->arrivals.load(std::memory_order_relaxed) - taken_mark;
        if (taken < config::kStreamBatch && arrived > own_posts_) gather_batch(slot, taken_mark);
        push_local(slot);
      }
      break;
    }
  }
  log::clear_current_pid();
}

void Worker::gather_batch(ProcessSlot* slot, std::uint32_t mark) {
  using Clock = std::chrono::steady_clock;
  if (scheduler_.any_work_visible()) return;
  bump(batch_waits_);
  const auto start = Clock::now();
  auto last = start;
  std::uint32_t seen = slot->arrivals.load(std::memory_order_relaxed);
  while (seen - mark < config::kStreamBatch) {
    for (int i = 0; i < 16; ++i) cpu_relax();
    const auto now = Clock::now();
    const std::uint32_t a = slot->arrivals.load(std::memory_order_relaxed);
    if (a != seen) {
      seen = a;
      last = now;
    } else if (now - last > config::kStreamQuiet) {
      return;
    }
    if (now - start > config::kStreamWait || scheduler_.any_work_visible() ||
        scheduler_.stopping_workers_.load(std::memory_order_relaxed))
      return;
  }
}

}  // namespace host
