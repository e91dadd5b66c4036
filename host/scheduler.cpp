// The scheduler: spawning, the relay, links and monitors, dispatch of
// yields to command handlers and process exit (shutdown: scheduler_shutdown.cpp).
#include "host/scheduler.hpp"

#include <algorithm>
#include <exception>

#include "host/error.hpp"
#include "host/log.hpp"
#include "host/runaway_monitor.hpp"
#include "host/worker.hpp"

namespace host {
namespace {

std::uint32_t next_generation(std::uint32_t g) { return g == UINT32_MAX ? 1 : g + 1; }

void erase_pid(std::vector<Pid>& v, const Pid& p) { std::erase(v, p); }

}  // namespace

Scheduler::Scheduler(SchedulerOptions options)
    : table_(options.node),
      idle_(static_cast<int>(options.workers ? options.workers : std::max(1u, std::thread::hardware_concurrency()))),
      timers_([this](Pid pid, std::uint64_t tag) { complete_sleep(pid, tag); }),
      pool_(options.blocking_threads) {
  unsigned n = options.workers ? options.workers : std::max(1u, std::thread::hardware_concurrency());
  for (unsigned i = 0; i < n; ++i) workers_.push_back(std::make_unique<Worker>(*this, i));
  // Helpers exist from the start (the vector never changes again, so any
  // thread may walk it), but get a thread only when a worker is stuck.
  for (unsigned i = 0; i < std::min<unsigned>(n, IdleWorkers::kMaxExtraThreads); ++i)
    workers_.push_back(std::make_unique<Worker>(*this, n + i, true));
  regular_workers_ = n;
  CommandHandler sleep;
  sleep.name = "sleep";
  sleep.direct = &Scheduler::start_sleep;
  sleep.direct_cancel = &Scheduler::cancel_sleep;
  commands_.add(cmd::kSleep, std::move(sleep));
  timers_.start();
  for (auto& w : workers_)
    if (!w->helper()) w->start();
}

Scheduler::~Scheduler() { shutdown(std::chrono::milliseconds(0)); }

void Scheduler::watch_for_runaways(std::chrono::milliseconds limit, const void* vm_code) {
  if (!runaway_monitor_) runaway_monitor_ = std::make_unique<RunawayMonitor>(*this, limit, vm_code);
}

Worker* Scheduler::own_worker() {
  Worker* w = Worker::current();
  return w && &w->scheduler() == this ? w : nullptr;
}

PidTable::LocalFree* Scheduler::local_free_slots() {
  Worker* w = own_worker();
  return w ? &w->free_slots() : nullptr;
}

std::string Scheduler::not_found(const Pid& pid) const {
  return make_error(ErrorKind::NotFound, "no process " + pid.to_string());
}

// Inline: on every message's path (out of line, a send paid for
// the call and the lock's return).
[[gnu::always_inline]] inline std::unique_lock<SpinLock> Scheduler::lock_live(const Pid& pid, ProcessSlot*& slot) {
  slot = table_.find(pid);
  if (!slot) return {};
  std::unique_lock lock(slot->mu);
  if (!slot->alive || slot->generation != pid.generation) return {};
  return lock;
}

// Inline into post, a message's path: out of line its call was a large
// share of a message's cost there (BENCHMARKS.md's source figures).
[[gnu::always_inline]] inline void Scheduler::schedule(ProcessSlot* slot) {
  if (Worker* w = own_worker()) {
    w->push_local(slot);
    // The worker runs what it readied next; only wake a thief when it has
    // more queued than that one (a ping-pong pair would otherwise wake a
    // parked worker, a futex call, on every message).
    if (w->deque().size_approx() > 1) idle_.notify_work_available();
    return;
  }
  push_global(slot);
}

void Scheduler::push_global(ProcessSlot* slot) {
  global_.push(slot);
  idle_.notify_work_available();
}

Scheduler::Counters Scheduler::counters() const {
  Counters c;
  for (const auto& w : workers_) c.workers += w->counters();
  c.workers.messages += elsewhere_messages_.load(std::memory_order_relaxed);
  c.workers.spawns += elsewhere_spawns_.load(std::memory_order_relaxed);
  c.failures = failures_.load(std::memory_order_relaxed);
  c.wakes = idle_.wakes();
  return c;
}

bool Scheduler::any_work_visible() const {
  if (!global_.empty_approx()) return true;
  for (const auto& w : workers_)
    if (!w->deque().empty_approx()) return true;
  return false;
}

void Scheduler::set_idle_job(std::function<bool()> job) {
  std::unique_lock lock(idle_job_mu_);
  has_idle_job_.store(static_cast<bool>(job), std::memory_order_release);
  idle_job_ = std::move(job);
}

bool Scheduler::run_idle_job() {
  if (!has_idle_job_.load(std::memory_order_acquire)) return false;
  // A worker that finds the job being replaced parks instead of waiting.
  std::shared_lock lock(idle_job_mu_, std::try_to_lock);
  return lock.owns_lock() && idle_job_ && idle_job_();
}

SpawnResult Scheduler::spawn(std::unique_ptr<Process> process, const std::string& method, std::string input,
                             const SpawnOptions& options) {
  if (stopping_workers_.load(std::memory_order_acquire))
    return {{}, make_error(ErrorKind::Canceled, "the scheduler is shutting down")};
  if (!process) return {{}, make_error(ErrorKind::Invalid, "spawn of a null process")};
  PidTable::LocalFree* local = local_free_slots();
  ProcessSlot* slot = table_.allocate(local);
  if (!slot) return {{}, make_error(ErrorKind::Limit, "the process table is full")};
  const Pid pid = slot->pid();

  auto give_up = [&](std::string why) -> SpawnResult {
    process->Close();
    {
      std::lock_guard lock(slot->mu);
      slot->generation = next_generation(slot->generation);  // the PID Init saw never answers
    }
    table_.release(slot, local);
    return {{}, std::move(why)};
  };

  std::string err;
  Worker* const on_worker = own_worker();
  if (on_worker) on_worker->begin_init();
  try {
    const log::CurrentPidScope own_lines(pid, process.get());  // its module's top-level code runs here
    err = process->Init(ProcessContext{this, pid}, method, std::move(input));
  } catch (const std::exception& e) {
    err = make_error(ErrorKind::Invalid, std::string("process init raised: ") + e.what());
  }
  // A thread the runaway monitor gave up on while it ran the Init (its
  // spawner was terminated in it) goes no further.
  Worker::park_if_abandoned();
  if (on_worker) on_worker->end_init();
  if (!err.empty()) return give_up(std::move(err));

  if (options.link_to.valid()) {
    ProcessSlot* parent;
    auto lock = lock_live(options.link_to, parent);
    if (!lock) return give_up(not_found(options.link_to));
    parent->links.push_back(pid);
  }
  slot->process = std::move(process);
  slot->terminate_requested.store(false, std::memory_order_relaxed);
  slot->outstanding_yields.store(0, std::memory_order_relaxed);
  slot->outstanding_sleeps.store(0, std::memory_order_relaxed);
  live_.fetch_add(1, std::memory_order_acq_rel);
  {
    std::lock_guard lock(slot->mu);
    slot->alive = true;
    slot->links.clear();
    slot->monitors.clear();
    slot->pending.clear();
    if (options.link_to.valid()) slot->links.push_back(options.link_to);
    if (options.monitor_by.valid()) slot->monitors.push_back(Monitor{options.monitor_by, options.monitor_ref});
    if (cancelling_.load(std::memory_order_acquire)) {
      Event ev;
      ev.kind = EventKind::Cancel;
      ev.payload = "shutdown";
      slot->pending.push_back(std::move(ev));
    }
    slot->state.reset_ready();
  }
  if (options.parent.valid() && track_parents_.load(std::memory_order_acquire)) {
    ParentStripe& st = parent_stripe(pid);
    std::lock_guard lock(st.mu);
    st.of[pid] = options.parent;
  }
  schedule(slot);
  if (Worker* w = own_worker()) w->note_spawn();
  else elsewhere_spawns_.fetch_add(1, std::memory_order_relaxed);
  return {pid, {}};
}

template <typename UnderLock>
bool Scheduler::post(const Pid& to, Event* event, UnderLock&& under_lock) {
  ProcessSlot* slot;
  auto lock = lock_live(to, slot);
  if (!lock) return false;
  under_lock(*slot);
  if (event) slot->pending.push_back(std::move(*event));
  slot->arrivals.store(slot->arrivals.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  const ProcessState::Wake wake = slot->state.on_event_arrived();
  lock.release()->unlock();  // (unique_lock::unlock, its checks and all, was a call g++ kept out of line)
  // Ready now, and in no queue: nothing can run or finish it until we queue it.
  if (wake == ProcessState::Wake::Schedule) schedule(slot);
  if (wake == ProcessState::Wake::Queued) {
    if (Worker* w = own_worker()) w->fed_queued_process();
  }
  if (wake == ProcessState::Wake::None) {  // running (or gone)
    if (Worker* w = own_worker(); w && w->running() == slot) w->posted_to_running();
  }
  return true;
}

std::string Scheduler::deliver(const Pid& to, Event&& event) {
  if (post(to, &event, [](ProcessSlot&) {})) return {};
  // An exit, link_down or cancel for a process of another node.
  if (remote_ && to.node != table_.node()) return remote_->deliver_event(to, event);
  return not_found(to);
}

// send's and send_copy's one body: the message is built in place in the
// queue, under the lock: no Event to construct, move and destroy around
// it (three strings each). The message path's only copy of the topic;
// the payload moved in (a std::string) or copied in (a std::string_view).
template <typename Payload>
std::string Scheduler::post_message(const Pid& to, std::string_view topic, Payload&& payload, const Pid& from,
                                    std::size_t* backlog) {
  if (Worker* w = own_worker()) w->note_message();
  else elsewhere_messages_.fetch_add(1, std::memory_order_relaxed);
  const bool alive = post(to, nullptr, [&](ProcessSlot& slot) {
    if (payload.empty()) slot.pending.emplace_back(from, topic);
    else slot.pending.emplace_back(from, topic, std::forward<Payload>(payload));
    if (backlog) *backlog = slot.pending.size();
  });
  return alive ? std::string() : not_found(to);
}

std::string Scheduler::send(const Pid& to, std::string_view topic, std::string&& payload, const Pid& from,
                            std::size_t* backlog) {
  return post_message(to, topic, std::move(payload), from, backlog);
}

std::string Scheduler::send_copy(const Pid& to, std::string_view topic, std::string_view payload, const Pid& from,
                                 std::size_t* backlog) {
  return post_message(to, topic, payload, from, backlog);
}

std::string Scheduler::cancel(const Pid& to, std::string reason, const Pid& from, bool value_bytes) {
  Event ev;
  ev.kind = EventKind::Cancel;
  ev.from = from;
  ev.tag = value_bytes ? 1 : 0;
  ev.payload = std::move(reason);
  return deliver(to, std::move(ev));
}

std::string Scheduler::terminate(const Pid& to) {
  bool ok = post(to, nullptr, [](ProcessSlot& s) { s.terminate_requested.store(true, std::memory_order_release); });
  if (ok) return {};
  if (remote_ && to.node != table_.node()) return remote_->terminate(to);
  return not_found(to);
}

bool Scheduler::complete_yield(const Pid& pid, std::uint64_t tag, std::string result, std::string error) {
  const bool failed = !error.empty();
  return post_completion(pid, tag, failed ? &error : &result, {}, failed, false);
}

bool Scheduler::complete_yield_copy(const Pid& pid, std::uint64_t tag, std::string_view result) {
  return post_completion(pid, tag, nullptr, result, false, false);
}

void Scheduler::complete_sleep(const Pid& pid, std::uint64_t tag, std::string error) {
  const bool failed = !error.empty();
  post_completion(pid, tag, &error, {}, failed, true);
}

// The completions' one body: the event is built in place in the queue,
// under the lock, as post_message builds a message (an Event built here
// and moved in cost its strings' moves and its destruction on every
// readiness a socket waited for: BENCHMARKS.md, "An echo message's cost,
// continued"). Its payload moved from *moved, else copied from copied.
// One function, not a template on the payload: a further instantiation
// of post made g++ stop inlining the payload's move into send.
bool Scheduler::post_completion(const Pid& pid, std::uint64_t tag, std::string* moved, std::string_view copied,
                                bool failed, bool sleep) {
  if (post(pid, nullptr, [&](ProcessSlot& s) {
        // The event first, the counts last: a bad_alloc here leaves the
        // queue and the counts as they were, so the caller's catch can
        // complete the same tag with an error and be counted once.
        Event& ev = s.pending.emplace_back();
        try {
          if (moved) ev.payload = std::move(*moved);
          else ev.payload.assign(copied);
        } catch (...) {
          s.pending.pop_back();
          throw;
        }
        ev.kind = EventKind::YieldComplete;
        ev.tag = tag;
        ev.failed = failed;
        s.outstanding_yields.fetch_sub(1, std::memory_order_relaxed);
        if (sleep) s.outstanding_sleeps.fetch_sub(1, std::memory_order_relaxed);
      }))
    return true;
  log::logger().debug("scheduler: completion of tag {} for {} dropped: process gone", tag, pid.to_string());
  return false;
}

std::string Scheduler::link(const Pid& a, const Pid& b) {
  if (a == b) return make_error(ErrorKind::Invalid, "a process cannot link to itself");
  if (remote_ && b.node != table_.node() && a.node == table_.node()) {
    // This node's half (a's failure reaches b through the cluster), then
    // the other node's (b's reaches a).
    if (std::string err = link_half(a, b); !err.empty()) return err;
    if (std::string err = remote_->link(a, b); !err.empty()) {
      (void)unlink(a, b);
      return err;
    }
    return {};
  }
  ProcessSlot* sa = table_.find(a);
  ProcessSlot* sb = table_.find(b);
  if (!sa) return not_found(a);
  if (!sb) return not_found(b);
  // Lock in index order: two links made at once never deadlock.
  ProcessSlot* first = sa->index < sb->index ? sa : sb;
  ProcessSlot* second = first == sa ? sb : sa;
  std::scoped_lock lock(first->mu, second->mu);
  if (!sa->alive || sa->generation != a.generation) return not_found(a);
  if (!sb->alive || sb->generation != b.generation) return not_found(b);
  if (std::find(sa->links.begin(), sa->links.end(), b) == sa->links.end()) sa->links.push_back(b);
  if (std::find(sb->links.begin(), sb->links.end(), a) == sb->links.end()) sb->links.push_back(a);
  return {};
}

std::string Scheduler::unlink(const Pid& a, const Pid& b) {
  for (auto [self, other] : {std::pair{a, b}, std::pair{b, a}}) {
    ProcessSlot* slot;
    if (auto lock = lock_live(self, slot)) erase_pid(slot->links, other);
  }
  if (remote_ && b.node != table_.node() && a.node == table_.node()) remote_->unlink(a, b);
  return {};
}

void Scheduler::unlink_half(const Pid& local, const Pid& other) {
  ProcessSlot* slot;
  if (auto lock = lock_live(local, slot)) erase_pid(slot->links, other);
}

std::string Scheduler::link_half(const Pid& local, const Pid& other) {
  ProcessSlot* slot;
  auto lock = lock_live(local, slot);
  if (!lock) return not_found(local);
  if (std::find(slot->links.begin(), slot->links.end(), other) == slot->links.end()) slot->links.push_back(other);
  return {};
}

std::string Scheduler::monitor(const Pid& watcher, const Pid& target, std::uint64_t ref) {
  ProcessSlot* slot;
  {
    auto lock = lock_live(target, slot);
    if (lock) {
      slot->monitors.push_back(Monitor{watcher, ref});
      return {};
    }
  }
  // A process of another node: its node keeps the monitor.
  if (remote_ && target.node != table_.node()) return remote_->monitor(watcher, target, ref);
  // Gone, or never there: the monitor ends at once with "noproc", as
  // Erlang's DOWN does, so that a watcher given any PID learns of its end
  // without a race between the end and the monitor.
  Event ev;
  ev.kind = EventKind::Exit;
  ev.tag = ref;
  ev.from = target;
  ev.failed = true;
  ev.payload = "noproc";
  (void)deliver(watcher, std::move(ev));  // a watcher that is gone has nobody to tell
  return {};
}

std::string Scheduler::unmonitor(const Pid& watcher, const Pid& target, std::uint64_t ref) {
  ProcessSlot* slot;
  auto lock = lock_live(target, slot);
  if (!lock) {
    if (remote_ && target.node != table_.node()) {
      remote_->demonitor(watcher, target, ref);
      return {};
    }
    return not_found(target);
  }
  std::erase_if(slot->monitors, [&](const Monitor& m) { return m.watcher == watcher && m.ref == ref; });
  return {};
}

bool Scheduler::alive(const Pid& pid) {
  ProcessSlot* slot;
  return static_cast<bool>(lock_live(pid, slot));
}

bool Scheduler::wait_all_exited(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(live_mu_);
  return live_cv_.wait_until(lock, deadline, [&] { return live_.load(std::memory_order_acquire) == 0; });
}

void Scheduler::cancel_yields(ProcessSlot* slot, const StepOutput& out) {
  for (const auto& c : out.cancels()) {
    const CommandHandler* h = commands_.find(c.command);
    if (!h) continue;
    if (h->direct_cancel ? h->direct_cancel(h->context, *this, *slot, c.tag) : h->cancel && h->cancel(*this, slot->pid(), c.tag))
      slot->outstanding_yields.fetch_sub(1, std::memory_order_relaxed);
  }
}

// cmd::kSleep's handler: the timer service's. A process's timers count
// apart from its other yields (outstanding_sleeps), for shutdown: a
// process that waits on timers alone can run again only when one is due
// (nothing_can_run).
void Scheduler::start_sleep(void*, Scheduler& s, ProcessSlot& slot, const Yield& y) {
  slot.outstanding_sleeps.fetch_add(1, std::memory_order_relaxed);  // before it can fire
  try {
    s.timers_.schedule(slot.pid(), y.tag, std::chrono::nanoseconds(y.arg));
  } catch (const std::exception& e) {
    s.complete_sleep(slot.pid(), y.tag, make_error(ErrorKind::Invalid, std::string("command sleep failed: ") + e.what()));
  }
}

bool Scheduler::cancel_sleep(void*, Scheduler& s, ProcessSlot& slot, std::uint64_t tag) {
  if (!s.timers_.cancel(slot.pid(), tag)) return false;
  slot.outstanding_sleeps.fetch_sub(1, std::memory_order_relaxed);
  return true;
}

void Scheduler::dispatch(ProcessSlot* slot, StepOutput& out) {
  const Pid pid = slot->pid();
  if (!out.cancels().empty()) cancel_yields(slot, out);
  const std::size_t n = out.yield_count();
  // Most steps wait on messages only: no locked add for nothing (its line
  // is one senders write, and in perf the add was three quarters of this
  // function's samples in Big).
  if (n != 0) slot->outstanding_yields.fetch_add(static_cast<std::int32_t>(n), std::memory_order_relaxed);
  for (std::size_t i = 0; i < n; ++i) {
    Yield& y = out.yield_at(i);
    const CommandHandler* h = commands_.find(y.command);
    if (!h) {
      complete_yield(pid, y.tag, {}, make_error(ErrorKind::Invalid, "unknown command " + std::to_string(y.command)));
      continue;
    }
    if (h->direct) {
      h->direct(h->context, *this, *slot, y);
      continue;
    }
    CommandRequest req{this, pid, y.tag, y.arg, std::move(y.bytes)};
    auto run_guarded = [this, h](CommandRequest&& r) {
      const Pid p = r.pid;
      const std::uint64_t tag = r.tag;
      try {
        h->run(std::move(r));
      } catch (const std::exception& e) {
        complete_yield(p, tag, {}, make_error(ErrorKind::Invalid, "command " + h->name + " failed: " + e.what()));
      } catch (...) {
        complete_yield(p, tag, {}, make_error(ErrorKind::Invalid, "command " + h->name + " failed"));
      }
    };
    if (h->blocking) {
      auto job = [run_guarded, r = std::move(req)]() mutable { run_guarded(std::move(r)); };
      if (!pool_.submit(std::move(job)))
        complete_yield(pid, y.tag, {}, make_error(ErrorKind::Canceled, "the scheduler is shutting down"));
    } else {
      run_guarded(std::move(req));
    }
  }
}

void Scheduler::finish(ProcessSlot* slot, bool failed, std::string result, std::string error, Ending ending) {
  const Pid pid = slot->pid();
  if (failed) failures_.fetch_add(1, std::memory_order_relaxed);
  if (track_parents_.load(std::memory_order_acquire)) {
    ParentStripe& st = parent_stripe(pid);
    std::lock_guard lock(st.mu);
    st.of.erase(pid);
  }
  std::vector<Pid> links;
  std::vector<Monitor> monitors;
  {
    std::lock_guard lock(slot->mu);
    slot->state.mark_complete();  // under the lock: see ProcessState::on_event_arrived
    slot->alive = false;
    slot->generation = next_generation(slot->generation);
    links.swap(slot->links);
    monitors.swap(slot->monitors);
    slot->pending.clear();
  }
  // Its entry, for a crash report: the process is gone by then.
  std::string entry = failed && slot->process ? slot->process->Name() : "";
  if (auto proc = std::move(slot->process)) {
    if (ending != Ending::Closed) proc->Close();
    if (ending == Ending::Abandon) {
      // A thread stopped, or still running, inside it: never freed.
      std::lock_guard lock(abandoned_mu_);
      abandoned_.push_back(std::move(proc));
    } else {
      log::forget_process(proc.get());
    }
  }

  ExitInfo info{pid, failed, failed ? std::string() : std::move(result), failed ? std::move(error) : std::string()};
  info.entry = std::move(entry);
  for (auto& hook : exit_hooks_) hook(info);
  // Whether some live process learnt of a failure: a watcher or linked
  // process that is gone already misses its event (deliver fails).
  bool told = false;
  for (const Monitor& m : monitors) {
    Event ev;
    ev.kind = EventKind::Exit;
    ev.tag = m.ref;
    ev.from = pid;
    ev.failed = info.failed;
    ev.payload = info.failed ? info.error : info.result;
    told |= deliver(m.watcher, std::move(ev)).empty();  // a watcher that is gone simply misses it
  }
  for (const Pid& other : links) {
    ProcessSlot* os;
    if (auto lock = lock_live(other, os)) erase_pid(os->links, pid);
    // A link to another node's process ends there too (a failure's
    // link_down below ends it as it arrives).
    else if (!failed && remote_ && other.node != table_.node()) remote_->unlink(pid, other);
    if (failed) {
      Event ev;
      ev.kind = EventKind::LinkDown;
      ev.from = pid;
      ev.failed = true;
      ev.payload = info.error;
      told |= deliver(other, std::move(ev)).empty();
    }
  }
  if (failed && !told && unwatched_failure_hook_) unwatched_failure_hook_(info);
  table_.release(slot, local_free_slots());
  if (live_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    std::lock_guard lock(live_mu_);  // orders the notify after a waiter's predicate check
    live_cv_.notify_all();
  }
}

std::vector<Pid> Scheduler::live_pids() {
  std::vector<Pid> out;
  out.reserve(live_count());
  for (std::uint32_t i = 0, n = table_.index_limit(); i < n; ++i) {
    ProcessSlot* slot = table_.slot_at(i);
    if (!slot) continue;
    std::lock_guard lock(slot->mu);
    // One terminated is ended for whoever asks after terminate returned,
    // though its worker may not have finished it yet.
    if (slot->alive && !slot->terminate_requested.load(std::memory_order_acquire)) out.push_back(slot->pid());
  }
  return out;
}

std::optional<Scheduler::Inspection> Scheduler::inspect(const Pid& pid, bool self) {
  // A step is usually microseconds long: wait for one to end rather than
  // answer without what only a quiet process can tell; a process stuck in
  // a long computation or a C call is answered as it is.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::milliseconds(5);
  for (;;) {
    ProcessSlot* slot;
    auto lock = lock_live(pid, slot);
    if (!lock || slot->terminate_requested.load(std::memory_order_acquire)) return std::nullopt;  // see live_pids
    Inspection in;
    in.state = slot->state.state();
    if (in.state == RunState::Running && !self && std::chrono::steady_clock::now() < give_up) {
      lock.unlock();
      std::this_thread::yield();
      continue;
    }
    in.queued = static_cast<std::size_t>(std::count_if(slot->pending.begin(), slot->pending.end(),
                                                       [](const Event& e) { return e.kind == EventKind::Message; }));
    in.outstanding = slot->outstanding_yields.load(std::memory_order_acquire);
    in.links = slot->links;
    in.monitored_by.reserve(slot->monitors.size());
    for (const Monitor& m : slot->monitors)
      if (std::find(in.monitored_by.begin(), in.monitored_by.end(), m.watcher) == in.monitored_by.end())
        in.monitored_by.push_back(m.watcher);
    in.facts.quiet = in.state != RunState::Running && !self;
    if (slot->process) slot->process->Describe(in.facts);
    lock.unlock();
    if (track_parents_.load(std::memory_order_acquire)) {
      ParentStripe& st = parent_stripe(pid);
      std::lock_guard plock(st.mu);
      if (auto it = st.of.find(pid); it != st.of.end()) in.parent = it->second;
    }
    return in;
  }
}

}  // namespace host
