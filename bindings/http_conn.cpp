// require("host.http") (docs/ARCHITECTURE.md, "HTTP on the workers"): an HTTP
// connection served where it is parsed. The connection's process
// (stdlib/http/conn.lua) holds its socket; conn:next() reads from the
// socket's ByteStream and parses with the Lua-free HttpRequestParser
// (host/io/http_request_parser.hpp), writing the 400/408/413/414/431/505
// answers itself, before any Lua runs, and gives the next whole request as
// a table; conn:respond, conn:chunk and conn:finish write the response
// straight to the socket. Only a call that would block waits: io_wait
// with the netpoller's tag and a sleep for its deadline, and the step that
// hears of it runs the call's attempt again (as bindings/socket_tcp.cpp).
//
// Reading happens only while a request (or a streamed body's next chunk)
// is wanted: a client that pipelines and never reads what it is sent
// stops being read, and TCP makes it wait.
//
// A client that leaves is noticed: while a handler answers a request
// (its body in hand), the connection is watched for reading (io_watch, a
// wait no task blocks on). When the descriptor turns readable the stream
// reads what came, no more than its usual bound; an end or a reset with
// nothing else sent means the client left: the process is cancelled (the
// handler's cancel event, or its end) and req:closed() answers true.
// Bytes that came instead (pipelined requests) end the watch: that
// client's leaving is seen at its next write, as before.
//
// A connection whose process ends in the middle of a request (a limit, a
// terminate) is answered 500 by its own finalizer (finalize_conn), which
// the process's end runs on its worker before the socket closes; only a
// process whose thread the runaway monitor gave up (stuck in JIT-compiled
// code, in a C call or native code, or in its finalizers while it
// closed, past the time limit or a terminate: no finalizer of its runs
// then, and its descriptors stay open) leaves it to the acceptor
// (untrack). A thread given up in a C call may still run finalize_conn
// when the call returns: the entry's lock decides which of the two
// writes the 500. The acceptor
// (stdlib/http/server.lua) has a handle on each connection (track, whose
// __gc lets it go), with no descriptor of its own: when the server closes
// it sets the connection's drain flag and wakes the connection's read
// wait through the netpoller (drain), so that an idle connection ends at
// once and one in the middle of a request answers it with Connection:
// close. A connection with no process
// (a new one before its first bytes, an idle one whose process parked)
// is hibernated in its handle (hibernate): the socket held in C and a
// readiness watch, with no task, no coroutine and no timer of its own;
// the watch tells the acceptor by a message to itself when bytes come
// or the client leaves, and the acceptor keeps the deadlines.
//
// Threads: the one running the process; the tracked entries any (a lock).
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include <lua.hpp>

#include "bindings/lua_process.hpp"
#include "bindings/registry_table.hpp"
#include "bindings/socket_ref.hpp"
#include "host/commands.hpp"
#include "host/io/http_request_parser.hpp"
#include "host/io/io_services.hpp"
#include "host/io/tcp_socket.hpp"

namespace host::lua {

namespace {

using Io = io::ByteStream::Io;

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// ---- the acceptor's view of a connection (track / untrack / drain)

// What the acceptor and the connection's process share (each on its own
// worker).
struct Tracked {
  std::atomic<bool> draining{false};   // the server closed: answer with Connection: close, then close
  std::atomic<bool> in_flight{false};  // a request handed over, nothing of its response written
  bool tls = false;
  // The descriptor while a connection's process holds it open (-1: none),
  // cleared under mu before that process closes it: while the acceptor
  // holds mu, one set here is this connection's. A process that ends
  // closes it (its finalizer), so one still set when the acceptor hears
  // of a failed process's end is a given-up process's, never closed.
  std::mutex mu;
  int fd = -1;  // guarded by mu
};

void set_tracked_fd(Tracked* t, int fd) {
  std::lock_guard lock(t->mu);
  t->fd = fd;
}

void send_all_now(int fd, const std::string& data) {
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n <= 0) return;
    done += static_cast<std::size_t>(n);
  }
}

// Objects that processes on any worker name by a number (a Lua number
// crosses a spawn; a pointer would not be checked): the tracked
// connections and the servers' configurations. Ids start at 1 and are
// never reused; 0 finds nothing.
template <typename T>
class IdRegistry {
 public:
  std::uint64_t add(std::shared_ptr<T> object) {
    std::lock_guard lock(mu_);
    const std::uint64_t id = ++last_;
    objects_.emplace(id, std::move(object));
    return id;
  }
  std::shared_ptr<T> find(std::uint64_t id) {
    if (id == 0) return nullptr;
    std::lock_guard lock(mu_);
    auto it = objects_.find(id);
    return it == objects_.end() ? nullptr : it->second;
  }
  // Removes the id's object and returns it, to be dropped outside the lock.
  std::shared_ptr<T> take(std::uint64_t id) {
    std::lock_guard lock(mu_);
    auto it = objects_.find(id);
    if (it == objects_.end()) return nullptr;
    std::shared_ptr<T> object = std::move(it->second);
    objects_.erase(it);
    return object;
  }

 private:
  std::mutex mu_;
  std::unordered_map<std::uint64_t, std::shared_ptr<T>> objects_;  // guarded by mu_
  std::uint64_t last_ = 0;                                          // guarded by mu_
};

IdRegistry<Tracked> g_tracked;

// ---- a server's configuration (config): what each of its connections is
// served with, made once by its acceptor and shared, immutable, by every
// connection's process. A connection's process is spawned with the
// configuration's id, a number, and finds it here: its arguments were a
// table of a dozen keys, encoded by the acceptor and decoded, every key
// and string made again, in each new process.

struct ServerConf {
  io::HttpLimits limits;
  std::string entry;     // the handler, "module:method"
  std::string module;    // its parts (http/server.lua's conn_config)
  std::string method;
  std::string acceptor;  // the acceptor's pid, for park
  std::string bound;     // a server of the host's own: its address ("" for a script's)
  std::shared_ptr<const io::TlsContext> tls;  // https: the server's context, made once here
};

IdRegistry<const ServerConf> g_confs;

// An id argument (a configuration's, a tracked connection's): an integer
// in [1, 2^53), else 0 (none). Any other number cast to uint64_t would be
// undefined (a negative, NaN, 1e30), and a double holds integers exactly
// only below 2^53.
std::uint64_t id_arg(lua_State* L, int idx) {
  if (lua_type(L, idx) != LUA_TNUMBER) return 0;
  const double d = lua_tonumber(L, idx);
  if (!(d >= 1 && d < 9007199254740992.0) || d != std::floor(d)) return 0;
  return static_cast<std::uint64_t>(d);
}

// A server's TLS options from its certificate chain and key (PEM text),
// named by their files in errors: what check_tls tries and config makes.
io::TlsContext::Options server_tls_options(std::string cert_pem, std::string key_pem, std::string cert_file,
                                           std::string key_file) {
  io::TlsContext::Options o;
  o.server = true;
  o.verify = false;
  o.in_memory = true;
  o.cert_pem = std::move(cert_pem);
  o.key_pem = std::move(key_pem);
  o.cert_file = std::move(cert_file);
  o.key_file = std::move(key_file);
  return o;
}

// ---- a connection

char kConnMetaKey;  // the metatable's registry key (registry_table.hpp)

struct Conn {
  HostFinalizer fin;  // its end (finalize_conn): its __gc, or the process's
  std::unique_ptr<io::TcpSocket> sock;
  std::unique_ptr<io::HttpRequestParser> parser;
  std::shared_ptr<Tracked> tracked;

  enum Op : std::uint8_t { kNone, kNext, kWrite, kBody };
  Op op = kNone;
  std::uint64_t tag = 0;
  double deadline = -1;
  std::string out;  // what is still to write
  std::size_t out_done = 0;
  double write_deadline = -1;  // a write that waits ends the connection past this

  double request_since = 0;  // the request being read began (or the connection, before its first)
  double idle_since = 0;     // the last response was written
  std::uint64_t served = 0;
  bool in_flight = false;        // a request handed over, not yet answered
  bool head_written = false;     // its response's head is written (a stream)
  bool responding_head = false;  // it is a HEAD request
  bool no_body = false;          // its response has no body (HEAD, 204, 304)
  bool raw_stream = false;       // its streamed body goes out as it is, ended by the close (HTTP/1.0)
  bool keep_alive = true;        // of the request in flight
  bool flight_streamed = false;  // its body is streamed
  unsigned short minor = 1;
  bool eof = false;      // the client sent all it will
  bool closing = false;  // answer nothing more: write what is queued, then close
  bool dead = false;     // closed
  bool shut = false;     // the write side is shut: lingering
  bool client_closes = false;  // the request in flight asked for the close (Connection: close, HTTP/1.0)
  bool pipelined = false;      // a request came behind one not yet answered: it may send more still
  bool internal = false; // of a server of the host's own (counted)
  bool gone = false;     // the client left while its request was served
  std::uint64_t watch_tag = 0;  // the watch on the client while a handler runs (0: none)
  // The wait for a keep-alive connection's next request: its deadline
  // (hibernate_after or keepalive_timeout past the last response; -1
  // while next() waits for anything else), and a sleep that watches it
  // (idle_timer, due at idle_timer_at), kept from one request to the
  // next: that wait arms no timer of its own (a timer armed and cancelled
  // a request), and the sleep fires once a deadline at most.
  double idle_deadline = -1;
  std::uint64_t idle_timer = 0;
  double idle_timer_at = 0;
  double linger_until = 0;
};

// The methods hold the connection's metatable as their upvalue: the check
// compares it with the object's, without the registry look-up, twice a
// request.
Conn* check_conn(lua_State* L) {
  void* p = lua_touserdata(L, 1);
  if (p != nullptr && lua_getmetatable(L, 1)) {
    const bool ours = lua_rawequal(L, -1, lua_upvalueindex(1));
    lua_pop(L, 1);
    if (ours) return static_cast<Conn*>(p);
  }
  luaL_typerror(L, 1, "http connection");
  return nullptr;
}

void close_now(lua_State* L, Conn* c) {
  if (c->dead) return;
  c->dead = true;
  c->watch_tag = 0;
  c->idle_timer = 0;  // io_forget drops it
  io_forget(L, c);
  if (c->tracked) set_tracked_fd(c->tracked.get(), -1);
  if (c->sock) c->sock->close();
  c->out.clear();
}

bool draining(const Conn* c) { return c->tracked && c->tracked->draining.load(std::memory_order_relaxed); }

io::NetPoller::Dir dir_for(Conn* c, bool reading) {
  io::ByteStream* st = c->sock->stream();
  if (reading) return st->wants() == io::ByteStream::Want::kWrite ? io::NetPoller::kWrite : io::NetPoller::kRead;
  return st->wants() == io::ByteStream::Want::kRead ? io::NetPoller::kRead : io::NetPoller::kWrite;
}

// Writes what is queued: kDone once all went, kAgain (c->deadline set),
// kEnd (the client is gone, or read nothing for keepalive_timeout:
// closed).
Io flush(lua_State* L, Conn* c) {
  if (c->dead) return Io::kEnd;
  const Io r = c->out_done >= c->out.size() ? Io::kDone : c->sock->stream()->write(c->out, &c->out_done);
  if (r == Io::kDone) {
    c->out.clear();
    c->out_done = 0;
    c->write_deadline = -1;
    return Io::kDone;
  }
  if (r == Io::kAgain) {
    const double t = now();
    if (c->write_deadline < 0) c->write_deadline = t + c->parser->limits().keepalive_timeout;
    if (t < c->write_deadline) {
      c->deadline = c->write_deadline;
      return Io::kAgain;
    }
  }
  close_now(L, c);
  return Io::kEnd;
}

// The request as the handler gets it, as the values conn:next() returns
// (stdlib/http/conn.lua makes its table with a constructor, which costs
// far less than a field set from C for each): method, path, query (nil
// when the URL has none), headers, body (nil when streamed) and whether
// it is HTTP/1.0. Returns how many it pushed.
int push_request(lua_State* L, io::HttpRequest& r) {
  std::string path;
  io::HttpQuery query;
  io::split_target(r, &path, &query);
  io::group_headers(r);
  const auto& headers = r.headers;
  lua_pushlstring(L, r.method.data(), r.method.size());
  lua_pushlstring(L, path.data(), path.size());
  if (query.empty()) {
    lua_pushnil(L);
  } else {
    lua_createtable(L, 0, static_cast<int>(query.size()));
    for (const auto& [k, vs] : query) {
      lua_pushlstring(L, k.data(), k.size());
      if (vs.size() == 1) {
        lua_pushlstring(L, vs[0].data(), vs[0].size());
      } else {
        lua_createtable(L, static_cast<int>(vs.size()), 0);
        for (std::size_t i = 0; i < vs.size(); ++i) {
          lua_pushlstring(L, vs[i].data(), vs[i].size());
          lua_rawseti(L, -2, static_cast<int>(i + 1));
        }
      }
      lua_rawset(L, -3);
    }
  }
  lua_createtable(L, 0, static_cast<int>(headers.size()));
  for (const auto& [name, value] : headers) {
    lua_pushlstring(L, name.data(), name.size());
    lua_pushlstring(L, value.data(), value.size());
    lua_rawset(L, -3);
  }
  if (r.streamed) lua_pushnil(L);
  else lua_pushlstring(L, r.body.data(), r.body.size());
  lua_pushboolean(L, r.minor == 0);
  return 6;
}

// Reads once more into the parser: kDone (something came, or the client
// finished sending), kAgain.
Io read_more(Conn* c) {
  io::ByteStream& st = *c->sock->stream();
  std::string_view got;  // where the stream holds it: fed to the parser without a copy between
  const Io r = st.any(&got, io::ByteStream::kReadChunk);
  if (r == Io::kAgain) return Io::kAgain;
  if (r == Io::kEnd) {
    c->eof = true;
    c->parser->ended();
    return Io::kDone;
  }
  const io::TakenGuard done(st);
  c->parser->feed(got.data(), got.size());
  return Io::kDone;
}

void note_began(Conn* c) {
  if (!c->parser->began) return;
  c->parser->began = false;
  if (!c->in_flight && c->parser->ready.empty()) c->request_since = now();
}

// Reads what the client sent while its request is served (read_ahead's
// bound) to learn whether it left: a read that ends with nothing else
// sent (a server that drains too: its handler's client may leave). True
// where the watch should go on (nothing came).
bool probe(lua_State* L, Conn* c) {
  io::ByteStream* st = c->sock->stream();
  const Io r = st->read_ahead();
  if (r == Io::kAgain) return st->wants() == io::ByteStream::Want::kRead;
  if (r == Io::kDone) {
    c->pipelined = true;
    return false;
  }
  const io::HttpRequestParser& p = *c->parser;
  // Requests sent before an end are a client that finished sending (a
  // half close): they are answered, not abandoned.
  if (st->buffered() > 0 || !p.ready.empty() || p.in_message) return false;
  c->gone = true;
  cancel_self(L, "client gone");
  return false;
}

void watch_fired(lua_State* L, lua_State* co, void* owner, std::uint64_t tag, bool failed, std::string_view payload);

void watch(lua_State* L, Conn* c) {
  if (c->watch_tag != 0 || c->dead || c->gone || !c->in_flight || c->flight_streamed) return;
  IoWaitCall call{io::io_cmd::kPollWait, c->sock->poller().tag_for(c->sock->slot(), io::NetPoller::kRead)};
  c->watch_tag = call.tag;
  io_watch(L, std::move(call), c, watch_fired);
}

void unwatch(lua_State* L, Conn* c) {
  if (c->watch_tag == 0) return;
  io_unwatch(L, c->watch_tag);
  c->watch_tag = 0;
}

void watch_fired(lua_State* L, lua_State*, void* owner, std::uint64_t tag, bool failed, std::string_view) {
  auto* c = static_cast<Conn*>(owner);
  if (c->watch_tag != tag) return;
  c->watch_tag = 0;
  if (failed || c->dead || c->gone || !c->in_flight) return;  // failed: the poller could not watch it
  if (probe(L, c)) watch(L, c);
}

void idle_timer_fired(lua_State* L, lua_State* co, void* owner, std::uint64_t tag, bool failed, std::string_view payload);

void arm_idle_timer(lua_State* L, Conn* c, double at, double t) {
  if (c->idle_timer != 0) io_unwatch(L, c->idle_timer);
  IoWaitCall call{cmd::kSleep, io_call_tag(L)};
  call.arg = static_cast<std::int64_t>(std::min(std::max(at - t, 0.0) * 1e9, 9e18));
  c->idle_timer = call.tag;
  c->idle_timer_at = at;
  io_watch(L, std::move(call), c, idle_timer_fired);
}

// next() waits idle until at: without a timer of its own; the idle
// sleep, armed where none is due by then.
void wait_idle(lua_State* L, Conn* c, double at, double t) {
  c->deadline = -1;
  c->idle_deadline = at;
  if (c->idle_timer == 0 || c->idle_timer_at > at) arm_idle_timer(L, c, at, t);
}

// The idle sleep is due: where next() still waits idle, it ends that wait
// once its deadline passed (its retry, resume_conn, finds it so), or
// sleeps again until the deadline, which requests since have moved on.
// Anything else waits with a timeout of its own; the next idle wait arms
// the sleep again.
void idle_timer_fired(lua_State* L, lua_State*, void* owner, std::uint64_t tag, bool, std::string_view) {
  auto* c = static_cast<Conn*>(owner);
  if (c->idle_timer != tag) return;
  c->idle_timer = 0;
  if (c->dead || c->op != Conn::kNext || c->tag == 0 || c->idle_deadline < 0) return;
  const double t = now();
  if (t < c->idle_deadline) arm_idle_timer(L, c, c->idle_deadline, t);
  else io_expire(L, c->tag);
}

// The next request (its values, push_request), or the connection's end (1: nil; 2:
// nil, "idle" where it waits idle past hibernate_after: the caller may
// give the socket up), or -1 (wait; *dir, c->deadline).
int attempt_next(lua_State* L, Conn* c, bool* reading) {
  io::HttpRequestParser& p = *c->parser;
  c->idle_deadline = -1;
  for (;;) {
    if (c->dead) {
      lua_pushnil(L);
      return 1;
    }
    if (p.continue_owed) {
      p.continue_owed = false;
      c->out += "HTTP/1.1 100 Continue\r\n\r\n";
    }
    if (!c->out.empty()) {
      if (flush(L, c) == Io::kAgain) {
        *reading = false;
        return -1;
      }
      continue;
    }
    if (c->closing) {
      // Graceful: the write side shut, what the client still sends read
      // and dropped for a moment (closing with unread bytes would reset
      // the connection and could lose the response at the client).
      // Over plain TCP a close with nothing unread sends the same FIN as
      // the shutdown, so the shutdown and the wait are only for a client
      // that may still send: one whose end was read closes at once; so
      // does a client that asked for the close itself, or one the server
      // drains, whose request was read whole and that has sent nothing
      // since and has never pipelined (one that has may have its next
      // request on the wire still, which a close would answer with a
      // reset), as nginx's lingering close decides (a TLS client may answer
      // the close with an alert of its own, and its shutdown sends the
      // session's close). Lingering for its end cost each such
      // connection's process a wait, a timer and one more step
      // (BENCHMARKS.md, "A new connection's cost: the close and the accept").
      io::ByteStream* st = c->sock->stream();
      if (!c->shut) {
        const bool plain = !st->tls();
        if (plain && c->eof) {
          close_now(L, c);
          continue;
        }
        if (plain && !p.in_message && !c->pipelined && (c->client_closes || draining(c))) {
          std::string_view drop;
          const Io r = st->any(&drop, io::ByteStream::kReadChunk);
          if (r == Io::kAgain) {
            close_now(L, c);
            continue;
          }
          if (r == Io::kEnd) {
            c->eof = true;
            continue;
          }
          st->taken();  // it sent more after all: its bytes are read and dropped while it lingers
        }
        c->shut = true;
        st->shutdown(false, true);
        c->linger_until = now() + 2;
      }
      if (c->eof || now() >= c->linger_until) {
        close_now(L, c);
        continue;
      }
      std::string_view drop;
      const Io r = st->any(&drop, io::ByteStream::kReadChunk);
      if (r == Io::kDone) st->taken();
      if (r == Io::kAgain) {
        *reading = true;
        c->deadline = c->linger_until;
        return -1;
      }
      if (r == Io::kEnd) c->eof = true;
      continue;
    }
    if (draining(c) && !c->in_flight) {
      p.ready.clear();
      c->closing = true;
      continue;
    }
    if (!p.ready.empty()) {
      io::HttpRequest& head = p.ready.front();
      if (head.error) {
        c->out += io::error_response(head.error);
        p.ready.clear();
        c->closing = true;
        continue;
      }
      io::HttpRequest r = std::move(head);
      p.ready.erase(p.ready.begin());
      // More than this one in a read (a streamed request's own body is
      // what follows it, not another).
      if (!r.streamed && (!p.ready.empty() || p.in_message || c->sock->stream()->buffered() > 0)) c->pipelined = true;
      c->in_flight = true;
      p.answering = true;
      c->responding_head = r.head;
      c->keep_alive = r.keep_alive;
      // A streamed request is marked to close by the server (its body may
      // be left unread), not by its client: that one lingers as before.
      c->client_closes = !r.keep_alive && !r.streamed;
      c->minor = r.minor;
      c->flight_streamed = r.streamed;
      c->head_written = false;
      ++c->served;
      if (c->tracked) c->tracked->in_flight.store(true, std::memory_order_relaxed);
      const int n = push_request(L, r);
      watch(L, c);
      return n;
    }
    if ((p.no_more && !p.in_message) || c->eof) {
      c->closing = true;
      continue;
    }
    const Io r = read_more(c);
    note_began(c);
    if (r == Io::kDone) continue;
    // Nothing more now: wait, as long as the state allows.
    const double t = now();
    const io::HttpLimits& lim = p.limits();
    if (p.in_message || c->served == 0) {
      c->deadline = c->request_since + lim.request_timeout;
      if (t >= c->deadline) {  // too slow: 408, then closed
        c->out += io::error_response(408);
        p.ready.clear();
        p.no_more = true;
        c->closing = true;
        continue;
      }
    } else if (lim.hibernate_after > 0 && lim.hibernate_after < lim.keepalive_timeout &&
               c->sock->stream()->buffered() == 0) {
      const double at = c->idle_since + lim.hibernate_after;
      if (t >= at) {
        lua_pushnil(L);
        lua_pushliteral(L, "idle");
        return 2;
      }
      wait_idle(L, c, at, t);
    } else {
      const double at = c->idle_since + lim.keepalive_timeout;
      if (t >= at) {
        close_now(L, c);
        continue;
      }
      wait_idle(L, c, at, t);
    }
    *reading = true;
    return -1;
  }
}

// A queued write's end (respond, chunk, finish): true, or nil, "closed".
int attempt_write(lua_State* L, Conn* c, bool* reading) {
  const Io r = flush(L, c);
  if (r == Io::kAgain) {
    *reading = false;
    return -1;
  }
  if (r == Io::kEnd) {
    lua_pushnil(L);
    lua_pushliteral(L, "closed");
    return 2;
  }
  lua_pushboolean(L, 1);
  return 1;
}

// What a "body" call returns: the bytes waiting, else nothing at the end,
// else nil and why it ended early.
int take_body(lua_State* L, Conn* c) {
  io::HttpRequestParser& p = *c->parser;
  if (!p.stream_buf.empty()) {
    lua_pushlstring(L, p.stream_buf.data(), p.stream_buf.size());
    p.stream_buf.clear();
    return 1;
  }
  if (!p.stream_error.empty() && !p.stream_done) {
    lua_pushnil(L);
    lua_pushlstring(L, p.stream_error.data(), p.stream_error.size());
    return 2;
  }
  lua_pushnil(L);
  return 1;
}

int attempt_body(lua_State* L, Conn* c, bool* reading) {
  io::HttpRequestParser& p = *c->parser;
  for (;;) {
    if (c->dead && p.stream_buf.empty()) {
      if (p.stream_error.empty() && !p.stream_done) p.stream_error = "closed";
      return take_body(L, c);
    }
    if (!p.stream_buf.empty() || p.stream_done || !p.stream_error.empty()) return take_body(L, c);
    const Io r = read_more(c);
    if (r == Io::kDone) continue;
    if (now() >= c->deadline) {  // a body that stopped coming: its read fails
      p.stream_error = "timeout";
      p.streaming = false;
      p.no_more = true;
      p.in_message = false;
      c->keep_alive = false;
      continue;
    }
    *reading = true;
    return -1;
  }
}

int attempt(lua_State* L, Conn* c, bool* reading) {
  switch (c->op) {
    case Conn::kNext: return attempt_next(L, c, reading);
    case Conn::kWrite: return attempt_write(L, c, reading);
    case Conn::kBody: return attempt_body(L, c, reading);
    default: lua_pushnil(L); return 1;
  }
}

void resume_conn(lua_State* L, lua_State* co, void* owner, std::uint64_t tag, bool failed, std::string_view payload);

IoWaitCall poll_call(Conn* c, bool reading) {
  IoWaitCall call{io::io_cmd::kPollWait, c->sock->poller().tag_for(c->sock->slot(), dir_for(c, reading))};
  if (c->deadline >= 0) call.timeout = std::max(0.0, c->deadline - now());
  c->tag = call.tag;
  return call;
}

int run(lua_State* L, Conn* c, Conn::Op op) {
  c->op = op;
  bool reading = true;
  const int n = attempt(L, c, &reading);
  if (n >= 0) {
    c->op = Conn::kNone;
    return n;
  }
  return io_wait(L, poll_call(c, reading), c, resume_conn);
}

void resume_conn(lua_State* L, lua_State* co, void* owner, std::uint64_t tag, bool failed, std::string_view) {
  auto* c = static_cast<Conn*>(owner);
  if (c->tag != tag) return;
  c->tag = 0;
  if (failed) close_now(L, c);  // the poller could not watch it: the call ends as on a closed connection
  bool reading = true;
  const int n = attempt(L, c, &reading);
  if (n >= 0) {
    c->op = Conn::kNone;
    io_resume(L, co, n);
    return;
  }
  io_rewait(L, co, poll_call(c, reading), c, resume_conn);
}

int busy(lua_State* L, Conn* c) {
  if (c->op == Conn::kNone) return 0;
  lua_pushnil(L);
  lua_pushliteral(L, "busy: another task uses this connection");
  return 2;
}

std::string number_text(double d) {
  char buf[64];
  if (d == std::floor(d) && std::fabs(d) < 1e15)
    std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(d));
  else
    std::snprintf(buf, sizeof buf, "%.14g", d);
  return buf;
}

// A header's value as text: a string or a number; else an error's words.
// Appends "name: value\r\n" for the header value at idx (a string or a
// number); false and *err (naming the header) for any other value, or
// one that holds CR, LF or NUL.
bool add_header(lua_State* L, int idx, std::string_view name, std::string* h, std::string* err) {
  std::string number;
  std::string_view text;
  if (lua_type(L, idx) == LUA_TSTRING) {
    std::size_t n;
    const char* s = lua_tolstring(L, idx, &n);
    text = std::string_view(s, n);
  } else if (lua_type(L, idx) == LUA_TNUMBER) {
    number = number_text(lua_tonumber(L, idx));
    text = number;
  } else {
    *err = "invalid: header '" + std::string(name) + "' has a value that is not a string or number";
    return false;
  }
  if (!io::is_field_value(text)) {
    *err = "invalid: header '" + std::string(name) + "' holds CR, LF or NUL";
    return false;
  }
  h->append(name);
  h->append(": ", 2);
  h->append(text);
  h->append("\r\n", 2);
  return true;
}

// Appends the head of a response from the handler's status (index 2) and
// headers (3) to *h (the connection's output, whose buffer stays from one
// response to the next: no string is made per header); false and *err on
// a status or header that cannot be written, with *h as it was.
bool response_head(lua_State* L, Conn* c, std::size_t length, bool chunked, std::string* h, bool* close_after,
                   std::string* err) {
  const bool is_num = lua_type(L, 2) == LUA_TNUMBER;
  const double sv = is_num ? lua_tonumber(L, 2) : 0;
  if (!is_num || !(sv >= 200 && sv <= 999) || sv != static_cast<int>(sv)) {
    *err = "invalid: status " + (is_num ? number_text(sv) : std::string("not a number")) + " (an integer from 200 to 999)";
    return false;
  }
  const std::size_t start = h->size();
  const auto fail = [&] {
    h->resize(start);
    return false;
  };
  const int status = static_cast<int>(sv);
  const bool no_body = status == 204 || status == 304;
  *h += io::status_line(status);
  bool has_date = false, asked_close = false;
  if (lua_istable(L, 3)) {
    lua_pushnil(L);
    while (lua_next(L, 3) != 0) {
      if (lua_type(L, -2) != LUA_TSTRING) {
        const bool listed = lua_type(L, -2) == LUA_TNUMBER;
        lua_pop(L, 2);
        *err = listed ? "invalid: headers must be a table of names to values"
                      : "invalid: header name not a string (letters, digits and !#$%&'*+-.^_`|~)";
        return fail();
      }
      std::size_t kn;
      const char* kp = lua_tolstring(L, -2, &kn);
      const std::string_view key(kp, kn);
      if (!io::is_token(key)) {
        lua_pop(L, 2);
        *err = "invalid: header name '" + std::string(key) + "' (letters, digits and !#$%&'*+-.^_`|~)";
        return fail();
      }
      if (io::iequals(key, "content-length") || io::iequals(key, "transfer-encoding")) {  // the host frames the body itself
        lua_pop(L, 1);
        continue;
      }
      if (io::iequals(key, "date")) has_date = true;
      if (io::iequals(key, "connection")) {
        if (lua_type(L, -1) == LUA_TSTRING && io::iequals(lua_tostring(L, -1), "close")) asked_close = true;
        lua_pop(L, 1);
        continue;
      }
      if (lua_istable(L, -1)) {
        const int n = static_cast<int>(lua_objlen(L, -1));
        for (int i = 1; i <= n; ++i) {
          lua_rawgeti(L, -1, i);
          const bool ok = add_header(L, -1, key, h, err);
          lua_pop(L, 1);
          if (!ok) {
            lua_pop(L, 2);
            return fail();
          }
        }
      } else if (!add_header(L, -1, key, h, err)) {
        lua_pop(L, 2);
        return fail();
      }
      lua_pop(L, 1);
    }
  } else if (!lua_isnil(L, 3)) {
    *err = "invalid: headers must be a table";
    return fail();
  }
  if (!has_date) *h += io::date_header();
  // A stream to an HTTP/1.0 client, which knows no chunks, is ended by
  // the close.
  const bool raw = chunked && c->minor == 0;
  if (!no_body && !raw) {
    if (chunked) *h += "Transfer-Encoding: chunked\r\n";
    else {
      char digits[24];
      const auto end = std::to_chars(digits, digits + sizeof digits, length).ptr;
      h->append("Content-Length: ", 16);
      h->append(digits, static_cast<std::size_t>(end - digits));
      h->append("\r\n", 2);
    }
  }
  io::HttpRequestParser& p = *c->parser;
  *close_after = asked_close || raw || !c->keep_alive || draining(c) || c->flight_streamed ||
                 (c->eof && p.ready.empty() && !p.in_message);
  if (*close_after) *h += "Connection: close\r\n";
  else if (c->minor == 0) *h += "Connection: keep-alive\r\n";
  h->append("\r\n", 2);
  return true;
}

// The request in flight is answered.
void answered(lua_State* L, Conn* c) {
  unwatch(L, c);
  c->in_flight = false;
  c->head_written = false;
  c->parser->answering = false;
  const double t = now();
  c->idle_since = t;
  if (c->tracked) c->tracked->in_flight.store(false, std::memory_order_relaxed);
  if (c->flight_streamed) {  // what the handler did not read of its body is dropped as it comes
    c->flight_streamed = false;
    c->parser->stream_buf.clear();
    if (c->parser->streaming) c->parser->discarding = true;
  }
  if (!c->keep_alive) {  // its response said Connection: close: what else was sent goes unanswered
    c->parser->ready.clear();
    c->closing = true;
  }
  c->request_since = t;
}

// ---- the methods

// conn:next(): the next request's method, path, query, headers, body
// and whether it is HTTP/1.0 (push_request); nil at the connection's
// end, or nil, "idle" (hibernate_after passed with nothing coming).
int m_next(lua_State* L) {
  Conn* c = check_conn(L);
  if (int n = busy(L, c)) return n;
  if (c->in_flight) return luaL_error(L, "invalid: a request is already being served on this connection");
  return run(L, c, Conn::kNext);
}

// conn:respond(status, headers, body[, stream]): true once written; nil,
// err where it cannot be written as given (nothing written); nil,
// "closed" where the client went away.
int m_respond(lua_State* L) {
  Conn* c = check_conn(L);
  if (int n = busy(L, c)) return n;
  if (!c->in_flight || c->head_written) {
    lua_pushnil(L);
    lua_pushliteral(L, "invalid: no request waits for a response on this connection");
    return 2;
  }
  const bool stream_body = lua_toboolean(L, 5);
  std::size_t blen = 0;
  const char* body = nullptr;
  if (lua_type(L, 4) == LUA_TSTRING) {
    body = lua_tolstring(L, 4, &blen);
  } else if (!lua_isnil(L, 4) && !lua_isnone(L, 4)) {
    lua_pushnil(L);
    lua_pushliteral(L, "invalid: body must be a string");
    return 2;
  }
  std::string err;
  bool close_after = false;
  if (!response_head(L, c, blen, stream_body, &c->out, &close_after, &err)) {
    lua_pushnil(L);
    lua_pushlstring(L, err.data(), err.size());
    return 2;
  }
  const int status = static_cast<int>(lua_tonumber(L, 2));
  if (close_after) c->keep_alive = false;
  c->no_body = c->responding_head || status == 204 || status == 304;
  c->raw_stream = stream_body && c->minor == 0;
  if (c->tracked) c->tracked->in_flight.store(false, std::memory_order_relaxed);
  if (!c->no_body && body) c->out.append(body, blen);
  if (stream_body) c->head_written = true;
  else answered(L, c);
  return run(L, c, Conn::kWrite);
}

// What conn:chunk and conn:finish return when no streamed response is
// open (2), or 0 where one is.
int no_stream_open(lua_State* L, Conn* c) {
  if (c->in_flight && c->head_written) return 0;
  lua_pushnil(L);
  lua_pushliteral(L, "invalid: no streamed response is open on this connection");
  return 2;
}

// conn:chunk(data): true once written (it waits while the client does
// not read), or nil, "closed".
int m_chunk(lua_State* L) {
  Conn* c = check_conn(L);
  if (int n = busy(L, c)) return n;
  std::size_t n;
  const char* data = luaL_checklstring(L, 2, &n);
  if (int r = no_stream_open(L, c)) return r;
  if (!c->no_body && n > 0 && c->raw_stream) {
    c->out.append(data, n);
  } else if (!c->no_body && n > 0) {
    char size[32];
    std::snprintf(size, sizeof size, "%zx\r\n", n);
    c->out += size;
    c->out.append(data, n);
    c->out += "\r\n";
  }
  return run(L, c, Conn::kWrite);
}

// conn:finish(): the streamed response's end.
int m_finish(lua_State* L) {
  Conn* c = check_conn(L);
  if (int n = busy(L, c)) return n;
  if (int r = no_stream_open(L, c)) return r;
  if (!c->no_body && !c->raw_stream) c->out += "0\r\n\r\n";
  answered(L, c);
  return run(L, c, Conn::kWrite);
}

// conn:body(): a streamed body's next chunk, nil at its end, nil, err
// where it ended early.
int m_body(lua_State* L) {
  Conn* c = check_conn(L);
  if (int n = busy(L, c)) return n;
  if (!c->in_flight || !c->flight_streamed) {
    lua_pushnil(L);
    return 1;
  }
  c->deadline = now() + c->parser->limits().request_timeout;
  return run(L, c, Conn::kBody);
}

// conn:park(): the socket back as a socket object, for a connection idle
// with nothing read and nothing owed (after next() said "idle"); nil
// otherwise.
int m_park(lua_State* L) {
  Conn* c = check_conn(L);
  if (c->dead || c->op != Conn::kNone || c->in_flight || !c->parser->ready.empty() || c->parser->in_message ||
      c->closing || !c->out.empty() || c->sock->stream()->buffered() != 0) {
    lua_pushnil(L);
    return 1;
  }
  c->dead = true;
  c->idle_timer = 0;  // io_forget drops it
  io_forget(L, c);
  if (c->tracked) set_tracked_fd(c->tracked.get(), -1);
  tcp_push(L, std::move(c->sock), kClient);
  return 1;
}

// conn:gone(): whether the client left while its request is served (the
// watch's finding, or a look now for a handler that has not waited since).
int m_gone(lua_State* L) {
  Conn* c = check_conn(L);
  if (!c->gone && !c->dead && c->in_flight && !c->flight_streamed && c->op == Conn::kNone) (void)probe(L, c);
  lua_pushboolean(L, c->gone || c->dead);
  return 1;
}

int m_close(lua_State* L) {
  Conn* c = check_conn(L);
  close_now(L, c);
  return 0;
}

// The connection's end: its __gc, or its process's end, which runs it on
// the process's worker whatever ended the process (a limit, a terminate,
// a crash, the host's shutdown). A request handed to the handler with
// nothing of its response written gets its 500 here, before the close (a
// handler that raises is answered by conn.lua itself). Plain HTTP only,
// as a write that may not wait: a TLS session ends with its process.
void finalize_conn(lua_State* L, void* object) {
  auto* c = static_cast<Conn*>(object);
  bool owed = c->in_flight && !c->head_written && !c->dead && !c->sock->stream()->tls();
  // The acceptor's release may answer the same request (its process
  // reported given up while this thread still ran, or the acceptor's own
  // end): whoever takes the entry's descriptor first under its lock
  // writes the 500, and clears it for the other. (A dead connection's
  // entry is no longer its own: a parked one's may name the next
  // process's socket.)
  std::unique_lock<std::mutex> lock;
  if (c->tracked && !c->dead) {
    lock = std::unique_lock(c->tracked->mu);
    owed = owed && c->tracked->fd >= 0 && c->tracked->in_flight.load(std::memory_order_relaxed);
    c->tracked->fd = -1;
    c->tracked->in_flight.store(false, std::memory_order_relaxed);
  }
  if (owed) {
    const std::string r = io::error_response(500);
    std::size_t done = 0;
    (void)c->sock->stream()->write(r, &done);
  }
  if (lock.owns_lock()) lock.unlock();
  close_now(L, c);
  if (c->internal) io_services(L).http.note_internal(-1);
  c->~Conn();
}

int m_gc(lua_State* L) {
  auto* c = static_cast<Conn*>(lua_touserdata(L, 1));
  run_finalizer(L, &c->fin);
  return 0;
}

// The connections' metatable (push_registry_table's make), made at the
// process's first connection.
void make_conn_meta(lua_State* L) {
  static const luaL_Reg methods[] = {
      {"next", m_next}, {"respond", m_respond}, {"chunk", m_chunk}, {"finish", m_finish},
      {"body", m_body}, {"park", m_park},       {"close", m_close}, {"gone", m_gone},
      {nullptr, nullptr},
  };
  lua_createtable(L, 0, 2);
  lua_createtable(L, 0, 8);
  for (const luaL_Reg* m = methods; m->name != nullptr; ++m) {  // each with the metatable (check_conn)
    lua_pushvalue(L, -2);
    lua_pushcclosure(L, m->func, 1);
    lua_setfield(L, -2, m->name);
  }
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, m_gc);
  lua_setfield(L, -2, "__gc");
}

double opt_field(lua_State* L, int idx, const char* name, double dflt) {
  lua_getfield(L, idx, name);
  const double v = lua_type(L, -1) == LUA_TNUMBER ? lua_tonumber(L, -1) : dflt;
  lua_pop(L, 1);
  return v;
}

// The string field name of the table at idx, or "" where it is not a
// string.
std::string str_field(lua_State* L, int idx, const char* name) {
  lua_getfield(L, idx, name);
  std::string v;
  if (lua_type(L, -1) == LUA_TSTRING) {
    std::size_t n;
    const char* p = lua_tolstring(L, -1, &n);
    v.assign(p, n);
  }
  lua_pop(L, 1);
  return v;
}

// The acceptor's handle on its server's configuration (config): its
// __gc, or the acceptor's end, drops the configuration's entry;
// connections that have it already keep it as long as they last.
char kConfMetaKey;  // the handles' metatable's registry key (registry_table.hpp)
struct ConfHandle {
  std::uint64_t id;
  HostFinalizer fin;  // its end (finalize_conf_handle): its __gc, or the process's
};

void finalize_conf_handle(lua_State*, void* object) {
  auto* h = static_cast<ConfHandle*>(object);
  g_confs.take(h->id);  // (the last reference, maybe: freed outside the lock)
  h->id = 0;
}

int conf_handle_gc(lua_State* L) {
  auto* h = static_cast<ConfHandle*>(lua_touserdata(L, 1));
  run_finalizer(L, &h->fin);
  return 0;
}

void make_conf_handle_meta(lua_State* L) {
  lua_createtable(L, 0, 1);
  lua_pushcfunction(L, conf_handle_gc);
  lua_setfield(L, -2, "__gc");
}

// http.config(conf): the server's configuration made once, for each of its
// connections' processes (http.conn): the limits (max_header_bytes,
// max_body_bytes, buffer_body_bytes, request_timeout, keepalive_timeout,
// hibernate_after), the handler (entry, module, method), the acceptor's
// pid, bound (a server of the host's own) and the TLS certificate and key
// (tls_cert, tls_key: PEM text, whose context is made here). Returns a
// handle, which the acceptor keeps as long as it serves, and the id its
// connections' processes are given; or nil, err where the TLS context
// cannot be made.
int f_config(lua_State* L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  auto conf = std::make_shared<ServerConf>();
  io::HttpLimits& lim = conf->limits;
  lim.max_header_bytes = static_cast<std::size_t>(opt_field(L, 1, "max_header_bytes", static_cast<double>(lim.max_header_bytes)));
  lim.max_body_bytes = static_cast<std::size_t>(opt_field(L, 1, "max_body_bytes", static_cast<double>(lim.max_body_bytes)));
  lim.buffer_body_bytes = static_cast<std::size_t>(opt_field(L, 1, "buffer_body_bytes", static_cast<double>(lim.buffer_body_bytes)));
  lim.request_timeout = opt_field(L, 1, "request_timeout", lim.request_timeout);
  lim.keepalive_timeout = opt_field(L, 1, "keepalive_timeout", lim.keepalive_timeout);
  lua_getfield(L, 1, "hibernate_after");
  if (lua_type(L, -1) == LUA_TBOOLEAN && !lua_toboolean(L, -1)) lim.hibernate_after = 0;
  else if (lua_type(L, -1) == LUA_TNUMBER) lim.hibernate_after = lua_tonumber(L, -1);
  lua_pop(L, 1);
  conf->entry = str_field(L, 1, "entry");
  conf->module = str_field(L, 1, "module");
  conf->method = str_field(L, 1, "method");
  if (conf->module.empty() || conf->method.empty())
    return luaL_error(L, "http.config: conf.module and conf.method must be set (http/server.lua conn_config)");
  conf->acceptor = str_field(L, 1, "acceptor");
  conf->bound = str_field(L, 1, "bound");
  const std::string cert = str_field(L, 1, "tls_cert");
  if (!cert.empty()) {  // https: the server's certificate and key
    std::string err;  // (checked by serve: http.check_tls, with the files' names)
    conf->tls = io::TlsContext::make(server_tls_options(cert, str_field(L, 1, "tls_key"), "cert", "key"), &err);
    if (!conf->tls) {
      lua_pushnil(L);
      lua_pushlstring(L, err.data(), err.size());
      return 2;
    }
  }
  auto* h = static_cast<ConfHandle*>(new_userdata_with(L, sizeof(ConfHandle), &kConfMetaKey, make_conf_handle_meta));
  new (h) ConfHandle{0, {}};
  track_finalizer(L, &h->fin, finalize_conf_handle, h);
  h->id = g_confs.add(std::move(conf));
  lua_pushnumber(L, static_cast<double>(h->id));
  return 2;
}

// http.server_conf(conf_id, key): what a connection's process seldom needs
// of its server's configuration: "entry", "acceptor" or "bound" (nil where
// it has none, or the server is gone).
int f_server_conf(lua_State* L) {
  const std::shared_ptr<const ServerConf> conf = g_confs.find(id_arg(L, 1));
  const std::string_view key = luaL_checkstring(L, 2);
  const std::string* v = nullptr;
  if (conf && key == "entry") v = &conf->entry;
  else if (conf && key == "acceptor") v = &conf->acceptor;
  else if (conf && key == "bound") v = &conf->bound;
  if (v == nullptr || v->empty()) lua_pushnil(L);
  else lua_pushlstring(L, v->data(), v->size());
  return 1;
}

// http.conn(sock, tracked_id, conf_id): the connection over the socket
// (which it takes out of its object), served as its server's
// configuration (config) says, the handler's module and method, and the
// client's "IP:PORT" (the same for each request on the connection, so
// given once, with the rest, rather than by a method of its own); or nil,
// "closed" where the socket is closed or the server gone.
int f_conn(lua_State* L) {
  SocketRef* s = to_socket(L, 1);
  luaL_argcheck(L, s != nullptr, 1, "socket expected");
  const std::uint64_t id = id_arg(L, 2);
  std::unique_ptr<io::TcpSocket> sock = tcp_take(L, s);
  // The configuration the acceptor gave the socket (hibernate) is taken
  // from it: it outlives an acceptor that ended since the spawn. A socket
  // the acceptor never held (a test's) finds it by its id.
  std::shared_ptr<const ServerConf> conf;
  if (sock && sock->serve_with) conf = std::static_pointer_cast<const ServerConf>(std::move(sock->serve_with));
  else conf = g_confs.find(id_arg(L, 3));
  if (!conf || !sock || !sock->stream()) {
    lua_pushnil(L);
    lua_pushliteral(L, "closed");
    return 2;
  }
  std::string ip;
  int port = 0;
  const char* family = "inet";
  std::string remote;
  if (sock->name(true, &ip, &port, &family).empty())
    remote = std::strcmp(family, "inet6") == 0 ? "[" + ip + "]:" + std::to_string(port) : ip + ":" + std::to_string(port);
  if (conf->tls && !sock->stream()->tls()) sock->stream()->start_tls(std::make_unique<io::TlsSession>(conf->tls));
  auto* c = static_cast<Conn*>(new_userdata_with(L, sizeof(Conn), &kConnMetaKey, make_conn_meta));
  new (c) Conn();
  track_finalizer(L, &c->fin, finalize_conn, c);
  c->sock = std::move(sock);
  c->parser = std::make_unique<io::HttpRequestParser>(conf->limits);
  c->tracked = id ? g_tracked.find(id) : nullptr;
  if (c->tracked) set_tracked_fd(c->tracked.get(), c->sock->fd());
  c->request_since = c->idle_since = now();
  if (!conf->bound.empty()) {  // the host's own server's: left out of the inspector's counts
    c->internal = true;
    io_services(L).http.note_internal(1);
  }
  lua_pushlstring(L, conf->module.data(), conf->module.size());
  lua_pushlstring(L, conf->method.data(), conf->method.size());
  lua_pushlstring(L, remote.data(), remote.size());
  return 4;
}

// http.check_tls(cert_pem, key_pem, cert_file, key_file): true where they make a server's TLS
// context; nil, err otherwise.
int f_check_tls(lua_State* L) {
  const char* cert_pem = luaL_checkstring(L, 1);  // (checked in order: the first bad one is named)
  const char* key_pem = luaL_checkstring(L, 2);
  const char* cert_file = luaL_checkstring(L, 3);
  const char* key_file = luaL_checkstring(L, 4);
  std::string err;
  if (!io::TlsContext::make(server_tls_options(cert_pem, key_pem, cert_file, key_file), &err)) {
    lua_pushnil(L);
    lua_pushlstring(L, err.data(), err.size());
    return 2;
  }
  lua_pushboolean(L, 1);
  return 1;
}

// The acceptor's handle on a connection (track): its __gc lets the
// connection go (its entry, and its socket where it is hibernated).
char kTrackMetaKey;  // the handles' metatable's registry key (registry_table.hpp)
struct TrackHandle {
  std::uint64_t id;
  HostFinalizer fin;  // its end (finalize_track): its __gc, or the process's
  // A hibernated connection's socket (hibernate), until wake gives it
  // back as an object, and the readiness watch on it (0: none).
  std::unique_ptr<io::TcpSocket> sock;
  std::uint64_t watch_tag;
  bool tls;  // https: its socket is peeked, not read (peek)
  // The socket's netpoller slot and its generation, from its first
  // hibernate (a socket keeps them wherever it moves, until it closes):
  // drain wakes the reader of that descriptor, and of no later one.
  int slot;
  std::uint32_t gen;
  // Its server's configuration, given to the socket at each hibernate
  // for the process that serves it (conn).
  std::shared_ptr<const ServerConf> conf;
};

// Drops the entry (a connection's process that looks it up later finds
// none: it is not drained). failed: its process failed (untrack), or the
// acceptor itself ended (finalize_track); a connection still open then
// (a given-up process's, or, at the acceptor's end, one still served) is
// shut, and a request it was answering gets its 500 here.
void release(std::uint64_t id, bool failed) {
  std::shared_ptr<Tracked> t = g_tracked.take(id);
  if (!t || !failed) return;
  std::lock_guard lock(t->mu);
  if (t->fd < 0) return;
  if (t->in_flight.load(std::memory_order_relaxed) && !t->tls) send_all_now(t->fd, io::error_response(500));
  ::shutdown(t->fd, SHUT_RDWR);
  // Claimed: a finalizer of the connection's that still runs (a thread
  // given up in a C call goes on) writes no second 500.
  t->fd = -1;
  t->in_flight.store(false, std::memory_order_relaxed);
}

TrackHandle* check_track(lua_State* L) {
  if (auto* h = static_cast<TrackHandle*>(to_userdata(L, 1, &kTrackMetaKey))) return h;
  luaL_typerror(L, 1, "http track handle");
  return nullptr;
}

// The hibernated socket, if any, closed and its watch dropped. (A
// process's end drops its watches itself: io_forget finds none then.)
void drop_hibernated(lua_State* L, TrackHandle* h) {
  if (h->watch_tag != 0) io_forget(L, h);
  h->watch_tag = 0;
  h->sock.reset();
}

void finalize_track(lua_State* L, void* object) {
  auto* h = static_cast<TrackHandle*>(object);
  drop_hibernated(L, h);
  if (h->id) release(h->id, true);
  h->id = 0;
  h->conf.reset();
}

int t_untrack(lua_State* L);
int t_drain(lua_State* L);
int t_hibernate(lua_State* L);
int t_wake(lua_State* L);
int t_gc(lua_State* L);

// The handles' metatable (push_registry_table's make), made at the first
// track: only the acceptor tracks, and each connection's process opens
// this module too (made by the opener, it was a fifth of the opener's cost).
void make_track_meta(lua_State* L) {
  lua_createtable(L, 0, 2);
  static const luaL_Reg methods[] = {{"untrack", t_untrack},
                                     {"drain", t_drain},
                                     {"hibernate", t_hibernate},
                                     {"wake", t_wake},
                                     {nullptr, nullptr}};
  lua_createtable(L, 0, 4);
  luaL_register(L, nullptr, methods);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, t_gc);
  lua_setfield(L, -2, "__gc");
}

// http.track(sock, tls, conf_id): the acceptor's handle on a connection
// and the id its process is given (which finds the drain flag by it);
// conf_id: its server's configuration (config), which the socket carries
// to its process from each hibernate.
int f_track(lua_State* L) {
  SocketRef* s = to_socket(L, 1);
  luaL_argcheck(L, s != nullptr && s->tcp != nullptr, 1, "TCP socket expected");
  const bool tls = lua_toboolean(L, 2);
  auto t = std::make_shared<Tracked>();
  t->tls = tls;
  const std::uint64_t id = g_tracked.add(std::move(t));
  auto* h = static_cast<TrackHandle*>(new_userdata_with(L, sizeof(TrackHandle), &kTrackMetaKey, make_track_meta));
  new (h) TrackHandle{id, {}, nullptr, 0, tls, -1, 0, g_confs.find(id_arg(L, 3))};
  track_finalizer(L, &h->fin, finalize_track, h);
  lua_pushnumber(L, static_cast<double>(id));
  return 2;
}

// handle:untrack(failed): the connection is done with (its process
// ended, or it closed while hibernated); failed: its process failed (see
// release).
int t_untrack(lua_State* L) {
  TrackHandle* h = check_track(L);
  // Within a step: a watch made in this same step is taken back before it
  // reaches the poller (io_forget would leave its yield to arm a slot the
  // close below frees, and the next socket opened would get it).
  if (h->watch_tag != 0) io_unwatch(L, h->watch_tag);
  h->watch_tag = 0;
  drop_hibernated(L, h);
  const std::uint64_t id = h->id;
  h->id = 0;
  if (id) release(id, lua_toboolean(L, 2));
  return 0;
}

// What a hibernated socket has: bytes (or a TLS record already read into
// its stream), its end (the client closed or reset it), or nothing yet.
// Over plain TCP the bytes are read into the socket's stream, where the
// connection's process parses them without a read of its own: a peek left
// them to that read, one system call more a connection. A TLS connection
// is peeked: its first bytes are the handshake's, which its process's
// session must read (the stream takes what it holds for plaintext).
enum class Waiting : std::uint8_t { kNothing, kBytes, kEnd };
Waiting peek(io::TcpSocket& sock, bool tls) {
  io::ByteStream& st = *sock.stream();
  if (st.dirty()) return Waiting::kBytes;
  if (!tls) {
    switch (st.read_ahead()) {
      case Io::kDone: return Waiting::kBytes;
      case Io::kAgain: return Waiting::kNothing;
      case Io::kEnd: return Waiting::kEnd;
    }
  }
  char byte;
  const ssize_t n = ::recv(sock.fd(), &byte, 1, MSG_PEEK);
  if (n > 0) return Waiting::kBytes;
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return Waiting::kNothing;
  return Waiting::kEnd;
}

void hibernated_ready(lua_State* L, lua_State* co, void* owner, std::uint64_t tag, bool failed,
                      std::string_view payload);

// Tells the acceptor what its hibernated socket has ("readable" or
// "hangup", with the id), or watches it for its next edge (an edge the
// poller saw before the watch completes it at once: the peek then tells
// whether it was for bytes, or waits again).
void look(lua_State* L, TrackHandle* h) {
  switch (peek(*h->sock, h->tls)) {
    case Waiting::kBytes: (void)post_self(L, "readable", static_cast<double>(h->id)); return;
    case Waiting::kEnd: (void)post_self(L, "hangup", static_cast<double>(h->id)); return;
    case Waiting::kNothing: break;
  }
  IoWaitCall call{io::io_cmd::kPollWait, h->sock->poller().tag_for(h->sock->slot(), io::NetPoller::kRead)};
  h->watch_tag = call.tag;
  io_watch(L, std::move(call), h, hibernated_ready);
}

void hibernated_ready(lua_State* L, lua_State*, void* owner, std::uint64_t tag, bool failed, std::string_view) {
  auto* h = static_cast<TrackHandle*>(owner);
  if (h->watch_tag != tag) return;
  h->watch_tag = 0;
  if (!h->sock) return;
  // The poller could not watch it: the acceptor drops it, as on a hangup.
  if (failed) (void)post_self(L, "hangup", static_cast<double>(h->id));
  else look(L, h);
}

// handle:hibernate(sock): the connection waits with no process, its
// socket held here (sock answers closed from then on) and watched: the
// acceptor gets "readable" (bytes came: wake, then a process serves
// them) or "hangup" (the client left), the id as the payload, once. A
// message rather than a task per connection: a task's coroutine, its
// closure and its wait cost the acceptor's heap about 1.1 KB a
// connection (BENCHMARKS.md, "Hibernated HTTP connections"). The
// deadline is the caller's. True; or, where its bytes are there already
// (a new client's request came with its connection), the socket back as
// a new object for the caller to serve now, with no message and no wake
// of the acceptor between; or nil, "closed" where sock is not a live TCP
// client with no call waiting (the caller closes it).
int t_hibernate(lua_State* L) {
  TrackHandle* h = check_track(L);
  SocketRef* s = to_socket(L, 2);
  luaL_argcheck(L, s != nullptr && s->tcp != nullptr, 2, "TCP socket expected");
  if (h->id == 0 || h->sock)
    return luaL_error(L, "hibernate: the connection is %s", h->id == 0 ? "untracked" : "hibernated already");
  std::unique_ptr<io::TcpSocket> sock = tcp_take(L, s);
  if (!sock || !sock->stream()) {
    lua_pushnil(L);
    lua_pushliteral(L, "closed");
    return 2;
  }
  if (h->slot < 0) {
    h->slot = sock->slot();
    h->gen = sock->poller().generation(h->slot);
  }
  sock->serve_with = h->conf;
  if (peek(*sock, h->tls) == Waiting::kBytes) {
    tcp_push(L, std::move(sock), kClient);
    return 1;
  }
  h->sock = std::move(sock);
  look(L, h);
  lua_pushboolean(L, 1);
  return 1;
}

// handle:wake(): the hibernated socket back as an object, its watch
// dropped, for the process that serves its next request (or for the 408
// of one that sent nothing); nil where none is held.
int t_wake(lua_State* L) {
  TrackHandle* h = check_track(L);
  if (!h->sock) {
    lua_pushnil(L);
    return 1;
  }
  if (h->watch_tag != 0) io_unwatch(L, h->watch_tag);
  h->watch_tag = 0;
  tcp_push(L, std::move(h->sock), kClient);
  return 1;
}

int t_gc(lua_State* L) {
  auto* h = static_cast<TrackHandle*>(lua_touserdata(L, 1));
  run_finalizer(L, &h->fin);
  return 0;
}

// handle:drain(): the server closed: the connection answers what it is
// serving with Connection: close and ends; an idle one ends now (a
// hibernated one the acceptor closes itself). The flag is set first, then
// the connection's read wait woken (its netpoller completion orders the
// two): an idle connection's next() then finds the flag and ends, a
// handler's watch reads nothing and watches on, and a connection past
// its close, or not yet waiting, is not troubled (the slot's generation
// moved on, or its next wait completes once at once).
int t_drain(lua_State* L) {
  TrackHandle* h = check_track(L);
  std::shared_ptr<Tracked> t = h->id ? g_tracked.find(h->id) : nullptr;
  if (!t) return 0;
  t->draining.store(true, std::memory_order_relaxed);
  if (h->slot >= 0) io_services(L).netpoll.wake_reader(h->slot, h->gen);
  return 0;
}

// http.error_response(status): the response the server writes by itself.
int f_error_response(lua_State* L) {
  const std::string r = io::error_response(static_cast<int>(luaL_checknumber(L, 1)));
  lua_pushlstring(L, r.data(), r.size());
  return 1;
}

}  // namespace

int open_http_conn(lua_State* L) {
  static const luaL_Reg funcs[] = {
      {"conn", f_conn},   {"track", f_track},
      {"config", f_config}, {"server_conf", f_server_conf},
      {"error_response", f_error_response},
      {"check_tls", f_check_tls},
      {nullptr, nullptr},
  };
  lua_createtable(L, 0, 7);
  luaL_register(L, nullptr, funcs);
  return 1;
}

}  // namespace host::lua
