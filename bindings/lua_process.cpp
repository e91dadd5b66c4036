// LuaProcess: state setup, lazy libraries and API tables, the C primitives
// of the process API, entry loading, and the step loop.
#include "bindings/lua_process.hpp"

#include <algorithm>
#include <bit>
#include <chrono>
#include <iterator>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include <lua.hpp>

#include "bindings/codec.hpp"
#include "bindings/duration.hpp"
#include "bindings/gc_pressure.hpp"
#include "bindings/log_fields.hpp"
#include "bindings/socket_object.hpp"
#include "bindings/stack_args.hpp"
#include "host/config.hpp"
#include "host/assert.hpp"
#include "host/error.hpp"
#include "host/getrandom_batch.hpp"
#include "host/log.hpp"
#include "host/worker.hpp"

namespace host::lua {

namespace {

// While LuaProcess::Init runs a module's top-level code on this thread:
// when that code has run as long as a step may (jit_probe_hook); min until
// the hook first fires there. max otherwise.
thread_local std::chrono::steady_clock::time_point t_load_deadline = std::chrono::steady_clock::time_point::max();

// The process whose state this thread runs (a step, its start, its close,
// a spare's preparation), for Primitives::of. Nested: a spawn runs the
// child's start inside the parent's step, and gives the parent back after.
thread_local LuaProcess* t_running = nullptr;

struct RunningHere {
  LuaProcess* outer;
  explicit RunningHere(LuaProcess* p) : outer(t_running) { t_running = p; }
  ~RunningHere() { t_running = outer; }  // also when LuaJIT unwinds through it
  RunningHere(const RunningHere&) = delete;
  RunningHere& operator=(const RunningHere&) = delete;
};

// The process whose state L is, by the public API (its allocator's data).
LuaProcess* owner_by_api(lua_State* L) {
  void* ud = nullptr;
  lua_getallocf(L, &ud);
  return static_cast<LuaProcess*>(ud);
}

// Globals are read raw here: _G's __index is lazy_global itself.
void raw_global(lua_State* L, const char* name) {
  lua_pushstring(L, name);
  lua_rawget(L, LUA_GLOBALSINDEX);
}

// The API tables every process has as globals (built by the kernel), and
// the kernel's wrapper of the coroutine library.
// fs and exec are Lua modules over waiting calls (bindings/fs.lua, exec.lua).
constexpr const char* kApiNames[] = {"process", "channel", "time", "log", "coroutine", "fs", "exec"};

bool is_api(const char* name) {
  for (const char* api : kApiNames)
    if (std::strcmp(api, name) == 0) return true;
  return false;
}

// LuaJIT's standard libraries, by name.
constexpr std::pair<const char*, lua_CFunction> kLibraries[] = {
    {"string", luaopen_string}, {"table", luaopen_table}, {"math", luaopen_math},
    {"io", luaopen_io},         {"os", luaopen_os},       {"debug", luaopen_debug},
    {"bit", luaopen_bit},       {"ffi", luaopen_ffi},     {"package", luaopen_package},
    {"jit", luaopen_jit}};

// The opener of a standard library; null for any other name.
lua_CFunction opener(const char* name) {
  for (auto& [n, f] : kLibraries)
    if (std::strcmp(n, name) == 0) return f;
  return nullptr;
}

// Pushes nil, err and returns 2: the "fails for reasons outside the caller's
// code" convention of SPEC section 4.
int push_fail(lua_State* L, const std::string& err) {
  lua_pushnil(L);
  lua_pushlstring(L, err.data(), err.size());
  return 2;
}

// Pushes exactly one value decoded from bytes (nil when they hold none, the
// first when several); on bad bytes pushes nothing and returns false.
bool push_one_value(lua_State* L, const std::string& bytes, std::string* err, StringCache* strings = nullptr) {
  int n = decode_values(L, bytes, err, strings);
  if (n < 0) return false;
  if (n == 0) lua_pushnil(L);
  else if (n > 1) lua_pop(L, n - 1);
  return true;
}

// Argument idx (>= 1) must be a string (numbers are not coerced: a PID, a
// name or a topic given as a number is a programming error). Raises "bad
// argument #idx to 'fname' (string expected, got TYPE)". Read from the
// stack directly (stack_args.hpp): a send checks two.
[[gnu::cold, gnu::noinline]] void raise_not_string(lua_State* L, int idx) { luaL_typerror(L, idx, "string"); }
inline const char* check_string(lua_State* L, int idx, std::size_t* len = nullptr) {
  const char* s = stack_args::string(L, idx, len);
  if (!s) raise_not_string(L, idx);
  return s;
}

// Pushes fn and, where variant is not negative, makes it a closure over
// the variant (upvalue 1). Each function finds its process with
// Primitives::of.
void push_closure(lua_State* L, lua_CFunction fn, int variant = -1) {
  if (variant < 0) {
    lua_pushcfunction(L, fn);
    return;
  }
  lua_pushinteger(L, variant);
  lua_pushcclosure(L, fn, 1);
}

}  // namespace

// The C functions behind the process API (made lazily by process_field),
// log and time.now, the globals' and the package searcher's hooks, and H,
// the table of primitives kernel_ext.lua gets. Each finds its LuaProcess
// with of(L).
struct Primitives {
  // The process whose state L is: the one this thread runs (one load,
  // where the C API's lua_getallocf was about 10 instructions), else the
  // allocator's data. Debug builds check that L is that process's: a
  // state is touched only by the thread running it.
  static LuaProcess& of(lua_State* L) {
    LuaProcess* p = t_running;
    if (!p) [[unlikely]] p = owner_by_api(L);
    HOST_ASSERT(p == owner_by_api(L), "a process's state is used only on the thread running it");
    return *p;
  }
  static TaskKernel& kernel(lua_State* L) { return of(L).kernel_; }

  // A PID string, or a registered name, to a PID; else nil, err pushed.
  // The common case inline (a send's destination seen before: out of line
  // the call cost a send about 20 instructions), the rest out of line.
  [[gnu::always_inline]] static bool resolve(lua_State* L, LuaProcess& p, int idx, Pid& out, int& nret) {
    // A PID string seen before: Lua strings are interned, so the same
    // pointer (kept alive by PeerStrings) is the same text. Found by its
    // address alone: the string's length is read only on a miss, as a
    // process that sends to many others (Big) finds the string's own line
    // evicted, and that read was 60% of a send's perf samples.
    const char* s = check_string(L, idx);
    if (p.peers_.find(s, out)) return true;
    std::size_t n;
    s = check_string(L, idx, &n);
    return resolve_new(L, p, idx, std::string_view(s, n), out, nret);
  }
  // A destination find did not know (its string at idx is dest).
  [[gnu::noinline]] static bool resolve_new(lua_State* L, LuaProcess& p, int idx, std::string_view dest, Pid& out,
                                            int& nret) {
    const char* s = dest.data();
    if (!dest.empty() && dest.front() == '<') {
      if (auto pid = Pid::parse(dest)) {
        out = *pid;
        p.peers_.remember_dest(L, idx, s, *pid);
        return true;
      }
      nret = push_fail(L, make_error(ErrorKind::Invalid, "not a PID: '" + std::string(dest) + "'"));
      return false;
    }
    // A name: its PID from the last send to it while the names stay as
    // they were, else from the registry's lookup (under its lock).
    const std::uint32_t version = p.rt_.names().version();
    if (p.peers_.find_name(s, version, out)) return true;
    if (auto pid = p.rt_.names().lookup(std::string(dest))) {
      out = *pid;
      p.peers_.remember_name(L, idx, s, *pid, version);
      return true;
    }
    nret = push_fail(L, make_error(ErrorKind::NotFound, "no process registered as '" + std::string(dest) + "'"));
    return false;
  }

  // Resolves argument 1 (a PID or a registered name) and calls
  // fn(process, pid), which returns how many results it pushed; when the
  // target cannot be resolved, returns nil, err instead.
  template <typename F>
  [[gnu::always_inline]] static int on_target(lua_State* L, F&& fn) {
    auto& p = of(L);
    Pid to;
    int nret;
    if (!resolve(L, p, 1, to, nret)) return nret;
    return fn(p, to);
  }

  static int ok_or_fail(lua_State* L, const std::string& err) {
    if (!err.empty()) return push_fail(L, err);
    // (A send's true, pushed as a value: the C API's call was about 20.)
    const std::uint64_t yes = luajit_private::primitive(luajit_private::kTagTrue);
    if (!stack_args::push_tvalues(L, &yes, 1)) lua_pushboolean(L, 1);
    return 1;
  }

  static void push_pids(lua_State* L, const std::vector<Pid>& pids) {
    lua_createtable(L, static_cast<int>(pids.size()), 0);
    for (std::size_t i = 0; i < pids.size(); ++i) {
      push_pid(L, pids[i]);
      lua_rawseti(L, -2, static_cast<int>(i + 1));
    }
  }

  // process.list(): the PIDs of the live processes.
  static int list(lua_State* L) {
    push_pids(L, of(L).rt_.scheduler().live_pids());
    return 1;
  }

  // process.info(pid or name): what SPEC section 10 lists, or nil,
  // "not_found: ..." for a process that is not alive.
  static int info(lua_State* L) {
    return on_target(L, [L](LuaProcess& p, const Pid& to) {
      const bool self = to == p.ctx_.self;
      auto in = p.rt_.scheduler().inspect(to, self);
      if (!in) return push_fail(L, make_error(ErrorKind::NotFound, "no process " + to.to_string()));
      // Its own inbox, read here (Describe does not, for a running process).
      if (self) in->facts.inbox = p.kernel_.queued_messages(L);
      const std::vector<std::string> names = p.rt_.names().names_of(to);
      // Idle: waiting for messages, with none queued and no command (a
      // timer included) outstanding; waiting: any other wait.
      const std::size_t mailbox = in->queued + in->facts.inbox;
      const bool waits = in->state == RunState::Blocked || in->state == RunState::Idle;
      const char* status = !waits ? "running" : in->outstanding > 0 || mailbox > 0 ? "waiting" : "idle";
      lua_createtable(L, 0, 10);
      lua_pushstring(L, in->facts.entry.c_str());
      lua_setfield(L, -2, "entry");
      lua_pushstring(L, status);
      lua_setfield(L, -2, "status");
      lua_pushnumber(L, static_cast<lua_Number>(mailbox));
      lua_setfield(L, -2, "mailbox");
      lua_pushnumber(L, static_cast<lua_Number>(in->facts.memory));
      lua_setfield(L, -2, "memory");
      lua_pushnumber(L, static_cast<lua_Number>(in->facts.steps));
      lua_setfield(L, -2, "steps");
      push_pids(L, in->links);
      lua_setfield(L, -2, "links");
      push_pids(L, in->facts.monitors);
      lua_setfield(L, -2, "monitors");
      push_pids(L, in->monitored_by);
      lua_setfield(L, -2, "monitored_by");
      lua_createtable(L, static_cast<int>(names.size()), 0);
      for (std::size_t i = 0; i < names.size(); ++i) {
        lua_pushlstring(L, names[i].data(), names[i].size());
        lua_rawseti(L, -2, static_cast<int>(i + 1));
      }
      lua_setfield(L, -2, "names");
      lua_pushnumber(L, in->facts.started);
      lua_setfield(L, -2, "started");
      if (in->parent.valid()) {  // under --inspect (Scheduler::track_parents)
        const std::string parent = in->parent.to_string();
        lua_pushlstring(L, parent.data(), parent.size());
        lua_setfield(L, -2, "parent");
      }
      return 1;
    });
  }

  static int pid(lua_State* L) {
    auto& p = of(L);
    lua_pushlstring(L, p.self_.data(), p.self_.size());
    return 1;
  }

  static int memory(lua_State* L) {
    lua_pushnumber(L, static_cast<lua_Number>(of(L).used_));
    return 1;
  }

  static int now(lua_State* L) {
    lua_pushnumber(L, monotonic_seconds());
    return 1;
  }

  static int send(lua_State* L) {
    return on_target(L, [L](LuaProcess& p, const Pid& to) __attribute__((always_inline)) {
      std::size_t tn;
      const char* topic = check_string(L, 2, &tn);
      // A nil payload (or none) travels as no bytes at all: nothing to
      // encode, copy or decode (push_message reads it back as nil). A
      // short one is encoded on the stack and copied once, into the queue;
      // only a larger one is built in a string, moved there.
      std::string bytes;
      char small[kSmallPayloadBytes];
      std::size_t small_n = 0;
      if (const int type = stack_args::type(L, 3); type == LUA_TNUMBER) {
        small_n = encode_number(stack_args::number(L, 3), small);
      } else if (type > LUA_TNIL && (small_n = encode_small(L, 3, type, small)) == 0) {
        std::string err = encode_value_large(L, 3, type, bytes);
        if (!err.empty()) return push_fail(L, err);
      }
      std::size_t backlog = 0;  // stays 0 when the send fails
      Scheduler& s = p.rt_.scheduler();
      const std::string_view topic_bytes(topic, tn);
      const int nret =
          ok_or_fail(L, bytes.empty() ? s.send_copy(to, topic_bytes, std::string_view(small, small_n), p.ctx_.self, &backlog)
                                      : s.send(to, topic_bytes, std::move(bytes), p.ctx_.self, &backlog));
      // The receiver is far behind: let it (and others) run before this
      // process sends more (config::kSendBacklogYield). Not when it sends
      // to itself: its queue would only move into its own heap.
      if (backlog >= config::kSendBacklogYield && to != p.ctx_.self && p.kernel_.can_yield_to_others(L))
        return p.kernel_.yield_to_others(L, nret);
      return nret;
    });
  }

  // process.spawn, spawn_linked, spawn_monitored: the mode is upvalue 1.
  static int spawn(lua_State* L) {
    auto& p = of(L);
    auto mode = static_cast<int>(lua_tointeger(L, lua_upvalueindex(1)));
    std::string entry = check_string(L, 1);
    int nargs = lua_gettop(L) - 1;
    std::string bytes;
    std::string err = encode_values(L, 2, nargs, bytes, "arg");
    if (!err.empty()) return push_fail(L, err);
    SpawnOptions opts;
    opts.parent = p.ctx_.self;
    if (mode == 1) opts.link_to = p.ctx_.self;
    if (mode == 2) {
      opts.monitor_by = p.ctx_.self;
      opts.monitor_ref = ++p.next_monitor_ref_;
    }
    SpawnResult r = p.rt_.spawn(entry, std::move(bytes), opts);
    if (!r) return push_fail(L, r.error);
    if (mode == 2) p.add_monitor(r.pid, opts.monitor_ref);
    push_pid(L, r.pid);
    return 1;
  }

  static int link(lua_State* L) {
    return on_target(L, [L](LuaProcess& p, const Pid& to) {
      return ok_or_fail(L, p.rt_.scheduler().link(p.ctx_.self, to));
    });
  }

  static int unlink(lua_State* L) {
    return on_target(L, [L](LuaProcess& p, const Pid& to) {
      return ok_or_fail(L, p.rt_.scheduler().unlink(p.ctx_.self, to));
    });
  }

  // process.monitor(pid) -> true; with a true upvalue 1 (H.watch_monitor,
  // for process.watch) -> true, ref.
  static int monitor(lua_State* L) {
    return on_target(L, [L](LuaProcess& p, const Pid& to) {
      std::uint64_t ref = ++p.next_monitor_ref_;
      std::string err = p.rt_.scheduler().monitor(p.ctx_.self, to, ref);
      if (!err.empty()) return push_fail(L, err);
      p.add_monitor(to, ref);
      lua_pushboolean(L, 1);
      if (!lua_toboolean(L, lua_upvalueindex(1))) return 1;
      p.kernel_.note_watch();
      lua_pushnumber(L, static_cast<lua_Number>(ref));
      return 2;
    });
  }

  // H.demonitor(pid, ref): drops one monitor.
  static int demonitor(lua_State* L) {
    return on_target(L, [L](LuaProcess& p, const Pid& to) {
      auto ref = static_cast<std::uint64_t>(luaL_checknumber(L, 2));
      p.forget_monitor(to, ref);
      (void)p.rt_.scheduler().unmonitor(p.ctx_.self, to, ref);
      lua_pushboolean(L, 1);
      return 1;
    });
  }

  static int unmonitor(lua_State* L) {
    return on_target(L, [L](LuaProcess& p, const Pid& to) {
      std::vector<std::uint64_t> refs;
      {
        std::lock_guard lock(p.monitors_lock());
        if (p.monitors_)
          if (auto it = p.monitors_->find(to); it != p.monitors_->end()) {
            refs = std::move(it->second);
            p.monitors_->erase(it);
          }
      }
      if (refs.empty()) return push_fail(L, make_error(ErrorKind::NotFound, "not monitoring " + to.to_string()));
      for (std::uint64_t ref : refs) (void)p.rt_.scheduler().unmonitor(p.ctx_.self, to, ref);
      lua_pushboolean(L, 1);
      return 1;
    });
  }

  // process.cancel(pid[, reason]): the reason is any value a message may
  // carry (copied as one; refused as one), default "canceled".
  static int cancel(lua_State* L) {
    return on_target(L, [L](LuaProcess& p, const Pid& to) {
      if (lua_isnoneornil(L, 2)) return ok_or_fail(L, p.rt_.scheduler().cancel(to, "canceled", p.ctx_.self));
      std::string reason;
      std::string err = encode_value(L, 2, reason, "reason");
      if (!err.empty()) return push_fail(L, err);
      return ok_or_fail(L, p.rt_.scheduler().cancel(to, std::move(reason), p.ctx_.self, /*value_bytes=*/true));
    });
  }

  // process.terminate(pid). A process stops between steps; one that
  // terminates itself yields here so that its step ends now (the call
  // does not return), or, where it cannot yield (inside a C call), raises
  // "terminated".
  static int terminate(lua_State* L) {
    return on_target(L, [L](LuaProcess& p, const Pid& to) {
      const int nret = ok_or_fail(L, p.rt_.scheduler().terminate(to));
      if (to != p.ctx_.self) return nret;
      if (!p.kernel_.can_yield_to_others(L)) return luaL_error(L, "terminated");
      return p.kernel_.yield_to_others(L, nret);
    });
  }

  static int register_name(lua_State* L) {
    auto& p = of(L);
    std::string name = check_string(L, 1);
    // process.send takes a string that starts with '<' for a PID, anything
    // else for a name: such a name could never be reached.
    if (name.empty() || name.front() == '<')
      return push_fail(L, make_error(ErrorKind::Invalid, "bad name '" + name + "': empty or starting with '<' (a PID's mark)"));
    Pid who = p.ctx_.self;
    if (!lua_isnoneornil(L, 2)) {
      int nret;
      if (!resolve(L, p, 2, who, nret)) return nret;
      if (!p.rt_.scheduler().alive(who)) return push_fail(L, make_error(ErrorKind::NotFound, "no process " + who.to_string()));
    }
    std::string err = p.rt_.names().register_name(name, who);
    // The process may have exited between the check and the registration.
    if (err.empty() && !p.rt_.scheduler().alive(who)) {
      p.rt_.names().release_all(who);
      err = make_error(ErrorKind::NotFound, "no process " + who.to_string());
    }
    return ok_or_fail(L, err);
  }

  static int lookup(lua_State* L) {
    auto& p = of(L);
    std::string name = check_string(L, 1);
    auto pid = p.rt_.names().lookup(name);
    if (!pid) return push_fail(L, make_error(ErrorKind::NotFound, "no process registered as '" + name + "'"));
    std::string s = pid->to_string();
    lua_pushlstring(L, s.data(), s.size());
    return 1;
  }

  static int unregister(lua_State* L) {
    auto& p = of(L);
    return ok_or_fail(L, p.rt_.names().unregister(check_string(L, 1)));
  }

  // time.sleep(d): C, so that a process which only sleeps never loads
  // kernel_ext.lua (TaskKernel::block_in_sleep says why).
  static int sleep(lua_State* L) {
    auto& p = of(L);
    const double secs = check_duration(L, 1, 1);
    p.kernel_.check_blockable(L);
    if (secs <= 0) return p.kernel_.yield_to_others(L, 0);  // behind the other processes
    return p.kernel_.block_in_sleep(L, secs);
  }

  // TaskKernel's C timers' commands: a count from kTimerTagMark, so that a
  // tag is never one still out (a completion already on its way when its
  // receive got a message must not end the task's next wait).
  static std::uint64_t start_timer(LuaProcess& p, double secs) {
    const std::uint64_t tag = TaskKernel::kTimerTagMark | ++p.c_timers_;
    add_sleep(p, tag, secs);
    return tag;
  }

  // A sleep command for flush_commands, its nanoseconds bounded.
  static void add_sleep(LuaProcess& p, std::uint64_t tag, double secs) {
    p.pending_sleeps_.emplace_back(tag, static_cast<std::int64_t>(std::min(secs * 1e9, 9e18)));
  }

  // A timer started in this step is only dropped: its command is not out
  // yet (flush_commands sends cancels before new sleeps).
  static void cancel_timer(LuaProcess& p, std::uint64_t tag) {
    if (std::erase_if(p.pending_sleeps_, [tag](const auto& s) { return s.first == tag; }) == 0)
      p.pending_cancels_.push_back(tag);
  }

  // H.duration(d, level) -> seconds, for kernel_ext.lua's time calls.
  static int duration(lua_State* L) {
    const double secs = check_duration(L, 1, static_cast<int>(luaL_checkinteger(L, 2)));
    lua_pushnumber(L, secs);
    return 1;
  }

  // The one way a binding waits on something outside the process:
  // call(command, arg, ...) starts command `command` with the integer
  // arg and the other arguments encoded as its bytes, and blocks the
  // running task until the handler completes it (Scheduler::
  // complete_yield, from any thread); its results become this call's
  // returns, or nil, err when it failed (TaskKernel::complete_call).
  // require("host.call") returns it; fs.lua and exec.lua get it as their
  // chunks' argument.
  static int wait_call(lua_State* L) {
    const lua_Number id = luaL_checknumber(L, 1);
    if (id < cmd::kFirstUser || id >= 1u << 24 || id != static_cast<CommandId>(id))
      return luaL_argerror(L, 1, "not a command id");
    const lua_Number arg = luaL_optnumber(L, 2, 0);
    return start_call(L, static_cast<CommandId>(id), static_cast<std::int64_t>(arg), 3, lua_gettop(L) - 2);
  }

  // wait_call's body, for C bindings too: the n values from index first
  // are the command's arguments.
  static int start_call(lua_State* L, CommandId id, std::int64_t arg, int first, int n) {
    auto& p = of(L);
    p.kernel_.check_blockable(L);
    std::string bytes;
    if (n > 0) {
      std::string err = encode_values(L, first, n, bytes, "argument");
      if (!err.empty()) return luaL_error(L, "%s", err.c_str());
    }
    // Into the step's output at once (a task runs only inside a step): a
    // list of its own would make every process larger.
    const std::uint64_t tag = TaskKernel::kCallTagMark | ++p.c_timers_;
    Yield& y = p.step_out_->add_yield(id, tag);
    y.arg = arg;
    y.bytes = std::move(bytes);
    return p.kernel_.block_in_call(L, tag);
  }

  // require("host.stats")(): what the host did since it started. The
  // processes are the live ones but for the inspector's own (one per
  // connection to it).
  static int host_stats(lua_State* L) {
    auto& p = of(L);
    Scheduler& s = p.rt_.scheduler();
    const Scheduler::Counters c = s.counters();
    const std::size_t live = s.live_count(), own = p.rt_.io().http.internal_processes();
    lua_createtable(L, 0, 8);
    auto field = [L](const char* k, double v) {
      lua_pushnumber(L, v);
      lua_setfield(L, -2, k);
    };
    field("processes", static_cast<double>(live > own ? live - own : 0));
    field("messages", static_cast<double>(c.workers.messages));
    field("steps", static_cast<double>(c.workers.steps));
    field("spawns", static_cast<double>(c.workers.spawns));
    field("failures", static_cast<double>(c.failures));
    field("steals", static_cast<double>(c.workers.steals));
    field("parks", static_cast<double>(c.workers.parks));
    field("wakes", static_cast<double>(c.wakes));
    return 1;
  }

  static int sleep_cmd(lua_State* L) {
    const auto tag = static_cast<std::uint64_t>(luaL_checknumber(L, 1));
    add_sleep(of(L), tag, luaL_checknumber(L, 2));
    return 0;
  }

  static int cancel_cmd(lua_State* L) {
    auto& p = of(L);
    p.pending_cancels_.push_back(static_cast<std::uint64_t>(luaL_checknumber(L, 1)));
    return 0;
  }

  // The timed selects' shared timer (LuaProcess::select_timer_), for
  // kernel_ext.lua's channel_select.
  // H.sel_wait(secs, tag, due) -> the shared timer's tag, now with a
  // select waiting on it, and the select's deadline (monotonic_seconds);
  // or 0 when that deadline comes before the shared timer's (due, which
  // kernel_ext keeps): the select then starts a timer of its own. With
  // none armed, it starts one with tag (kernel_ext's next) for this
  // select's deadline.
  static int sel_wait(lua_State* L) {
    auto& p = of(L);
    const double secs = luaL_checknumber(L, 1);
    const double deadline = monotonic_seconds() + secs;
    if (p.select_timer_ == 0) {
      p.select_timer_ = static_cast<std::uint64_t>(luaL_checknumber(L, 2));
      add_sleep(p, p.select_timer_, secs);
    } else if (deadline < luaL_checknumber(L, 3)) {
      lua_pushinteger(L, 0);
      return 1;
    }
    p.select_timer_idle_ = false;
    lua_pushnumber(L, static_cast<lua_Number>(p.select_timer_));
    lua_pushnumber(L, deadline);
    return 2;
  }
  // H.sel_idle(): no select waits on the shared timer any more; the step's
  // end drops it unless one comes first (LuaProcess::settle_select_timer).
  static int sel_idle(lua_State* L) {
    of(L).select_timer_idle_ = true;
    return 0;
  }
  // H.sel_timer(tag, secs): the shared timer fired (or went with
  // process.upgrade): a new one, tag (kernel_ext's next), for the selects
  // still waiting, or 0 for none.
  static int sel_timer(lua_State* L) {
    auto& p = of(L);
    p.select_timer_ = static_cast<std::uint64_t>(luaL_checknumber(L, 1));
    p.select_timer_idle_ = false;
    if (p.select_timer_ != 0) add_sleep(p, p.select_timer_, luaL_checknumber(L, 2));
    return 0;
  }

  static int describe(lua_State* L) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%s: %p", luaL_typename(L, 1), lua_topointer(L, 1));
    lua_pushstring(L, buf);
    return 1;
  }

  // H.load_entry([entry]) -> fn | nil, err: the newest code of an entry
  // (default: the process's own), for process.upgrade.
  static int load_entry(lua_State* L) {
    auto& p = of(L);
    std::string entry = lua_isnoneornil(L, 1) ? p.entry_ : std::string(luaL_checkstring(L, 1));
    lua_settop(L, 0);
    // The new code must require the newest versions too.
    p.push_loaded(L);
    for (const auto& name : p.script_modules_) {
      lua_pushnil(L);
      lua_setfield(L, -2, name.c_str());
    }
    p.script_modules_.clear();
    lua_settop(L, 0);
    std::string err = p.push_entry(L, entry);
    if (!err.empty()) return push_fail(L, err);
    p.entry_ = entry;  // the log's lines name it from here on (log::set_current_pid)
    return 1;
  }

  // print(...) goes to the log at info level, tab-separated like Lua's.
  static int print(lua_State* L) {
    int n = lua_gettop(L);
    std::string line;
    base_global(L, "tostring");
    for (int i = 1; i <= n; ++i) {
      lua_pushvalue(L, -1);
      lua_pushvalue(L, i);
      lua_call(L, 1, 1);
      std::size_t len;
      const char* s = lua_tolstring(L, -1, &len);
      if (!s) return luaL_error(L, "'tostring' must return a string to 'print'");
      if (i > 1) line += '\t';
      line.append(s, len);
      lua_pop(L, 1);
    }
    log::logger().info("{}", line);
    return 0;
  }

  // The count hook of the JIT probe (config::kJitProbeSteps, armed by
  // LuaProcess::probe_jit), every kJitHookInterval bytecodes of an armed
  // step: adds them to the estimate of what the process has run (32 times
  // over in a sampled step, which stands for the 32 steps since the last).
  // Once that passes kJitWarmupInstructions, the process has run long
  // enough to be worth compiling, if this step is a long computation or
  // two of the last four armed steps were long (config::kJitLongStepFirings
  // says why), it compiles the process. It fires at once in a step that
  // probe_jit found hot.
  //
  // In Init (no step yet) it only watches the time limit: a module's
  // top-level code runs inside the spawn call, outside any step the
  // runaway monitor can stop, so the hook raises "limit: time" past
  // t_load_deadline itself, and compiles nothing (compiled loops run no
  // hooks).
  static void jit_probe_hook(lua_State* L, lua_Debug*) {
    Worker::park_if_abandoned();  // a spawn's Init on a thread given up (Scheduler::spawn)
    auto* p = &of(L);
    if (p->interrupted_.load(std::memory_order_acquire)) luaL_error(L, "limit: time");
    if (p->steps_ == 0) [[unlikely]] {
      using Clock = std::chrono::steady_clock;
      if (t_load_deadline == Clock::time_point::max()) return;  // not in Init (Prepare's setup)
      const auto now = Clock::now();
      if (t_load_deadline == Clock::time_point::min()) {  // the first firing: the clock starts
        const double limit = p->rt_.options().time_limit;
        t_load_deadline = limit < 1e9 ? now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(limit))
                                      : Clock::time_point::max() - Clock::duration(1);
      } else if (now > t_load_deadline) {
        p->interrupted_.store(true, std::memory_order_release);
        luaL_error(L, "limit: time");
      }
      return;
    }
    if (p->jit_hot_samples_ >= config::kJitHotSamples) return compile(L, p);  // see probe_jit
    if (p->jit_fired_step_ != p->steps_) {  // the first firing in this step: a long one
      p->jit_fired_step_ = p->steps_;
      p->jit_step_firings_ = 0;
      p->jit_long_history_ |= 1;
    }
    if (p->jit_step_firings_ < 255) ++p->jit_step_firings_;
    const std::uint32_t weight = p->steps_ <= config::kJitProbeSteps ? 1 : config::kJitSampleSteps;
    if (p->jit_estimate_ < config::kJitWarmupInstructions) {  // (so that it cannot wrap)
      p->jit_estimate_ += std::uint32_t{config::kJitHookInterval} * weight;
      if (p->jit_estimate_ < config::kJitWarmupInstructions) return;
    }
    if (p->jit_step_firings_ < config::kJitLongStepFirings &&
        std::popcount(static_cast<unsigned>(p->jit_long_history_ & 0xF)) < 2)
      return;
    compile(L, p);
  }

  // The JIT probe's verdict: the hook removes itself and opens jit, which
  // switches the compiler on.
  static void compile(lua_State* L, LuaProcess* p) {
    lua_sethook(L, nullptr, 0, 0);
    // The runaway monitor may have armed its hook just before ours was
    // cleared: arm it again.
    if (p->interrupted_.load(std::memory_order_acquire)) {
      p->Interrupt();
      luaL_error(L, "limit: time");
    }
    open_lib(L, "jit");
  }

  // __index of the process table: makes the call `name` and keeps it in the
  // table. The C primitives, process.receive (bindings/receive.lua over the
  // kernel's C receive), and kernel_ext.lua's calls (inbox, events, listen,
  // watch, upgrade, ...).
  static int process_field(lua_State* L) {
    auto& p = of(L);
    if (lua_type(L, 2) != LUA_TSTRING) return 0;
    const char* k = lua_tostring(L, 2);
    // variant: upvalue 1 of the closure, or none (-1).
    static const struct {
      const char* name;
      lua_CFunction fn;
      int variant;
    } calls[] = {
        {"send", send, -1},       {"pid", pid, -1},
        {"spawn", spawn, 0},      {"spawn_linked", spawn, 1},
        {"spawn_monitored", spawn, 2},
        {"link", link, -1},       {"unlink", unlink, -1},
        {"monitor", monitor, -1}, {"unmonitor", unmonitor, -1},
        {"cancel", cancel, -1},   {"terminate", terminate, -1},
        {"memory", memory, -1},  // bytes of Lua heap (an extension)
        {"list", list, -1},       {"info", info, -1},
    };
    static const luaL_Reg registry[] = {
        {"register", register_name}, {"lookup", lookup}, {"unregister", unregister}, {nullptr, nullptr}};
    const auto call = std::find_if(std::begin(calls), std::end(calls),
                                   [k](const auto& c) { return std::strcmp(c.name, k) == 0; });
    if (call != std::end(calls)) {
      push_closure(L, call->fn, call->variant);
    } else if (!std::strcmp(k, "receive")) {
      p.kernel_.push_receive(L);
    } else if (!std::strcmp(k, "registry")) {
      lua_createtable(L, 0, 3);
      luaL_setfuncs(L, registry, 0);
    } else {
      p.kernel_.push_ext(L);
      lua_getfield(L, -1, "process");
      lua_pushvalue(L, 2);
      lua_rawget(L, -2);
      if (lua_isnil(L, -1)) return 1;  // no such call
    }
    lua_pushvalue(L, 2);
    lua_pushvalue(L, -2);
    lua_rawset(L, 1);
    return 1;
  }

  // Pushes the base library's global name (raw: the process may have
  // replaced it), opening the library first if need be.
  static void base_global(lua_State* L, const char* name) {
    open_base(L, of(L));
    raw_global(L, name);
  }

  // __index of _G: opens a standard library, or builds an API table, the
  // first time a script names it, so an idle process pays only for what it
  // used.
  static int lazy_global(lua_State* L) {
    // Strings share _G's metatable until the string library opens and
    // installs theirs (install_globals): ("x"):upper() comes here first.
    // It opens without the global `string` (which comes when the script
    // names it): a method call inside a pairs(_G) loop must not add a key
    // to the table being walked, which can make next skip a key
    // (tests/lua/test_processes.lua).
    if (lua_type(L, 1) == LUA_TSTRING) {
      push_string_lib(L);
      lua_pushvalue(L, 2);
      lua_gettable(L, -2);
      return 1;
    }
    auto& p = of(L);
    if (lua_type(L, 2) != LUA_TSTRING) return 0;
    const char* k = lua_tostring(L, 2);
    if (!std::strcmp(k, "require")) {
      open_package(L);
      raw_global(L, "require");
      return 1;
    }
    // ffi is only require'd, as in plain LuaJIT.
    if (opener(k) && std::strcmp(k, "ffi") != 0) {
      // Opened already without its global (a string method, require):
      // the global is the same table.
      p.push_loaded(L);
      lua_getfield(L, -1, k);
      if (lua_istable(L, -1)) {
        lua_pushvalue(L, -1);
        lua_setfield(L, LUA_GLOBALSINDEX, k);  // rawset: _G has no __newindex
        return 1;
      }
      lua_pop(L, 2);
      if (!std::strcmp(k, "package")) open_package(L);
      else open_lib(L, k);
      lua_rawget(L, 1);
      return 1;
    }
    if (is_api(k)) {
      push_api(L, p, k);
      return 1;
    }
    if (is_metatable_call(k)) {
      install_metatable_calls(L, p);
      lua_pushvalue(L, 2);
      lua_rawget(L, 1);
      return 1;
    }
    // Any other name the process lacks may be the base library's (print's
    // tostring, pairs, _G, ...): open it and look again. assert alone, the
    // one base function of many short processes (assert(process.spawn(..))),
    // is the host's own until then.
    if (p.base_open_) return 0;
    if (!std::strcmp(k, "assert")) {
      lua_pushcfunction(L, assert_);
      lua_pushvalue(L, -1);
      lua_setfield(L, LUA_GLOBALSINDEX, "assert");  // rawset: _G has no __newindex
      return 1;
    }
    open_base(L, p);
    lua_pushvalue(L, 2);
    lua_rawget(L, 1);
    return 1;
  }

  // assert until the base library opens: LuaJIT's behaviour to the letter
  // (what it returns, and each error's text and position: the caller's
  // file and line before a message that is a string or a number, as
  // lj_err_callermsg adds them; any other message is raised as it is, and,
  // as in LuaJIT, that is the last argument). Opening the base library for
  // it cost a spawn about 14k instructions (a fifth of Fib's). It is a
  // plain C function, not one of LuaJIT's fast functions that compiled
  // code calls inline, so the library replaces it when it opens, and opens
  // when the compiler comes on (jit_opened).
  static int assert_(lua_State* L) {
    const int n = lua_gettop(L);
    if (n == 0) luaL_checkany(L, 1);
    if (lua_toboolean(L, 1)) return n;
    if (n == 1) {
      luaL_where(L, 1);
      lua_pushliteral(L, "assertion failed!");
      lua_concat(L, 2);
    } else if (lua_type(L, 2) == LUA_TSTRING || lua_type(L, 2) == LUA_TNUMBER) {
      luaL_where(L, 1);
      lua_pushvalue(L, 2);
      lua_concat(L, 2);
    }
    return lua_error(L);
  }

  static bool has_own_assert(lua_State* L) {
    raw_global(L, "assert");
    const bool own = lua_tocfunction(L, -1) == assert_;
    lua_pop(L, 1);
    return own;
  }

  // Opens LuaJIT's base library (about 45 functions, a third of a spawn's
  // instructions and 4.7 KB of an idle process) the first time a process
  // names a global it lacks. It must not replace what the process already
  // has: the globals defined before it (ours, such as print and the API
  // tables, and the script's own) are put back afterwards, and coroutine
  // stays the kernel's, while LuaJIT's own library goes to the kernel.
  static void open_base(lua_State* L, LuaProcess& p) {
    if (p.base_open_) return;
    p.base_open_ = true;
    const int base = lua_gettop(L);
    p.push_loaded(L);
    lua_getfield(L, -1, "coroutine");  // base + 2: the kernel's wrapper, if built
    if (has_own_assert(L)) {  // LuaJIT's replaces it; a script's own stays
      lua_pushnil(L);
      lua_setfield(L, LUA_GLOBALSINDEX, "assert");
    }
    int saved = 0;
    lua_pushnil(L);
    while (lua_next(L, LUA_GLOBALSINDEX)) {
      luaL_checkstack(L, 3, "opening the base library");
      lua_pushvalue(L, -2);
      ++saved;
    }
    lua_pushcfunction(L, luaopen_base);
    lua_call(L, 0, 0);
    // print is ours (install_globals), or gone if the script removed it.
    lua_pushnil(L);
    lua_setfield(L, LUA_GLOBALSINDEX, "print");
    raw_global(L, "coroutine");
    p.kernel_.set_coroutine_lib(L);
    lua_pushnil(L);
    lua_setfield(L, LUA_GLOBALSINDEX, "coroutine");  // rawset: _G has no __newindex
    lua_pushvalue(L, base + 2);
    lua_setfield(L, base + 1, "coroutine");
    wrap_needs_close(L, LUA_GLOBALSINDEX, "newproxy");
    // getmetatable and setmetatable wait in the registry until the script
    // names one (install_metatable_calls).
    for (const char* name : kMetatableCalls) {
      raw_global(L, name);
      lua_setfield(L, LUA_REGISTRYINDEX, name);
      lua_pushnil(L);
      lua_setfield(L, LUA_GLOBALSINDEX, name);  // rawset: _G has no __newindex
    }
    for (int i = 0; i < saved; ++i) lua_rawset(L, LUA_GLOBALSINDEX);
    lua_settop(L, base);
  }

  // Pushes the string library, opening it if need be without the global
  // `string` (lazy_global sets that when the script names it): for string
  // methods and log's format, which a script may call inside a pairs(_G)
  // loop, where a new key in the table being walked can make next skip
  // one (tests/lua/test_processes.lua).
  static void push_string_lib(lua_State* L) {
    of(L).push_loaded(L);
    lua_getfield(L, -1, "string");
    if (!lua_istable(L, -1)) {
      // LuaJIT's opener fills the table package.loaded already holds, and
      // then leaves the globals alone (lib_create_table).
      lua_pop(L, 1);
      lua_newtable(L);
      lua_pushvalue(L, -1);
      lua_setfield(L, -3, "string");
      open_lib(L, "string");
    }
    lua_remove(L, -2);
  }

  static void open_lib(lua_State* L, const char* name) {
    const bool jit = !std::strcmp(name, "jit");
    auto& p = of(L);
    // Named in a module's top-level code (Init), the compiler stays off
    // until the load ends (LuaProcess::Init): compiled code runs no hook,
    // and the hook is what stops that code at the time limit.
    const bool loading = jit && p.steps_ == 0 && t_load_deadline != std::chrono::steady_clock::time_point::max();
    if (jit && !loading && lua_gethook(L) == jit_probe_hook) lua_sethook(L, nullptr, 0, 0);
    run_opener(L, name, 0);
    if (!jit) return;
    if (loading) {
      luaJIT_setmode(L, 0, LUAJIT_MODE_ENGINE | LUAJIT_MODE_OFF);
      p.jit_after_load_ = true;
    }
    jit_opened(L);
  }

  // Calls the standard library's opener. io and ffi make userdata with
  // finalizers, and jit machine code that only lua_close frees: from then
  // on the state must be closed (LuaProcess::Close).
  static void run_opener(lua_State* L, const char* name, int nresults) {
    if (!std::strcmp(name, "io") || !std::strcmp(name, "ffi") || !std::strcmp(name, "jit")) of(L).needs_close_ = true;
    lua_pushcfunction(L, opener(name));
    lua_pushstring(L, name);
    lua_call(L, 1, nresults);
    if (!std::strcmp(name, "os")) {  // os.exit ends the process (exit)
      raw_global(L, "os");
      lua_pushcfunction(L, exit);
      lua_setfield(L, -2, "exit");
      lua_pop(L, 1);
    } else if (!std::strcmp(name, "debug")) {
      raw_global(L, "debug");
      wrap_metatable_calls(L, -1);
      lua_pop(L, 1);
    } else if (!std::strcmp(name, "math")) {
      seed_random(L);
    }
  }

  // LuaJIT starts every state's math.random from the same seed, so every
  // process drew the same numbers. Each process's starts from kernel
  // randomness instead (a batch per thread: no system call per process),
  // once, as its math library opens; math.randomseed(n) still makes a
  // sequence reproducible.
  static void seed_random(lua_State* L) {
    std::uint64_t bits = 0;
    if (!take_batched_random(&bits, sizeof bits)) {
      // The kernel gave too little: still one sequence a process, from
      // the clock and the process's address.
      bits = static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) * 0x9E3779B97F4A7C15ull ^
             reinterpret_cast<std::uintptr_t>(&of(L));
    }
    raw_global(L, "math");
    lua_getfield(L, -1, "randomseed");
    lua_remove(L, -2);
    lua_pushnumber(L, static_cast<lua_Number>(bits >> 11));  // 53 bits: every one a distinct double
    lua_call(L, 1, 0);
  }

  // The globals and the libraries a process has not named yet come from
  // _G's metatable (lazy_global), which strings share until the string
  // library opens. Code that reads or replaces those metatables (a strict
  // mode, as LuaJIT's etc/strict.lua and penlight's pl.strict install;
  // getmetatable("").__index to extend strings) would find or break ours.
  // So getmetatable and setmetatable (the base library's, through
  // bindings/metatable_calls.lua, and debug's) call plain first for _G or
  // a string: _G becomes what it is in plain LuaJIT, every library, API
  // table and global there and no metatable; a string's metatable, the
  // string library's.
  static int plain(lua_State* L) {
    if (lua_type(L, 1) == LUA_TSTRING) {
      push_string_lib(L);  // installs the strings' own metatable
      return 0;
    }
    lua_pushvalue(L, LUA_GLOBALSINDEX);
    if (lua_rawequal(L, 1, -1)) plain_globals(L);
    return 0;
  }

  // getmetatable and setmetatable as globals: bindings/metatable_calls.lua's
  // over the base library's, made when the script first names one (about
  // 1 KB of heap that a process which never does is spared).
  static constexpr const char* kMetatableCalls[] = {"getmetatable", "setmetatable"};
  static bool is_metatable_call(const char* k) {
    return !std::strcmp(k, kMetatableCalls[0]) || !std::strcmp(k, kMetatableCalls[1]);
  }
  static void install_metatable_calls(lua_State* L, LuaProcess& p) {
    open_base(L, p);
    const std::string& bc = p.rt_.metatable_calls_bytecode();
    if (luaL_loadbuffer(L, bc.data(), bc.size(), "=metatable_calls") != 0) lua_error(L);
    for (const char* name : kMetatableCalls) lua_getfield(L, LUA_REGISTRYINDEX, name);
    lua_pushvalue(L, LUA_GLOBALSINDEX);
    raw_global(L, "type");
    lua_pushcfunction(L, plain);
    lua_call(L, 5, 2);
    lua_setfield(L, LUA_GLOBALSINDEX, kMetatableCalls[1]);  // rawset: _G has no __newindex
    lua_setfield(L, LUA_GLOBALSINDEX, kMetatableCalls[0]);
  }

  // debug's: upvalue 1 the original call.
  static int metatable_call(lua_State* L) {
    lua_pushcfunction(L, plain);
    lua_pushvalue(L, 1);
    lua_call(L, 1, 0);
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
    return lua_gettop(L);
  }

  static void wrap_metatable_calls(lua_State* L, int idx) {
    if (idx < 0 && idx > LUA_REGISTRYINDEX) idx = lua_gettop(L) + idx + 1;
    for (const char* name : kMetatableCalls) {
      lua_getfield(L, idx, name);
      lua_pushcclosure(L, metatable_call, 1);
      lua_setfield(L, idx, name);
    }
  }

  // Every name lazy_global would give, made now, and _G's metatable gone.
  static void plain_globals(lua_State* L) {
    if (!lua_getmetatable(L, LUA_GLOBALSINDEX)) return;  // plain already
    lua_pop(L, 1);
    auto& p = of(L);
    open_base(L, p);
    auto name_global = [L](const char* name) {
      lua_getfield(L, LUA_GLOBALSINDEX, name);  // through lazy_global
      lua_pop(L, 1);
    };
    for (const auto& [name, open] : kLibraries)
      if (std::strcmp(name, "ffi") != 0) name_global(name);  // ffi is only require'd, as in plain LuaJIT
    name_global("require");
    for (const char* name : kApiNames) name_global(name);
    lua_pushnil(L);
    lua_setmetatable(L, LUA_GLOBALSINDEX);
  }

  // os.exit([code]): see TaskKernel::request_exit. true, nil or 0 is a
  // success; false or any other number a failure.
  static int exit(lua_State* L) {
    int code = 0;
    if (lua_type(L, 1) == LUA_TBOOLEAN) code = lua_toboolean(L, 1) ? 0 : 1;
    else if (!lua_isnoneornil(L, 1)) code = static_cast<int>(luaL_checkinteger(L, 1));
    return of(L).kernel_.request_exit(L, code == 0, code);
  }

  // Upvalue 1 called with the arguments, after marking the state as one to
  // close with lua_close: for newproxy and the C module loaders, which can
  // make userdata with finalizers.
  static int needs_close(lua_State* L) {
    of(L).needs_close_ = true;
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
    return lua_gettop(L);
  }

  // Replaces t[key] (t at idx) by needs_close over it.
  static void wrap_needs_close(lua_State* L, int idx, const char* key) {
    if (idx < 0 && idx > LUA_REGISTRYINDEX) idx = lua_gettop(L) + idx + 1;  // not a pseudo-index
    lua_getfield(L, idx, key);
    lua_pushcclosure(L, needs_close, 1);
    lua_setfield(L, idx, key);
  }

  // With the compiler on, process.receive's Lua fast path pays (see
  // TaskKernel::push_receive).
  static void jit_opened(lua_State* L) {
    auto& p = of(L);
    p.jit_on_ = true;
    p.kernel_.enable_fast_receive();
    if (has_own_assert(L)) open_base(L, p);  // compiled code calls LuaJIT's inline
  }

  // Pushes the API table `name`, building it once and recording it as a
  // global and in package.loaded so require("time") returns the same table.
  static void push_api(lua_State* L, LuaProcess& p, const char* name) {
    if (!std::strcmp(name, "process")) {
      p.push_process_api(L);
    } else if (!std::strcmp(name, "log")) {
      push_log_api(L);
    } else if (!std::strcmp(name, "time")) {
      push_time_api(L);
    } else if (!std::strcmp(name, "fs") || !std::strcmp(name, "exec")) {
      push_io_api(L, p, name);
    } else {
      push_ext_api(L, p, name);
    }
    lua_pushvalue(L, -1);
    lua_setfield(L, LUA_GLOBALSINDEX, name);  // rawset: _G has no __newindex
    p.push_loaded(L);
    lua_pushvalue(L, -2);
    lua_setfield(L, -2, name);
    lua_pop(L, 1);
  }

  // fs, exec or socket: its chunk called with the waiting call, its
  // command, and (socket's gettime) the wall clock.
  static void push_io_api(lua_State* L, LuaProcess& p, const char* name) {
    struct Module {
      const char* name;
      const std::string& (LuaRuntime::*bytecode)() const;
      CommandId command;
    };
    static constexpr Module modules[] = {{"fs", &LuaRuntime::fs_bytecode, io_cmd::kFs},
                                         {"exec", &LuaRuntime::exec_bytecode, io_cmd::kExec},
                                         {"socket", &LuaRuntime::socket_bytecode, io_cmd::kSocket}};
    const Module* m = modules;
    while (std::strcmp(m->name, name) != 0) ++m;
    const std::string& bc = (p.rt_.*m->bytecode)();
    if (luaL_loadbuffer(L, bc.data(), bc.size(), (std::string("=") + name).c_str()) != 0) lua_error(L);
    lua_pushcfunction(L, wait_call);
    lua_pushinteger(L, m->command);
    lua_pushcfunction(L, wall_time);
    lua_call(L, 3, 1);
  }

  // The socket module's table in this process, loading it if need be
  // (require("socket"), or a socket that arrived in a message).
  static void push_socket_module(lua_State* L, LuaProcess& p) {
    p.push_loaded(L);
    lua_getfield(L, -1, "socket");
    if (!lua_istable(L, -1)) {  // nil, or require's mark that it is loading
      lua_pop(L, 1);
      push_io_api(L, p, "socket");
      lua_pushvalue(L, -1);
      lua_setfield(L, -3, "socket");
      lua_pushvalue(L, -1);
      lua_setfield(L, -3, "socket.core");
    }
    lua_remove(L, -2);
  }


  static void claim_socket(lua_State* L, std::uint64_t id) {
    auto& p = of(L);
    p.rt_.io().sockets.claim(id, p.ctx_.self);
  }
  static void give_socket(lua_State* L, std::uint64_t id) {
    auto& p = of(L);
    p.rt_.io().sockets.give(id, p.ctx_.self);
  }
  static void drop_socket(lua_State* L, std::uint64_t id) {
    auto& p = of(L);
    p.rt_.io().sockets.drop(id, p.ctx_.self);
  }
  static SocketShards& socket_service(lua_State* L) { return of(L).rt_.io().sockets; }
  static void mark_needs_close(lua_State* L) { of(L).needs_close_ = true; }

  // Seconds since the epoch, with their fraction (LuaSocket's gettime).
  static int wall_time(lua_State* L) {
    timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    lua_pushnumber(L, static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9);
    return 1;
  }

  static void push_ext_api(lua_State* L, LuaProcess& p, const char* name) {
    p.kernel_.push_ext(L);
    lua_getfield(L, -1, "api");
    lua_pushstring(L, name);
    lua_call(L, 1, 1);
    lua_remove(L, -2);
  }

  // log.trace/debug/info/warn/error/critical(fmt, ...[, fields]):
  // string.format's rules, or tostring of a lone argument. A table after
  // the values the format takes is the entry's fields (log_fields.hpp):
  // log.info("saved", { user = id }). A table the format takes stays its
  // value ("%s" logs its tostring, as before fields). Upvalues: the spdlog
  // level, the name.
  static int log_at(lua_State* L) {
    auto level = static_cast<spdlog::level::level_enum>(lua_tointeger(L, lua_upvalueindex(1)));
    int n = lua_gettop(L);
    const bool format = n > 1;
    std::vector<log::Field> fields;
    if (format && lua_type(L, n) == LUA_TTABLE && (lua_type(L, 1) == LUA_TSTRING || lua_type(L, 1) == LUA_TNUMBER)) {
      std::size_t flen = 0;
      lua_pushvalue(L, 1);  // a copy: lua_tolstring makes a number a string in place
      const char* f = lua_tolstring(L, -1, &flen);
      const bool beyond = n - 2 >= format_arguments(std::string_view(f, flen));
      lua_pop(L, 1);
      if (beyond) {
        const std::string call = std::string("'log.") + lua_tostring(L, lua_upvalueindex(2)) + "'";
        read_log_fields(L, n, n, call.c_str(), fields);
        lua_settop(L, --n);
      }
    }
    if (format) {
      push_string_lib(L);
      lua_getfield(L, -1, "format");
      lua_replace(L, -2);
      lua_insert(L, 1);
      if (const int rc = lua_pcall(L, n, 1, 0); rc != 0) {
        if (rc == LUA_ERRMEM) return lua_error(L);
        // string.format's error names neither the script's line nor the
        // call (it sees this C function as its caller): name both.
        std::string err = lua_tostring(L, -1) ? lua_tostring(L, -1) : "bad format";
        const std::string call = std::string("'log.") + lua_tostring(L, lua_upvalueindex(2)) + "'";
        if (auto at = err.find("'?'"); at != std::string::npos) err.replace(at, 3, call);
        luaL_where(L, 1);
        lua_pushlstring(L, err.data(), err.size());
        lua_concat(L, 2);
        return lua_error(L);
      }
    } else if (lua_type(L, 1) != LUA_TSTRING) {  // a string is its own text: no base library for it
      base_global(L, "tostring");
      lua_insert(L, 1);
      lua_settop(L, 2);
      lua_call(L, 1, 1);
    }
    std::size_t len = 0;
    const char* msg = lua_tolstring(L, -1, &len);
    log::write(level, std::string_view(msg ? msg : "", msg ? len : 0), fields);
    return 0;
  }

  static void push_log_api(lua_State* L) {
    static const std::pair<const char*, spdlog::level::level_enum> levels[] = {
        {"trace", spdlog::level::trace}, {"debug", spdlog::level::debug}, {"info", spdlog::level::info},
        {"warn", spdlog::level::warn},   {"error", spdlog::level::err},   {"critical", spdlog::level::critical}};
    lua_createtable(L, 0, 6);
    for (auto& [name, level] : levels) {
      lua_pushinteger(L, level);
      lua_pushstring(L, name);
      lua_pushcclosure(L, log_at, 2);
      lua_setfield(L, -2, name);
    }
  }

  // time: now and sleep are C; the first other name (after, ticker,
  // timer) brings in kernel_ext's calls.
  static void push_time_api(lua_State* L) {
    lua_createtable(L, 0, 5);
    lua_pushcfunction(L, now);
    lua_setfield(L, -2, "now");
    lua_pushcfunction(L, sleep);
    lua_setfield(L, -2, "sleep");
    lua_createtable(L, 0, 1);
    lua_pushcfunction(L, [](lua_State* S) -> int {
      auto& p = of(S);
      // Copy kernel_ext's time calls in once, then look again.
      push_ext_api(S, p, "time");
      lua_pushnil(S);
      while (lua_next(S, -2)) {
        lua_pushvalue(S, -2);
        lua_insert(S, -2);
        lua_rawset(S, 1);
      }
      lua_pop(S, 1);
      lua_pushnil(S);
      lua_setmetatable(S, 1);
      lua_pushvalue(S, 2);
      lua_rawget(S, 1);
      return 1;
    });
    lua_setfield(L, -2, "__index");
    lua_setmetatable(L, -2);
  }

  // Opens package and puts our searcher first: modules of the script
  // directory and stdlib/ come from the shared bytecode cache; the host's
  // API and LuaJIT's libraries by name; then LuaJIT's own searchers, whose
  // path is LUA_PATH/LUA_CPATH if set, else LuaJIT's default.
  static void open_package(lua_State* L) {
    raw_global(L, "package");
    bool opened = lua_istable(L, -1);
    lua_pop(L, 1);
    if (opened) return;
    open_lib(L, "package");
    raw_global(L, "package");
    lua_getfield(L, -1, "loaders");
    // Shift the loaders up by one and put ours at 1 (before preload). The
    // others run only for modules outside the script directory and stdlib,
    // which may be native code (LUA_CPATH), as may loadlib's.
    int n = static_cast<int>(lua_objlen(L, -1));
    for (int i = n; i >= 1; --i) {
      lua_rawgeti(L, -1, i);
      lua_pushcclosure(L, needs_close, 1);
      lua_rawseti(L, -2, i + 1);
    }
    lua_pushcfunction(L, searcher);
    lua_rawseti(L, -2, 1);
    lua_pop(L, 1);
    wrap_needs_close(L, -1, "loadlib");
    lua_pop(L, 1);
  }

  static int load_std(lua_State* L) {
    const char* name = lua_tostring(L, lua_upvalueindex(1));
    run_opener(L, name, 1);
    if (lua_isnil(L, -1)) {
      lua_pop(L, 1);
      raw_global(L, name);
    }
    return 1;
  }

  static int load_api(lua_State* L) {
    push_api(L, of(L), lua_tostring(L, lua_upvalueindex(1)));
    return 1;
  }

  static int searcher(lua_State* L) {
    auto& p = of(L);
    std::string name = luaL_checkstring(L, 1);
    if (opener(name.c_str()) && name != "package") {  // package is already loaded when require runs
      lua_pushstring(L, name.c_str());
      lua_pushcclosure(L, load_std, 1);
      return 1;
    }
    if (name == "_G") {  // as in plain LuaJIT, where the base library is always open
      open_base(L, p);
      lua_pushcfunction(L, [](lua_State* S) -> int {
        lua_pushvalue(S, LUA_GLOBALSINDEX);
        return 1;
      });
      return 1;
    }
    if (is_api(name.c_str())) {
      lua_pushstring(L, name.c_str());
      lua_pushcclosure(L, load_api, 1);
      return 1;
    }
    // The host's socket module shadows LuaSocket's (its C core would block
    // a worker); LuaSocket's Lua modules (socket.http, socket.url) load
    // from the system's path as usual, on top of it.
    if (name == "socket" || name == "socket.core") {
      lua_pushcfunction(L, [](lua_State* S) -> int {
        push_socket_module(S, of(S));
        return 1;
      });
      return 1;
    }
    if (name == "host.commands") {  // the host's own commands, for stdlib modules (http)
      lua_pushcfunction(L, [](lua_State* S) -> int {
        lua_createtable(S, 0, 1);
        lua_pushinteger(S, io_cmd::kHttp);
        lua_setfield(S, -2, "http");
        return 1;
      });
      return 1;
    }
    if (name == "host.stats") {  // the scheduler's counters, for the inspector (stdlib/host/inspector.lua)
      lua_pushcfunction(L, [](lua_State* S) -> int {
        lua_pushcfunction(S, host_stats);
        return 1;
      });
      return 1;
    }
    if (name == "host.call") {  // the waiting-call primitive itself (wait_call)
      lua_pushcfunction(L, [](lua_State* S) -> int {
        lua_pushcfunction(S, wait_call);
        return 1;
      });
      return 1;
    }
    if (p.rt_.modules().locate(name).empty()) {
      lua_pushfstring(L, "\n\tno module '%s' in the script directory or stdlib", name.c_str());
      return 1;
    }
    std::string err;
    auto mod = p.rt_.modules().get(name, &err);
    if (!mod) return luaL_error(L, "error loading module '%s': %s", name.c_str(), err.c_str());
    if (luaL_loadbuffer(L, mod->bytecode.data(), mod->bytecode.size(), name.c_str()) != 0) return lua_error(L);
    p.rt_.note_module_use(p.ctx_.self, name);
    p.script_modules_.push_back(name);
    return 1;
  }
};

TaskKernel& TaskKernel::self(lua_State* L) { return Primitives::kernel(L); }

void install_moved_value_hooks() {
  moved_value_hooks.encode = &encode_socket;
  moved_value_hooks.decode = &decode_socket;
}

int start_waiting_call(lua_State* L, CommandId command, int first, int n) {
  return Primitives::start_call(L, command, 0, first, n);
}

void claim_socket(lua_State* L, std::uint64_t id) { Primitives::claim_socket(L, id); }

void give_socket(lua_State* L, std::uint64_t id) { Primitives::give_socket(L, id); }

void drop_socket(lua_State* L, std::uint64_t id) { Primitives::drop_socket(L, id); }

SocketShards& socket_service(lua_State* L) { return Primitives::socket_service(L); }

void mark_needs_close(lua_State* L) { Primitives::mark_needs_close(L); }

std::uint64_t TaskKernel::start_timer(void* loader_ctx, double secs) {
  return Primitives::start_timer(*static_cast<LuaProcess*>(loader_ctx), secs);
}

void TaskKernel::cancel_timer(void* loader_ctx, std::uint64_t tag) {
  Primitives::cancel_timer(*static_cast<LuaProcess*>(loader_ctx), tag);
}

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
  // The global state's allocation and free, and the globals hash part, are
  // out of line: the rest tail-calls allocate, saving no registers (about a
  // thousand instructions a spawn: lua_newstate makes some 50 allocations).
  if (ptr ? ptr == self->global_state_ : (!self->global_state_ || nsize == small_globals::kHashBytes)) [[unlikely]]
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
  // lua_newstate's globals hash part: a scratch block (small_globals.hpp).
  if (!ptr && !L_ && !globals_scratch_) {
    if ((globals_scratch_ = small_globals::take_scratch())) return globals_scratch_;
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

void LuaProcess::push_ext_chunk(lua_State* L, void* ctx) {
  auto* p = static_cast<LuaProcess*>(ctx);
  // kernel_ext.lua keeps base functions as upvalues, and wraps LuaJIT's
  // coroutine library, which comes with the base library.
  Primitives::open_base(L, *p);
  const std::string& bc = p->rt_.kernel_ext_bytecode();
  if (luaL_loadbuffer(L, bc.data(), bc.size(), "=kernel_ext") != 0) lua_error(L);
  // H: the primitives kernel_ext.lua uses.
  static const luaL_Reg prims[] = {
      {"now", Primitives::now},
      {"duration", Primitives::duration},
      {"demonitor", Primitives::demonitor},
      {"sleep_cmd", Primitives::sleep_cmd},
      {"cancel_cmd", Primitives::cancel_cmd},
      {"sel_wait", Primitives::sel_wait},
      {"sel_idle", Primitives::sel_idle},
      {"sel_timer", Primitives::sel_timer},
      {"describe", Primitives::describe},
      {"load_entry", Primitives::load_entry},
      {nullptr, nullptr},
  };
  lua_createtable(L, 0, 11);
  luaL_setfuncs(L, prims, 0);
  push_closure(L, Primitives::monitor, 1);  // process.watch's: also returns the ref
  lua_setfield(L, -2, "watch_monitor");
}

void LuaProcess::push_process_api(lua_State* L) {
  // Empty at first: each call is made the first time a script names it
  // (Primitives::process_field), so a process pays only for what it uses.
  lua_createtable(L, 0, 4);
  lua_createtable(L, 0, 1);
  lua_pushcfunction(L, Primitives::process_field);
  lua_setfield(L, -2, "__index");
  lua_setmetatable(L, -2);
}

void LuaProcess::install_globals() {
  lua_State* L = L_;
  // coroutine becomes the kernel's wrapper (blocking calls reach the
  // scheduler) on first use, through lazy_global or require; the base
  // library's functions come on first use too (open_base). print is made
  // here, not on first use: a script's print = nil must stay nil.
  lua_pushcfunction(L, Primitives::print);
  lua_setfield(L, LUA_GLOBALSINDEX, "print");
  // _G's __index opens libraries and API tables on first use.
  lua_createtable(L, 0, 1);
  lua_pushcfunction(L, Primitives::lazy_global);
  lua_setfield(L, -2, "__index");
  // Strings get their methods once the string library opens (it installs
  // their own metatable); until then a method call opens it, through the
  // same __index: a metatable of their own cost a spawn about 650
  // instructions and 144 bytes.
  lua_pushliteral(L, "");
  lua_pushvalue(L, -2);
  lua_setmetatable(L, -2);
  lua_pop(L, 1);
  lua_setmetatable(L, LUA_GLOBALSINDEX);
}

// The error Prepare's setup raises when small_globals cannot replace the
// globals table.
constexpr const char* kTablesUnexpected = "LuaJIT's tables are not as small_globals expects";

bool LuaProcess::Prepare() {
  const RunningHere running(this);
  L_ = lua_newstate(&LuaProcess::allocate_global, this);
  if (!L_) return false;
  if (globals_scratch_ && !small_globals::holds_globals(L_, globals_scratch_)) return prepare_without_small_globals();
  lua_setallocf(L_, &LuaProcess::allocate, this);
  // No collection while the kernel is set up (and until Init has loaded the
  // script's module): everything it allocates stays alive, so a collection
  // would only cost time (about 10% of a spawn).
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
    p.kernel_.init(S, &LuaProcess::push_ext_chunk, &p);
    p.kernel_.set_message_chunk(&p.rt_.message_bytecode());
    p.kernel_.set_receive_chunk(&p.rt_.receive_bytecode());
    p.peers_.init(S, [&p](lua_State* T) { return p.kernel_.pin(T); });
    lua_pushcfunction(S, step_body);
    p.step_fn_ = lua_topointer(S, -1);
    p.step_fn_ref_ = p.kernel_.pin(S);
    // package.loaded, where the entry module and the API tables a process
    // uses are recorded, made here and kept in a slot: found by name
    // (luaL_findtable) it cost each spawn about 1k instructions.
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
  arena_.release();
  set_used(0);
  L_ = nullptr;
  global_state_ = globals_scratch_ = nullptr;
  return Prepare();
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
  self_ = ctx.self.to_string();
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

std::mutex& LuaProcess::monitors_lock() const {
  // Striped: a mutex per process would not fit its 1 KB (and most hold no
  // monitor); changes and process.info's reads are rare.
  static std::mutex stripes[64];
  return stripes[(reinterpret_cast<std::uintptr_t>(this) >> 10) % 64];
}

void LuaProcess::add_monitor(const Pid& target, std::uint64_t ref) {
  std::lock_guard lock(monitors_lock());
  if (!monitors_) monitors_ = std::make_unique<Monitors>();
  (*monitors_)[target].push_back(ref);
}

bool LuaProcess::forget_monitor(const Pid& target, std::uint64_t ref) {
  std::lock_guard lock(monitors_lock());
  if (!monitors_) return false;
  auto it = monitors_->find(target);
  if (it == monitors_->end()) return false;
  const bool held = std::erase(it->second, ref) != 0;
  if (it->second.empty()) monitors_->erase(it);
  return held;
}

void LuaProcess::flush_commands(StepOutput& out) {
  for (auto tag : pending_cancels_) out.cancel_yield(cmd::kSleep, tag);
  for (auto& [tag, ns] : pending_sleeps_) out.add_yield(cmd::kSleep, tag).arg = ns;
  pending_cancels_.clear();
  pending_sleeps_.clear();
}

namespace {
[[gnu::cold, gnu::noinline]] void log_dropped(const Event& ev, const std::string& err) {
  log::logger().error("message from {} on topic '{}' dropped: {}", ev.from.to_string(), ev.topic, err);
}
}  // namespace

// On the path of every message: the rare failure's logging is out of line.
// Both inlined into their callers (deliver_events, queue_run): out of line
// they cost a message about 25 instructions of call and register saves
// (PingPong, callgrind).
[[gnu::always_inline]] inline bool LuaProcess::push_payload(lua_State* L, const Event& ev) {
  // No bytes: nil (what send writes for a nil payload, and what a native
  // sender's empty payload reads as).
  if (ev.payload.empty()) {
    lua_pushnil(L);
    return true;
  }
  if (push_simple_value(L, ev.payload, &received_strings_)) return true;
  if (push_shaped_payload(L, ev.payload)) return true;
  std::string err;
  if (push_one_value(L, ev.payload, &err, &received_strings_)) return true;
  log_dropped(ev, err);
  return false;
}

[[gnu::always_inline]] inline bool LuaProcess::push_message(lua_State* L, const Event& ev) {
  peers_.push_sender(L, ev.from);
  received_strings_.push_topic(L, ev.topic);
  if (push_payload(L, ev)) return true;
  lua_pop(L, 2);
  return false;
}

[[gnu::noinline]] void LuaProcess::queue_run(lua_State* L, std::span<Event> run) {
  const int base = lua_gettop(L);
  kernel_.begin_queue(L, static_cast<int>(run.size()));
  // A message from the same sender on the same topic as the one before
  // (a producer's stream) takes that one's from and topic strings again,
  // copied on the stack, instead of finding them (the sender's registry
  // slot, the topic's cache): Counting's consumer, about 80 instructions a
  // message. While the kernel takes each message off the stack, the two
  // are kept in two slots of their own.
  const bool popped = kernel_.queue_pops();
  int kept = 0;
  if (popped) {
    lua_pushnil(L);
    lua_pushnil(L);
    kept = lua_gettop(L) - 1;
  }
  const Event* prev = nullptr;  // the last message pushed
  int n = 0;
  for (const Event& ev : run) {
    if (prev && ev.from == prev->from && StringCache::same(ev.topic, prev->topic)) {
      if (popped) {
        lua_pushvalue(L, kept);
        lua_pushvalue(L, kept + 1);
      } else {  // the one before is on top: from, topic, value
        lua_pushvalue(L, -3);
        lua_pushvalue(L, -3);
      }
      if (!push_payload(L, ev)) {
        lua_pop(L, 2);
        continue;
      }
    } else {
      if (!push_message(L, ev)) continue;
      if (popped) {
        lua_pushvalue(L, -3);
        lua_replace(L, kept);
        lua_pushvalue(L, -2);
        lua_replace(L, kept + 1);
      }
    }
    prev = &ev;
    kernel_.queue_pushed(L);
    ++n;
  }
  kernel_.end_queue(L, base, n);
}

namespace {
constexpr std::size_t kMaxQueueRun = 1024;
}  // namespace

// Hands each event to the kernel. A message whose payload cannot be decoded
// is logged and skipped.
void LuaProcess::deliver_events(lua_State* L, std::span<Event> events) {
  using Name = TaskKernel::EventName;
  std::size_t end = 0;  // where the run of messages from i ends
  for (std::size_t i = 0; i < events.size(); ++i) {
    Event& ev = events[i];
    if (end <= i)
      for (end = i; end < events.size() && events[end].kind == EventKind::Message;) ++end;
    // Two or more messages in a row that nobody waits for go to the end of
    // the inbox's buffer in one call to Lua (not worth its table of
    // arguments for one): appending changes nothing that decides where a
    // message goes. Asked again at each message handed over singly: a
    // parked task takes a run's first message, and the rest may then queue.
    // A run goes at most kMaxQueueRun at a time: an inbox of message
    // tables takes a run as the arguments of one call (TaskKernel::
    // end_queue), three stack slots a message, and a step that delivers
    // all its events at once (its task yielded) could bring tens of
    // thousands: past LuaJIT's stack limit, which failed the process.
    if (end - i >= 2 && kernel_.queues_directly(L)) {
      const std::size_t stop = std::min(end, i + kMaxQueueRun);
      queue_run(L, events.subspan(i, stop - i));
      i = stop - 1;
      continue;
    }
    switch (ev.kind) {
      case EventKind::Message:
        if (push_message(L, ev)) kernel_.message(L);
        break;
      case EventKind::YieldComplete:
        if (TaskKernel::is_call_tag(ev.tag)) {
          kernel_.complete_call(L, ev.tag, ev.failed, ev.payload);
          break;
        }
        lua_pushnumber(L, static_cast<lua_Number>(ev.tag));
        if (!ev.failed) lua_pushnil(L);
        else lua_pushlstring(L, ev.payload.data(), ev.payload.size());
        kernel_.complete(L);
        break;
      case EventKind::Cancel:
        push_pid(L, ev.from);
        if (ev.tag != 1 || !push_payload(L, ev)) lua_pushlstring(L, ev.payload.data(), ev.payload.size());
        kernel_.event(L, Name::cancel, {Name::from, Name::reason});
        break;
      case EventKind::Exit: {
        // An exit ends its monitor. One already on its way when unmonitor or
        // unwatch dropped the monitor is dropped too: as with Erlang's
        // demonitor, none comes after.
        if (!forget_monitor(ev.from, ev.tag)) break;
        push_pid(L, ev.from);
        const bool failed = ev.failed;
        if (failed) {
          lua_pushlstring(L, ev.payload.data(), ev.payload.size());
        } else {
          std::string err;
          // No result bytes, or bad ones: the result is nil.
          if (ev.payload.empty() || !push_one_value(L, ev.payload, &err)) lua_pushnil(L);
        }
        kernel_.event(L, Name::exit, {Name::from, failed ? Name::error : Name::result}, static_cast<double>(ev.tag));
        break;
      }
      case EventKind::Reload: {
        lua_newtable(L);
        int i = 0;
        std::size_t start = 0;
        while (start < ev.payload.size()) {
          std::size_t end = ev.payload.find('\n', start);
          if (end == std::string::npos) end = ev.payload.size();
          lua_pushlstring(L, ev.payload.data() + start, end - start);
          lua_rawseti(L, -2, ++i);
          start = end + 1;
        }
        kernel_.event(L, Name::reload, {Name::modules});
        break;
      }
      case EventKind::LinkDown:
        push_pid(L, ev.from);
        lua_pushlstring(L, ev.payload.data(), ev.payload.size());
        kernel_.event(L, Name::link_down, {Name::from, Name::error});
        break;
    }
  }
}

bool LuaProcess::may_hand_over(const std::string& payload) { return payload.empty() || payload.size() >= 2; }

LuaProcess::HandOver LuaProcess::hand_over(const Event& ev) {
  lua_State* co = kernel_.raw_receiver();
  if (!co) return hand_over_plain(ev);
  // What every push below relies on: the task is suspended in receive,
  // with nothing on its stack, and is not the main thread the step runs.
  HOST_ASSERT(co != L_ && lua_status(co) == LUA_YIELD && lua_gettop(co) == 0,
              "a message is handed over only to a task waiting in receive");
  // Three slots, so the pushes below never grow the stack (an allocation).
  if (!stack_args::has_room(co, 3)) return HandOver::kDeclined;
  const char* from = peers_.known_sender(ev.from);  // nullptr for the host's (receive.lua needs a sender)
  if (!from) return HandOver::kDeclined;
  const char* topic = received_strings_.find_topic(ev.topic);
  if (!topic) return HandOver::kDeclined;
  if (ev.payload.size() >= 2 && static_cast<std::uint8_t>(ev.payload[1]) == kTable)
    return hand_over_table(co, from, topic, ev.payload, true);
  stack_args::push_string_object(co, from);
  stack_args::push_string_object(co, topic);
  if (!push_handed_payload(co, ev.payload)) return hand_over_decoded(co, from, topic, ev.payload, true);
  return resume_handed(co);
}

LuaProcess::HandOver LuaProcess::hand_over_decoded(lua_State* co, const char* from, const char* topic,
                                                   const std::string& payload, bool raw) {
  // What the other ways do not make (a string the process does not keep,
  // a table with one, a large or nested table, a heap near the collector's
  // threshold or the memory limit) the decoder makes in a protected call
  // on the main thread (idle during a step), which moves it to the task:
  // about 600 instructions less than step_body's delivery. For a task in
  // the C function of process.receive (not raw), message.lua's
  // constructor makes the message of it there too. An error there
  // (memory, the collector's step and its finalizers) fails the step as
  // step_body's would; a payload that does not decode goes to step_body,
  // which logs and drops it.
  stack_args::drop_to(co, 0);  // a waiting task's stack holds nothing else
  if (raw) {
    stack_args::push_string_object(co, from);
    stack_args::push_string_object(co, topic);
  }
  struct Made {
    LuaProcess* self;
    const std::string& payload;
    lua_State* to;
    const char* from;
    const char* topic;
    bool raw;
    bool ok = false;
  } made{this, payload, co, from, topic, raw};
  const int rc = lua_cpcall(
      L_,
      [](lua_State* S) {
        auto* m = static_cast<Made*>(lua_touserdata(S, 1));
        if (!m->raw) {
          m->self->kernel_.push_message_ctor(S);
          stack_args::push_string_object(S, m->from);
          stack_args::push_string_object(S, m->topic);
        }
        // A string alone is made as it is: through the cache, a stream of
        // new ones would push out the strings the process keeps (its
        // topics among them). A table's keep their cache.
        if (std::string_view s; short_string_value(m->payload, &s)) {
          lua_pushlstring(S, s.data(), s.size());
        } else {
          std::string err;
          if (!push_one_value(S, m->payload, &err, &m->self->received_strings_)) return 0;
        }
        if (!m->raw) lua_call(S, 3, 1);
        if (!stack_args::move(S, m->to, 1)) lua_xmove(S, m->to, 1);
        m->ok = true;
        return 0;
      },
      &made);
  if (rc != 0) return HandOver::kFailed;
  if (!made.ok) {
    stack_args::drop_to(co, 0);
    return HandOver::kDeclined;
  }
  return resume_handed(co);
}

inline bool LuaProcess::push_handed_payload(lua_State* co, const std::string& payload) {
  if (payload.empty()) {
    lua_pushnil(co);
    return true;
  }
  return push_simple_value_with(co, payload, [this](lua_State* S, std::string_view s) {
    const char* kept = received_strings_.find(s);
    return kept && stack_args::push_string_object(S, kept);
  });
}

LuaProcess::HandOver LuaProcess::hand_over_plain(const Event& ev) {
  // Only once message.lua's constructor is loaded: until then step_body
  // delivers each message and counts it, and the count's 16th loads the
  // constructor and puts receive.lua's form into the process table (which
  // a process that does not keep a copy of the C function then takes).
  lua_State* co = kernel_.plain_receiver();
  if (!co || !kernel_.message_ctor_loaded() || !stack_args::has_room(co, 1)) return HandOver::kDeclined;
  const char* from = peers_.known_sender(ev.from);
  if (!from) return HandOver::kDeclined;
  const char* topic = received_strings_.find_topic(ev.topic);
  if (!topic) return HandOver::kDeclined;
  if (ev.payload.size() >= 2 && static_cast<std::uint8_t>(ev.payload[1]) == kTable)
    return hand_over_table(co, from, topic, ev.payload, false);
  // message.lua's constructor makes the table.
  lua_State* L = L_;
  kernel_.push_message_ctor(L);
  stack_args::push_string_object(L, from);
  stack_args::push_string_object(L, topic);
  if (!push_handed_payload(L, ev.payload)) {
    lua_settop(L, 0);
    return hand_over_decoded(co, from, topic, ev.payload, false);
  }
  return hand_over_made(co, 3);
}

LuaProcess::HandOver LuaProcess::hand_over_made(lua_State* co, int nargs) {
  // On the main thread, idle during a step. An error (memory, the time
  // limit's hook, a finalizer's) fails the step as step_body's would.
  lua_State* L = L_;
  if (lua_pcall(L, nargs, 1, 0) != 0) return HandOver::kFailed;
  if (!stack_args::move(L, co, 1)) lua_xmove(L, co, 1);
  return resume_handed(co);
}

LuaProcess::HandOver LuaProcess::hand_over_table(lua_State* co, const char* from, const char* topic,
                                                 const std::string& payload, bool raw) {
  // A small payload of a shape seen before goes to the task as its shape's
  // constructor, which makes the message in the task's own code, its
  // allocations protected by the task's resume (shape_cache.hpp);
  // hand_over left the three slots that takes. A task in the C function
  // of process.receive takes the message the constructor made for it.
  // After a small table with a string the process does not keep, the
  // next kHandOverBackoff go straight to the decoder.
  const bool small = payload.size() <= kHandOverTableBytes && !received_strings_.skip_find();
  if (small) {
    if (!shapes_) shapes_ = std::make_unique<ShapeCache>();
    switch (shapes_->fill(payload, received_strings_, from, topic)) {
      case ShapeCache::Match::kFilled: {
        namespace LL = luajit_private;
        if (!raw) {
          stack_args::push_kept(L_, shapes_->constructor(), LL::kTagFunc, shapes_->constructor_ref());
          return hand_over_made(co, 0);
        }
        const std::uint64_t values[3] = {~std::uint64_t{0}, LL::tvalue(shapes_->constructor(), LL::kTagFunc),
                                         LL::primitive(LL::kTagTrue)};  // nil, the constructor, true
        if (!stack_args::push_tvalues(co, values, 3)) {
          shapes_->clear_scratch();
          return HandOver::kDeclined;
        }
        return resume_handed(co);
      }
      case ShapeCache::Match::kUnknown:
        if (!compile_shape(L_, payload)) return HandOver::kFailed;
        break;
      case ShapeCache::Match::kNotShape:
        break;
    }
  }
  if (!raw) return hand_over_decoded(co, from, topic, payload, false);
  // A small table of kept strings is made here, outside the protected
  // call, where none of its allocations can fail (the limit) nor step
  // the collector (its finalizers, its errors). Three slots more than
  // hand_over's: the table's first key and value. Else the decoder.
  const std::size_t heap = hand_over_table_heap(payload.size());
  if (!small || !stack_args::has_room(co, 6) || used_ + heap > limit_ || !gc_pressure::available() ||
      !gc_pressure::below_threshold(co, heap))
    return hand_over_decoded(co, from, topic, payload, true);
  stack_args::push_string_object(co, from);
  stack_args::push_string_object(co, topic);
  if (!push_value_of_kept_strings(co, payload, received_strings_)) {
    received_strings_.missed_find(kHandOverBackoff);
    return hand_over_decoded(co, from, topic, payload, true);
  }
  return resume_handed(co);
}

bool LuaProcess::compile_shape(lua_State* L, const std::string& payload) {
  // Compiled the second time in a row it is seen, in a protected call (a
  // few KB of heap: not near the memory limit).
  return used_ + kShapeCompileHeap > limit_ || !shapes_->wants_compile(payload) ||
         lua_cpcall(L, &ShapeCache::compile, shapes_.get()) == 0;
}

bool LuaProcess::push_shaped_payload(lua_State* L, const std::string& payload) {
  if (payload.size() < 2 || static_cast<std::uint8_t>(payload[1]) != kTable) return false;
  if (!shapes_) shapes_ = std::make_unique<ShapeCache>();
  switch (shapes_->fill_payload(payload, received_strings_)) {
    case ShapeCache::Match::kFilled:
      stack_args::push_kept(L, shapes_->payload_constructor(), luajit_private::kTagFunc,
                            shapes_->payload_constructor_ref());
      lua_call(L, 0, 1);
      return true;
    case ShapeCache::Match::kUnknown:
      if (!compile_shape(L, payload)) lua_error(L);  // out of memory: the step fails as any allocation would
      return false;
    case ShapeCache::Match::kNotShape:
      break;
  }
  return false;
}

int LuaProcess::step_body(lua_State* S) {
  LuaProcess& p = Primitives::of(S);
  StepOutput& out = *p.step_out_;
  p.kernel_.settle(S);  // hand_over's task, if it left one
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
      out.status = p.pending_sleeps_.empty() && !p.has_pending_calls() ? Status::Idle : Status::Blocked;
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

namespace {
// The Lua steps taken on this thread, and the thread's tag (1-255, given
// at its first sampled step; 0 until then): probe_jit's measure of a
// process's share of its core. Constant-initialized, so that reading
// them needs no guard.
struct ThreadSteps {
  std::uint32_t count = 0;
  std::uint8_t tag = 0;
};
thread_local ThreadSteps this_thread_steps;
std::atomic<std::uint8_t> thread_tags{0};
}  // namespace

// Arms the JIT probe's count hook for this step or disarms it (see
// config::kJitProbeSteps): armed from Prepare through the first steps, then
// on one step in kJitSampleSteps. A sampled step also tells whether the
// process is hot (config::kJitHotShare): then the hook is armed to fire at
// the step's first bytecode, and compiles.
void LuaProcess::probe_jit(std::uint32_t steps_here) {
  const std::uint32_t step = steps_;
  count_step();
  const bool arm = step < config::kJitProbeSteps || step % config::kJitSampleSteps == 0;
  int hook_count = config::kJitHookInterval;
  if (arm) jit_long_history_ = static_cast<std::uint8_t>(jit_long_history_ << 1);
  if (step % config::kJitSampleSteps == 0) {
    std::uint8_t& tag = this_thread_steps.tag;
    while (tag == 0) tag = thread_tags.fetch_add(1, std::memory_order_relaxed) + 1;  // (skips 0 on wrapping)
    if (tag != jit_hot_thread_) {
      // Its first sample, or it moved: the steps since the last sample
      // were another thread's. This one says nothing.
      jit_hot_thread_ = tag;
    } else if (steps_here - jit_hot_stamp_ <= config::kJitSampleSteps * config::kJitHotShare) {
      if (jit_hot_samples_ < config::kJitHotSamples) ++jit_hot_samples_;
    } else {
      jit_hot_samples_ = 0;
    }
    jit_hot_stamp_ = steps_here;
    if (jit_hot_samples_ >= config::kJitHotSamples) hook_count = 1;
  }
  // (A hot sample re-arms the hook with its count of 1, armed or not.)
  if (arm == jit_probe_armed_ && hook_count == config::kJitHookInterval) return;
  jit_probe_armed_ = arm;
  if (arm) lua_sethook(L_, Primitives::jit_probe_hook, LUA_MASKCOUNT, hook_count);
  else lua_sethook(L_, nullptr, 0, 0);
  // The runaway monitor may have armed its own hook just before: arm it again.
  if (interrupted_.load(std::memory_order_acquire)) Interrupt();
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
  // of one message for a waiting task may need none (hand_over; the
  // message's kind and its payload's tag and size checked first, so that
  // a large table declines at once).
  // step_body finds its arguments here (the allocator's userdata leads to
  // this process), not in a light userdata to push and read back.
  step_events_ = events;
  step_out_ = &out;
  int rc = 0;
  HandOver handed = HandOver::kDeclined;
  if (events.size() == 1 && events[0].kind == EventKind::Message && may_hand_over(events[0].payload))
    handed = hand_over(events[0]);
  if (handed == HandOver::kDone) {
    out.status = pending_sleeps_.empty() && !has_pending_calls() ? Status::Idle : Status::Blocked;
  } else if (handed == HandOver::kFailed) {
    rc = LUA_ERRRUN;  // the hand-over's protected call's error, on the stack as lua_pcall leaves one
  } else {
    stack_args::push_kept(L, step_fn_, luajit_private::kTagFunc, step_fn_ref_);
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
  kernel_.settle_receive_timer();
  settle_select_timer();
  if (!pending_sleeps_.empty() || !pending_cancels_.empty()) {
    // A process that ended starts no timer (nor call: the worker starts
    // no command of a finished step), but still drops the ones its last
    // step stopped waiting for (a receive that a message ended): left in
    // the wheel, they would fire for nobody and keep shutdown from seeing
    // that nothing can run (Scheduler::nothing_can_run).
    if (out.status == Status::Done || out.status == Status::Failed) pending_sleeps_.clear();
    flush_commands(out);
  }
}

void LuaProcess::settle_select_timer() {
  if (select_timer_ == 0 || !select_timer_idle_) return;
  Primitives::cancel_timer(*this, select_timer_);
  select_timer_ = 0;
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
  // lua_close would only free memory, one object at a time (a sixth of a
  // spawn's instructions), unless finalizers or machine code may exist;
  // the arena frees it all at once.
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
  globals_scratch_ = nullptr;
  if (counted_) rt_.forget_process(ctx_.self);
}

void LuaProcess::Describe(ProcessFacts& facts) const {
  facts.entry = entry_;
  facts.started = started_;
  facts.memory = std::atomic_ref<std::size_t>(const_cast<std::size_t&>(used_)).load(std::memory_order_relaxed);
  facts.steps = std::atomic_ref<std::uint32_t>(const_cast<std::uint32_t&>(steps_)).load(std::memory_order_relaxed);
  {
    std::lock_guard lock(monitors_lock());
    if (monitors_)
      for (const auto& [target, refs] : *monitors_) facts.monitors.push_back(target);
  }
  // Its inbox is in its Lua state: read only while it does not run.
  if (facts.quiet && L_) facts.inbox = const_cast<TaskKernel&>(kernel_).queued_messages(L_);
}

}  // namespace host::lua
