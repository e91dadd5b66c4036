// LuaProcess: a Process whose code is a Lua module, run in its own LuaJIT
// state. Threads: one at a time (the worker stepping it, or the spawner
// during Init). Its definitions are spread over lua_process.cpp and the
// lua_process_*.cpp files, one concern each (bindings/
// lua_process_internal.hpp lists them).
//
// Prepare (called by Init, or ahead of time for a spare) creates the state
// on its own arena (bindings/state_arena.hpp) behind a counting allocator
// (the per-process memory figure and limit), opens no library (each opens
// on first use, the base library too; jit once the process has shown it
// computes, see config::kJitProbeSteps) and sets up the process kernel
// (bindings/task_kernel.hpp; kernel_ext.lua comes on first use). Init loads
// the entry module from the shared bytecode cache and starts the entry
// method as the main task. Step hands the kernel the events that arrived and
// runs its ready tasks, in one protected call; their waits on timers come
// back as sleep yields.
#pragma once

#include <atomic>
#include <mutex>
#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include <lua.hpp>

#include "bindings/host_finalizers.hpp"
#include "bindings/io_waits.hpp"
#include "bindings/lua_runtime.hpp"
#include "bindings/peer_strings.hpp"
#include "bindings/luajit/small_globals.hpp"
#include "bindings/luajit/small_strings.hpp"
#include "bindings/state_arena.hpp"
#include "bindings/shape_cache.hpp"
#include "bindings/string_cache.hpp"
#include "bindings/task_kernel.hpp"
#include "host/assert.hpp"
#include "host/process.hpp"

struct lua_State;

namespace host::lua {

// It is its kernel's KernelHost (task_kernel.hpp): the timers' sleep
// command and kernel_ext.lua's loader are its.
class LuaProcess final : public Process, private KernelHost {
 public:
  explicit LuaProcess(LuaRuntime& runtime);
  ~LuaProcess() override;
  void Prefetch() const override;

  // Creates the state, the base library, the kernel and the globals: all a
  // process needs before its module, so that idle workers can make spare
  // processes ahead of spawns (bindings/spare_processes.hpp). False when
  // out of memory. Init calls it when it was not called before.
  bool Prepare();
  // After Prepare: loads the newest version of `module` without running it,
  // for Init to use if its entry is that version. Nothing when it fails.
  void Preload(const std::string& module);
  // Whether Preload loaded `module` (some version of it).
  bool preloaded(std::string_view module) const { return preloaded_ && preloaded_->name == module; }
  std::string Init(const ProcessContext& ctx, const std::string& entry, std::string input) override;
  void Step(std::span<Event> events, StepOutput& out) override;
  void Close() override;
  void Interrupt() override;
  const char* Name() const override { return entry_.c_str(); }
  void Describe(ProcessFacts& facts) const override;
  void Abandon() override;

  std::size_t memory_used() const { return used_; }
  // used_'s writes, by the state's own thread (its allocator); atomic, as
  // process.info reads it from another (a plain store on x86-64).
  void set_used(std::size_t bytes) { std::atomic_ref<std::size_t>(used_).store(bytes, std::memory_order_relaxed); }

 private:
  friend struct Primitives;
  // Sets the process (and its kernel) this thread runs, for a scope
  // (lua_process.cpp).
  struct RunningHere;
  // The state's allocator (the arena behind the memory limit's count), and
  // the one lua_newstate and lua_close run with, which also knows the
  // global state: the hot path need not check for it.
  static void* allocate(void* ud, void* ptr, std::size_t osize, std::size_t nsize);
  // allocate's other cases: a resize, a large block, a new chunk, the limit.
  [[gnu::noinline]] void* allocate_slow(void* ptr, std::size_t osize, std::size_t nsize);
  static void* allocate_global(void* ud, void* ptr, std::size_t osize, std::size_t nsize);
  // allocate_global's own cases: the global state's block and its free,
  // and the globals hash part (small_globals.hpp).
  [[gnu::noinline]] void* allocate_newstate_special(void* ptr, std::size_t osize, std::size_t nsize);

  // Pushes on L (the main state or one of its coroutines) the entry's method
  // function, loading the newest module version; or returns the error
  // (docs/LUA_API.md, Modules, globals and the standard libraries) and pushes nothing.
  std::string push_entry(lua_State* L, const std::string& entry);
  // Pushes the chunk Preload loaded if it is `mod`, and forgets it either way.
  bool take_preloaded(lua_State* L, const Module& mod);
  void install_globals();
  // Prepare again, with small_globals switched off for good.
  bool prepare_without_small_globals();
  // Prepare again, with small_strings switched off for good.
  bool prepare_without_small_strings();
  // Forgets a state lua_newstate made and nothing has run on (its memory
  // goes with the arena, no lua_close); false, for Prepare to return.
  bool drop_unused_state();
  // Pushes package.loaded (the registry's _LOADED), which Prepare makes.
  void push_loaded(lua_State* L) const;
  // Pushes the `process` API table.
  void push_process_api(lua_State* L);
  // KernelHost: kernel_ext.lua's chunk and H, its primitives
  // (lua_process_env.cpp); the timers' sleep command of secs, and its
  // cancel (lua_process_waits.cpp).
  void push_ext_chunk(lua_State* L) override;
  std::uint64_t start_timer(double secs) override;
  void cancel_timer(std::uint64_t tag) override;
  // Step's protected body: the events, then the ready tasks. Called through
  // lua_pcall from a registry slot (step_fn_ref_): lua_cpcall would make a
  // new C function object every step. Its arguments are step_events_ and
  // step_out_.
  static int step_body(lua_State* L);
  // Route 1's case outside step_body, inside the LuaJIT seam: a step of
  // one message for the sole task waiting in inbox.lua's form
  // (TaskKernel::raw_receiver), its values pushed straight onto the
  // task's stack and the task resumed, where nothing has to be made
  // (no allocation outside a protected call): its sender and topic
  // strings already kept, and its payload nil, a boolean, a number, a
  // kept string, or a small table of a shape the process keeps receiving
  // (hand_over_shaped: nil, the shape's constructor and true; the values
  // in the shape cache's scratch table, shape_cache.hpp). True when that
  // was the whole step; false when step_body must run: with the message
  // still in step_events_ (declined: it takes route 1 inside the
  // protected call, TaskKernel::message, on the public API), or, once
  // the task was resumed, with step_events_ empty. Always false without
  // the seam. may_hand_over is Step's first check, on the payload's form.
  bool hand_over(const Event& ev);
  bool may_hand_over(const std::string& payload);
  // Route 1 inside step_body (its first act), for a step of one message
  // that hand_over declined: the message made on L (the main thread) as
  // deliver_events makes it, moved to the sole task waiting in inbox.lua's
  // form (TaskKernel::raw_receiver), and the task resumed. True when that was the whole step; false
  // when the body goes on (step_events_ emptied once the message was taken
  // or dropped as undecodable).
  bool hand_over_inside(lua_State* L);
  // hand_over's table payloads (out of line: the other payloads' path
  // stays as short as it was).
  [[gnu::noinline]] bool hand_over_shaped(lua_State* co, const char* from, const char* topic,
                                          const std::string& payload);
  // What every hand-over's pushes and move rely on: the task co is
  // suspended in receive, with nothing on its stack, and is not the main
  // thread the step runs (debug builds).
  void check_handed_to([[maybe_unused]] lua_State* co) const {
    HOST_ASSERT(co != L_ && lua_status(co) == LUA_YIELD && lua_gettop(co) == 0,
                "a message is handed over only to a task waiting in receive");
  }
  // Every hand-over's end: the message taken (step_body, if it runs, only
  // goes on from here) and co, which holds what it takes, resumed.
  [[gnu::always_inline]] bool resume_handed(lua_State* co) {
    step_events_ = {};
    return kernel_.resume_handed_over(co);
  }
  // hand_over's payload values made of nothing new: nil, a boolean, a
  // number or a kept string. False (nothing pushed) for any other.
  bool push_handed_payload(lua_State* co, const std::string& payload);
  // The largest table payload hand_over takes, in encoded bytes.
  static constexpr std::size_t kHandOverTableBytes = 256;
  // The heap a shape's constructor takes to compile, at most (about 2 KB).
  static constexpr std::size_t kShapeCompileHeap = 16 * 1024;
  void deliver_events(lua_State* L, std::span<Event> events);
  // Pushes a message event's from, topic and value; false (logged, nothing
  // pushed) when its value cannot be decoded.
  bool push_message(lua_State* L, Event& ev);
  // Its value alone: false (logged, nothing pushed) when it cannot be
  // decoded. A large payload's bytes are given back once decoded (the
  // event's payload is then empty).
  bool push_payload(lua_State* L, Event& ev);
  // push_payload's flat table of a shape the process keeps receiving,
  // made by the shape's payload constructor (ShapeCache); false, nothing
  // pushed, for any other payload. Inside step_body only (it calls Lua).
  [[gnu::noinline]] bool push_shaped_payload(lua_State* L, const std::string& payload);
  // The shape cache's candidate compiled, where fill found payload's shape
  // unknown and saw it last time too (and the heap is not near its limit);
  // false, with the error on L's stack, when memory ran out.
  bool compile_shape(lua_State* L, const std::string& payload);
  // A run of messages queued at once (deliver_events).
  void queue_run(lua_State* L, std::span<Event> run);
  void probe_jit(std::uint32_t steps_here);
  // Drops monitor `ref` of target; false when it held none such.
  bool forget_monitor(const Pid& target, std::uint64_t ref);

  // What a step or a message reads comes first, together (with the
  // arena's first line and the kernel's first fields): in a ring of 1000
  // processes each hop finds its process's lines evicted, and every line
  // read is a cache miss (ThreadRing 1000, cachegrind). What setup, exits,
  // upgrades and the JIT probe read follows the kernel.
  LuaRuntime& rt_;
  lua_State* L_ = nullptr;
  std::size_t used_ = 0;
  // The allocator's fast path's bound: half --mem-limit, past which each
  // allocation takes the slow path, which fails those past the limit and
  // brings the next collection forward (gc_pressure.hpp); the whole limit
  // where gc_pressure is not available.
  std::size_t limit_;
  bool mem_exceeded_ = false;
  std::atomic<bool> interrupted_{false};  // set by the runaway monitor
  // Set by the runaway monitor (Abandon) while a worker thread may be in
  // Close; read by Close, where the monitor calls it again after.
  std::atomic<bool> abandoned_{false};
  bool counted_ = false;  // in LuaRuntime::processes_ (from Init on)
  // Set once the state may hold userdata with finalizers (io, ffi,
  // newproxy, native modules) or machine code (jit): Close then runs
  // lua_close; else it only releases the arena.
  bool needs_close_ = false;
  // The host's userdata to finalize at the end when lua_close does not
  // run (host_finalizers.hpp).
  HostFinalizers finalizers_;
  void run_host_finalizers();
  bool base_open_ = false;  // the base library (Primitives::open_base)
  bool jit_on_ = false;     // the JIT compiler (Primitives::jit_opened)
  bool jit_probe_armed_ = true;  // the JIT probe's count hook (probe_jit)
  std::uint32_t steps_ = 0;      // steps taken (process.info reads it from another thread)
  void count_step() { std::atomic_ref<std::uint32_t>(steps_).store(steps_ + 1, std::memory_order_relaxed); }
  int step_fn_ref_ = -2;
  const void* step_fn_ = nullptr;  // the function in that slot (pushed without reading it)
  // Declared before the members that hold the state's values (it outlives
  // the state); its hot fields are its first.
  StateArena arena_;
  std::span<Event> step_events_;  // Step's arguments, for step_body
  StepOutput* step_out_ = nullptr;
  ProcessContext ctx_;
  // Topics and short strings of the messages it receives.
  StringCache received_strings_;
  // Constructors of its table payloads' shapes (hand_over_shaped,
  // push_shaped_payload), made at its first table payload.
  std::unique_ptr<ShapeCache> shapes_;
  // The PID strings of its messages' senders and its sends' destinations.
  PeerStrings peers_;
  // Whether this step started commands: waiting calls (Primitives::
  // wait_call writes them straight into the step's output), and at its
  // end the timers' (TaskKernel::settle_timers).
  bool has_pending_calls() const { return step_out_->yield_count() != 0; }
  TaskKernel kernel_;
  std::uint32_t jit_estimate_ = 0;  // bytecodes run, as the probe estimates them (up to the warm-up)
  // The count of its thread's steps at the last sampled step (probe_jit).
  std::uint32_t jit_hot_stamp_ = 0;
  void* global_state_ = nullptr;  // LuaJIT's, in the arena for the state's life (allocate)
  void* globals_scratch_ = nullptr;  // where lua_newstate's globals hash part went (small_globals.hpp)
  void* strings_scratch_ = nullptr;  // where lua_newstate's string table went (small_strings.hpp)
  std::shared_ptr<const Module> preloaded_;  // whose chunk Preload left in the registry
  std::string self_;    // this PID as a string, made by the first process.pid()
  std::string entry_;   // "module:method" it runs
  std::vector<std::string> script_modules_;  // loaded from the script dir or stdlib, for upgrade
  // Monitor references are unique within the process (32 bits: four
  // billion monitors in one process's life).
  std::uint32_t next_monitor_ref_ = 0;
  // What the JIT probe's hook saw of the latest armed steps (probe_jit,
  // jit_probe_hook): the step it last fired in and how often it fired
  // there, and one bit an armed step, newest lowest, set where it fired
  // (a step of kJitHookInterval bytecodes or more).
  std::uint32_t jit_fired_step_ = ~std::uint32_t{0};
  // Monitors this process holds: target -> refs, until the target's exit
  // event arrives or it is unmonitored. Made at its first monitor: most
  // processes hold none, and the map's 56 bytes kept the process object
  // from growing within its 1 KB class. Changed by the process's own
  // thread, read by process.info's from any (under monitors_lock).
  using Monitors = std::unordered_map<Pid, std::vector<std::uint64_t>>;
  std::unique_ptr<Monitors> monitors_;
  std::mutex& monitors_lock() const;
  void add_monitor(const Pid& target, std::uint64_t ref);
  // Waiting calls whose completion a C continuation takes instead of the
  // task (io_wait, below): made at the first, as most processes have none.
  std::unique_ptr<IoWaits> io_waits_;
  bool io_wait_completed(lua_State* L, const Event& ev);
  int loaded_ref_ = -2;  // package.loaded's registry slot (push_loaded)
  std::uint8_t jit_step_firings_ = 0;
  std::uint8_t jit_long_history_ = 0;
  // Sampled steps in a row that found the process hot (probe_jit), and
  // the tag of the thread of the last sample.
  std::uint8_t jit_hot_samples_ = 0;
  std::uint8_t jit_hot_thread_ = 0;
  // The timer commands TaskKernel started (LuaProcess::start_timer: their
  // tags), and its waiting calls (TaskKernel::kCallTagMark and this count).
  // 56 bits, not 32: a 32-bit count can wrap within a long-lived process,
  // and a wait still parked under an old tag would share it with a new
  // one. The flag after it fills the word, so the object stays in its
  // size class.
  std::uint64_t c_timers_ : 56 = 0;
  bool jit_after_load_ = false;  // jit named in Init: the compiler comes on when it ends (Primitives::open_lib)
  double started_ = 0;  // when Init ran, in time.now() seconds (process.info)
};

// Lets the value codec move sockets between processes (codec.hpp's
// MovedValueHooks); LuaRuntime calls it.
void install_moved_value_hooks();

// For C bindings (bindings/socket_object.cpp): a waiting call of command
// with the n values from index first as its arguments (docs/
// ARCHITECTURE.md, "A call that waits"); return what it returns. And the
// claim of a socket that arrived in this process (io::SocketService::claim).
int start_waiting_call(lua_State* L, CommandId command, int first, int n);
void claim_socket(lua_State* L, std::uint64_t id);
void give_socket(lua_State* L, std::uint64_t id);
void drop_socket(lua_State* L, std::uint64_t id);

// Waits whose completion goes to C (the sockets on the workers, bindings/
// socket_tcp.cpp): a wait for a descriptor's readiness (NetPoller) or
// for a waiting call's answer, whose completion calls cont(L, co, owner,
// tag, failed, payload) in the step that receives it, with co the task that
// waits (a timeout's completion has an empty payload). cont finishes the
// wait (io_resume with the task's results) or waits again (io_rewait).
// io_wait yields the calling task (return what it returns); timeout: its
// seconds, or < 0 for none (a sleep with the same tag ends it). owner's
// waits are dropped by io_forget (its __gc): their tasks never resume.
struct IoWaitCall {
  CommandId command;
  std::uint64_t tag;  // NetPoller::tag_for's, or io_call_tag's
  std::int64_t arg = 0;
  std::string bytes;
  double timeout = -1;
};
std::uint64_t io_call_tag(lua_State* L);
int io_wait(lua_State* L, IoWaitCall call, void* owner, IoContinuation cont);
void io_rewait(lua_State* L, lua_State* co, IoWaitCall call, void* owner, IoContinuation cont);
void io_resume(lua_State* L, lua_State* co, int n);
void io_forget(lua_State* L, void* owner);
// A wait no task blocks on (the HTTP server's watch on a client while its
// handler runs): its completion calls cont with co null, in the step that
// receives it, once. io_unwatch drops it before then (its yield cancelled;
// a completion already on its way is ignored). Both within a step.
void io_watch(lua_State* L, IoWaitCall call, void* owner, IoContinuation cont);
void io_unwatch(lua_State* L, std::uint64_t tag);
// Ends the task's wait of tag now, as its timeout would: its yields are
// cancelled and its continuation runs with an empty payload, within this
// step. So a wait can go without a timer of its own where a watch (a
// sleep the connection keeps from one wait to the next) says when its
// time is up. False where no task waits with that tag.
bool io_expire(lua_State* L, std::uint64_t tag);
// Cancels this process the way process.cancel does: its cancel event
// where it opened its events, else its end (reason "canceled: REASON").
void cancel_self(lua_State* L, std::string reason);
// What the process may still allocate under its memory limit, in bytes.
std::size_t memory_room(lua_State* L);
// Whether the running code may block (inside a task, not under a C call);
// check_blockable raises where it may not, as io_wait would.
bool blockable(lua_State* L);
void check_blockable(lua_State* L);
io::IoServices& io_services(lua_State* L);
Pid self_pid(lua_State* L);
// Sends this process a message, with value as its payload, from C within
// a step: how a watch's continuation (io_watch) tells the process's Lua
// what it saw when no task waits to be resumed (the HTTP acceptor's
// hibernated connections, bindings/http_conn.cpp). False where the send
// failed (the process is ending).
bool post_self(lua_State* L, std::string_view topic, double value);

}  // namespace host::lua
