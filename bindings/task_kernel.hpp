// TaskKernel: the C half of a Lua process's kernel, the scheduler inside
// one process. It runs the process's tasks (the entry method and
// coroutine.spawn'ed functions) as coroutines, delivers messages to the
// inbox, implements process.receive (its timeout too) and time.sleep, and
// queues lifecycle events. Everything else (channels beyond the inbox's
// plain receive, select, the other timers, process.watch, most of the API)
// is bindings/kernel_ext.lua, which a
// process loads the first time it needs it: a process that only spawns,
// sends, receives and logs runs no kernel Lua at all, which saves it the
// memory and load time of the kernel's prototypes (LuaJIT cannot share them
// between states).
//
// Tasks are threads, kept alive by a table of live tasks; the run queues
// hold their lua_State pointers. A woken task's values wait on its own stack
// until it is resumed. The inbox is a channel table of kernel_ext.lua's
// shape (which C reads with integer keys), plus C's list of tasks parked in
// process.receive. Threads: the one stepping the process.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

struct lua_State;

namespace host::lua {

// What a kernel asks of the process that holds it: the one way TaskKernel
// reaches outside itself, implemented by LuaProcess (bindings/
// lua_process_env.cpp, lua_process_waits.cpp). Called on the thread
// running the process, inside its step (or its start).
class KernelHost {
 public:
  // Pushes the extension chunk (kernel_ext.lua) and H, its C primitives:
  // the first time the process needs kernel_ext (TaskKernel::push_ext).
  virtual void push_ext_chunk(lua_State* L) = 0;
  // Starts the timers' sleep command, of secs (at a step's end:
  // settle_timers), and returns its tag: kTimerTagMark and a count, none
  // still out. Its completion comes back to complete().
  virtual std::uint64_t start_timer(double secs) = 0;
  // Cancels that command (one started in an earlier step).
  virtual void cancel_timer(std::uint64_t tag) = 0;

 protected:
  ~KernelHost() = default;
};

class TaskKernel {
 public:
  // What run() found: every task waits, some task only yielded to other
  // processes, the main task returned (its result pushed), or the process
  // failed (failure()).
  enum Outcome { kWaiting = 0, kContinue = 1, kDone = 2, kFailed = 3 };

  // Sets up the kernel in a fresh state; it needs no library open. host
  // holds the kernel and outlives it.
  void init(lua_State* L, KernelHost& host);

  // The kernel whose process this thread runs now: its host sets it
  // around every entry into the process's state (a step, a start, a
  // close), and gives the outer one back as it leaves (a spawn runs the
  // child's start inside the parent's step). The kernel's C functions
  // (l_receive, I.wake, ...) find their kernel there: one load, where a
  // light userdata upvalue on each closure cost lua_touserdata's index
  // resolution on every receive.
  static void set_running(TaskKernel* kernel) { running_ = kernel; }

  // Pops LuaJIT's own coroutine library, which kernel_ext.lua wraps (the
  // global coroutine is the wrapper): the loader gives it before it pushes
  // the chunk, since the base library that makes it opens lazily
  // (LuaProcess::open_base).
  void set_coroutine_lib(lua_State* L);

  // Pops the value on top of L into the next of the registry slots 1, 2,
  // ... and returns its number: for values kept for the state's life, set up
  // before anything calls luaL_ref (init, then LuaProcess::Prepare).
  // luaL_ref costs a search for the table's length each time (costly,
  // and a spawn made many: BENCHMARKS.md's source figures); a later luaL_ref, which takes a slot
  // past the length, never takes one of these.
  int pin(lua_State* L);

  // Starts loading the main task's thread (its lua_State) without waiting
  // for it, for a step about to hand it a message (LuaProcess::Step): in
  // a process that runs one step in a hundred it is evicted, and the first
  // C API call on it (wake's lua_checkstack) took its miss.
  void prefetch_main() const {
    if (main_) __builtin_prefetch(main_);
  }

  // Starts the main task: the function and its nargs arguments on top of L.
  void start(lua_State* L, int nargs);

  // A message event: from, topic and value on top of L (popped), by one
  // of its three routes (to_waiting_task, to_inbox, to_kernel_ext).
  void message(lua_State* L);
  // For a C primitive that may let other processes run before it returns
  // (process.send to a receiver far behind): whether L can yield to the
  // kernel here (it is a task, or a coroutine in one, with no C call in
  // between), and the yield itself, which the primitive returns. The
  // nresults values on top of L are what the primitive returns once the
  // task is resumed, behind the other processes.
  bool can_yield_to_others(lua_State* L) const;
  int yield_to_others(lua_State* L, int nresults);

  // Whether a message now would go straight to the end of the inbox's
  // buffer (nobody waits, no listeners, and the buffer flat or the
  // constructor loaded): then a run of messages may be handed over at
  // once. With the stack's top at base, begin_queue(L, n) pushes what
  // end_queue(L, base, k) needs, with k <= n messages (from, topic, value
  // each) pushed in between, each followed by queue_pushed.
  bool queues_directly(lua_State* L);
  void begin_queue(lua_State* L, int n);
  void end_queue(lua_State* L, int base, int n);
  // After each of those messages is pushed: while the inbox holds flat
  // messages (flat_inbox_), it goes into the buffer at once, popped.
  void queue_pushed(lua_State* L);
  // Whether queue_pushed pops what was pushed (else the messages wait on
  // the stack for end_queue). Fixed from begin_queue to end_queue.
  bool queue_pops() const { return flat_inbox_; }
  // Messages in the inbox not yet received (process.info's mailbox,
  // besides those the scheduler still holds). Not while the process runs.
  std::size_t queued_messages(lua_State* L);
  // The names in an event table: its keys and its kinds.
  enum class EventName : std::uint8_t {
    kind, from, result, error, reason, modules, exit, cancel, link_down, reload, node, nodeup, nodedown
  };
  // A lifecycle event: { kind = kind, fields[i] = the values on top of L }
  // (popped) for events(), or for the process.watch channel of watch_ref
  // (an exit's monitor ref). Queued here until kernel_ext.lua loads, so a
  // process that never looks at its events never loads it. A link_down
  // while links are not trapped fails the process instead, and so does a
  // cancel before events() was first called (events_opened_): as an
  // Erlang process that does not trap exits, one that never asked for its
  // events cannot see the cancel, so it ends at once ("canceled[: REASON]").
  void event(lua_State* L, EventName kind, std::initializer_list<EventName> fields, double watch_ref = 0);
  // A timer's completion: tag and error on top of L (popped).
  void complete(lua_State* L);
  // Timers: every timed wait of the process is an entry in one table
  // (timers_), whatever it wakes: a task in time.sleep (Primitives::sleep),
  // a process.receive with a timeout while the inbox is on its fast paths
  // (its entry's id in its parked_ entry), or kernel_ext.lua's timers
  // (time.after/ticker/timer, a select's timeout, a timed receive by its
  // rules: I.timer_start and I.timer_stop, fired through E.complete). The
  // table holds one sleep command (KernelHost::start_timer), armed at a
  // step's end (settle_timers) for its earliest entry, or for an earlier
  // deadline it already had: it fires early, and is armed again then for
  // what is left. So timed waits share one command however many there
  // are: a server that waits with process.receive(d) for each message
  // starts one every d seconds, not one a message, and request.call's
  // select one per call at most (each start and cancel
  // work in the scheduler's timer service: BENCHMARKS.md's source figures). A time.sleep or a
  // timed receive needs no kernel_ext.lua (a load's work and the
  // heap that a process which only sleeps or waits with a timeout never
  // needs). check_blockable raises where the running code cannot block
  // (outside a task; inside a C call), as kernel_ext's does; then
  // block_in_sleep yields the running task, what the C function returns.
  void check_blockable(lua_State* L) const;
  bool blockable(lua_State* L) const;
  int block_in_sleep(lua_State* L, double secs);
  // os.exit(code) inside a process (Primitives::exit): the process ends,
  // not the host (only the root's end ends it), completed (code nil,
  // true or 0; its result nil) or failed with "os.exit(code)". The task
  // yields to the kernel, which ends the process once the yield reaches
  // it; where it cannot yield (a C call), the call raises instead.
  int request_exit(lua_State* L, bool success, int code);
  // run()'s check: true once an exit asked for has set the outcome (a
  // success's result nil pushed at base).
  bool exited(lua_State* L, int base);

  // The timers' command's tags (KernelHost::start_timer).
  static constexpr std::uint64_t kTimerTagMark = std::uint64_t{1} << 52;
  // Waiting calls (docs/ARCHITECTURE.md, "A call that waits"): a binding
  // that must wait on something outside the process (a file, a program,
  // a socket) starts a command whose tag is kCallTagMark and a count
  // (below kTimerTagMark; kernel_ext.lua's tags are small counts), and
  // block_in_call yields the running task, mapped to that tag in the
  // calls table (calls_ref_). complete_call wakes it with the command's
  // results (codec bytes, decoded into its return values) or with
  // nil, error; a completion whose task is gone (stopped, or dropped by an
  // upgrade) is dropped. Callers check check_blockable first.
  static constexpr std::uint64_t kCallTagMark = std::uint64_t{1} << 51;
  static bool is_call_tag(std::uint64_t tag) { return tag >= kCallTagMark && tag < kTimerTagMark; }
  int block_in_call(lua_State* L, std::uint64_t tag);
  void complete_call(lua_State* L, std::uint64_t tag, bool failed, std::string_view payload);
  // For waits whose completion a C continuation handles (LuaProcess's I/O
  // waits, bindings/socket_tcp.cpp): the task waiting on tag, unmapped
  // (nullptr: none, the completion is dropped); mapping a task that still
  // waits to a new tag; waking it with the n values on top of L.
  lua_State* take_call(lua_State* L, std::uint64_t tag);
  void rewait_call(lua_State* L, std::uint64_t tag, lua_State* co) { map_call(L, tag, co); }
  void wake_call(lua_State* L, lua_State* co, int n) { wake(L, co, n); }
  // process.watch made a monitor: from now on an exit event may be for a
  // watch channel, which kernel_ext.lua knows (event asks it only then).
  void note_watch() { watched_ = true; }

  // Resumes ready tasks until none is left or the process ended.
  Outcome run(lua_State* L);
  // Route 1, a message to the task that waits for it, in a step of that
  // one message (LuaProcess::hand_over): the message given to the task
  // waiting in process.receive and the task resumed, without the step's
  // delivery, wake and run around the resume (a large share of
  // a ThreadRing hop's work, BENCHMARKS.md's source figures: a ring node's, a ping-pong partner's
  // or a Big worker's step is mostly this one message for this one task).
  // raw_receiver: that task, when it is the only thing the message could
  // go to, nothing else is ready to run, and it waits in inbox.lua's C
  // call, which takes the message as its three values (inbox.lua makes
  // the table); nullptr otherwise. A task in the C function takes the
  // step's delivery (TaskKernel::message): the case of a script that kept
  // the C function in a local, which no suite benchmark is.
  lua_State* raw_receiver() const {
    if (parked_.empty() || !parked_.front().raw || listening_ || slow_inbox_ || outcome_ != kWaiting ||
        !ready_.empty() || !yielded_.empty() || !receive_one_.empty())
      return nullptr;
    return parked_.front().co;
  }
  // Resumes raw_receiver's task, which holds the three values it
  // takes. True when it is waiting again
  // and nothing else is ready: the step is over. False when the step's
  // protected body must go on (settle first, then run).
  bool resume_handed_over(lua_State* co);
  // What run() would have done next with the task resume_handed_over left
  // (its yield's or its end's after_resume), inside the protected body.
  void settle(lua_State* L) {
    if (unsettled_rc_ >= 0) settle_unsettled(L);
  }
  const std::string& failure() const {
    static const std::string none;
    return failure_ ? *failure_ : none;
  }
  // At a step's end (LuaProcess::Step): the timers' command armed for the
  // earliest entry, or cancelled once there is none, so that a process
  // waiting without a deadline holds no timer (shutdown waits for none:
  // see Scheduler::nothing_can_run).
  void settle_timers();
  // Every timer gone (an upgrade; a process that ended), the command with
  // them at settle_timers.
  void drop_timers();

  // process.receive: the C function, then the Lua form that
  // bindings/inbox.lua makes over the C receive's raw call, which makes
  // the table of a message handed to it while it waited in its own code,
  // where the C receive calls the message constructor from C (a C-to-Lua
  // call a message). A process gets the Lua form at its
  // kMessagesBeforeCtor-th message (enable_waiting_receive: loading the
  // chunk takes time, which a process with few messages never
  // pays), and its drain loop once its JIT compiler is on or its messages
  // queue up (a run of them nobody waited for, see begin_queue): the loop
  // takes a queued message itself, so that LuaJIT compiles it into the
  // caller's loop and a process draining a full inbox runs no C call per
  // message. Only then: reading the inbox's buffer at each receive costs a
  // process that always waits for its next message cache lines the C
  // receive does not touch (with it in every node from the 16th message,
  // a ring of 100 missed a simulated cache more often:
  // BENCHMARKS.md's source figures). The receive in the process table replaces
  // itself the next time it is called, unless the script replaced it.
  void push_receive(lua_State* L);
  void enable_fast_receive() {
    if (inbox_chunk_) wanted_receive_ = ReceiveForm::kDraining;
  }
  void enable_waiting_receive() {
    if (inbox_chunk_ && wanted_receive_ == ReceiveForm::kC) wanted_receive_ = ReceiveForm::kWaiting;
  }
  // The bytecode of bindings/inbox.lua (see load_inbox).
  void set_inbox_chunk(const std::string* chunk) { inbox_chunk_ = chunk; }
  // The extension table (loading it on first use).
  void push_ext(lua_State* L);

 private:
  // Tasks to resume, in order. Their threads are kept alive by tasks_ref_.
  struct RunQueue {
    std::vector<lua_State*> items;
    std::size_t head = 0;
    bool empty() const { return head == items.size(); }
    void push(lua_State* co) { items.push_back(co); }
    lua_State* pop() {
      lua_State* co = items[head++];
      if (head == items.size()) items.clear(), head = 0;
      return co;
    }
    void clear() { items.clear(), head = 0; }
  };

  static int l_wake(lua_State* L);
  static int l_new_task(lua_State* L);
  static int l_current(lua_State* L);
  static int l_listening(lua_State* L);
  static int l_slow_inbox(lua_State* L);
  static int l_inbox_tables(lua_State* L);
  static int l_set_trap_links(lua_State* L);
  static int l_open_events(lua_State* L);
  static int l_timer_start(lua_State* L);
  static int l_timer_stop(lua_State* L);
  static int l_receive(lua_State* L);
  static int l_receive_raw(lua_State* L);  // inbox.lua's receive form's
  static int receive(lua_State* L, bool raw);
  // The kernel of the process whose state L is: the running one
  // (set_running).
  static TaskKernel& self(lua_State* L);
  static inline constinit thread_local TaskKernel* running_ = nullptr;

  // Creates a task for the function at idx and the nargs values above it
  // (all popped), queues it and leaves its thread on top of L.
  void new_task(lua_State* L, int idx, int nargs);
  // Pushes task co's thread.
  void push_task(lua_State* L, lua_State* co);
  // Moves the n values on top of L to task co and queues it; a task waiting
  // in process.receive takes only the first.
  void wake(lua_State* L, lua_State* co, int n);
  void fail(std::string err);
  void after_resume(lua_State* L, lua_State* co, int rc);
  void settle_unsettled(lua_State* L);
  // lua_resume of task co with the values on its stack, as current_.
  int resume(lua_State* co);
  // Whether the task's resume ended in a plain wait that needs no
  // after_resume (a park in process.receive, or a block).
  bool plain_wait(lua_State* co, int rc);
  void finish(lua_State* L, lua_State* co);
  void restart(lua_State* L, lua_State* co);
  // Pushes the inbox queue at index `which` (1 buf, 2 recvq, 3 sendq),
  // making it on first use: a process that only ever takes its messages as
  // they come (waiting in process.receive) never needs one.
  void push_inbox_queue(lua_State* L, int which);
  // Makes the inbox's queues that are not made yet, for Lua code that reads
  // them from the inbox table (kernel_ext.lua, bindings/inbox.lua).
  void make_inbox_queues(lua_State* L);
  // Whether the inbox queue `which` holds nothing (or is not made yet).
  bool inbox_queue_empty(lua_State* L, int which);
  // Whether no task waits in the inbox's receive queue (kernel_ext's).
  bool inbox_recvq_empty(lua_State* L);
  // Whether a message for the inbox would go straight to the end of its
  // buffer, as its values or by the constructor: nobody waits for it and
  // the inbox is on its fast paths. The one rule for message() and
  // queues_directly().
  bool inbox_takes_directly(lua_State* L);
  // message()'s routes: 1 and 2 return false, the stack as it was, where
  // they do not apply; 3 takes the rest.
  bool to_waiting_task(lua_State* L, int base);
  bool to_inbox(lua_State* L, int base);
  void to_kernel_ext(lua_State* L, int base, int channel);
  // Loads bindings/inbox.lua's constructor and append once: at the
  // kMessagesBeforeCtor-th message, the first Lua receive, or kernel_ext's
  // load.
  void load_inbox(lua_State* L);
  // Pushes a new receive form of inbox.lua's (receive_form), over the C
  // receive's raw call, whose errors name the caller `level` frames up;
  // draining: with the drain loop.
  void push_receive_form(lua_State* L, bool draining, int level);
  // Pushes the constructor and the message's from, topic and value (at
  // base + 1..3) for a call.
  void push_ctor_call(lua_State* L, int base);
  // Pushes the table of the message whose from, topic and value are at
  // stack indices first..first + 2: by the constructor once it is loaded,
  // else through the C API.
  void push_message_table(lua_State* L, int first);
  // Makes the inbox's buffer hold message tables from now on (flat_inbox_),
  // turning what it holds into tables in place.
  void inbox_to_tables(lua_State* L);
  // Pushes the events channel, made on first use.
  void push_events(lua_State* L);
  // Pushes the table of event names (event_names_ref_), and name's string
  // from it (the table at index `names`).
  void push_event_names(lua_State* L);
  static void push_event_name(lua_State* L, int names, EventName name);
  // From now on kernel_ext.lua handles the inbox's messages and senders:
  // the parked receivers join its recvq, in front.
  void slow_inbox(lua_State* L);
  bool ext_loaded() const { return ext_ref_ != -2; }
  // Puts the Lua receive in the process table in place of the C one.
  void install_receive(lua_State* L);
  // A waiting call's entry in the calls table (calls[tag] = task co), and
  // its removal once it completed.
  void map_call(lua_State* L, std::uint64_t tag, lua_State* co);
  void unmap_call(lua_State* L, std::uint64_t tag);
  // The timers (see check_blockable): an entry that wakes what kind says
  // at due (monotonic_seconds), and its id (> 0); an entry's removal
  // (nothing once it fired or went); what fired (complete); and every
  // entry gone (drop_timers).
  enum class TimerKind : std::uint8_t { kSleep, kReceive, kLua };
  std::uint64_t add_timer(double due, TimerKind kind, lua_State* co);
  void stop_timer(std::uint64_t id);
  void fire_timers(lua_State* L, bool failed);
  // Every parked receive's timer stopped (the inbox going to kernel_ext's
  // rules).
  void drop_receive_timers();
  // Takes the oldest parked receive off parked_ for a message that ends
  // its wait, its timer stopped with it; returns its task. Every such end
  // goes through here: one that skipped the stop left its timer armed and
  // held shutdown.
  // Inline, with the usual case (one parked, no timer) touching no call:
  // with link-time optimisation g++ had made it a call
  // on every message (BENCHMARKS.md's source figures).
  [[gnu::always_inline]] lua_State* unpark_front() {
    const Parked w = parked_.front();
    if (parked_.size() == 1) parked_.pop_back();
    else parked_.erase(parked_.begin());
    if (w.timer != 0) stop_timer(w.timer);
    return w.co;
  }

  // The fields a step or a message reads come first, together: in a ring of
  // 1000 processes each hop finds its process's lines evicted, and every
  // line read is a cache miss (ThreadRing 1000, cachegrind). The rest,
  // read at setup, for events or on slow paths, follow.
  RunQueue ready_;    // tasks to resume now
  lua_State* current_ = nullptr;
  lua_State* main_ = nullptr;
  // Tasks blocked in process.receive while the inbox's recvq was empty,
  // oldest first: older than every waiter in recvq, so a message goes to
  // the first of them before anyone in recvq. Usually zero or one. raw:
  // waiting in inbox.lua's call, which takes a message as its values.
  // timer: a timed receive's timer's id (0: none); deadline: when it ends, in
  // monotonic_seconds (for slow_inbox, which hands it to kernel_ext).
  struct Parked {
    lua_State* co;
    bool raw;
    std::uint64_t timer = 0;
    double deadline = 0;
  };
  std::vector<Parked> parked_;
  // Appends a parked entry, its fields written in place: a Parked built
  // on the stack and copied in was read back with 16-byte loads from the
  // narrower stores that made it, a store-forwarding stall (seen in
  // PingPong's receive, perf). Flattened: g++ left the vector's
  // emplace_back a call of its own on every receive that parks
  // (BENCHMARKS.md's source figures). Inline: with link-time optimisation the whole of it had
  // become a call on every receive that parks; inline, with
  // emplace_back left a call by that build, less work still.
  [[gnu::always_inline, gnu::flatten]] void park(lua_State* co, bool raw, std::uint64_t timer = 0, double deadline = 0) {
    Parked& w = parked_.emplace_back();
    w.co = co;
    w.raw = raw;
    w.timer = timer;
    w.deadline = deadline;
  }
  // Tasks blocked in process.receive from recvq (behind other waiters):
  // their wake gives them only the message (a plain ch:receive also gets ok).
  std::vector<lua_State*> receive_one_;
  // bindings/inbox.lua (inbox_chunk_ its bytecode), loaded by load_inbox:
  // its constructor and its append. messages_ counts a process's messages until the
  // kMessagesBeforeCtor-th, which loads it (if nothing did before) and
  // gives the process the Lua receive.
  static constexpr int kMessagesBeforeCtor = 16;
  const std::string* inbox_chunk_ = nullptr;
  int messages_ = 0;
  int message_ctor_ref_ = -2;
  int message_append_ref_ = -2;
  int tasks_ref_ = -2;  // light userdata(thread) -> thread, for every live task
  // Call tag -> its waiting task, made at the first call. A table apart
  // from the tasks: each wait's tag is a new number key, and beside the
  // tasks' live keys it collided and the table rehashed (kept small, it
  // ran out of free nodes at most inserts); alone, a new key's node is
  // one whose entry was taken, reused in place.
  int calls_ref_ = -2;
  int inbox_ref_ = -2;
  int ext_ref_ = -2;
  int inbox_queue_refs_[3] = {-2, -2, -2};  // its buf, recvq and sendq (-2: not made yet; never replaced)
  // The same queues' tables (their GCtab; nullptr: not made yet), whose
  // bounds inbox_queue_empty reads straight from their array parts.
  const void* inbox_queues_[3] = {nullptr, nullptr, nullptr};
  int queue_buf_ = 0;   // between begin_queue and end_queue, with flat_inbox_:
  int queue_tail_ = 0;  // the buffer's stack index and its tail so far
  Outcome outcome_ = kWaiting;
  // Set by process.receive right before the task itself parks and yields
  // nothing: run() sees the plain block without a sentinel to push and
  // read back (a light userdata each way).
  bool parking_ = false;
  // The inbox's buffer may hold messages: set whenever the C half queues
  // one there (or hands one to kernel_ext's deliver, which may), cleared by
  // process.receive when it finds the buffer empty. Nothing else adds to
  // it (kernel_ext's listen only puts back what it took), so a receive
  // with the flag clear skips looking.
  bool inbox_queued_ = false;
  // The inbox's buffer holds each message as its three values, from, topic
  // and payload, in three slots: a queued message costs no table until it
  // is received, and inbox.lua makes that one in its caller's loop, which
  // the compiler may keep from allocating at all. Until kernel_ext's
  // channel code needs the buffer (slow_inbox, listen, a select's or a
  // timed receive's waiter): from then on (inbox_to_tables) it holds
  // message tables, as any channel's buffer holds its values, and
  // inbox[kTables] tells inbox.lua so.
  bool flat_inbox_ = true;
  // Senders on the inbox or a closed inbox: kernel_ext.lua's rules
  // (E.deliver, E.try_receive) instead of the fast paths.
  bool slow_inbox_ = false;
  // process.listen was called: a message whose topic has a listener goes to
  // its channel (listeners_ref_: kernel_ext's topic -> channel table).
  bool listening_ = false;
  // process.receive's form (push_receive): the one wanted now, and the one
  // the process table was last given.
  enum class ReceiveForm : std::uint8_t { kC, kWaiting, kDraining };
  ReceiveForm wanted_receive_ = ReceiveForm::kC;
  ReceiveForm installed_receive_ = ReceiveForm::kC;
  // resume_handed_over's task (current_, left set) still needs
  // after_resume, with this lua_resume result; -1: none (settle's).
  std::int8_t unsettled_rc_ = -1;

  KernelHost* host_ = nullptr;
  RunQueue yielded_;  // tasks that let other processes run (time.sleep(0))
  int events_ref_ = -2;
  int deliver_ref_ = -2;  // kernel_ext's E.deliver, once event() first needed it
  int coroutine_ref_ = -2;
  int listeners_ref_ = -2;
  // The EventName strings, by EventName + 1, each interned at its first
  // event (push_event_name), the table made at the first event.
  int event_names_ref_ = -2;
  int message_key_refs_[3] = {-2, -2, -2};  // "from", "topic", "payload" (made by the first message)
  int pinned_ = 0;  // registry slots 1..pinned_ are pin()'s
  // The registry's array part from the start (init): the pins and the first
  // luaL_refs of a process.
  static constexpr int kRegistrySlots = 16;
  bool trap_links_ = false;  // process.set_options{trap_links = true}
  bool events_opened_ = false;  // process.events() was called: a cancel is its event, not its end
  bool watched_ = false;     // see note_watch
  // os.exit(code) was called (request_exit): 0 none, 1 with a success, 2
  // with a failure whose code is exit_code_.
  std::uint8_t exit_request_ = 0;
  std::uint8_t exit_code_ = 0;
  std::unique_ptr<std::string> failure_;  // fail()'s reason (a pointer: the process object's size, see LuaProcess)
  // The timers' table (see check_blockable), made at the first timer: a
  // pointer, for the process object's size (see LuaProcess). entries is a
  // min-heap on (due, id): of equal deadlines, the older fires first.
  struct Timer {
    double due;
    std::uint64_t id;
    lua_State* co;  // kSleep's task
    TimerKind kind;
  };
  struct Timers {
    std::vector<Timer> entries;
    std::uint64_t next_id = 0;
    std::uint64_t armed = 0;  // the sleep command's tag; 0: none
    double armed_due = 0;     // when it fires, in monotonic_seconds
    void push(const Timer& t);
    void remove_at(std::size_t i);
    void sift_up(std::size_t i);
    void sift_down(std::size_t i);
  };
  std::unique_ptr<Timers> timers_;
};

}  // namespace host::lua
