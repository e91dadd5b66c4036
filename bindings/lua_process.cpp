// LuaProcess's life: its LuaJIT state on its own allocator (the arena and
// the memory limit's count), its start (Prepare, Preload, Init: the state,
// the kernel, the entry module), its step (Step, step_body: the events,
// then the ready tasks) and its end (Close, Interrupt, Abandon). What its
// Lua code calls is in the other lua_process_*.cpp files
// (lua_process_internal.hpp lists them). Threads: the one running the
// process; Interrupt and Describe from any.
#include "bindings/lua_process.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>

#include <lua.hpp>

#include "bindings/codec.hpp"
#include "bindings/duration.hpp"
#include "bindings/luajit/gc_pressure.hpp"
#include "bindings/lua_process_internal.hpp"
#include "bindings/luajit/stack_args.hpp"
#include "host/assert.hpp"
#include "host/config.hpp"
#include "host/error.hpp"
#include "host/log.hpp"
#include "host/worker.hpp"

namespace host::lua {

// Makes p the process this thread runs (t_running, for Primitives::of,
// and its kernel TaskKernel's running one, for the kernel's C functions)
// until it goes, then gives the outer one back (a spawn runs the child's
// start inside the parent's step).
struct LuaProcess::RunningHere {
  LuaProcess* outer;
  explicit RunningHere(LuaProcess* p) : outer(t_running) {
    t_running = p;
    TaskKernel::set_running(&p->kernel_);
  }
  ~RunningHere() {  // also when LuaJIT unwinds through it
    t_running = outer;
    TaskKernel::set_running(outer ? &outer->kernel_ : nullptr);
  }
  RunningHere(const RunningHere&) = delete;
  RunningHere& operator=(const RunningHere&) = delete;
};

// One per process, from malloc: within mimalloc's 1 KB class an idle
// process takes 256 bytes less than in the next (1.25 KB).
static_assert(sizeof(LuaProcess) <= 1024, "LuaProcess outgrew malloc's 1 KB class");

LuaProcess::LuaProcess(LuaRuntime& runtime)
    : rt_(runtime),
      limit_(gc_pressure::available() ? runtime.options().mem_limit / 2 : runtime.options().mem_limit) {}

LuaProcess::~LuaProcess() {
  Close();
  if (counted_) rt_.processes_.fetch_sub(1, std::memory_order_acq_rel);
}

void* LuaProcess::allocate(void* ud, void* ptr, std::size_t osize, std::size_t nsize) {
  auto* self = static_cast<LuaProcess*>(ud);
  // The two common cases (a free; a new small block from a free list or
  // the chunk's unused part) call nothing, or call last: no register is
  // saved on their way (a message makes and frees about eight blocks).
  if (nsize == 0) {
    if (ptr) {
      self->set_used(self->used_ - osize);
      self->arena_.free(ptr, osize);
    }
    return nullptr;
  }
  if (!ptr && self->used_ + nsize <= self->limit_) [[likely]] {
    if (void* p = self->arena_.try_allocate_small(nsize)) [[likely]] {
      self->set_used(self->used_ + nsize);
      return p;
    }
  }
  return self->allocate_slow(ptr, osize, nsize);
}

void* LuaProcess::allocate_slow(void* ptr, std::size_t osize, std::size_t nsize) {
  const std::size_t old = ptr ? osize : 0;
  // Not while lua_newstate runs (L_ unset): LuaJIT frees a state it could
  // not finish making with a half-made string table, and crashes there
  // (under a --mem-limit of 8K). Past the limit, the next allocation fails.
  if (nsize > old && used_ + (nsize - old) > limit_ && L_) {
    const std::size_t hard = rt_.options().mem_limit;
    if (used_ + (nsize - old) > hard) {
      mem_exceeded_ = true;
      return nullptr;  // LuaJIT raises a memory error in the running code
    }
    // Past half the limit: the next cycle starts sooner (gc_pressure.hpp).
    if (L_) gc_pressure::collect_sooner(L_, hard);
  }
  void* out = arena_.reallocate(ptr, old, nsize);
  if (out) set_used(used_ - old + nsize);
  return out;
}

void* LuaProcess::allocate_global(void* ud, void* ptr, std::size_t osize, std::size_t nsize) {
  auto* self = static_cast<LuaProcess*>(ud);
  // The global state's allocation and free, the globals hash part and the
  // string table are out of line: the rest tail-calls allocate, saving no registers (which
  // counts in a spawn: lua_newstate makes some 50 allocations; BENCHMARKS.md's source figures).
  if (ptr ? ptr == self->global_state_
          : (!self->global_state_ || nsize == small_globals::kHashBytes || nsize == small_strings::kNewstateBytes))
      [[unlikely]]
    return self->allocate_newstate_special(ptr, osize, nsize);
  return allocate(ud, ptr, osize, nsize);
}

void* LuaProcess::allocate_newstate_special(void* ptr, std::size_t osize, std::size_t nsize) {
  // lua_newstate's first allocation is its global state, which lives as long
  // as the state: in the arena's chunk, beside what the state allocates next.
  if (!ptr && !global_state_) {
    void* g = arena_.allocate_for_life(nsize);
    if (g) {
      global_state_ = g;
      set_used(used_ + nsize);
    }
    return g;
  }
  // lua_newstate's globals hash part and string table: scratch blocks
  // (small_globals.hpp, small_strings.hpp).
  if (!ptr && !L_ && !globals_scratch_ && nsize == small_globals::kHashBytes) {
    if ((globals_scratch_ = small_globals::take_scratch())) return globals_scratch_;
  }
  if (!ptr && !L_ && !strings_scratch_ && nsize == small_strings::kNewstateBytes) {
    if ((strings_scratch_ = small_strings::take_scratch())) return strings_scratch_;
  }
  // Freed last (by lua_close, or by a lua_newstate that failed): it goes
  // with the arena. LuaJIT never resizes it.
  if (ptr && nsize == 0) {
    set_used(used_ - osize);
    return nullptr;
  }
  return allocate(this, ptr, osize, nsize);
}

std::string LuaProcess::push_entry(lua_State* L, const std::string& entry) {
  auto [module, method] = split_entry(entry);
  if (!valid_module_name(module))
    return make_error(ErrorKind::Invalid, "bad entry '" + entry + "': expected \"module\" or \"module:method\"");
  std::string err;
  auto mod = rt_.modules().get(module, &err);
  if (!mod) {
    if (err.rfind("invalid:", 0) == 0)
      return make_error(ErrorKind::Invalid, "module '" + module + "' does not compile: " + err.substr(9));
    return err;
  }
  const int base = lua_gettop(L);
  // Run the module's chunk with a traceback handler.
  lua_pushcfunction(L, [](lua_State* S) -> int {
    luaL_traceback(S, S, lua_tostring(S, 1) ? lua_tostring(S, 1) : "(error object is not a string)", 1);
    return 1;
  });
  if (!take_preloaded(L, *mod) &&
      luaL_loadbuffer(L, mod->bytecode.data(), mod->bytecode.size(), module.c_str()) != 0) {
    std::string e = lua_tostring(L, -1);
    lua_settop(L, base);
    if (mem_exceeded_) return make_error(ErrorKind::Limit, "memory");
    return make_error(ErrorKind::Invalid, "module '" + module + "' cannot load: " + e);
  }
  if (lua_pcall(L, 0, 1, base + 1) != 0) {
    std::string e = lua_tostring(L, -1) ? lua_tostring(L, -1) : "error object is not a string";
    lua_settop(L, base);
    if (mem_exceeded_) return make_error(ErrorKind::Limit, "memory");
    return make_error(ErrorKind::Invalid, "module '" + module + "' failed to load: " + e);
  }
  rt_.note_module_use(ctx_.self, module);
  script_modules_.push_back(module);
  // Remember it for require(module) in this process.
  if (!lua_isnil(L, -1)) {
    push_loaded(L);
    lua_pushvalue(L, -2);
    lua_setfield(L, -2, module.c_str());
    lua_pop(L, 1);
  }
  if (lua_isfunction(L, -1)) {
    if (method != "main") {
      lua_settop(L, base);
      return make_error(ErrorKind::NotFound, "method '" + method + "' not found in module '" + module +
                                                 "' (it returns a function, which is its main)");
    }
  } else if (lua_istable(L, -1)) {
    lua_getfield(L, -1, method.c_str());
    if (!lua_isfunction(L, -1)) {
      lua_settop(L, base);
      return make_error(ErrorKind::NotFound, "method '" + method + "' not found in module '" + module + "'");
    }
  } else {
    std::string got = luaL_typename(L, -1);
    lua_settop(L, base);
    return make_error(ErrorKind::Invalid, "module '" + module + "' returned " + got +
                                              ", expected a table of methods or a function");
  }
  lua_replace(L, base + 1);
  lua_settop(L, base + 1);
  return {};
}

// The error Prepare's setup raises when small_globals cannot replace the
// globals table.
constexpr const char* kTablesUnexpected = "LuaJIT's tables are not as small_globals expects";

bool LuaProcess::Prepare() {
  const RunningHere running(this);
  L_ = lua_newstate(&LuaProcess::allocate_global, this);
  if (!L_) return false;
  if (globals_scratch_ && !small_globals::holds_globals(L_, globals_scratch_)) return prepare_without_small_globals();
  if (strings_scratch_) {
    if (!small_strings::holds_strings(L_, strings_scratch_)) return prepare_without_small_strings();
    // LuaJIT's table is in the scratch block: dropped unused, the state
    // leaves it to the next one (no lua_close, which would free it).
    void* slots = allocate(this, nullptr, 0, small_strings::kBytes);
    if (!slots) return drop_unused_state();
    small_strings::shrink(L_, slots);
  }
  lua_setallocf(L_, &LuaProcess::allocate, this);
  // No collection while the kernel is set up (and until Init has loaded the
  // script's module): everything it allocates stays alive, so a collection
  // would only cost time (a noticeable share of a spawn: BENCHMARKS.md's source figures).
  lua_gc(L_, LUA_GCSTOP, 0);
  lua_gc(L_, LUA_GCSETPAUSE, gc_pressure::available() ? config::kLuaGcPause : config::kLuaGcPauseUnpressed);
  // Protected: a memory error must not panic.
  int rc = lua_cpcall(L_, [](lua_State* S) -> int {
    LuaProcess& p = *static_cast<LuaProcess*>(lua_touserdata(S, 1));
    lua_settop(S, 0);
    // The globals table LuaJIT made, its hash part in the scratch block,
    // is emptied and replaced before anything reads it (small_globals.hpp).
    if (p.globals_scratch_ && !small_globals::replace(S)) luaL_error(S, kTablesUnexpected);
    // No library is open yet, not even the base library (open_base).
    // The JIT compiler comes on later (jit_probe_hook), once the process
    // has shown it runs long enough to be worth it; probe_jit disarms the
    // hook after the first steps.
    lua_sethook(S, Primitives::jit_probe_hook, LUA_MASKCOUNT, config::kJitHookInterval);
    p.kernel_.init(S, p);
    p.kernel_.set_inbox_chunk(&p.rt_.inbox_bytecode());
    p.peers_.init(S, [&p](lua_State* T) { return p.kernel_.pin(T); });
    lua_pushcfunction(S, step_body);
    p.step_fn_ = lua_topointer(S, -1);
    p.step_fn_ref_ = p.kernel_.pin(S);
    // package.loaded, where the entry module and the API tables a process
    // uses are recorded, made here and kept in a slot: found by name
    // (luaL_findtable) it cost each spawn a search (BENCHMARKS.md's source figures).
    lua_createtable(S, 0, 4);
    lua_pushvalue(S, -1);
    lua_setfield(S, LUA_REGISTRYINDEX, "_LOADED");
    p.loaded_ref_ = p.kernel_.pin(S);
    p.install_globals();
    return 0;
  }, this);
  if (rc != 0) {
    const char* e = lua_tostring(L_, -1);
    if (globals_scratch_ && e && !std::strcmp(e, kTablesUnexpected)) return prepare_without_small_globals();
    Close();
    return false;
  }
  return true;
}

bool LuaProcess::prepare_without_small_globals() {
  // Something live of this state may be in the scratch block: the state is
  // dropped unused (no finalizer or machine code yet, nothing for lua_close
  // to do), and this and the next states keep LuaJIT's own globals table.
  log::logger().debug("{}; the globals tables stay as LuaJIT makes them", kTablesUnexpected);
  small_globals::disable();
  drop_unused_state();
  return Prepare();
}

bool LuaProcess::prepare_without_small_strings() {
  // As prepare_without_small_globals, for the string table.
  log::logger().debug("LuaJIT's string table is not where small_strings expects; it stays as LuaJIT makes it");
  small_strings::disable();
  drop_unused_state();
  return Prepare();
}

bool LuaProcess::drop_unused_state() {
  arena_.release();
  set_used(0);
  L_ = nullptr;
  global_state_ = globals_scratch_ = strings_scratch_ = nullptr;
  return false;
}

void LuaProcess::push_loaded(lua_State* L) const { lua_rawgeti(L, LUA_REGISTRYINDEX, loaded_ref_); }

// The registry key of the chunk Preload loaded.
constexpr const char* kPreloadedKey = "host.preloaded";

void LuaProcess::Preload(const std::string& module) {
  const RunningHere running(this);
  std::string err;
  auto mod = rt_.modules().get(module, &err);
  if (!mod) return;
  struct Load {
    const Module* mod;
    const char* name;
    bool ok;
  } load{mod.get(), module.c_str(), false};
  lua_cpcall(L_, [](lua_State* S) -> int {
    auto* l = static_cast<Load*>(lua_touserdata(S, 1));
    if (luaL_loadbuffer(S, l->mod->bytecode.data(), l->mod->bytecode.size(), l->name) != 0) return 0;
    lua_setfield(S, LUA_REGISTRYINDEX, kPreloadedKey);
    l->ok = true;
    return 0;
  }, &load);
  if (load.ok) preloaded_ = std::move(mod);
  lua_settop(L_, 0);  // a memory error leaves its message
}

bool LuaProcess::take_preloaded(lua_State* L, const Module& mod) {
  if (!preloaded_) return false;
  // The same Module object is the same version of the same module.
  const bool match = preloaded_.get() == &mod;
  preloaded_.reset();
  lua_getfield(L, LUA_REGISTRYINDEX, kPreloadedKey);
  lua_pushnil(L);
  lua_setfield(L, LUA_REGISTRYINDEX, kPreloadedKey);
  if (!match) lua_pop(L, 1);
  return match;
}

std::string LuaProcess::Init(const ProcessContext& ctx, const std::string& entry, std::string input) {
  const RunningHere running(this);
  // Counted from here (a spare made ahead of time is not a process yet).
  rt_.processes_.fetch_add(1, std::memory_order_acq_rel);
  counted_ = true;
  ctx_ = ctx;
  started_ = monotonic_seconds();
  entry_ = entry;
  if (!L_ && !Prepare()) return make_error(ErrorKind::Limit, "memory: cannot create a Lua state");
  // The module's top-level code may run no longer than a step may: the
  // clock starts at the hook's first firing, 1000 bytecodes in (most
  // modules load in fewer, and read no clock), and nested spawns each have
  // their own (jit_probe_hook).
  struct LoadDeadline {
    std::chrono::steady_clock::time_point outer = t_load_deadline;
    LoadDeadline() { t_load_deadline = std::chrono::steady_clock::time_point::min(); }
    ~LoadDeadline() { t_load_deadline = outer; }
  } deadline;
  struct Setup {
    LuaProcess* p;
    std::string* input;
    std::string err;
  } setup{this, &input, {}};
  int rc = lua_cpcall(L_, [](lua_State* S) -> int {
    auto* s = static_cast<Setup*>(lua_touserdata(S, 1));
    LuaProcess& p = *s->p;
    lua_settop(S, 0);
    // The script's module may make garbage as it loads: collect again, the
    // next cycle once the heap has doubled (LuaJIT's -1).
    lua_gc(S, LUA_GCRESTART, -1);
    // The entry method, then the arguments.
    s->err = p.push_entry(S, p.entry_);
    if (!s->err.empty()) return 0;
    std::string derr;
    int n = decode_values(S, *s->input, &derr);
    if (n < 0) {
      s->err = make_error(ErrorKind::Invalid, "spawn arguments: " + derr);
      return 0;
    }
    p.kernel_.start(S, n);
    return 0;
  }, &setup);
  if (jit_after_load_ && !interrupted_.load(std::memory_order_acquire)) {
    jit_after_load_ = false;
    if (lua_gethook(L_) == Primitives::jit_probe_hook) lua_sethook(L_, nullptr, 0, 0);
    luaJIT_setmode(L_, 0, LUAJIT_MODE_ENGINE | LUAJIT_MODE_ON);
  }
  if (interrupted_.load(std::memory_order_acquire))
    return make_error(ErrorKind::Limit, "time: module '" + split_entry(entry).first +
                                            "' ran longer than the time limit as it loaded (its top-level code)");
  if (rc != 0) {
    return mem_exceeded_ ? make_error(ErrorKind::Limit, "memory")
                         : make_error(ErrorKind::Invalid, std::string("process setup failed: ") +
                                                              (lua_tostring(L_, -1) ? lua_tostring(L_, -1) : "?"));
  }
  return setup.err;
}

int LuaProcess::step_body(lua_State* S) {
  LuaProcess& p = Primitives::of(S);
  StepOutput& out = *p.step_out_;
  if (p.step_events_.size() == 1 && p.hand_over_inside(S)) {
    out.status = p.has_pending_calls() ? Status::Blocked : Status::Idle;
    return 0;
  }
  p.kernel_.settle(S);  // a hand-over's task, if it left one
  // The events go to the kernel in batches, the tasks running after each:
  // a task in a receive loop drains one batch before the next becomes Lua
  // values, so a flood of messages (a producer's whole step) never exists
  // as Lua tables all at once. All at once, the inbox would hold every one
  // of them and each collection would mark them all: Counting's 200k
  // messages in one step took a third longer that way, and 64 MB, not 38.
  std::span<Event> events = p.step_events_;
  TaskKernel::Outcome outcome;
  for (;;) {
    const std::size_t n = std::min(events.size(), config::kDeliverBatch);
    p.deliver_events(S, events.first(n));
    events = events.subspan(n);
    outcome = p.kernel_.run(S);
    if (events.empty() || outcome != TaskKernel::kWaiting) break;
  }
  // Tasks that yielded run again next step, behind other processes; the
  // rest of the events wait for them in the inbox.
  if (outcome == TaskKernel::kContinue) p.deliver_events(S, events);
  switch (outcome) {
    case TaskKernel::kWaiting:
      out.status = p.has_pending_calls() ? Status::Blocked : Status::Idle;
      break;
    case TaskKernel::kContinue:
      out.status = Status::Continue;
      break;
    case TaskKernel::kDone: {
      std::string err = encode_values(S, lua_gettop(S), 1, out.result, "result");
      if (!err.empty()) {
        out.status = Status::Failed;
        out.error = err;
      } else {
        out.status = Status::Done;
      }
      break;
    }
    case TaskKernel::kFailed:
      out.status = Status::Failed;
      out.error = p.kernel_.failure();
      break;
  }
  return 0;
}

void LuaProcess::Prefetch() const {
  __builtin_prefetch(L_);
  __builtin_prefetch(reinterpret_cast<const char*>(L_) + 64);
}

void LuaProcess::Step(std::span<Event> events, StepOutput& out) {
  const RunningHere running(this);
  lua_State* L = L_;
  // Most steps take one message or a few: their senders' cache entries
  // load while the step sets up.
  for (std::size_t i = 0, n = std::min<std::size_t>(events.size(), 4); i < n; ++i) peers_.prefetch_sender(events[i].from);
  kernel_.prefetch_main();
  stack_args::drop_to(L, 0);  // only Init's leftovers: a step leaves it empty
  const std::uint32_t steps_here = ++this_thread_steps.count;
  if (!jit_on_) probe_jit(steps_here);
  else count_step();
  // One protected call a step: the events, then the ready tasks, then the
  // result's encoding. Only memory errors and the time limit's interrupt
  // (raised by the hook outside any task) end up here as errors. A step
  // of one message for a waiting task may need none (hand_over, inside
  // the LuaJIT seam; the message's kind and its payload's tag and size
  // checked first, so that a large table declines at once); else the
  // body's first act hands it over (hand_over_inside).
  // step_body finds its arguments here (the allocator's userdata leads to
  // this process), not in a light userdata to push and read back.
  step_events_ = events;
  step_out_ = &out;
  int rc = 0;
  const bool handed =
      events.size() == 1 && events[0].kind == EventKind::Message && may_hand_over(events[0].payload) &&
      hand_over(events[0]);
  if (handed) {
    out.status = has_pending_calls() ? Status::Blocked : Status::Idle;
  } else {
    stack_args::push_kept(L, step_fn_, stack_args::Object::kFunction, step_fn_ref_);
    rc = lua_pcall(L, 0, 0, 0);
  }
  // A thread the runaway monitor gave up on (the step outlived a terminate
  // or the time limit in a C call) writes nothing more: the worker has
  // another thread, and out is that thread's now.
  Worker::park_if_abandoned();
  if (interrupted_.load(std::memory_order_acquire)) {
    out.status = Status::Failed;
    out.error = make_error(ErrorKind::Limit, "time");
  } else if (mem_exceeded_) {
    out.status = Status::Failed;
    out.error = make_error(ErrorKind::Limit, "memory");
  } else if (rc != 0) {
    out.status = Status::Failed;
    const char* msg = lua_tostring(L, -1);
    out.error = std::string("kernel error: ") + (msg ? msg : "(error object is not a string)");
  }
  if (rc != 0) lua_settop(L, 0);  // the error; a call that returned left nothing
  // The timers' command (TaskKernel::settle_timers), into out: armed for
  // the earliest timer, or cancelled once none is left. A process that
  // ended keeps none, but still cancels its command: left in the wheel, it
  // would fire for nobody and keep shutdown from seeing that nothing can
  // run (Scheduler::nothing_can_run).
  if (out.status == Status::Done || out.status == Status::Failed) kernel_.drop_timers();
  kernel_.settle_timers();
  if (out.status == Status::Idle && has_pending_calls()) out.status = Status::Blocked;  // it armed one
}

void LuaProcess::Interrupt() {
  interrupted_.store(true, std::memory_order_release);
  // From the monitor thread: LuaJIT's lua_sethook only stores the hook and
  // switches the interpreter's dispatch to check it.
  lua_sethook(L_, [](lua_State* L, lua_Debug*) {
    Worker::park_if_abandoned();  // back in Lua from a C call after the monitor gave up on the thread
    void* ud = nullptr;
    lua_getallocf(L, &ud);
    if (static_cast<LuaProcess*>(ud)->interrupted_.load(std::memory_order_acquire)) luaL_error(L, "limit: time");
  }, LUA_MASKCOUNT, 1);
}

void LuaProcess::Abandon() {
  // A parked thread stopped inside this state: never free it (it stays
  // reachable here, so leak checkers do not flag it).
  static std::mutex mu;
  static std::vector<lua_State*> parked_states;
  std::lock_guard lock(mu);
  parked_states.push_back(L_);
  abandoned_.store(true, std::memory_order_relaxed);
}

void LuaProcess::Close() {
  if (!L_) return;
  if (abandoned_.load(std::memory_order_relaxed)) {
    // A thread may still run inside the state until it parks: its arena,
    // L_ and the rest stay as they are (this object is never destroyed).
    if (counted_) {
      counted_ = false;
      rt_.forget_process(ctx_.self);
      rt_.processes_.fetch_sub(1, std::memory_order_acq_rel);
    }
    return;
  }
  const RunningHere running(this);
  // lua_close would only free memory, one object at a time (a large part of a
  // spawn's work: BENCHMARKS.md's ledger, entry 1), unless finalizers or machine code may exist;
  // the arena frees it all at once. The host's own finalizers run first
  // (a failure among them leaves the rest to lua_close).
  if (!needs_close_ && finalizers_.first()) {
    run_host_finalizers();
    // A finalizer outlived the time limit, and the runaway monitor gave
    // up on this thread and finished the process: nothing here is ours.
    Worker::park_if_abandoned();
  }
  if (needs_close_) {
    arena_.begin_teardown();  // the chunks go back whole below
    lua_setallocf(L_, &LuaProcess::allocate_global, this);  // lua_close frees the global state last
    lua_close(L_);
    // Its finalizers outlived the time limit, and the runaway monitor gave
    // up on this thread and finished the process: nothing here is ours.
    Worker::park_if_abandoned();
  }
  arena_.release();
  L_ = nullptr;
  global_state_ = nullptr;
  globals_scratch_ = strings_scratch_ = nullptr;
  if (counted_) rt_.forget_process(ctx_.self);
}

void LuaProcess::run_host_finalizers() {
  const int rc = lua_cpcall(
      L_,
      [](lua_State* L) {
        auto& fins = static_cast<LuaProcess*>(lua_touserdata(L, 1))->finalizers_;
        lua_settop(L, 0);
        while (HostFinalizer* f = fins.first()) fins.run_once(L, f);
        return 0;
      },
      this);
  if (rc != 0) needs_close_ = true;  // the rest, if any, run in lua_close
}

void LuaProcess::Describe(ProcessFacts& facts) const {
  facts.entry = entry_;
  facts.started = started_;
  facts.memory = std::atomic_ref<std::size_t>(const_cast<std::size_t&>(used_)).load(std::memory_order_relaxed);
  facts.steps = std::atomic_ref<std::uint32_t>(const_cast<std::uint32_t&>(steps_)).load(std::memory_order_relaxed);
  {
    std::lock_guard lock(monitors_lock());
    if (monitors_)
      for (const auto& [target, refs] : *monitors_)
        if (target.valid()) facts.monitors.push_back(target);  // not a monitor by name's key
  }
  // Its inbox is in its Lua state: read only while it does not run.
  if (facts.quiet && L_) facts.inbox = const_cast<TaskKernel&>(kernel_).queued_messages(L_);
}

}  // namespace host::lua
