// The process and log APIs' C functions: process.send, spawn, link,
// monitor, cancel, terminate, the name registry, info and list, upgrade's
// load_entry; the process table that makes each on first use
// (process_field); the monitors a process holds; log.*. Threads: the one
// running the process (process.info's reads of the monitors from any).
#include <algorithm>
#include <iterator>
#include <cstring>
#include <mutex>

#include <lua.hpp>

#include "bindings/codec.hpp"
#include "bindings/log_fields.hpp"
#include "bindings/lua_process_internal.hpp"
#include "bindings/socket_object.hpp"
#include "bindings/luajit/stack_args.hpp"
#include "host/config.hpp"
#include "host/error.hpp"
#include "host/log.hpp"

namespace host::lua {

// A PID string, or a registered name, to a PID; else nil, err pushed.
// The common case inline (a send's destination seen before: out of line
// its call was overhead on every send), the rest out of line.
[[gnu::always_inline]] inline bool Primitives::resolve(lua_State* L, LuaProcess& p, int idx, Pid& out, int& nret,
                                                      bool for_send) {
  // A PID string seen before: Lua strings are interned, so the same
  // pointer (kept alive by PeerStrings) is the same text. Found by its
  // address alone: the string's length is read only on a miss, as a
  // process that sends to many others (Big) finds the string's own line
  // evicted, and that read dominated a send's perf samples (BENCHMARKS.md's source figures).
  const char* s = stack_args::string(L, idx, nullptr);
  // Not a string: a { name, node } table, or a bad argument (raised there).
  if (!s) return resolve_not_string(L, idx, out, nret, for_send);
  if (p.peers_.find(s, out)) return true;
  std::size_t n;
  s = check_string(L, idx, &n);
  return resolve_new(L, p, idx, std::string_view(s, n), out, nret);
}

// A destination find did not know (its string at idx is dest).
[[gnu::noinline]] bool Primitives::resolve_new(lua_State* L, LuaProcess& p, int idx, std::string_view dest,
                                              Pid& out, int& nret) {
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
[[gnu::always_inline]] inline int Primitives::on_target(lua_State* L, F&& fn, bool for_send) {
  auto& p = of(L);
  Pid to;
  int nret;
  if (!resolve(L, p, 1, to, nret, for_send)) return nret;
  return fn(p, to);
}

int Primitives::ok_or_fail(lua_State* L, const std::string& err) {
  if (!err.empty()) return push_fail(L, err);
  // (A send's true, pushed as a value: the C API's call was about 20.)
  if (!stack_args::push_true(L)) lua_pushboolean(L, 1);
  return 1;
}

void Primitives::push_pids(lua_State* L, const std::vector<Pid>& pids) {
  lua_createtable(L, static_cast<int>(pids.size()), 0);
  for (std::size_t i = 0; i < pids.size(); ++i) {
    push_pid(L, pids[i]);
    lua_rawseti(L, -2, static_cast<int>(i + 1));
  }
}

// process.list(): the PIDs of the live processes.
int Primitives::list(lua_State* L) {
  push_pids(L, of(L).rt_.scheduler().live_pids());
  return 1;
}

// process.info(pid or name): what docs/LUA_API.md, process, lists, or nil,
// "not_found: ..." for a process that is not alive.
int Primitives::info(lua_State* L) {
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

// require("host.stats")(): what the host did since it started. The
// processes are the live ones but for the inspector's own (one per
// connection to it).
int Primitives::host_stats(lua_State* L) {
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

int Primitives::pid(lua_State* L) {
  auto& p = of(L);
  // Formatted on first use: most processes never ask, and a spawn paid for it.
  if (p.self_.empty()) p.self_ = p.ctx_.self.to_string();
  lua_pushlstring(L, p.self_.data(), p.self_.size());
  return 1;
}

int Primitives::memory(lua_State* L) {
  lua_pushnumber(L, static_cast<lua_Number>(of(L).used_));
  return 1;
}

int Primitives::send(lua_State* L) {
  return on_target(L, [L](LuaProcess& p, const Pid& to) __attribute__((always_inline)) {
    // Another node's process: encoded once, into the message's own bytes.
    if (to.node != p.ctx_.self.node) [[unlikely]]
      if (p.rt_.scheduler().remote()) return send_remote(L, p, to);
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
      // Only a value encoded here may carry a socket: a failed send gives
      // it back (socket_moves_undo).
      socket_moves_begin();
      std::string err = encode_value_large(L, 3, type, bytes);
      if (!err.empty()) {
        socket_moves_undo(L);
        return push_fail(L, err);
      }
      std::size_t backlog = 0;
      const std::string_view topic_bytes(topic, tn);
      std::string serr = p.rt_.scheduler().send(to, topic_bytes, std::move(bytes), p.ctx_.self, &backlog);
      if (!serr.empty()) [[unlikely]] {  // the bytes are still here: a send that fails takes nothing
        socket_moves_undo(L);  // a socket never leaves this host
        return send_elsewhere(L, p, to, topic_bytes, bytes, serr);
      }
      const int nret = ok_or_fail(L, serr);
      if (backlog >= config::kSendBacklogYield && to != p.ctx_.self && p.kernel_.can_yield_to_others(L))
        return p.kernel_.yield_to_others(L, nret);
      return nret;
    }
    std::size_t backlog = 0;  // stays 0 when the send fails
    Scheduler& s = p.rt_.scheduler();
    const std::string_view topic_bytes(topic, tn);
    const std::string err = bytes.empty()
                                ? s.send_copy(to, topic_bytes, std::string_view(small, small_n), p.ctx_.self, &backlog)
                                : s.send(to, topic_bytes, std::move(bytes), p.ctx_.self, &backlog);
    // No process here: another node's, or none (out of line, so that the
    // scheduler's send stays inlined here: BENCHMARKS.md, issue 55).
    if (!err.empty()) [[unlikely]]
      return send_elsewhere(L, p, to, topic_bytes, bytes.empty() ? std::string_view(small, small_n) : bytes, err);
    const int nret = ok_or_fail(L, err);
    // The receiver is far behind: let it (and others) run before this
    // process sends more (config::kSendBacklogYield). Not when it sends
    // to itself: its queue would only move into its own heap.
    if (backlog >= config::kSendBacklogYield && to != p.ctx_.self && p.kernel_.can_yield_to_others(L))
      return p.kernel_.yield_to_others(L, nret);
    return nret;
  }, /*for_send=*/true);
}

// process.spawn, spawn_linked, spawn_monitored: the mode is upvalue 1.
int Primitives::spawn(lua_State* L) {
  auto& p = of(L);
  auto mode = static_cast<int>(lua_tointeger(L, lua_upvalueindex(1)));
  std::string entry = check_string(L, 1);
  int nargs = lua_gettop(L) - 1;
  std::string bytes;
  socket_moves_begin();  // a spawn that fails gives its arguments' sockets back
  std::string err = encode_values(L, 2, nargs, bytes, "arg");
  if (!err.empty()) {
    socket_moves_undo(L);
    return push_fail(L, err);
  }
  SpawnOptions opts;
  opts.parent = p.ctx_.self;
  if (mode == 1) opts.link_to = p.ctx_.self;
  if (mode == 2) {
    opts.monitor_by = p.ctx_.self;
    opts.monitor_ref = ++p.next_monitor_ref_;
  }
  SpawnResult r = p.rt_.spawn(entry, std::move(bytes), opts);
  if (!r) {
    socket_moves_undo(L);
    return push_fail(L, r.error);
  }
  if (mode == 2) p.add_monitor(r.pid, opts.monitor_ref);
  push_pid(L, r.pid);
  return 1;
}

int Primitives::link(lua_State* L) {
  if (lua_type(L, 1) == LUA_TTABLE) [[unlikely]] return refuse_named(L, "link");
  return on_target(L, [L](LuaProcess& p, const Pid& to) {
    return ok_or_fail(L, p.rt_.scheduler().link(p.ctx_.self, to));
  });
}

int Primitives::unlink(lua_State* L) {
  if (lua_type(L, 1) == LUA_TTABLE) [[unlikely]] return refuse_named(L, "unlink");
  return on_target(L, [L](LuaProcess& p, const Pid& to) {
    return ok_or_fail(L, p.rt_.scheduler().unlink(p.ctx_.self, to));
  });
}

// process.monitor(pid) -> true; with a true upvalue 1 (H.watch_monitor,
// for process.watch) -> true, ref.
int Primitives::monitor(lua_State* L) {
  // { name, node }: bindings/lua_cluster_api.cpp.
  if (lua_type(L, 1) == LUA_TTABLE) [[unlikely]] return monitor_named(L);
  return on_target(L, [L](LuaProcess& p, const Pid& to) {
    std::uint64_t ref = ++p.next_monitor_ref_;
    std::string err = p.rt_.scheduler().monitor(p.ctx_.self, to, ref);
    if (!err.empty()) return push_fail(L, err);
    return monitored(L, p, to, ref);
  });
}

// process.monitor's results once the scheduler took the monitor (key: the
// target's PID, or a monitor by name's key).
int Primitives::monitored(lua_State* L, LuaProcess& p, const Pid& key, std::uint64_t ref) {
  p.add_monitor(key, ref);
  lua_pushboolean(L, 1);
  if (!lua_toboolean(L, lua_upvalueindex(1))) return 1;
  p.kernel_.note_watch();
  lua_pushnumber(L, static_cast<lua_Number>(ref));
  return 2;
}

// H.demonitor(pid, ref): drops one monitor.
int Primitives::demonitor(lua_State* L) {
  if (lua_type(L, 1) == LUA_TTABLE) [[unlikely]] return demonitor_named(L);
  return on_target(L, [L](LuaProcess& p, const Pid& to) {
    auto ref = static_cast<std::uint64_t>(luaL_checknumber(L, 2));
    p.forget_monitor(to, ref);
    (void)p.rt_.scheduler().unmonitor(p.ctx_.self, to, ref);
    lua_pushboolean(L, 1);
    return 1;
  });
}

int Primitives::unmonitor(lua_State* L) {
  if (lua_type(L, 1) == LUA_TTABLE) [[unlikely]] return unmonitor_named(L);
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
int Primitives::cancel(lua_State* L) {
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
int Primitives::terminate(lua_State* L) {
  return on_target(L, [L](LuaProcess& p, const Pid& to) {
    const int nret = ok_or_fail(L, p.rt_.scheduler().terminate(to));
    if (to != p.ctx_.self) return nret;
    if (!p.kernel_.can_yield_to_others(L)) return luaL_error(L, "terminated");
    return p.kernel_.yield_to_others(L, nret);
  });
}

int Primitives::register_name(lua_State* L) {
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

int Primitives::lookup(lua_State* L) {
  auto& p = of(L);
  std::string name = check_string(L, 1);
  auto pid = p.rt_.names().lookup(name);
  if (!pid) return push_fail(L, make_error(ErrorKind::NotFound, "no process registered as '" + name + "'"));
  std::string s = pid->to_string();
  lua_pushlstring(L, s.data(), s.size());
  return 1;
}

int Primitives::unregister(lua_State* L) {
  auto& p = of(L);
  return ok_or_fail(L, p.rt_.names().unregister(check_string(L, 1)));
}

// H.load_entry([entry]) -> fn | nil, err: the newest code of an entry
// (default: the process's own), for process.upgrade.
int Primitives::load_entry(lua_State* L) {
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

// __index of the process table: makes the call `name` and keeps it in the
// table. The C primitives, process.receive (bindings/inbox.lua's form over the
// kernel's C receive), and kernel_ext.lua's calls (inbox, events, listen,
// watch, upgrade, ...).
int Primitives::process_field(lua_State* L) {
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
      {"node", node, -1},       {"nodes", nodes, -1},
      {"monitor_node", monitor_node, -1}, {"spawn_on", spawn_on, -1},
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

// log.trace/debug/info/warn/error/critical(fmt, ...[, fields]):
// string.format's rules, or tostring of a lone argument. A table after
// the values the format takes is the entry's fields (log_fields.hpp):
// log.info("saved", { user = id }). A table the format takes stays its
// value ("%s" logs its tostring, as before fields). Upvalues: the spdlog
// level, the name.
int Primitives::log_at(lua_State* L) {
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

void Primitives::push_log_api(lua_State* L) {
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

void LuaProcess::push_process_api(lua_State* L) {
  // Empty at first: each call is made the first time a script names it
  // (Primitives::process_field), so a process pays only for what it uses.
  lua_createtable(L, 0, 4);
  lua_createtable(L, 0, 1);
  lua_pushcfunction(L, Primitives::process_field);
  lua_setfield(L, -2, "__index");
  lua_setmetatable(L, -2);
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

}  // namespace host::lua
