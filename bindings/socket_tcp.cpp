// TCP sockets' methods on the worker (socket_ref.hpp; docs/ARCHITECTURE.md,
// "Sockets on the workers"). A method makes its system calls itself, on
// the descriptor the object owns; a receive the buffer answers makes
// none. Only a call that would block waits: io_wait with the netpoller's
// tag (and a sleep of the same tag for its timeout), and the step that
// hears the descriptor is ready calls the method's attempt again
// (resume_op) before the task sees anything: the task wakes with the
// call's results, as LuaSocket returns them.
#include <sys/socket.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include <lua.hpp>

#include "bindings/codec.hpp"
#include "bindings/lua_process.hpp"
#include "bindings/socket_ref.hpp"
#include "host/io/io_services.hpp"
#include "host/io/tcp_socket.hpp"

namespace host::lua {

using Io = io::ByteStream::Io;

// What a call that waits keeps until its descriptor is ready. Its small
// fields first, together, so that it packs into 96 bytes.
struct Pending {
  enum Op : std::uint8_t { kNone, kReceive, kSend, kAccept, kConnect, kHandshake, kResolve };
  Op op = kNone;
  char kind = 'l';  // receive: the pattern
  int data_ref = LUA_NOREF;  // send: what holds the data
  std::uint64_t tag = 0;
  double deadline = -1;  // monotonic seconds; < 0: none
  // receive: the count, and the result so far (the prefix)
  std::size_t n = 0;
  std::string got;
  // send: the data, how much went, LuaSocket's i - 1
  const char* data = nullptr;
  std::size_t len = 0, done = 0;
  double base = 0;
};

// A connect's, or a bind's by name: the port, the addresses left to try.
// Made by the call, gone when it ends: most TCP sockets never connect (a
// server's connections), and inline in both Pending records these fields
// put every socket's TcpState in malloc's 320-byte class (224 now: an idle
// echo connection's native side, BENCHMARKS.md).
struct Connecting {
  bool binding = false;
  int port = 0;
  std::vector<io::SocketAddress> addrs;
};

struct TcpState {
  std::unique_ptr<io::TcpSocket> sock;
  SocketRef* ref = nullptr;
  Pending in, out;  // a receive, accept or handshake; a send or connect
  std::unique_ptr<Connecting> connecting;  // while out is a connect or a resolve
};
// One per TCP socket, from malloc: within mimalloc's 224-byte class.
static_assert(sizeof(TcpState) <= 224, "TcpState outgrew malloc's 224-byte class");

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double deadline_after(double timeout) { return timeout < 0 ? -1 : now() + std::min(timeout, 3.2e7); }

int push_fail(lua_State* L, std::string_view err) {
  lua_pushnil(L);
  lua_pushlstring(L, err.data(), err.size());
  return 2;
}

void release(lua_State* L, TcpState* t, Pending& p) {
  if (p.data_ref != LUA_NOREF) luaL_unref(L, LUA_REGISTRYINDEX, p.data_ref);
  if (&p == &t->out) t->connecting.reset();
  p = Pending{};
}

bool usable(const TcpState* t) { return t && t->sock && !t->sock->closed(); }

io::NetPoller::Dir dir_of(const TcpState* t, Pending::Op op) {
  if (op == Pending::kConnect || op == Pending::kSend) {
    if (op == Pending::kSend && t->sock->stream() && t->sock->stream()->wants() == io::ByteStream::Want::kRead)
      return io::NetPoller::kRead;  // TLS wants the peer's bytes first
    return io::NetPoller::kWrite;
  }
  if (t->sock->stream() && t->sock->stream()->wants() == io::ByteStream::Want::kWrite) return io::NetPoller::kWrite;
  return io::NetPoller::kRead;
}

// ---- the attempts: push the results and return their count, or -1
// where the call must wait (readiness in dir_of).

int attempt_receive(lua_State* L, TcpState* t, Pending& p) {
  io::ByteStream& st = *t->sock->stream();
  // The result must fit too: what is buffered for one receive stays under
  // half of what the process may still hold.
  const std::size_t room = memory_room(L) / 2;
  std::string& out = p.got;
  const std::size_t had = out.size();
  std::string_view got;  // a count's or what came: where the stream holds it
  Io r;
  switch (p.kind) {
    case 'l': r = st.line(out, room); break;
    case 'n': r = st.exactly(&got, p.n, room); break;
    case 'a': r = st.all(out, room); break;
    default: r = st.any(&got, p.n); break;
  }
  if (r == Io::kAgain) return -1;
  if (r == Io::kDone) {
    if (p.kind == 'n' || p.kind == 'y') {
      // The string is made from the stream's bytes themselves (no copy
      // between), the prefix, if any, before them.
      const io::TakenGuard done(st);
      if (out.empty()) {
        lua_pushlstring(L, got.data(), got.size());
        return 1;
      }
      out.append(got);
    }
    lua_pushlstring(L, out.data(), out.size());
    return 1;
  }
  out.resize(had);
  lua_pushnil(L);
  lua_pushstring(L, st.error().c_str());
  // Past the limit, what came is dropped (it could not be held): the
  // stream has ended for reading.
  std::string partial = st.take_partial(p.kind, p.n);
  if (st.error().rfind("limit:", 0) != 0) out += partial;
  lua_pushlstring(L, out.data(), out.size());
  return 3;
}

int attempt_send(lua_State* L, TcpState* t, Pending& p) {
  io::ByteStream& st = *t->sock->stream();
  const Io r = st.write(std::string_view(p.data, p.len), &p.done);
  if (r == Io::kAgain) return -1;
  if (r == Io::kDone) {
    lua_pushnumber(L, p.base + static_cast<double>(p.len));
    return 1;
  }
  lua_pushnil(L);
  lua_pushstring(L, st.error().c_str());
  lua_pushnumber(L, p.base + static_cast<double>(p.done));
  return 3;
}

int attempt_accept(lua_State* L, TcpState* t, Pending&) {
  std::unique_ptr<io::TcpSocket> conn;
  std::string err;
  const Io r = t->sock->accept(&conn, &err);
  if (r == Io::kAgain) return -1;
  if (r == Io::kEnd) return push_fail(L, err);
  SocketRef* s = push_socket(L, kClient);
  s->tcp = new TcpState{std::move(conn), s, {}, {}};
  return 1;
}

// Connects to the next address left (a name's may be several: ::1 refused,
// then 127.0.0.1).
int attempt_connect(lua_State* L, TcpState* t, Pending&) {
  std::vector<io::SocketAddress> no_more;
  std::vector<io::SocketAddress>& addrs = t->connecting ? t->connecting->addrs : no_more;
  std::string err;
  if (t->sock->connecting()) {
    const Io r = t->sock->finish_connect(&err);
    if (r == Io::kAgain) return -1;
    if (r == Io::kDone) {
      t->ref->cls = kClient;
      lua_pushnumber(L, 1);
      return 1;
    }
    if (addrs.empty()) return push_fail(L, err);
    t->sock->discard_fd();
  }
  while (!addrs.empty()) {
    const io::SocketAddress a = addrs.front();
    addrs.erase(addrs.begin());
    const Io r = t->sock->start_connect(a, &err);
    if (r == Io::kAgain) return -1;
    if (r == Io::kDone) {
      t->ref->cls = kClient;
      lua_pushnumber(L, 1);
      return 1;
    }
    if (addrs.empty() || err == "already connected") break;
    t->sock->discard_fd();
  }
  return push_fail(L, err.empty() ? "host not found" : err);
}

int attempt_handshake(lua_State* L, TcpState* t, Pending&) {
  io::ByteStream& st = *t->sock->stream();
  const Io r = st.handshake();
  if (r == Io::kAgain) return -1;
  if (r == Io::kEnd) return push_fail(L, st.error());
  lua_pushboolean(L, 1);
  return 1;
}

// Whether bytes wait to be read, without reading them (http.serve's
// acceptor waits so before it starts a connection's process).
int attempt(lua_State* L, TcpState* t, Pending& p) {
  if (!usable(t)) {
    if (p.op == Pending::kReceive) {
      lua_pushnil(L);
      lua_pushliteral(L, "closed");
      lua_pushlstring(L, p.got.data(), p.got.size());
      return 3;
    }
    if (p.op == Pending::kSend) {
      lua_pushnil(L);
      lua_pushliteral(L, "closed");
      lua_pushnumber(L, p.base + static_cast<double>(p.done));
      return 3;
    }
    return push_fail(L, "closed");
  }
  switch (p.op) {
    case Pending::kReceive: return attempt_receive(L, t, p);
    case Pending::kSend: return attempt_send(L, t, p);
    case Pending::kAccept: return attempt_accept(L, t, p);
    case Pending::kConnect: return attempt_connect(L, t, p);
    case Pending::kHandshake: return attempt_handshake(L, t, p);
    default: return push_fail(L, "closed");
  }
}

// The results of a call cut short by err ("timeout", a refused watch):
// nil, err, and what a receive or a send had done so far.
int cut_short(lua_State* L, TcpState* t, Pending& p, std::string_view err) {
  lua_pushnil(L);
  lua_pushlstring(L, err.data(), err.size());
  if (p.op == Pending::kReceive) {
    if (usable(t)) p.got += t->sock->stream()->take_partial(p.kind, p.n);
    lua_pushlstring(L, p.got.data(), p.got.size());
    return 3;
  }
  if (p.op == Pending::kSend) {
    lua_pushnumber(L, p.base + static_cast<double>(p.done));
    return 3;
  }
  if (p.op == Pending::kConnect && usable(t)) t->sock->close();  // an attempt cannot be taken back
  return 2;
}

void resume_op(lua_State* L, lua_State* co, void* owner, std::uint64_t tag, bool failed, std::string_view payload);

IoWaitCall poll_call(TcpState* t, Pending& p) {
  IoWaitCall c{io::io_cmd::kPollWait, t->sock->poller().tag_for(t->sock->slot(), dir_of(t, p.op))};
  if (p.deadline >= 0) c.timeout = std::max(0.0, p.deadline - now());
  p.tag = c.tag;
  return c;
}

// Waits for p's call. Where the running code cannot block (a __gc, a
// sort's comparator) it raises as io_wait would, p released first: the
// socket is not left busy for ever (a connect under way is closed, as a
// timeout closes it).
int wait_for(lua_State* L, TcpState* t, Pending& p, IoWaitCall c) {
  if (!blockable(L)) {
    if (p.op == Pending::kConnect && usable(t)) t->sock->close();
    release(L, t, p);
    check_blockable(L);
  }
  return io_wait(L, std::move(c), t, resume_op);
}

// Runs the call p (already filled in): its results, or it waits.
int run(lua_State* L, TcpState* t, Pending& p) {
  const int n = attempt(L, t, p);
  if (n >= 0) {
    release(L, t, p);
    return n;
  }
  if (p.deadline >= 0 && p.deadline <= now()) {
    const int k = cut_short(L, t, p, "timeout");
    release(L, t, p);
    return k;
  }
  return wait_for(L, t, p, poll_call(t, p));
}

void finish(lua_State* L, lua_State* co, TcpState* t, Pending& p, int n) {
  release(L, t, p);
  io_resume(L, co, n);
}

// Starts the connect or bind to the addresses a name resolved to.
void resolved(lua_State* L, lua_State* co, TcpState* t, Pending& p, std::string_view payload) {
  Connecting& c = *t->connecting;
  std::string err;
  const int base = lua_gettop(L);
  const int n = decode_values(L, payload, &err);
  if (n >= 1 && lua_istable(L, base + 1)) {
    for (int i = 1;; ++i) {
      lua_rawgeti(L, base + 1, i);
      if (!lua_isstring(L, -1)) {
        lua_pop(L, 1);
        break;
      }
      io::SocketAddress a;
      if (io::parse_numeric(lua_tostring(L, -1), c.port, t->sock->family(), &a)) c.addrs.push_back(a);
      lua_pop(L, 1);
    }
  }
  lua_settop(L, base);
  if (c.addrs.empty()) return finish(L, co, t, p, push_fail(L, "host not found"));
  if (c.binding) {
    const std::string e = usable(t) ? t->sock->bind(c.addrs.front()) : "closed";
    if (e.empty()) lua_pushnumber(L, 1);
    return finish(L, co, t, p, e.empty() ? 1 : push_fail(L, e));
  }
  p.op = Pending::kConnect;
  const int k = attempt(L, t, p);
  if (k >= 0) return finish(L, co, t, p, k);
  io_rewait(L, co, poll_call(t, p), t, resume_op);
}

// A wait of t's ended: the descriptor is ready (or closed), its time ran
// out, or a name resolved.
void resume_op(lua_State* L, lua_State* co, void* owner, std::uint64_t tag, bool failed, std::string_view payload) {
  auto* t = static_cast<TcpState*>(owner);
  Pending& p = t->in.tag == tag ? t->in : t->out;
  if (p.tag != tag) return io_resume(L, co, push_fail(L, "closed"));  // its call is not this socket's any more
  p.tag = 0;
  if (p.op == Pending::kResolve) {
    if (failed) return finish(L, co, t, p, push_fail(L, payload));
    if (!usable(t)) return finish(L, co, t, p, push_fail(L, "closed"));
    return resolved(L, co, t, p, payload);
  }
  if (!failed && payload.empty()) return finish(L, co, t, p, cut_short(L, t, p, "timeout"));  // the sleep's end
  if (failed) return finish(L, co, t, p, cut_short(L, t, p, payload));  // the poller could not watch it
  const int n = attempt(L, t, p);
  if (n >= 0) return finish(L, co, t, p, n);
  if (p.deadline >= 0 && p.deadline <= now()) return finish(L, co, t, p, cut_short(L, t, p, "timeout"));
  io_rewait(L, co, poll_call(t, p), t, resume_op);
}

// The call that p names can start: none of its kind is waiting already.
bool busy(lua_State* L, Pending& p) {
  if (p.op == Pending::kNone) return false;
  push_fail(L, "busy: another task waits on this socket");
  return true;
}

// The address at index 2 and port at 3 (checked by the caller): numeric,
// or looked up (a waiting call whose answer resolved() takes).
int by_address(lua_State* L, SocketRef* s, bool binding) {
  TcpState* t = s->tcp;
  Pending& p = t->out;
  if (busy(L, p)) return 2;
  std::size_t len;
  const char* h = lua_tolstring(L, 2, &len);
  const std::string host(h, len);
  if (host.find('\0') != std::string::npos) return push_fail(L, "invalid: host name contains a NUL byte");
  const int port = static_cast<int>(lua_tonumber(L, 3));
  std::string host_name = binding && host == "*" ? "" : host;
  if (binding && (host == "*" || host.empty())) host_name = t->sock->family() == AF_INET6 ? "::" : "0.0.0.0";
  io::SocketAddress a;
  if (io::parse_numeric(host_name, port, t->sock->family(), &a)) {
    if (binding) {
      const std::string e = t->sock->bind(a);
      if (!e.empty()) return push_fail(L, e);
      lua_pushnumber(L, 1);
      return 1;
    }
    p.op = Pending::kConnect;
    t->connecting = std::make_unique<Connecting>();
    t->connecting->addrs.push_back(a);
    p.deadline = deadline_after(call_timeout(s));
    return run(L, t, p);
  }
  if (host_name.empty()) return push_fail(L, "host not found");
  p.op = Pending::kResolve;
  t->connecting = std::make_unique<Connecting>();
  t->connecting->binding = binding;
  t->connecting->port = port;
  p.deadline = deadline_after(call_timeout(s));
  const int fam = t->sock->family();
  // The socket command's call on no socket: op, host, family (socket_service.cpp).
  io::CallResultWriter args;
  args.string("resolve").string(host_name).string(fam == AF_INET6 ? "inet6" : fam == AF_INET ? "inet" : "unspec");
  IoWaitCall c{io::io_cmd::kSocket, io_call_tag(L), 0, args.finish(), -1};
  p.tag = c.tag;
  return wait_for(L, t, p, std::move(c));
}

// TLS contexts that verify against the system's store are made once
// (loading the store takes milliseconds); others at each wrap.
std::shared_ptr<const io::TlsContext> tls_context(const io::TlsContext::Options& o, std::string* err) {
  static std::mutex mu;
  static std::unordered_map<std::string, std::shared_ptr<const io::TlsContext>> shared;
  const bool reuse = !o.server && o.ca_pem.empty() && o.cert_pem.empty() && o.key_pem.empty() && o.ca_file.empty();
  const std::string key = o.protocol + (o.verify ? "/verify" : "/none");
  if (reuse) {
    std::lock_guard lock(mu);
    if (auto it = shared.find(key); it != shared.end()) return it->second;
  }
  std::shared_ptr<const io::TlsContext> ctx = io::TlsContext::make(o, err);
  if (ctx && reuse) {
    std::lock_guard lock(mu);
    shared.emplace(key, ctx);
  }
  return ctx;
}

std::string opt_string(lua_State* L, int idx) {
  std::size_t n = 0;
  const char* p = lua_isstring(L, idx) ? lua_tolstring(L, idx, &n) : nullptr;
  return p ? std::string(p, n) : std::string();
}

}  // namespace

int new_tcp_socket(lua_State* L) {
  const char* fam = luaL_optstring(L, 1, "unspec");
  const int family = !std::strcmp(fam, "inet6") ? AF_INET6 : !std::strcmp(fam, "inet") ? AF_INET : AF_UNSPEC;
  auto sock = std::make_unique<io::TcpSocket>(io_services(L).netpoll, family);
  if (std::string err = sock->open(); !err.empty()) return push_fail(L, err);
  SocketRef* s = push_socket(L, kMaster);
  s->tcp = new TcpState{std::move(sock), s, {}, {}};
  return 1;
}

int tcp_close(lua_State* L, SocketRef* s) {
  s->closed = true;
  if (s->tcp && s->tcp->sock) s->tcp->sock->close();  // a wait on it completes: its task answers closed
  lua_pushnumber(L, 1);
  return 1;
}

int tcp_bind(lua_State* L, SocketRef* s) { return by_address(L, s, true); }
int tcp_connect(lua_State* L, SocketRef* s) { return by_address(L, s, false); }

int tcp_listen(lua_State* L, SocketRef* s) {
  const int backlog = static_cast<int>(luaL_optnumber(L, 2, 32));
  const std::string e = s->tcp->sock->listen(backlog);
  if (!e.empty()) return push_fail(L, e);
  s->cls = kServer;
  lua_pushnumber(L, 1);
  return 1;
}

int tcp_accept(lua_State* L, SocketRef* s) {
  TcpState* t = s->tcp;
  if (busy(L, t->in)) return 2;
  t->in.op = Pending::kAccept;
  t->in.deadline = deadline_after(call_timeout(s));
  return run(L, t, t->in);
}

int tcp_send(lua_State* L, SocketRef* s, const char* data, std::size_t i, std::size_t j) {
  TcpState* t = s->tcp;
  Pending& p = t->out;
  if (p.op != Pending::kNone) {
    lua_pushnil(L);
    lua_pushliteral(L, "busy: another task sends on this socket");
    lua_pushnumber(L, static_cast<double>(i - 1));
    return 3;
  }
  p.op = Pending::kSend;
  p.data = data + i - 1;
  p.len = j - i + 1;
  p.base = static_cast<double>(i - 1);
  p.deadline = deadline_after(call_timeout(s));
  const int n = attempt(L, t, p);
  if (n >= 0) {
    p = Pending{};
    return n;
  }
  if (p.deadline >= 0 && p.deadline <= now()) {
    const int k = cut_short(L, t, p, "timeout");
    p = Pending{};
    return k;
  }
  // It waits: the data stays where it is, held for the wait.
  lua_pushvalue(L, 2);
  p.data_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  return wait_for(L, t, p, poll_call(t, p));
}

int tcp_receive(lua_State* L, SocketRef* s, char kind, std::size_t n, int prefix_idx) {
  TcpState* t = s->tcp;
  Pending& p = t->in;
  if (p.op != Pending::kNone) {
    lua_pushnil(L);
    lua_pushliteral(L, "busy: another task receives on this socket");
    if (prefix_idx) lua_pushvalue(L, prefix_idx);
    else lua_pushliteral(L, "");
    return 3;
  }
  // The usual case first: the buffer answers, nothing to keep.
  p.op = Pending::kReceive;
  p.kind = kind;
  p.n = n;
  if (prefix_idx) {
    std::size_t len;
    const char* pre = lua_tolstring(L, prefix_idx, &len);
    p.got.assign(pre, len);
  }
  p.deadline = deadline_after(call_timeout(s));
  return run(L, t, p);
}

int tcp_shutdown(lua_State* L, SocketRef* s, const char* how) {
  io::ByteStream* st = s->tcp->sock->stream();
  if (!st) return push_fail(L, "closed");
  const bool both = !std::strcmp(how, "both");
  const int err = st->shutdown(both || !std::strcmp(how, "receive"), both || !std::strcmp(how, "send"));
  if (err != 0) return push_fail(L, io::socket_errno_text(err));
  lua_pushnumber(L, 1);
  return 1;
}

int tcp_name(lua_State* L, SocketRef* s, bool peer) {
  std::string ip;
  int port = 0;
  const char* family = "inet";
  const std::string e = s->tcp->sock->name(peer, &ip, &port, &family);
  if (!e.empty()) return push_fail(L, e);
  lua_pushstring(L, ip.c_str());
  lua_pushnumber(L, port);
  lua_pushstring(L, family);
  return 3;
}

int tcp_option(lua_State* L, SocketRef* s, bool set) {
  const std::string name = luaL_checkstring(L, 2);
  if (set) {
    bool on;
    int linger = 0;
    if (lua_istable(L, 3)) {  // linger: { on =, timeout = }
      lua_getfield(L, 3, "on");
      on = lua_toboolean(L, -1);
      lua_getfield(L, 3, "timeout");
      linger = static_cast<int>(lua_tonumber(L, -1));
      lua_pop(L, 2);
    } else {
      on = lua_type(L, 3) == LUA_TNUMBER ? lua_tonumber(L, 3) != 0 : lua_toboolean(L, 3);
    }
    const std::string e = s->tcp->sock->set_option(name, on, linger);
    if (!e.empty()) return push_fail(L, e);
    lua_pushnumber(L, 1);
    return 1;
  }
  bool on = false;
  int linger = 0;
  const std::string e = s->tcp->sock->get_option(name, &on, &linger);
  if (!e.empty()) return push_fail(L, e);
  if (name == "linger") {
    lua_createtable(L, 0, 2);
    lua_pushboolean(L, on);
    lua_setfield(L, -2, "on");
    lua_pushnumber(L, linger);
    lua_setfield(L, -2, "timeout");
    return 1;
  }
  lua_pushboolean(L, on);
  return 1;
}

int tcp_dirty(lua_State* L, SocketRef* s) {
  const io::ByteStream* st = s->tcp->sock->stream();
  lua_pushboolean(L, st && st->dirty());
  return 1;
}

int tcp_getstats(lua_State* L, SocketRef* s) {
  const io::ByteStream* st = s->tcp->sock->stream();
  lua_pushnumber(L, st ? st->bytes_in() : 0);
  lua_pushnumber(L, st ? st->bytes_out() : 0);
  lua_pushnumber(L, std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count() -
                        s->tcp->sock->created());
  return 3;
}

int tcp_setstats(lua_State* L, SocketRef* s) {
  io::TcpSocket& sock = *s->tcp->sock;
  if (io::ByteStream* st = sock.stream())
    st->set_stats(lua_isnumber(L, 2) ? lua_tonumber(L, 2) : st->bytes_in(), lua_isnumber(L, 3) ? lua_tonumber(L, 3) : st->bytes_out());
  if (lua_isnumber(L, 4))
    sock.set_created(std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count() -
                     lua_tonumber(L, 4));
  lua_pushnumber(L, 1);
  return 1;
}

int tcp_getfd(lua_State* L, SocketRef* s) {
  lua_pushnumber(L, s->tcp->sock->fd());
  return 1;
}

// sock:__tlswrap(mode, protocol, verify, cafile, certificate, key, ca_pem,
// certificate_pem, key_pem) (socket_object.cpp checked them).
int tcp_tlswrap(lua_State* L, SocketRef* s) {
  io::ByteStream* st = s->tcp->sock->stream();
  if (!st) return push_fail(L, "not connected");
  if (st->tls()) return push_fail(L, "already wrapped");
  io::TlsContext::Options o;
  o.server = !std::strcmp(lua_tostring(L, 2), "server");
  o.protocol = lua_tostring(L, 3);
  o.verify = lua_toboolean(L, 4);
  o.ca_file = opt_string(L, 5);
  o.cert_file = opt_string(L, 6);
  o.key_file = opt_string(L, 7);
  o.in_memory = true;  // the files' contents, read by the calling process (stdlib/ssl.lua)
  o.ca_pem = opt_string(L, 8);
  o.cert_pem = opt_string(L, 9);
  o.key_pem = opt_string(L, 10);
  std::string err;
  std::shared_ptr<const io::TlsContext> ctx = tls_context(o, &err);
  if (!ctx) return push_fail(L, err);
  auto session = std::make_unique<io::TlsSession>(std::move(ctx));
  if (session->state() == io::TlsSession::State::Failed) return push_fail(L, session->error());
  st->start_tls(std::move(session));
  s->cls = kTls;
  lua_pushnumber(L, 1);
  return 1;
}

int tcp_handshake(lua_State* L, SocketRef* s) {
  TcpState* t = s->tcp;
  io::TlsSession* session = t->sock->stream() ? t->sock->stream()->session() : nullptr;
  if (!session) return push_fail(L, "closed");
  if (session->state() == io::TlsSession::State::Open || session->state() == io::TlsSession::State::Closed) {
    lua_pushboolean(L, 1);
    return 1;
  }
  if (session->state() == io::TlsSession::State::Failed) return push_fail(L, session->error());
  if (t->in.op != Pending::kNone) return push_fail(L, "handshake already in progress");
  t->in.op = Pending::kHandshake;
  t->in.deadline = deadline_after(call_timeout(s));
  return run(L, t, t->in);
}

int tcp_sni(lua_State* L, SocketRef* s) {
  io::TlsSession* session = s->tcp->sock->stream() ? s->tcp->sock->stream()->session() : nullptr;
  if (!session) return push_fail(L, "closed");
  if (session->server()) return push_fail(L, "invalid: sni names a client's peer");
  session->set_host_name(lua_tostring(L, 2));
  lua_pushnumber(L, 1);
  return 1;
}

int tcp_info(lua_State* L, SocketRef* s) {
  io::TlsSession* session = s->tcp->sock->stream() ? s->tcp->sock->stream()->session() : nullptr;
  if (!session) return push_fail(L, "closed");
  const std::string protocol = session->protocol(), cipher = session->cipher();
  if (protocol.empty()) {
    lua_pushnil(L);
    return 1;
  }
  const std::string field = opt_string(L, 2);
  if (field == "protocol") lua_pushstring(L, protocol.c_str());
  else if (field == "cipher") lua_pushstring(L, cipher.c_str());
  else if (!field.empty()) lua_pushnil(L);
  else {
    lua_createtable(L, 0, 2);
    lua_pushstring(L, protocol.c_str());
    lua_setfield(L, -2, "protocol");
    lua_pushstring(L, cipher.c_str());
    lua_setfield(L, -2, "cipher");
  }
  return 1;
}

void tcp_free(lua_State* L, SocketRef* s) {
  TcpState* t = s->tcp;
  if (!t) return;
  s->tcp = nullptr;
  io_forget(L, t);
  if (t->in.data_ref != LUA_NOREF) luaL_unref(L, LUA_REGISTRYINDEX, t->in.data_ref);
  if (t->out.data_ref != LUA_NOREF) luaL_unref(L, LUA_REGISTRYINDEX, t->out.data_ref);
  delete t;  // closes the socket where it is still here
}

std::uint64_t tcp_give(lua_State* L, SocketRef* s) {
  TcpState* t = s->tcp;
  if (!t || !usable(t)) return 0;
  // Its waits here end: the socket is no longer this process's. (A task
  // of this process that waits on it answers closed when it wakes.)
  std::unique_ptr<io::TcpSocket> sock = std::move(t->sock);
  return io_services(L).tcp_transit.give(std::move(sock));
}

void tcp_claim(lua_State* L, std::uint64_t id, SocketClass cls) {
  std::unique_ptr<io::TcpSocket> sock = id != 0 ? io_services(L).tcp_transit.claim(id) : nullptr;
  SocketRef* s = push_socket(L, cls);
  if (!sock) {
    s->closed = true;
    return;
  }
  s->tcp = new TcpState{std::move(sock), s, {}, {}};
}

bool tcp_take_back(lua_State* L, SocketRef* s, std::uint64_t id) {
  std::unique_ptr<io::TcpSocket> sock = io_services(L).tcp_transit.claim(id);
  if (!sock || !s->tcp) return false;
  s->tcp->sock = std::move(sock);
  return true;
}

std::unique_ptr<io::TcpSocket> tcp_take(lua_State* L, SocketRef* s) {
  TcpState* t = s->tcp;
  if (!t || !usable(t) || s->closed || s->moved || t->in.op != Pending::kNone || t->out.op != Pending::kNone)
    return nullptr;
  io_forget(L, t);
  s->closed = true;
  return std::move(t->sock);
}

void tcp_push(lua_State* L, std::unique_ptr<io::TcpSocket> sock, SocketClass cls) {
  SocketRef* s = push_socket(L, cls);
  s->tcp = new TcpState{std::move(sock), s, {}, {}};
}

}  // namespace host::lua
