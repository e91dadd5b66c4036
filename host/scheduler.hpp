// The scheduler: runs processes on a pool of work-stealing workers and
// relays events (messages, yield completions, cancels, exits) to them.
// Threads: every public call may be made from any thread, including from a
// process's Step on a worker.
//
// Design essay
// ------------
// Vocabulary. A *process* is a state machine behind the Process interface; a
// *slot* is its control block in the PID table; a *worker* is an OS thread
// that runs processes; a *yield* is a command a process waits on, identified
// by a tag it chose; a *completion* is the event that answers a yield.
//
// The problem. Many more processes than cores, most of them waiting most of
// the time, woken by events that come from any thread. We must run each
// ready process on exactly one worker, never lose a wakeup, keep a process
// and the one that woke it on the same core when we can, and not burn cores
// when there is nothing to do.
//
// Run queues. Each worker owns a Chase-Lev deque (deque.hpp): it pushes and
// pops at the bottom, so a process woken by the process that just ran runs
// next, on a warm cache. A global FIFO queue (global_queue.hpp) takes new
// submissions, processes readied by non-worker threads (timers, handlers on
// the blocking pool) and voluntary yields. A worker looks for work in this
// order: its deque, the global queue (taking up to 16 more into its deque),
// then half of a random victim's deque. Every 61st tick it looks at the
// global queue first, so local ping-pong cannot starve it.
//
// Waking. A process's RunState (process_state.hpp) is one atomic word; an
// event that arrives while the process runs sets a wakeup bit instead of
// queueing it, and the worker re-queues it after the step. Only the thread
// whose CAS moved a process to Ready queues it, so a process is in at most
// one queue at a time. Events are pushed under the slot's mutex together
// with the generation check, so an event for a dead process is refused and
// a stale PID can never wake a reused slot.
//
// Idling. Workers spin briefly, then yield, then park (idle_workers.hpp).
// Making work available wakes a parked worker only if no worker is
// spinning; a spinner that finds work wakes the next. Rejected: waking a
// worker on every push (a thundering herd that costs a futex call per
// message), and never parking (burns the machine when idle).
//
// Barriers. Submit: push, then a seq_cst fence, then read the spinning and
// parked counts. Spin-down: announce parked, seq_cst fence, then recheck
// every queue. One of the two always sees the other (idle_workers.hpp).
//
// Shutdown. 1) Refuse nothing yet, but send every live process a cancel
// event (and every process spawned from now on). 2) Wait for all to exit
// until the grace deadline, or until none of them can run again before it
// (each waits for an event nothing can send in time). 3) Stop and join the
// workers, each until the grace deadline (or a short allowance past it);
// one stuck in a step is given up. 4) Close what is left, on the calling
// thread, abandoning the processes of given-up workers, and report it with
// the yields that never completed. 5) Stop the timer thread and the
// blocking pool.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <array>
#include <mutex>
#include <unordered_map>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "host/blocking_pool.hpp"
#include "host/commands.hpp"
#include "host/config.hpp"
#include "host/deque.hpp"
#include "host/global_queue.hpp"
#include "host/idle_workers.hpp"
#include "host/pid_table.hpp"
#include "host/process.hpp"
#include "host/remote_nodes.hpp"
#include "host/timer_service.hpp"
#include "host/worker.hpp"

namespace host {

class RunawayMonitor;

struct SchedulerOptions {
  unsigned workers = 0;  // 0: one per hardware thread
  std::uint32_t node = 0;
  unsigned blocking_threads = config::kBlockingPoolThreads;
};

struct SpawnOptions {
  Pid link_to;                   // link the new process with this one, atomically
  Pid monitor_by;                // and/or let this one monitor it, atomically
  std::uint64_t monitor_ref = 0;
  Pid parent;                    // the process spawning it (kept only while track_parents is on)
};

struct SpawnResult {
  Pid pid;
  std::string error;  // empty on success
  explicit operator bool() const { return error.empty(); }
};

struct ExitInfo {
  Pid pid;
  bool failed = false;
  std::string result;  // when !failed
  std::string error;   // when failed
  std::string entry;   // when failed: the process's Name(), for a crash report
};

struct ShutdownReport {
  std::size_t exited_in_grace = 0;        // processes that ended after the cancel, within the grace
  std::size_t force_closed = 0;           // processes closed after the grace ran out, or when none could run
  bool none_could_run = false;            // the wait ended early: no process left could run before the deadline
  std::size_t yields_never_completed = 0; // outstanding yields of the force-closed ones
  // Worker threads left running or blocked when shutdown returned: stuck in
  // a step past the grace, or given up by the runaway monitor and not parked
  // yet. The scheduler must then not be destroyed: the caller exits the
  // program instead (_exit), as the host program does.
  std::size_t threads_given_up = 0;
  std::size_t timers_dropped = 0;
  std::size_t blocking_jobs_dropped = 0;
};

class Scheduler {
 public:
  explicit Scheduler(SchedulerOptions options = {});
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  unsigned worker_count() const { return regular_workers_; }
  CommandRegistry& commands() { return commands_; }
  TimerService& timers() { return timers_; }
  BlockingPool& blocking_pool() { return pool_; }

  // Calls Init on the caller's thread, so a process that cannot start fails
  // here with its reason; then queues it.
  SpawnResult spawn(std::unique_ptr<Process> process, const std::string& method, std::string input,
                    const SpawnOptions& options = {});

  // The relay. Each returns "" on success, or an error naming the cause
  // ("not_found: no process <0.4.2>"). Events from one thread to one process
  // arrive in the order sent. send takes its payload by rvalue reference:
  // by value, a short (in-place) payload was copied once more on the way
  // into the event, a memcpy call a message. The payload is opaque here; a
  // Lua process reads it with the codec, and an empty one as nil. Where
  // backlog is given, it is set to the events now waiting for the target's
  // next step, this one included (read under the lock the send takes
  // anyway): how far the target's steps are behind its senders.
  std::string send(const Pid& to, std::string_view topic, std::string&& payload, const Pid& from = {},
                   std::size_t* backlog = nullptr);
  // send for a payload held elsewhere (a sender's buffer on its stack),
  // copied once, into the event in the queue: for a short payload,
  // encoded into a std::string and moved, the append and the move's copy
  // were paid on every message (BENCHMARKS.md's source figures).
  std::string send_copy(const Pid& to, std::string_view topic, std::string_view payload, const Pid& from = {},
                        std::size_t* backlog = nullptr);
  // Moves the event once, into the process's queue.
  std::string deliver(const Pid& to, Event&& event);
  // A Cancel event: its payload is `reason`, as text, or (value_bytes) a
  // value a binding encoded, which its tag (1) marks.
  std::string cancel(const Pid& to, std::string reason, const Pid& from = {}, bool value_bytes = false);
  // Forced stop: the process is not stepped again; monitors see "terminated".
  std::string terminate(const Pid& to);

  // Completes an outstanding yield; from any thread. False when the process
  // is gone (the completion is dropped; a late timer, say).
  bool complete_yield(const Pid& pid, std::uint64_t tag, std::string result, std::string error = {});
  // The same with a result copied in from bytes held elsewhere (the
  // netpoller's readiness, the same few bytes for every wait): built in
  // place in the queue, as send_copy builds a message.
  bool complete_yield_copy(const Pid& pid, std::uint64_t tag, std::string_view result);

  // Erlang-style links (both directions) and monitors (one way). A failure
  // of one linked process delivers LinkDown to the other; the exit of a
  // monitored process delivers one Exit event per monitor. A monitor of a
  // process that is gone (or never was) succeeds and delivers its Exit at
  // once, failed with "noproc"; a link to one is refused (not_found).
  std::string link(const Pid& a, const Pid& b);
  std::string unlink(const Pid& a, const Pid& b);
  std::string monitor(const Pid& watcher, const Pid& target, std::uint64_t ref);
  // One half of a link: `other` (a process of another node, whose node
  // keeps the other half) joins local's links, so local's failure sends it
  // a link_down. not_found when local is not alive.
  std::string link_half(const Pid& local, const Pid& other);
  void unlink_half(const Pid& local, const Pid& other);
  std::string unmonitor(const Pid& watcher, const Pid& target, std::uint64_t ref);

  bool alive(const Pid& pid);
  std::size_t live_count() const { return live_.load(std::memory_order_acquire); }

  // process.list and process.info (docs/LUA_API.md, process). live_pids: every live
  // process, each slot locked in turn (a snapshot that may miss a process
  // spawned meanwhile). Both take a process terminate() was called for as
  // gone already, though its worker may finish it a little later.
  // inspect: nullopt when pid is not alive; a process
  // that is running is waited for a few milliseconds, so that most answers
  // are read while it is quiet (ProcessFacts).
  std::vector<Pid> live_pids();
  struct Inspection {
    RunState state = RunState::Ready;
    Pid parent;              // who spawned it, while track_parents is on (else none)
    std::size_t queued = 0;  // messages not yet taken by a step
    std::int32_t outstanding = 0;  // commands it waits on (timers included)
    std::vector<Pid> links;
    std::vector<Pid> monitored_by;
    ProcessFacts facts;
  };
  // self: the caller is that process, in its own step (nothing to wait
  // for; it reads its own state).
  std::optional<Inspection> inspect(const Pid& pid, bool self = false);
  // Who spawned whom (the inspector's tree): off by default, since it costs
  // every spawn and exit a locked map update. Turn on before spawning.
  void track_parents() { track_parents_.store(true, std::memory_order_release); }
  // What the workers did (the sums of Worker::Counters) and the wakes the
  // idle protocol issued; logged at debug level when the workers stop.
  struct Counters {
    Worker::Counters workers;     // with the messages and spawns of threads that are not workers
    std::uint64_t wakes = 0;
    std::uint64_t failures = 0;   // processes that ended failed
  };
  Counters counters() const;
  // True when every process exited before the deadline.
  bool wait_all_exited(std::chrono::steady_clock::time_point deadline);

  // Called on the thread that finished a process, after its PID stopped
  // answering and before its monitors are told (and before live_count()
  // drops). Register before spawning.
  // Hooks also run during shutdown (from the destructor too), so whatever a
  // hook uses must outlive the scheduler or be owned by the hook.
  void add_exit_hook(std::function<void(const ExitInfo&)> hook) { exit_hooks_.push_back(std::move(hook)); }
  // Called for a process that failed with nobody to tell: none of its
  // monitors and links named a live process when it ended, so no exit or
  // link_down event of it reached anyone (the crash report of docs/LUA_API.md, Output and logs).
  // On the thread that finished it, after the exit hooks. Set before
  // spawning; the same lifetime rule as the exit hooks'.
  void set_unwatched_failure_hook(std::function<void(const ExitInfo&)> hook) {
    unwatched_failure_hook_ = std::move(hook);
  }

  ShutdownReport shutdown(std::chrono::milliseconds grace = config::kDefaultShutdownGrace);

  // Stops processes whose step runs longer than `limit` of CPU time, and
  // steps of terminated processes that do not end (runaway_monitor.hpp).
  // vm_code: an address in the Lua VM's code, where a stuck thread may be
  // parked (null: none). Call once, before processes run.
  void watch_for_runaways(std::chrono::milliseconds limit, const void* vm_code = nullptr);

  // Work for idle cores. A worker that runs out of processes to run (a
  // parked one once it is woken and done), before it spins and parks, calls
  // `job` once and looks for processes again; it keeps
  // alternating until `job` returns false (nothing left to do). So one unit
  // of `job` is the longest a new process waits for an idle worker: keep it
  // short (a few microseconds). Replacing or clearing it (an empty job)
  // waits for the workers inside the old one, so its owner may go away.
  void set_idle_job(std::function<bool()> job);

  // The idle poller (idle_poller.hpp): workers poll it when they look for
  // work and the last to park blocks in it. One per scheduler: false
  // when one is attached already (the caller then polls it itself). It
  // must outlive the workers (the exit hooks' lifetime rule).
  bool attach_idle_poller(IdlePoller* poller) {
    if (idle_.poller()) return false;
    idle_.set_poller(poller);
    return true;
  }

  // The cluster (host/remote_nodes.hpp): events, monitors, links and
  // terminates for a PID of another node go there (a message's send is
  // the Lua send's, bindings/lua_cluster_api.cpp, send_elsewhere). Set
  // once, before processes run; null (the default) without --cluster.
  // Only a call that finds no local process looks at it, so a local
  // message pays nothing for it.
  void set_remote(RemoteNodes* remote) { remote_ = remote; }
  RemoteNodes* remote() const { return remote_; }
  // This scheduler's node id: the node part of its PIDs.
  std::uint32_t node() const { return table_.node(); }

 private:
  // Whether no live process can run again before `deadline`: each waits,
  // with no event queued and no yield outstanding but timers, none of which
  // is due by then, and no step ran and no timer fired meanwhile.
  // Shutdown's early end; see the definition for why one pass suffices.
  bool nothing_can_run(std::chrono::steady_clock::time_point deadline);
  // cmd::kSleep's handler (direct, on the timer service), and the timer
  // thread's completion of its yield (error: the schedule's failure).
  static void start_sleep(void*, Scheduler& s, ProcessSlot& slot, const Yield& y);
  static bool cancel_sleep(void*, Scheduler& s, ProcessSlot& slot, std::uint64_t tag);
  void complete_sleep(const Pid& pid, std::uint64_t tag, std::string error = {});
  bool post_completion(const Pid& pid, std::uint64_t tag, std::string* moved, std::string_view copied, bool failed,
                       bool sleep);
  friend class Worker;
  friend class RunawayMonitor;

  // Locks the slot a PID names if it is that process and alive. On success
  // the returned lock holds slot->mu.
  std::unique_lock<SpinLock> lock_live(const Pid& pid, ProcessSlot*& slot);
  // The relay's one wake protocol: if `to` is alive, runs under_lock(slot)
  // and pushes *event (when not null) under its lock, moves it to Ready if it
  // waited, and queues it after unlocking. False when `to` is gone.
  template <typename UnderLock>
  bool post(const Pid& to, Event* event, UnderLock&& under_lock);
  template <typename Payload>
  std::string post_message(const Pid& to, std::string_view topic, Payload&& payload, const Pid& from,
                           std::size_t* backlog);
  // Queues a process whose state this thread just moved to Ready.
  void schedule(ProcessSlot* slot);
  void push_global(ProcessSlot* slot);
  // How finish treats the process object: Close it; it was Closed already
  // (by its worker, inside the step); or Abandon: a worker thread was given
  // up inside its step (Process::Abandon was called), so the object is
  // closed but kept for good, as that thread may still hold it.
  enum class Ending : std::uint8_t { Close, Closed, Abandon };
  // Ends a process: PID stops answering, Close, hooks, monitors and links told.
  void finish(ProcessSlot* slot, bool failed, std::string result, std::string error, Ending ending = Ending::Close);
  bool any_work_visible() const;
  // One unit of the idle job; false when there is none or it had nothing to do.
  bool run_idle_job();
  // A step's cancels, then its yields. A step that ends its process has
  // only its cancels carried out (cancel_yields), which drop timers it no
  // longer waits for.
  void dispatch(ProcessSlot* slot, StepOutput& out);
  void cancel_yields(ProcessSlot* slot, const StepOutput& out);
  std::string not_found(const Pid& pid) const;
  // The calling worker's cache of free PID slots; null on other threads.
  PidTable::LocalFree* local_free_slots();
  // The worker running on this thread if it is one of this scheduler's,
  // else null (another thread, or a worker of another scheduler).
  Worker* own_worker();

  PidTable table_;
  CommandRegistry commands_;
  GlobalQueue<ProcessSlot*> global_;
  IdleWorkers idle_;
  std::vector<std::unique_ptr<Worker>> workers_;  // regular ones first, then helpers; fixed after construction
  unsigned regular_workers_ = 0;
  TimerService timers_;
  BlockingPool pool_;
  RemoteNodes* remote_ = nullptr;  // set before processes run (set_remote), then only read
  std::vector<std::function<void(const ExitInfo&)>> exit_hooks_;
  std::function<void(const ExitInfo&)> unwatched_failure_hook_;
  std::unique_ptr<RunawayMonitor> runaway_monitor_;
  std::mutex abandoned_mu_;
  std::vector<std::unique_ptr<Process>> abandoned_;  // guarded by abandoned_mu_; never freed (finish)
  std::shared_mutex idle_job_mu_;     // shared while a worker runs the job
  std::function<bool()> idle_job_;    // guarded by idle_job_mu_
  std::atomic<bool> has_idle_job_{false};  // lets workers skip the lock when there is none

  std::atomic<std::size_t> live_{0};
  // Counters of what threads other than workers did (the I/O thread's
  // spawns, a native caller's sends), and of failures.
  std::atomic<std::uint64_t> elsewhere_messages_{0};
  std::atomic<std::uint64_t> elsewhere_spawns_{0};
  std::atomic<std::uint64_t> failures_{0};
  // track_parents: each live process's parent, in stripes by PID index.
  std::atomic<bool> track_parents_{false};
  struct ParentStripe {
    std::mutex mu;
    std::unordered_map<Pid, Pid> of;  // guarded by mu
  };
  static constexpr std::size_t kParentStripes = 16;
  std::array<ParentStripe, kParentStripes> parents_;
  ParentStripe& parent_stripe(const Pid& pid) { return parents_[pid.index % kParentStripes]; }
  std::mutex live_mu_;                 // pairs with live_cv_ for wait_all_exited
  std::condition_variable live_cv_;
  std::atomic<bool> cancelling_{false};   // shutdown step 1 happened: new spawns get a cancel
  std::atomic<bool> stopping_workers_{false};
  std::atomic<int> stuck_workers_{0};  // written by the runaway monitor: workers in a long step
  std::atomic<bool> shut_down_{false};
  std::mutex shutdown_mu_;
  ShutdownReport report_;              // guarded by shutdown_mu_
};

}  // namespace host
