// Socket objects and their methods (socket_object.hpp).
#include "bindings/socket_object.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <vector>

#include <lua.hpp>

#include "bindings/codec.hpp"
#include "host/io/io_services.hpp"
#include "bindings/lua_process.hpp"
#include "bindings/registry_table.hpp"
#include "bindings/socket_ref.hpp"

namespace host::lua {
namespace {

using Class = SocketClass;
constexpr const char* kClassNames[kClasses] = {"tcp{master}",      "tcp{client}",    "tcp{server}",
                                               "udp{unconnected}", "udp{connected}", "tls{connection}"};
constexpr unsigned bit(Class c) { return 1u << c; }
constexpr unsigned kAll = (1u << kClasses) - 1;

// The registry's keys (their addresses): the metatable, and the objects by
// id (weak values) whose class a call may change. (The methods made are
// kept by __index itself, m_index.)
char kMetatableKey, kObjectsKey;


Class class_of(std::string_view name) {
  for (int c = 0; c < kClasses; ++c)
    if (name == kClassNames[c]) return static_cast<Class>(c);
  return kClient;
}

// The socket at index 1; raises, naming the method, where it is none, or
// one whose class has no such method (a method taken from one socket and
// called on another: a TCP method given a UDP socket would find no TCP
// state). A method's function object holds the metatable and its classes
// as its upvalues (m_index makes it so), so the check compares with them,
// not with the registry's.
SocketRef* check(lua_State* L, const char* method) {
  void* p = lua_touserdata(L, 1);
  if (p && lua_getmetatable(L, 1)) {
    const bool ours = lua_rawequal(L, -1, lua_upvalueindex(1));
    lua_pop(L, 1);
    if (ours) {
      auto* s = static_cast<SocketRef*>(p);
      if (static_cast<unsigned>(lua_tonumber(L, lua_upvalueindex(2))) & bit(s->cls)) return s;
      luaL_error(L, "bad argument #1 to '%s' (%s has no %s)", method, kClassNames[s->cls], method);
    }
  }
  luaL_error(L, "bad argument #1 to '%s' (socket expected, got %s)", method, luaL_typename(L, 1));
  return nullptr;
}

// Whether the socket is still this process's to use; else its methods
// answer closed.
bool live(const SocketRef* s) { return !s->closed && !s->moved; }

int answer_closed(lua_State* L) {
  lua_pushnil(L);
  lua_pushliteral(L, "closed");
  return 2;
}

void push_timeout(lua_State* L, const SocketRef* s) {
  const double t = call_timeout(s);
  if (t < 0) lua_pushnil(L);
  else lua_pushnumber(L, t);
}

// UDP's waiting call op(id, the values pushed after it): pushes op and id
// below the n values on top, and yields the task until the I/O thread
// answers.
int call(lua_State* L, const char* op, const SocketRef* s, int n) {
  const int first = lua_gettop(L) - n + 1;
  lua_pushstring(L, op);
  lua_insert(L, first);
  lua_pushnumber(L, s->id);
  lua_insert(L, first + 1);
  return start_waiting_call(L, io::io_cmd::kSocket, first, n + 2);
}

std::string_view check_address(lua_State* L, int idx, const char* method) {
  if (lua_type(L, idx) != LUA_TSTRING)
    luaL_error(L, "bad argument #%d to '%s' (string expected, got %s)", idx - 1, method, luaL_typename(L, idx));
  std::size_t n;
  const char* p = lua_tolstring(L, idx, &n);
  return {p, n};
}

// A byte count from Lua, clamped to [0, 2^50]: math.huge, 1e300 or NaN
// cast to size_t would be undefined; no receive can hold 2^50 bytes, so
// a larger count means "however much" (a process's memory limit stops
// it first).
constexpr double kMaxCount = 1125899906842624.0;  // 2^50
double clamp_count(double n) {
  if (!(n > 0)) return 0;  // (NaN too)
  return n >= kMaxCount ? kMaxCount : std::floor(n);
}

// A UDP receive's size argument (8192 by default), clamped; NaN is refused
// (it would cut the datagram to nothing).
double datagram_size(lua_State* L, const char* method) {
  const double size = luaL_optnumber(L, 2, 8192);
  if (size != size) luaL_error(L, "bad argument #1 to '%s' (size expected, got NaN)", method);
  return clamp_count(size);
}

double check_port(lua_State* L, int idx, const char* method) {
  const double p = lua_tonumber(L, idx);
  if (!lua_isnumber(L, idx) || p < 0 || p > 65535 || p != std::floor(p))
    luaL_error(L, "bad argument #%d to '%s' (port must be a number from 0 to 65535)", idx - 1, method);
  return p;
}

void expect_class_change(lua_State* L, const SocketRef* s);

// ---- the methods every socket has

int m_close(lua_State* L) {
  SocketRef* s = check(L, "close");
  if (!live(s)) {
    s->closed = true;
    lua_pushnumber(L, 1);
    return 1;
  }
  if (s->tcp) return tcp_close(L, s);
  s->closed = true;
  return call(L, "close", s, 0);
}

int m_settimeout(lua_State* L) {
  SocketRef* s = check(L, "settimeout");
  double v = -1;
  if (!lua_isnoneornil(L, 2)) {
    if (lua_type(L, 2) != LUA_TNUMBER) luaL_error(L, "bad argument #1 to 'settimeout' (number expected, got %s)", luaL_typename(L, 2));
    v = lua_tonumber(L, 2);  // negative: for ever, as LuaSocket's
  }
  const char* mode = luaL_optstring(L, 3, "b");
  if (!std::strcmp(mode, "b") || !std::strcmp(mode, "r")) s->block = v;
  else if (!std::strcmp(mode, "t")) s->total = v;
  else luaL_error(L, "bad argument #2 to 'settimeout' (invalid timeout mode)");
  lua_pushnumber(L, 1);
  return 1;
}

// A method that is only a call with its arguments.
template <int Args>
int plain(lua_State* L, const char* op) {
  SocketRef* s = check(L, op);
  if (!live(s)) return answer_closed(L);
  lua_settop(L, 1 + Args);
  return call(L, op, s, Args);
}

// TCP's, on the worker, where the socket is TCP; else UDP's call on the I/O thread.
#define HOST_TCP_FIRST(method, call_expr)      \
  SocketRef* s = check(L, method);            \
  if (s->tcp && live(s)) return call_expr;

int m_getsockname(lua_State* L) {
  HOST_TCP_FIRST("getsockname", tcp_name(L, s, false));
  return plain<0>(L, "sockname");
}
int m_getpeername(lua_State* L) {
  HOST_TCP_FIRST("getpeername", tcp_name(L, s, true));
  return plain<0>(L, "peername");
}
int m_dirty(lua_State* L) {
  SocketRef* s = check(L, "dirty");
  if (!live(s)) {
    lua_pushboolean(L, 0);
    return 1;
  }
  if (s->tcp) return tcp_dirty(L, s);
  return call(L, "dirty", s, 0);
}
int m_getstats(lua_State* L) {
  HOST_TCP_FIRST("getstats", tcp_getstats(L, s));
  return plain<0>(L, "getstats");
}
int m_setstats(lua_State* L) {
  HOST_TCP_FIRST("setstats", tcp_setstats(L, s));
  return plain<3>(L, "setstats");
}
int m_getfd(lua_State* L) {
  SocketRef* s = check(L, "getfd");
  if (!live(s)) {
    lua_pushnumber(L, -1);
    return 1;
  }
  if (s->tcp) return tcp_getfd(L, s);
  return call(L, "getfd", s, 0);
}
int m_setfd(lua_State* L) { return luaL_error(L, "not supported: setfd"); }

int option(lua_State* L, const char* op) {
  SocketRef* s = check(L, op);
  luaL_checkstring(L, 2);
  if (!live(s)) return answer_closed(L);
  lua_settop(L, 3);
  if (s->tcp) return tcp_option(L, s, !std::strcmp(op, "setoption"));
  return call(L, op, s, 2);
}
int m_setoption(lua_State* L) { return option(L, "setoption"); }
int m_getoption(lua_State* L) { return option(L, "getoption"); }

// ---- TCP

// Masters' bind, and UDP's setsockname (op: the name the caller used, for
// its error).
int bind_as(lua_State* L, const char* op) {
  SocketRef* s = check(L, op);
  const bool udp = s->cls == kUnconnected || s->cls == kConnected;
  const char* name = udp ? "setsockname" : "bind";
  check_address(L, 2, name);
  const double port = check_port(L, 3, name);
  if (!live(s)) return answer_closed(L);
  if (!udp) {
    lua_settop(L, 3);
    return tcp_bind(L, s);
  }
  lua_settop(L, 2);
  lua_pushnumber(L, port);
  return call(L, "bind", s, 2);
}

int m_listen(lua_State* L) {
  SocketRef* s = check(L, "listen");
  luaL_optnumber(L, 2, 32);  // a bad backlog raises, closed or not
  if (!live(s)) return answer_closed(L);
  return tcp_listen(L, s);
}

// Masters' connect, and UDP's setpeername.
int connect_as(lua_State* L, const char* op) {
  SocketRef* s = check(L, op);
  const bool udp = s->cls == kUnconnected || s->cls == kConnected;
  const char* name = udp ? "setpeername" : "connect";
  const std::string_view host = check_address(L, 2, name);
  const double port = udp && host == "*" ? 0 : check_port(L, 3, name);
  if (!live(s)) return answer_closed(L);
  if (!udp) {
    lua_settop(L, 3);
    return tcp_connect(L, s);
  }
  expect_class_change(L, s);
  lua_settop(L, 2);
  lua_pushnumber(L, port);
  push_timeout(L, s);
  return call(L, "connect", s, 3);
}

// UDP's names for bind and connect: functions of their own, as their
// classes differ from the masters' (m_index tells methods by function).
int m_bind(lua_State* L) { return bind_as(L, "bind"); }
int m_connect(lua_State* L) { return connect_as(L, "connect"); }
int m_setsockname(lua_State* L) { return bind_as(L, "setsockname"); }
int m_setpeername(lua_State* L) { return connect_as(L, "setpeername"); }

int m_accept(lua_State* L) {
  SocketRef* s = check(L, "accept");
  if (!live(s)) return answer_closed(L);
  return tcp_accept(L, s);
}

// send(data[, i[, j]]) on TCP; send(data) on connected UDP. (The call's
// arguments go on top of the stack; call() takes the top n.)
int m_send(lua_State* L) {
  SocketRef* s = check(L, "send");
  if (lua_type(L, 2) != LUA_TSTRING && lua_type(L, 2) != LUA_TNUMBER)
    luaL_error(L, "bad argument #1 to 'send' (string expected, got %s)", luaL_typename(L, 2));
  std::size_t len;
  const char* data = lua_tolstring(L, 2, &len);
  if (s->cls == kConnected) {
    if (!live(s)) return answer_closed(L);
    lua_pushvalue(L, 2);
    return call(L, "send", s, 1);
  }
  const auto n = static_cast<long long>(len);
  long long i = static_cast<long long>(luaL_optnumber(L, 3, 1));
  long long j = static_cast<long long>(luaL_optnumber(L, 4, -1));
  if (i < 0) i = n + i + 1;
  if (i < 1) i = 1;
  if (j < 0) j = n + j + 1;
  if (j > n) j = n;
  if (!live(s)) {
    answer_closed(L);
    lua_pushnumber(L, static_cast<double>(i - 1));
    return 3;
  }
  if (j < i) {
    lua_pushnumber(L, static_cast<double>(i - 1));
    return 1;
  }
  return tcp_send(L, s, data, static_cast<std::size_t>(i), static_cast<std::size_t>(j));
}

// receive([pattern[, prefix]]) on TCP; receive([size]) on UDP.
int m_receive(lua_State* L) {
  SocketRef* s = check(L, "receive");
  if (s->cls == kUnconnected || s->cls == kConnected) {
    const double size = datagram_size(L, "receive");
    if (!live(s)) return answer_closed(L);
    lua_pushnumber(L, size);
    push_timeout(L, s);
    return call(L, "receive", s, 2);
  }
  double count = -1;
  const char* kind = "l";
  if (lua_type(L, 2) == LUA_TNUMBER) {
    count = lua_tonumber(L, 2);
    if (!(count >= 0)) luaL_error(L, "bad argument #1 to 'receive' (invalid receive pattern)");
    count = clamp_count(count);
  } else if (!lua_isnoneornil(L, 2)) {
    const char* p = lua_tostring(L, 2);
    if (p && (!std::strcmp(p, "*l") || !std::strcmp(p, "l"))) kind = "l";
    else if (p && (!std::strcmp(p, "*a") || !std::strcmp(p, "a"))) kind = "a";
    else luaL_error(L, "bad argument #1 to 'receive' (invalid receive pattern)");
  }
  const bool prefixed = !lua_isnoneornil(L, 3);
  if (prefixed) luaL_checkstring(L, 3);
  if (count == 0) {  // nothing to wait for
    if (prefixed) lua_pushvalue(L, 3);
    else lua_pushliteral(L, "");
    return 1;
  }
  if (!live(s)) {
    answer_closed(L);
    if (prefixed) lua_pushvalue(L, 3);
    else lua_pushliteral(L, "");
    return 3;
  }
  return tcp_receive(L, s, count > 0 ? 'n' : kind[0], count > 0 ? static_cast<std::size_t>(count) : 0, prefixed ? 3 : 0);
}

// receiveany(max): what has come, at least a byte and at most max,
// waiting only while nothing has (OpenResty's cosocket call; LuaSocket
// has none).
int m_receiveany(lua_State* L) {
  SocketRef* s = check(L, "receiveany");
  const double max = luaL_checknumber(L, 2);
  if (!(max >= 1)) luaL_error(L, "bad argument #1 to 'receiveany' (positive number expected)");
  if (!live(s)) return answer_closed(L);
  // Clamped: math.huge asks for what has come, however much.
  return tcp_receive(L, s, 'y', static_cast<std::size_t>(clamp_count(max)), 0);
}

int m_shutdown(lua_State* L) {
  SocketRef* s = check(L, "shutdown");
  const char* how = luaL_optstring(L, 2, "both");
  if (std::strcmp(how, "both") && std::strcmp(how, "send") && std::strcmp(how, "receive"))
    luaL_error(L, "bad argument #1 to 'shutdown' (invalid shutdown method)");
  if (!live(s)) return answer_closed(L);
  return tcp_shutdown(L, s, how);
}

// ---- UDP

int m_receivefrom(lua_State* L) {
  SocketRef* s = check(L, "receivefrom");
  const double size = datagram_size(L, "receivefrom");
  if (!live(s)) return answer_closed(L);
  lua_pushnumber(L, size);
  push_timeout(L, s);
  return call(L, "receivefrom", s, 2);
}

int m_sendto(lua_State* L) {
  SocketRef* s = check(L, "sendto");
  if (lua_type(L, 2) != LUA_TSTRING) luaL_error(L, "bad argument #1 to 'sendto' (string expected, got %s)", luaL_typename(L, 2));
  check_address(L, 3, "sendto");
  const double port = check_port(L, 4, "sendto");
  if (!live(s)) return answer_closed(L);
  lua_pushvalue(L, 2);
  lua_pushvalue(L, 3);
  lua_pushnumber(L, port);
  return call(L, "sendto", s, 3);
}

// ---- TLS (stdlib/ssl.lua: LuaSec's API)

// Raises, naming the argument, where idx holds neither a string nor nil.
void check_optstring(lua_State* L, int idx, const char* what, const char* method) {
  if (!lua_isnoneornil(L, idx) && lua_type(L, idx) != LUA_TSTRING)
    luaL_error(L, "bad argument to '%s' (%s: string expected, got %s)", method, what, luaL_typename(L, idx));
}

// sock:__tlswrap(mode, protocol, verify, cafile, certificate, key, ca_pem,
// certificate_pem, key_pem): ssl.wrap's entry (stdlib/ssl.lua checks the
// parameters and reads the files first). The socket becomes a TLS
// connection (class tls{connection}) once its context is made
// (socket_tcp.cpp); nil, err where it cannot (a bad key).
int m_tlswrap(lua_State* L) {
  SocketRef* s = check(L, "wrap");
  const char* mode = luaL_checkstring(L, 2);
  if (std::strcmp(mode, "client") && std::strcmp(mode, "server"))
    luaL_error(L, "bad argument to 'wrap' (mode must be 'client' or 'server')");
  luaL_checkstring(L, 3);
  check_optstring(L, 5, "cafile", "wrap");
  check_optstring(L, 6, "certificate", "wrap");
  check_optstring(L, 7, "key", "wrap");
  check_optstring(L, 8, "cafile's contents", "wrap");
  check_optstring(L, 9, "certificate's contents", "wrap");
  check_optstring(L, 10, "key's contents", "wrap");
  if (!live(s)) return answer_closed(L);
  lua_settop(L, 10);
  return tcp_tlswrap(L, s);
}

// conn:dohandshake(): true, or nil and why ("certificate verify failed:
// ...", "closed", "timeout").
int m_dohandshake(lua_State* L) {
  SocketRef* s = check(L, "dohandshake");
  if (!live(s)) return answer_closed(L);
  return tcp_handshake(L, s);
}

// conn:sni(name): the host name a client sends and checks (before the
// handshake).
int m_sni(lua_State* L) {
  SocketRef* s = check(L, "sni");
  if (lua_type(L, 2) == LUA_TTABLE) return luaL_error(L, "not supported: sni with a table (a server's names)");
  if (lua_type(L, 2) != LUA_TSTRING)
    luaL_error(L, "bad argument #1 to 'sni' (string expected, got %s)", luaL_typename(L, 2));
  if (!live(s)) return answer_closed(L);
  lua_settop(L, 2);
  return tcp_sni(L, s);
}

// conn:info([field]): { protocol =, cipher = } once the handshake is
// done, or that field's value.
int m_info(lua_State* L) {
  SocketRef* s = check(L, "info");
  check_optstring(L, 2, "field", "info");
  if (!live(s)) return 0;
  lua_settop(L, 2);
  return tcp_info(L, s);
}

int m_tls_unsupported(lua_State* L) {
  lua_Debug ar;
  const char* name = "?";
  if (lua_getstack(L, 0, &ar) && lua_getinfo(L, "n", &ar) && ar.name) name = ar.name;
  return luaL_error(L, "not supported: %s", name);
}

// ---- the object

struct Method {
  const char* name;
  lua_CFunction fn;
  unsigned classes;
};
// The calls of every message first: m_index's check of a cached method
// stops at its entry.
constexpr Method kMethods[] = {
    {"receive", m_receive, bit(kClient) | bit(kUnconnected) | bit(kConnected) | bit(kTls)},
    {"send", m_send, bit(kClient) | bit(kConnected) | bit(kTls)},
    {"receiveany", m_receiveany, bit(kClient) | bit(kTls)},
    {"close", m_close, kAll},
    {"settimeout", m_settimeout, kAll},
    {"getsockname", m_getsockname, kAll},
    {"setoption", m_setoption, kAll},
    {"getoption", m_getoption, kAll},
    {"dirty", m_dirty, kAll},
    {"getstats", m_getstats, kAll},
    {"setstats", m_setstats, kAll},
    {"getfd", m_getfd, kAll},
    {"setfd", m_setfd, kAll},
    {"bind", m_bind, bit(kMaster)},
    {"listen", m_listen, bit(kMaster)},
    {"connect", m_connect, bit(kMaster)},
    {"accept", m_accept, bit(kServer)},
    {"getpeername", m_getpeername, bit(kClient) | bit(kConnected) | bit(kTls)},
    {"shutdown", m_shutdown, bit(kClient)},
    {"setsockname", m_setsockname, bit(kUnconnected)},
    {"setpeername", m_setpeername, bit(kUnconnected) | bit(kConnected)},
    {"receivefrom", m_receivefrom, bit(kUnconnected)},
    {"sendto", m_sendto, bit(kUnconnected)},
    {"__tlswrap", m_tlswrap, bit(kClient)},
    {"dohandshake", m_dohandshake, bit(kTls)},
    {"sni", m_sni, bit(kTls)},
    {"info", m_info, bit(kTls)},
    {"getpeercertificate", m_tls_unsupported, bit(kTls)},
    {"getpeerchain", m_tls_unsupported, bit(kTls)},
    {"getpeerverification", m_tls_unsupported, bit(kTls)},
    {"getpeerfinished", m_tls_unsupported, bit(kTls)},
    {"getfinished", m_tls_unsupported, bit(kTls)},
    {"getalpn", m_tls_unsupported, bit(kTls)},
    {"want", m_tls_unsupported, bit(kTls)},
};

// m_index knows a cached method's classes by its function: names that share
// one must share their classes too.
constexpr bool one_class_set_a_function() {
  for (const Method& a : kMethods)
    for (const Method& b : kMethods)
      if (a.fn == b.fn && a.classes != b.classes) return false;
  return true;
}
static_assert(one_class_set_a_function(), "a function two methods share must have one set of classes");

// __index: the method, where the socket's class has it (as LuaSocket's
// classes: a client has no accept). Upvalues: the methods' function objects
// by name, and the metatable (each method's first upvalue, its classes the
// second, for check). The function objects are made as a process first
// names each: a connection's process that only receives, sends and closes
// makes three, not all of them. A method named again is found by name in
// that table and its classes by its function, so the names are compared as
// C strings only at a method's first use (a socket's class may change: a
// master connects).
int m_index(lua_State* L) {
  auto* s = static_cast<SocketRef*>(lua_touserdata(L, 1));
  lua_pushvalue(L, 2);
  lua_rawget(L, lua_upvalueindex(1));
  if (const lua_CFunction fn = lua_tocfunction(L, -1)) {
    for (const Method& each : kMethods)
      if (each.fn == fn) return each.classes & bit(s->cls) ? 1 : 0;
  }
  lua_pop(L, 1);
  // Strings only, and whole: a name with a NUL in it ("close\0x") is no
  // method (nor cached, which would grow the table with each such key).
  if (lua_type(L, 2) != LUA_TSTRING) return 0;
  std::size_t len = 0;
  const char* name = lua_tolstring(L, 2, &len);
  if (std::strlen(name) != len) return 0;
  const Method* m = nullptr;
  for (const Method& each : kMethods) {
    if (!std::strcmp(each.name, name)) {
      m = &each;
      break;
    }
  }
  if (!m || !(m->classes & bit(s->cls))) return 0;
  lua_pushvalue(L, lua_upvalueindex(2));
  lua_pushnumber(L, m->classes);
  lua_pushcclosure(L, m->fn, 2);
  lua_pushvalue(L, 2);
  lua_pushvalue(L, -2);
  lua_rawset(L, lua_upvalueindex(1));
  return 1;
}

// A socket object the process dropped without closing: closed now, as
// LuaSocket's are when collected (not at the process's end only).
void finalize_socket(lua_State* L, void* object) {
  auto* s = static_cast<SocketRef*>(object);
  tcp_free(L, s);
  if (live(s) && s->id != 0) drop_socket(L, static_cast<std::uint64_t>(s->id));
}

int m_gc(lua_State* L) {
  auto* s = static_cast<SocketRef*>(lua_touserdata(L, 1));
  if (s) run_finalizer(L, &s->fin);
  return 0;
}

int m_tostring(lua_State* L) {
  auto* s = static_cast<SocketRef*>(lua_touserdata(L, 1));
  lua_pushfstring(L, "%s: %p", kClassNames[s->cls], static_cast<const void*>(s));
  return 1;
}

// The metatable (push_registry_table's make), made at the process's first socket.
void make_metatable(lua_State* L) {
  lua_createtable(L, 0, 4);
  lua_createtable(L, 0, 4);  // the methods made, by name
  lua_pushvalue(L, -2);
  lua_pushcclosure(L, m_index, 2);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, m_tostring);
  lua_setfield(L, -2, "__tostring");
  lua_pushcfunction(L, m_gc);
  lua_setfield(L, -2, "__gc");
  lua_pushliteral(L, "socket");
  lua_setfield(L, -2, "__metatable");
}

void push_new(lua_State* L, double id, Class cls) {
  SocketRef* s = push_socket(L, cls);
  s->id = id;
}

// Records the socket at index 1 by its id, for the class change its call
// (connect, listen, setpeername) answers with: made at a process's first
// such call, so a process that only holds connections has no table.
void expect_class_change(lua_State* L, const SocketRef* s) {
  push_registry_table(L, &kObjectsKey, [](lua_State* S) {
    lua_createtable(S, 0, 1);
    lua_createtable(S, 0, 1);
    lua_pushliteral(S, "v");
    lua_setfield(S, -2, "__mode");
    lua_setmetatable(S, -2);
  });
  lua_pushnumber(L, s->id);
  lua_pushvalue(L, 1);
  lua_rawset(L, -3);
  lua_pop(L, 1);
}

// The moves of the send or spawn being encoded (socket_moves_begin).
struct MoveRecord {
  SocketRef* s;
  std::uint64_t id;
};
thread_local std::vector<MoveRecord> t_moves;

}  // namespace

void socket_moves_begin() { t_moves.clear(); }

void socket_moves_undo(lua_State* L) {
  for (const MoveRecord& m : t_moves) {
    SocketRef* s = m.s;
    if (!s->moved || m.id == 0) continue;
    if (s->tcp) {
      if (!tcp_take_back(L, s, m.id)) continue;
    } else {
      claim_socket(L, m.id);
    }
    s->moved = false;
  }
  t_moves.clear();
}

SocketRef* push_socket(lua_State* L, SocketClass cls) {
  auto* s = static_cast<SocketRef*>(new_userdata_with(L, sizeof(SocketRef), &kMetatableKey, make_metatable));
  *s = SocketRef{0, -1, -1, nullptr, cls, false, false};
  track_finalizer(L, &s->fin, finalize_socket, s);  // its __gc closes it
  return s;
}

SocketRef* to_socket(lua_State* L, int idx) { return static_cast<SocketRef*>(to_userdata(L, idx, &kMetatableKey)); }

bool encode_socket(lua_State* L, int idx, std::string& out) {
  SocketRef* s = to_socket(L, idx);
  if (!s) return false;
  // A socket closed here moves as one the receiver finds closed. TCP's
  // travel as themselves ('~' before the class: an id of TcpTransit's).
  double id = live(s) ? s->id : 0;
  std::string cls = kClassNames[s->cls];
  if (s->tcp) {
    id = live(s) ? static_cast<double>(tcp_give(L, s)) : 0;
    cls.insert(0, "~");
  } else if (id != 0) {
    give_socket(L, static_cast<std::uint64_t>(id));
  }
  s->moved = true;
  if (id != 0) t_moves.push_back(MoveRecord{s, static_cast<std::uint64_t>(id)});
  const std::size_t n = cls.size();
  char buf[24];
  out.push_back(static_cast<char>(kMoved));
  out.append(buf, static_cast<std::size_t>(write_varint(buf, static_cast<std::uint64_t>(id)) - buf));
  out.append(buf, static_cast<std::size_t>(write_varint(buf, n) - buf));
  out.append(cls.data(), n);
  return true;
}

bool decode_socket(lua_State* L, std::uint64_t id, std::string_view cls) {
  if (!lua_checkstack(L, 8) || cls.empty()) return false;
  if (cls[0] == '=') {  // a class change of a socket this process holds
    lua_pushlightuserdata(L, &kObjectsKey);  // none: no socket here expects a change
    lua_rawget(L, LUA_REGISTRYINDEX);
    if (lua_istable(L, -1)) {
      lua_pushnumber(L, static_cast<lua_Number>(id));
      lua_rawget(L, -2);
      if (auto* s = static_cast<SocketRef*>(lua_touserdata(L, -1))) s->cls = class_of(cls.substr(1));
      lua_pop(L, 1);
    }
    lua_pop(L, 1);
    lua_pushnumber(L, 1);
    return true;
  }
  if (cls[0] == '~') {  // a TCP socket: the object it was in another process
    tcp_claim(L, id, class_of(cls.substr(1)));
    return true;
  }
  if (cls[0] == '+') cls.remove_prefix(1);  // made for this process: already its own
  else if (id != 0) claim_socket(L, id);
  push_new(L, static_cast<double>(id), class_of(cls));
  return true;
}

}  // namespace host::lua
