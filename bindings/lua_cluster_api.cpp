// The process API's cluster calls (SPEC section 12): process.node,
// process.nodes, and a destination { name, node } for process.send and
// the calls that take a process. Threads: the one running the process.
// Without --cluster the scheduler has no RemoteNodes and each answers as
// the SPEC says a lone host does (nil, {}, not_found).
#include <algorithm>
#include <mutex>
#include <optional>

#include <lua.hpp>

#include "bindings/codec.hpp"
#include "bindings/lua_process_internal.hpp"
#include "bindings/socket_object.hpp"
#include "host/cluster/buffer_pool.hpp"
#include "host/cluster/wire.hpp"
#include "host/commands.hpp"
#include "host/config.hpp"
#include "host/error.hpp"

namespace host::lua {

namespace {

// Field i (1 or 2) of the table at idx, if it is a string.
bool string_at(lua_State* L, int idx, int i, std::string& out) {
  lua_rawgeti(L, idx, i);
  const bool ok = lua_type(L, -1) == LUA_TSTRING;
  if (ok) {
    std::size_t n;
    const char* s = lua_tolstring(L, -1, &n);
    out.assign(s, n);
  }
  lua_pop(L, 1);
  return ok;
}

}  // namespace

// A destination that is not a string: { name, node }, a name registered on
// a node (this one or another). Anything else is the argument error a
// string's check raises.
[[gnu::noinline, gnu::cold]] bool Primitives::resolve_not_string(lua_State* L, int idx, Pid& out, int& nret,
                                                                bool for_send) {
  LuaProcess& p = of(L);
  std::string name, node;
  if (lua_type(L, idx) != LUA_TTABLE) raise_not_string(L, idx);
  if (!string_at(L, idx, 1, name) || !string_at(L, idx, 2, node)) {
    nret = push_fail(L, make_error(ErrorKind::Invalid, "a destination table is { name, node }: two strings"));
    return false;
  }
  RemoteNodes* remote = p.rt_.scheduler().remote();
  if (remote && node == remote->node_name()) {  // this node: a local name
    if (auto pid = p.rt_.names().lookup(name)) {
      out = *pid;
      return true;
    }
    nret = push_fail(L, make_error(ErrorKind::NotFound, "no process registered as '" + name + "'"));
    return false;
  }
  if (!remote) {
    nret = push_fail(L, make_error(ErrorKind::NotFound, "node " + node + " is not connected (no --cluster)"));
    return false;
  }
  if (!for_send) {
    nret = push_fail(L, make_error(ErrorKind::Invalid, "{ name, node } of another node is taken by process.send "
                                                       "and process.monitor only; use the process's PID"));
    return false;
  }
  nret = send_to_node(L, p, name, node);
  return false;
}

// process.monitor({ name, node }) (and process.watch's): of this node (or
// without a cluster), as process.monitor(name); of another, a monitor of
// whatever that node finds registered as name when the request arrives
// (RemoteNodes::monitor_named), kept under the node's key until its exit.
int Primitives::monitor_named(lua_State* L) {
  auto& p = of(L);
  std::string name, node;
  if (!string_at(L, 1, 1, name) || !string_at(L, 1, 2, node) || name.empty())
    return push_fail(L, make_error(ErrorKind::Invalid,
                                   "a destination table is { name, node }: two strings, the name not empty"));
  const std::uint64_t ref = ++p.next_monitor_ref_;
  RemoteNodes* remote = p.rt_.scheduler().remote();
  if (!remote || node == remote->node_name()) {
    Pid to;
    int nret;
    if (!resolve_not_string(L, 1, to, nret, /*for_send=*/false)) return nret;
    if (std::string err = p.rt_.scheduler().monitor(p.ctx_.self, to, ref); !err.empty()) return push_fail(L, err);
    return monitored(L, p, to, ref);
  }
  return monitored(L, p, remote->monitor_named(p.ctx_.self, node, name, ref), ref);
}

// process.unmonitor({ name, node }): of this node, as unmonitor(name); of
// another, refused: which monitors it would end is not plain (a name may
// have named several processes), and process.watch's channel ends one.
int Primitives::unmonitor_named(lua_State* L) {
  auto& p = of(L);
  RemoteNodes* remote = p.rt_.scheduler().remote();
  std::string node;
  if (remote && string_at(L, 1, 2, node) && node != remote->node_name())
    return push_fail(L, make_error(ErrorKind::Invalid, "unmonitor takes a PID or a name of this node; a monitor by "
                                                       "{ name, node } of another node ends with its exit or, made by "
                                                       "process.watch, with process.unwatch"));
  Pid to;
  int nret;
  if (!resolve_not_string(L, 1, to, nret, /*for_send=*/false)) return nret;
  push_pid(L, to);
  lua_replace(L, 1);
  return unmonitor(L);
}

// H.demonitor({ name, node }, ref) (process.unwatch): the monitor is found
// by its ref, unique in this process, whatever its key.
int Primitives::demonitor_named(lua_State* L) {
  auto& p = of(L);
  RemoteNodes* remote = p.rt_.scheduler().remote();
  std::string node;
  if (remote && string_at(L, 1, 2, node) && node != remote->node_name()) {
    const auto ref = static_cast<std::uint64_t>(luaL_checknumber(L, 2));
    std::optional<Pid> key;
    {
      std::lock_guard lock(p.monitors_lock());
      if (p.monitors_)
        for (auto it = p.monitors_->begin(); it != p.monitors_->end(); ++it)
          if (!it->first.valid() && std::erase(it->second, ref) != 0) {
            key = it->first;
            if (it->second.empty()) p.monitors_->erase(it);
            break;
          }
    }
    if (key) (void)p.rt_.scheduler().unmonitor(p.ctx_.self, *key, ref);
    lua_pushboolean(L, 1);
    return 1;
  }
  Pid to;
  int nret;
  if (!resolve_not_string(L, 1, to, nret, /*for_send=*/false)) return nret;
  push_pid(L, to);
  lua_replace(L, 1);
  return demonitor(L);
}

// process.link and unlink of a table: a link binds two processes' fates,
// so it takes a PID, never a name that may come to name another process.
int Primitives::refuse_named(lua_State* L, const char* fname) {
  return push_fail(L, make_error(ErrorKind::Invalid, std::string("process.") + fname +
                                                         " takes a PID (or a name of this node), not a "
                                                         "{ name, node } table"));
}

// process.send({ name, node }, topic, value) to another node.
int Primitives::send_to_node(lua_State* L, LuaProcess& p, std::string_view name, std::string_view node) {
  return send_remote(L, p, Pid{}, name, node);
}

int Primitives::send_remote(lua_State* L, LuaProcess& p, const Pid& to, std::string_view name, std::string_view node) {
  std::size_t tn;
  const char* topic = check_string(L, 2, &tn);
  RemoteNodes* remote = p.rt_.scheduler().remote();
  std::string message = remote->begin_message(to, name, std::string_view(topic, tn), p.ctx_.self);
  // A large string goes into a kept buffer with room for it (no fresh
  // memory per message, no growth while encoding: buffer_pool.hpp).
  if (lua_type(L, 3) == LUA_TSTRING) {
    const std::size_t room = message.size() + lua_objlen(L, 3) + 16;
    if (room >= cluster::kPooledMinBytes) message = cluster::take_buffer(message, room);
  }
  // A nil payload (or none) travels as no bytes, as a local send's does.
  if (!lua_isnoneornil(L, 3)) {
    socket_moves_begin();
    std::string err = encode_value(L, 3, message);
    socket_moves_undo(L);  // a socket never leaves this host
    if (!err.empty()) return push_fail(L, err);
  }
  std::size_t backlog = 0;
  const int nret = ok_or_fail(L, remote->send_begun(to, node, p.ctx_.self, std::move(message), &backlog));
  // The session's window is full: let others run before sending more.
  if (backlog >= config::kSendBacklogYield && p.kernel_.can_yield_to_others(L)) return p.kernel_.yield_to_others(L, nret);
  return nret;
}

// A send that found no local process: to another node when `to` is one
// of its PIDs (its payload was not moved: the scheduler refused it), else
// the scheduler's not_found.
[[gnu::noinline, gnu::cold]] int Primitives::send_elsewhere(lua_State* L, LuaProcess& p, const Pid& to,
                                                           std::string_view topic, std::string_view payload,
                                                           const std::string& err) {
  Scheduler& s = p.rt_.scheduler();
  RemoteNodes* remote = s.remote();
  if (!remote || to.node == s.node()) return push_fail(L, err);
  std::size_t backlog = 0;
  const int nret = ok_or_fail(L, remote->send(to, topic, payload, p.ctx_.self, &backlog));
  // The session's window is full: let others run before sending more.
  if (backlog >= config::kSendBacklogYield && p.kernel_.can_yield_to_others(L)) return p.kernel_.yield_to_others(L, nret);
  return nret;
}

// process.node(): the --node name, or nil without a cluster.
int Primitives::node(lua_State* L) {
  if (RemoteNodes* remote = of(L).rt_.scheduler().remote()) {
    const std::string& name = remote->node_name();
    lua_pushlstring(L, name.data(), name.size());
  } else {
    lua_pushnil(L);
  }
  return 1;
}

// process.nodes(): the other connected nodes' names ({} without a cluster).
int Primitives::nodes(lua_State* L) {
  std::vector<std::string> names;
  if (RemoteNodes* remote = of(L).rt_.scheduler().remote()) names = remote->node_names();
  lua_createtable(L, static_cast<int>(names.size()), 0);
  for (std::size_t i = 0; i < names.size(); ++i) {
    lua_pushlstring(L, names[i].data(), names[i].size());
    lua_rawseti(L, -2, static_cast<int>(i + 1));
  }
  return 1;
}

// process.spawn_on(node, entry, ...) -> pid | nil, err: as process.spawn,
// on the node named. A waiting call (cmd::kSpawnOn) for another node: its
// node answers with the new PID, or the error (a missing module, say), or
// the node goes down first (not_found). Not connected: not_found at once.
int Primitives::spawn_on(lua_State* L) {
  auto& p = of(L);
  std::size_t nn;
  const char* node_chars = check_string(L, 1, &nn);
  const std::string node(node_chars, nn);
  std::string entry = check_string(L, 2);
  const int nargs = lua_gettop(L) - 2;
  std::string args;
  if (std::string err = encode_values(L, 3, nargs, args, "arg"); !err.empty()) return push_fail(L, err);
  RemoteNodes* remote = p.rt_.scheduler().remote();
  if (remote && node == remote->node_name()) {  // this node: a plain spawn
    SpawnOptions opts;
    opts.parent = p.ctx_.self;
    SpawnResult r = p.rt_.spawn(entry, std::move(args), opts);
    if (!r) return push_fail(L, r.error);
    push_pid(L, r.pid);
    return 1;
  }
  bool connected = false;
  if (remote)
    for (const std::string& n : remote->node_names()) connected |= n == node;
  if (!connected)
    return push_fail(L, make_error(ErrorKind::NotFound, "node " + node + " is not connected" + (remote ? "" : " (no --cluster)")));
  p.kernel_.check_blockable(L);
  const std::uint64_t tag = TaskKernel::kCallTagMark | ++p.c_timers_;
  Yield& y = p.step_out_->add_yield(cmd::kSpawnOn, tag);
  y.bytes = cluster::encode_spawn_request({node, entry, args});
  return p.kernel_.block_in_call(L, tag);
}

// process.monitor_node(name) -> true: { kind = "nodedown", node = name }
// when the node goes away (at once when it is not connected), { kind =
// "nodeup", node = name } when it connects, in process.events().
int Primitives::monitor_node(lua_State* L) {
  auto& p = of(L);
  std::size_t n;
  const char* name = check_string(L, 1, &n);
  if (n == 0) return push_fail(L, make_error(ErrorKind::Invalid, "monitor_node needs a node's name"));
  if (RemoteNodes* remote = p.rt_.scheduler().remote()) {
    remote->monitor_node(p.ctx_.self, std::string_view(name, n));
  } else {
    // No cluster: no node is connected, so it is down now, and stays so.
    Event ev;
    ev.kind = EventKind::Node;
    ev.payload.assign(name, n);
    (void)p.rt_.scheduler().deliver(p.ctx_.self, std::move(ev));
  }
  lua_pushboolean(L, 1);
  return 1;
}

}  // namespace host::lua
