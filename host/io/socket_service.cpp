// TCP, UDP and name lookups on the I/O thread (socket_service.hpp).
#include "host/io/socket_service.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <functional>
#include <future>
#include <limits>
#include <optional>

#include "host/io/tls_session.hpp"
#include "host/error.hpp"
#include "host/log.hpp"
#include "host/scheduler.hpp"

namespace host::io {
namespace {

constexpr std::uint64_t kNoDeadline = std::numeric_limits<std::uint64_t>::max();

[[noreturn]] void fail(std::string text) { throw CallError{std::move(text)}; }

// LuaSocket's words for the errors its users match on.
std::string socket_error(int rc) {
  switch (rc) {
    case UV_EADDRINUSE: return "address already in use";
    case UV_ECONNREFUSED: return "connection refused";
    case UV_EISCONN: return "already connected";
    case UV_EACCES: return "permission denied";
    case UV_ECONNABORTED:
    case UV_ECONNRESET:
    case UV_EPIPE:
    case UV_EOF:
    case UV_ENOTCONN:
    case UV_EBADF: return "closed";
    case UV_ETIMEDOUT: return "timeout";
    case UV_EAI_NONAME:
    case UV_EAI_NODATA:
    case UV_EAI_FAIL:
    case UV_EAI_AGAIN:
    case UV_EAI_ADDRFAMILY: return "host not found";
    default: return uv_strerror(rc);
  }
}

const CallValue& arg(const std::vector<CallValue>& args, std::size_t i) {
  static const CallValue nil;
  return i < args.size() ? args[i] : nil;
}

std::string one(double v) { return CallResultWriter().number(v).finish(); }
std::string one(std::string_view s) { return CallResultWriter().string(s).finish(); }
std::string ok() { return one(1.0); }

// An address's text, its port and family name.
struct Endpoint {
  std::string ip;
  int port = 0;
  const char* family = "inet";
};
Endpoint endpoint_of(const sockaddr* sa) {
  Endpoint e;
  char buf[INET6_ADDRSTRLEN] = "";
  if (sa->sa_family == AF_INET6) {
    auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    uv_ip6_name(in6, buf, sizeof buf);
    e.port = ntohs(in6->sin6_port);
    e.family = "inet6";
  } else {
    auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    uv_ip4_name(in, buf, sizeof buf);
    e.port = ntohs(in->sin_port);
  }
  e.ip = buf;
  return e;
}

// A numeric address, or nothing (then it is a name to look up). "*" is
// any address of the family.
std::optional<sockaddr_storage> numeric(const std::string& host, int port, int family) {
  sockaddr_storage ss{};
  std::string h = host;
  if (h == "*" || h.empty()) h = family == AF_INET6 ? "::" : "0.0.0.0";
  if (family != AF_INET6 && uv_ip4_addr(h.c_str(), port, reinterpret_cast<sockaddr_in*>(&ss)) == 0) return ss;
  if (family != AF_INET && uv_ip6_addr(h.c_str(), port, reinterpret_cast<sockaddr_in6*>(&ss)) == 0) return ss;
  return std::nullopt;
}

// One waiting request on a socket.
struct Req {
  Pid pid;
  std::uint64_t tag = 0;
  std::uint64_t deadline = kNoDeadline;  // the loop's ms (uv_now)
  char kind = 0;                         // receive: 'l' a line, 'n' n bytes, 'a' all
  std::size_t n = 0;
  std::string data;  // send: the bytes; receive: the prefix its result starts with
  std::size_t issued = 0;  // send: bytes handed to the kernel or libuv so far
  double base = 0;         // send: what its counts start from (LuaSocket's i - 1)
  bool detached = false;   // send: one that returned at once (send_now): nobody waits
  bool plain = false;      // send: queued before the socket became TLS: its bytes go as they are
};

// A receive's answers, its prefix before what came (LuaSocket's
// receive(pattern, prefix)); a send's, counted from its base.
std::string received(const Req& r, std::string_view got) {
  if (r.data.empty()) return one(got);
  return one(r.data + std::string(got));
}
std::string receive_failed(const Req& r, const char* err, std::string_view partial) {
  CallResultWriter w;
  w.nil().string(err).string(r.data + std::string(partial));
  return w.finish();
}
double sent_count(const Req& r) { return r.base + static_cast<double>(r.issued); }
std::string send_failed(const Req& r, const char* err) {
  CallResultWriter w;
  w.nil().string(err).number(sent_count(r));
  return w.finish();
}

// A socket's queues hold a request or two: a vector (nothing allocated
// while empty) rather than std::deque, which allocates its first block,
// about 600 bytes, as it is made: four a socket made an idle connection
// 2.3 KB larger.
template <typename T>
struct Fifo : std::vector<T> {
  void pop_front() { this->erase(this->begin()); }
};

struct Datagram {
  std::string data;
  Endpoint from;
};

}  // namespace

struct SocketService::Sock {
  SocketService* svc = nullptr;
  uv_loop_t* loop = nullptr;
  std::uint64_t id = 0;
  Pid owner;
  bool udp = false;
  int family = AF_UNSPEC;
  enum State { Master, Client, Server, Dead } state = Master;
  uv_handle_t* h = nullptr;  // a uv_tcp_t or uv_udp_t of its own allocation
  uv_timer_t* timer = nullptr;
  int handles = 0;
  bool forgotten = false;
  bool lingering = false;  // forgotten, its handle open until its detached sends are written
  bool connecting = false;
  SocketService::Shared* shared = nullptr;
  // Reads.
  std::string rbuf;
  bool eof = false;
  int read_error = 0;
  bool reading = false;
  bool shut_receive = false;
  Fifo<Req> receives;
  // Writes.
  Fifo<Req> sends;
  bool chunk_in_flight = false;
  int write_error = 0;
  // Accepts and connects.
  Fifo<Req> accepts;
  int pending_conns = 0;
  std::optional<Req> connect;
  std::vector<sockaddr_storage> connect_addrs;
  std::size_t next_addr = 0;
  // UDP.
  Fifo<Datagram> dgrams;
  bool udp_connected = false;
  // getstats / setstats.
  double bytes_in = 0, bytes_out = 0;
  double created = 0;
  // Options set before the socket existed (a master of no family yet).
  bool nodelay = false, keepalive = false;
  std::uint64_t linger_deadline = kNoDeadline;  // a lingering socket closes by then whatever is unsent
  // Given away (owner invalid) and not yet claimed: closed if nobody claims
  // it by then (the message that carried it was dropped, or its encode
  // failed on another value).
  std::uint64_t transit_deadline = kNoDeadline;
  // TLS (ssl.wrap): what is read is ciphertext, fed to the session, and
  // rbuf holds the plaintext it gives; sends are encrypted as they are
  // written. The handshake starts at dohandshake (or the first send or
  // receive) and sends wait for its end.
  std::unique_ptr<TlsSession> tls;
  bool tls_started = false;
  std::optional<Req> handshake;

  ~Sock() {
    if (shared) SocketService::release(shared);
  }
};

struct SockOps {
  using Sock = SocketService::Sock;

  static Scheduler& sched(Sock* s) { return s->svc->scheduler_; }
  static uv_loop_t* loop_of(Sock* s) { return s->loop; }
  static uv_stream_t* stream(Sock* s) { return reinterpret_cast<uv_stream_t*>(s->h); }
  static uv_tcp_t* tcp(Sock* s) { return reinterpret_cast<uv_tcp_t*>(s->h); }
  static uv_udp_t* udp(Sock* s) { return reinterpret_cast<uv_udp_t*>(s->h); }

  static void on_closed(uv_handle_t* h) {
    auto* s = static_cast<Sock*>(h->data);
    if (h->type == UV_TCP) delete reinterpret_cast<uv_tcp_t*>(h);
    else if (h->type == UV_UDP) delete reinterpret_cast<uv_udp_t*>(h);
    else delete reinterpret_cast<uv_timer_t*>(h);
    if (--s->handles == 0 && s->forgotten) delete s;
  }
  static void close_handle(Sock* s, uv_handle_t*& h) {
    if (!h) return;
    if (!uv_is_closing(h)) uv_close(h, on_closed);
    h = nullptr;
  }
  template <typename T>
  static void close_handle(Sock* s, T*& h) {
    uv_handle_t* g = reinterpret_cast<uv_handle_t*>(h);
    close_handle(s, g);
    h = nullptr;
  }

  // A fresh TCP or UDP handle for s (of family, or none yet).
  static int init_handle(Sock* s, uv_loop_t* loop) {
    int rc;
    if (s->udp) {
      auto* u = new uv_udp_t;
      rc = s->family == AF_UNSPEC ? uv_udp_init(loop, u) : uv_udp_init_ex(loop, u, static_cast<unsigned>(s->family));
      s->h = reinterpret_cast<uv_handle_t*>(u);
    } else {
      auto* t = new uv_tcp_t;
      rc = s->family == AF_UNSPEC ? uv_tcp_init(loop, t) : uv_tcp_init_ex(loop, t, static_cast<unsigned>(s->family));
      s->h = reinterpret_cast<uv_handle_t*>(t);
    }
    if (rc != 0) {
      if (s->udp) delete reinterpret_cast<uv_udp_t*>(s->h);
      else delete reinterpret_cast<uv_tcp_t*>(s->h);
      s->h = nullptr;
      return rc;
    }
    s->h->data = s;
    ++s->handles;
    return 0;
  }

  // ---- deadlines
  static std::uint64_t deadline(uv_loop_t* loop, const CallValue& timeout) {
    if (!timeout.is_number()) return kNoDeadline;
    // At most a year: a larger one (math.huge) is for ever in practice, and
    // beyond the integer range undefined.
    const double ms = std::min(std::max(0.0, timeout.number), 3.2e7) * 1000.0;
    return uv_now(loop) + static_cast<std::uint64_t>(ms + 0.5);
  }
  static void arm(Sock* s) {
    std::uint64_t next = kNoDeadline;
    for (const Fifo<Req>* q : {&s->receives, &s->sends, &s->accepts})
      for (const Req& r : *q) next = std::min(next, r.deadline);
    if (s->connect) next = std::min(next, s->connect->deadline);
    if (s->handshake) next = std::min(next, s->handshake->deadline);
    next = std::min({next, s->linger_deadline, s->transit_deadline});
    if (next == kNoDeadline) {
      if (s->timer) uv_timer_stop(s->timer);
      return;
    }
    if (!s->timer) {
      s->timer = new uv_timer_t;
      uv_timer_init(loop_of(s), s->timer);
      s->timer->data = s;
      ++s->handles;
    }
    const std::uint64_t now = uv_now(s->timer->loop);
    uv_timer_start(s->timer, on_timer, next > now ? next - now : 0, 0);
  }
  static void on_timer(uv_timer_t* t) {
    auto* s = static_cast<Sock*>(t->data);
    const std::uint64_t now = uv_now(t->loop);
    if (s->lingering && s->linger_deadline <= now) {  // the peer did not take the rest in time
      end_linger(s);
      return;
    }
    if (s->transit_deadline <= now) {  // given away, and nobody claimed it
      s->svc->forget(s);
      return;
    }
    // The receive at the head takes its partial data with its timeout.
    for (std::size_t i = 0; i < s->receives.size();) {
      if (s->receives[i].deadline > now) {
        ++i;
        continue;
      }
      Req r = std::move(s->receives[i]);
      s->receives.erase(s->receives.begin() + static_cast<std::ptrdiff_t>(i));
      std::string partial = i == 0 && !s->udp ? take_partial(s, r) : std::string();
      sched(s).complete_yield(r.pid, r.tag, receive_failed(r, "timeout", partial));
    }
    for (std::size_t i = 0; i < s->sends.size();) {
      if (s->sends[i].deadline > now) {
        ++i;
        continue;
      }
      Req r = std::move(s->sends[i]);
      s->sends.erase(s->sends.begin() + static_cast<std::ptrdiff_t>(i));
      finish_send(s, r, "timeout");
    }
    for (std::size_t i = 0; i < s->accepts.size();) {
      if (s->accepts[i].deadline > now) {
        ++i;
        continue;
      }
      Req r = std::move(s->accepts[i]);
      s->accepts.erase(s->accepts.begin() + static_cast<std::ptrdiff_t>(i));
      sched(s).complete_yield(r.pid, r.tag, {}, "timeout");
    }
    if (s->handshake && s->handshake->deadline <= now) {  // the handshake goes on; dohandshake may wait again
      Req r = std::move(*s->handshake);
      s->handshake.reset();
      sched(s).complete_yield(r.pid, r.tag, {}, "timeout");
    }
    if (s->connect && s->connect->deadline <= now) {
      Req r = std::move(*s->connect);
      s->connect.reset();
      s->connecting = false;
      // The attempt cannot be taken back: the socket goes with it.
      s->state = Sock::Dead;
      close_handle(s, s->h);
      sched(s).complete_yield(r.pid, r.tag, {}, "timeout");
    }
    arm(s);
  }

  // ---- reads
  static std::string strip_cr(std::string_view v) {
    std::string out;
    out.reserve(v.size());
    for (char c : v)
      if (c != '\r') out.push_back(c);
    return out;
  }
  // What a receive that ends early (timeout, closed) takes: for a line,
  // the buffer; for n bytes, up to n; for all, the buffer.
  static std::string take_partial(Sock* s, const Req& r) {
    std::string out;
    if (r.kind == 'n') {
      out = s->rbuf.substr(0, std::min(r.n, s->rbuf.size()));
      s->rbuf.erase(0, out.size());
    } else {
      out = r.kind == 'l' ? strip_cr(s->rbuf) : s->rbuf;
      s->rbuf.clear();
    }
    resume_reading(s);
    return out;
  }
  static bool closed_for_reading(Sock* s) {
    return s->eof || s->read_error || s->state == Sock::Dead || s->shut_receive ||
           (s->tls && (s->tls->state() == TlsSession::State::Closed || s->tls->state() == TlsSession::State::Failed));
  }
  // Why a receive that cannot complete ends: a TLS failure's text, else closed.
  static const char* read_end(Sock* s) {
    if (s->tls && s->tls->state() == TlsSession::State::Failed) return s->tls->error().c_str();
    return "closed";
  }

  // Completes the receives the buffer satisfies, in order.
  static void serve_receives(Sock* s) {
    while (!s->receives.empty()) {
      if (s->tls) tls_pull(s);
      Req& r = s->receives.front();
      std::optional<std::string> got;
      if (r.kind == 'l') {
        const auto nl = s->rbuf.find('\n');
        if (nl != std::string::npos) {
          got = strip_cr(std::string_view(s->rbuf).substr(0, nl));
          s->rbuf.erase(0, nl + 1);
        }
      } else if (r.kind == 'n') {
        if (s->rbuf.size() >= r.n) {
          got = s->rbuf.substr(0, r.n);
          s->rbuf.erase(0, r.n);
        }
      } else if (r.kind == 'y') {  // receiveany: what is there, up to n
        if (!s->rbuf.empty()) {
          const std::size_t k = std::min(r.n, s->rbuf.size());
          got = s->rbuf.substr(0, k);
          s->rbuf.erase(0, k);
        }
      } else if (closed_for_reading(s)) {  // 'a': all, once the peer closed
        got = std::move(s->rbuf);
        s->rbuf.clear();
      }
      Req done = std::move(r);
      if (got) {
        s->receives.pop_front();
        sched(s).complete_yield(done.pid, done.tag, received(done, *got));
        continue;
      }
      if (closed_for_reading(s)) {
        s->receives.pop_front();
        std::string partial = take_partial(s, done);
        sched(s).complete_yield(done.pid, done.tag, receive_failed(done, read_end(s), partial));
        continue;
      }
      r = std::move(done);  // still waiting
      break;
    }
    resume_reading(s);
    arm(s);
  }

  // Reading runs while the buffer is under the read-ahead, or under what
  // the waiting receive needs.
  static std::size_t want(Sock* s) {
    std::size_t w = SocketService::kReadAhead;
    if (!s->receives.empty() && s->receives.front().kind == 'n') w = std::max(w, s->receives.front().n);
    if (!s->receives.empty() && s->receives.front().kind != 'n') w = std::numeric_limits<std::size_t>::max();
    return w;
  }
  static void resume_reading(Sock* s) {
    if (s->udp || s->state != Sock::Client || !s->h || s->reading || closed_for_reading(s)) return;
    if (s->tls && !s->tls_started) return;  // the peer's first flight waits for the handshake's start
    if (s->rbuf.size() >= want(s)) return;
    if (uv_read_start(stream(s), on_alloc, on_read) == 0) s->reading = true;
  }
  static void on_alloc(uv_handle_t*, std::size_t, uv_buf_t* buf) {
    static thread_local char chunk[65536];  // one read at a time on the loop thread, copied out at once
    *buf = uv_buf_init(chunk, sizeof chunk);
  }
  static void on_read(uv_stream_t* st, ssize_t n, const uv_buf_t* buf) {
    auto* s = static_cast<Sock*>(st->data);
    if (n > 0) {
      if (s->tls) s->tls->feed(std::string_view(buf->base, static_cast<std::size_t>(n)));
      else s->rbuf.append(buf->base, static_cast<std::size_t>(n));
      s->bytes_in += static_cast<double>(n);
    } else if (n < 0) {
      if (n == UV_EOF) s->eof = true;
      else s->read_error = static_cast<int>(n);
      uv_read_stop(st);
      s->reading = false;
    }
    if (s->tls) {
      tls_progress(s);
      if (s->forgotten) return;
      if (s->reading && !s->tls_started) {
        uv_read_stop(st);
        s->reading = false;
      }
    }
    if (s->reading && s->rbuf.size() >= want(s)) {
      uv_read_stop(st);
      s->reading = false;
    }
    serve_receives(s);
  }

  // ---- TLS (ssl.wrap): the session's ciphertext goes out, what comes in
  // is fed to it, and rbuf gets its plaintext.

  // Writes what the session has for the peer: to the kernel where it takes
  // it, the rest handed to libuv. counted: a send's own bytes (one chunk
  // in flight at a time, as a plain send's); else the handshake's and
  // alerts', small, written behind whatever is queued.
  static void tls_flush(Sock* s, bool counted) {
    if (!s->tls || s->tls->output_size() == 0) return;
    std::string out;
    s->tls->take_output(out);
    if (!s->h || s->write_error || s->state != Sock::Client) return;
    std::size_t done = 0;
    while (done < out.size()) {
      uv_buf_t b = uv_buf_init(out.data() + done, static_cast<unsigned>(out.size() - done));
      const int w = uv_try_write(stream(s), &b, 1);
      if (w > 0) {
        done += static_cast<std::size_t>(w);
        continue;
      }
      if (w != UV_EAGAIN && w != 0) {
        s->write_error = w;
        return;
      }
      break;
    }
    if (done == out.size()) return;
    auto* c = new Chunk{{}, out.substr(done), s, counted};
    c->req.data = c;
    uv_buf_t cb = uv_buf_init(c->data.data(), static_cast<unsigned>(c->data.size()));
    if (const int rc = uv_write(&c->req, stream(s), &cb, 1, on_written); rc != 0) {
      delete c;
      s->write_error = rc;
      return;
    }
    ++s->handles;
    if (counted) s->chunk_in_flight = true;
  }

  // The handshake starts (once): at dohandshake, or a send or receive
  // before it.
  static void tls_start(Sock* s) {
    if (!s->tls || s->tls_started) return;
    s->tls_started = true;
    tls_progress(s);
    resume_reading(s);
  }

  // Advances the handshake with what came, answers dohandshake at its end,
  // and decrypts what the receives may take.
  static void tls_progress(Sock* s) {
    if (!s->tls || !s->tls_started) return;
    TlsSession& t = *s->tls;
    if (t.state() == TlsSession::State::Handshaking) {
      t.handshake();
      tls_flush(s, false);
      if (t.state() == TlsSession::State::Handshaking && (s->eof || s->read_error || s->write_error || s->state == Sock::Dead))
        t.abort("closed");
      if (t.state() != TlsSession::State::Handshaking) {
        if (s->handshake) {
          Req r = std::move(*s->handshake);
          s->handshake.reset();
          if (t.state() == TlsSession::State::Failed) sched(s).complete_yield(r.pid, r.tag, {}, t.error());
          else sched(s).complete_yield(r.pid, r.tag, CallResultWriter().boolean(true).finish());
        }
        pump_sends(s);  // the sends that waited for it: written, or answered closed
        if (s->forgotten) return;
        arm(s);
      }
    }
    if (t.state() == TlsSession::State::Open) tls_pull(s);
  }

  // Plaintext from the session into rbuf, up to what the receives want.
  static void tls_pull(Sock* s) {
    TlsSession& t = *s->tls;
    if (t.state() != TlsSession::State::Open) return;
    const std::size_t w = want(s);
    if (s->rbuf.size() < w) t.read(s->rbuf, w - s->rbuf.size());
    tls_flush(s, false);  // a read may answer the peer (a key update)
  }

  // A clean close: the close_notify, if the kernel takes it now.
  static void tls_goodbye(Sock* s) {
    if (!s->tls || !s->h || s->write_error || s->state != Sock::Client || s->tls->state() != TlsSession::State::Open) return;
    s->tls->close();
    std::string out;
    s->tls->take_output(out);
    uv_buf_t b = uv_buf_init(out.data(), static_cast<unsigned>(out.size()));
    if (!out.empty()) uv_try_write(stream(s), &b, 1);
  }

  // ---- writes
  struct Chunk {
    uv_write_t req{};
    std::string data;
    Sock* s;
    bool counted = true;  // a send's chunk (chunk_in_flight); else TLS's own messages
  };
  // A send leaves the queue: its waiter answered, or (detached) its bytes
  // leave the shared count.
  // err: nullptr for a send that went whole, else its failure's word.
  static void finish_send(Sock* s, Req& done, const char* err) {
    if (done.detached) {
      s->shared->unsent.fetch_sub(static_cast<std::int64_t>(done.data.size()), std::memory_order_release);
      if (err) s->shared->failed.store(true, std::memory_order_release);
      return;
    }
    s->shared->waiting.fetch_sub(1, std::memory_order_release);  // counted by the object's send (socket_object.cpp)
    sched(s).complete_yield(done.pid, done.tag, err ? send_failed(done, err) : one(sent_count(done)));
  }

  static void pump_sends(Sock* s) {
    while (!s->sends.empty() && !s->chunk_in_flight) {
      Req& r = s->sends.front();
      if (s->write_error || s->state == Sock::Dead || !s->h || (s->tls && s->tls->state() == TlsSession::State::Failed)) {
        Req done = std::move(r);
        s->sends.pop_front();
        finish_send(s, done, "closed");
        continue;
      }
      if (s->tls && !r.plain && s->tls->state() == TlsSession::State::Handshaking) {
        tls_start(s);  // a send starts the handshake, and waits for its end
        break;
      }
      while (r.issued < r.data.size()) {
        const std::size_t n = std::min(SocketService::kWriteChunk, r.data.size() - r.issued);
        if (s->tls && !r.plain) {  // encrypted a chunk at a time; what the kernel does not take waits in libuv
          if (!s->tls->write(std::string_view(r.data).substr(r.issued, n))) break;
          r.issued += n;
          s->bytes_out += static_cast<double>(n);
          tls_flush(s, true);
          if (s->chunk_in_flight || s->write_error) break;
          continue;
        }
        uv_buf_t b = uv_buf_init(r.data.data() + r.issued, static_cast<unsigned>(n));
        const int w = uv_try_write(stream(s), &b, 1);
        if (w > 0) {
          r.issued += static_cast<std::size_t>(w);
          s->bytes_out += w;
          continue;
        }
        if (w != UV_EAGAIN && w != 0) {
          s->write_error = w;
          break;
        }
        // The kernel's buffer is full: this chunk waits in libuv.
        auto* c = new Chunk{{}, r.data.substr(r.issued, n), s};
        c->req.data = c;
        uv_buf_t cb = uv_buf_init(c->data.data(), static_cast<unsigned>(c->data.size()));
        if (const int rc = uv_write(&c->req, stream(s), &cb, 1, on_written); rc != 0) {
          delete c;
          s->write_error = rc;
          break;
        }
        ++s->handles;  // the chunk keeps the socket's memory until its callback
        s->chunk_in_flight = true;
        r.issued += n;
        s->bytes_out += static_cast<double>(n);
        break;
      }
      if (s->write_error || (s->tls && s->tls->state() == TlsSession::State::Failed)) continue;  // answered "closed" at the loop's top
      if (r.issued < r.data.size()) break;  // behind the chunk in flight
      Req done = std::move(r);
      s->sends.pop_front();
      finish_send(s, done, nullptr);
    }
    // A forgotten socket lingers only for its detached sends.
    if (s->lingering && ((s->sends.empty() && !s->chunk_in_flight) || s->write_error)) {
      tls_goodbye(s);
      end_linger(s);
      return;
    }
    arm(s);
  }
  static void on_written(uv_write_t* req, int status) {
    auto* c = static_cast<Chunk*>(req->data);
    Sock* s = c->s;
    const bool counted = c->counted;
    delete c;
    if (counted) s->chunk_in_flight = false;
    if (status < 0 && !s->write_error) s->write_error = status;
    if (--s->handles == 0 && s->forgotten) {
      delete s;
      return;
    }
    if (!s->forgotten || s->lingering) pump_sends(s);
  }

  // ---- accepts
  static void on_connection(uv_stream_t* server, int status) {
    auto* s = static_cast<Sock*>(server->data);
    if (status < 0) {
      log::logger().debug("socket: accept on {} failed: {}", s->id, uv_strerror(status));
      return;
    }
    ++s->pending_conns;
    serve_accepts(s);
  }
  static void serve_accepts(Sock* s) {
    while (!s->accepts.empty() && s->pending_conns > 0) {
      Req r = std::move(s->accepts.front());
      s->accepts.pop_front();
      --s->pending_conns;
      SocketService* target = s->svc->accept_target_ ? s->svc->accept_target_() : s->svc;
      if (target != s->svc) {
        accept_elsewhere(s, r, *target);
        continue;
      }
      Sock* c = s->svc->make(loop_of(s), r.pid, false, AF_UNSPEC);
      if (!c) {
        sched(s).complete_yield(r.pid, r.tag, {}, "closed");
        continue;
      }
      if (const int rc = uv_accept(stream(s), stream(c)); rc != 0) {
        s->svc->forget(c);
        sched(s).complete_yield(r.pid, r.tag, {}, socket_error(rc));
        continue;
      }
      c->state = Sock::Client;
      if (s->nodelay) uv_tcp_nodelay(tcp(c), 1);
      resume_reading(c);
      if (!sched(s).complete_yield(r.pid, r.tag, CallResultWriter().moved(c->id, "+tcp{client}").finish()))
        s->svc->forget(c);
    }
    arm(s);
  }

  // The connection is accepted here into a handle of the moment, and its
  // descriptor, duplicated, goes to the target shard, which makes it a
  // socket there and completes the accept.
  static void accept_elsewhere(Sock* s, const Req& r, SocketService& target) {
    auto* tmp = new uv_tcp_t;
    uv_tcp_init(loop_of(s), tmp);
    const auto drop_tmp = [tmp] {
      uv_close(reinterpret_cast<uv_handle_t*>(tmp), [](uv_handle_t* h) { delete reinterpret_cast<uv_tcp_t*>(h); });
    };
    int rc = uv_accept(stream(s), reinterpret_cast<uv_stream_t*>(tmp));
    uv_os_fd_t fd = -1;
    if (rc == 0) rc = uv_fileno(reinterpret_cast<uv_handle_t*>(tmp), &fd);
    const int dup = rc == 0 ? ::fcntl(fd, F_DUPFD_CLOEXEC, 0) : -1;
    if (rc == 0 && dup < 0) rc = -errno;
    drop_tmp();
    if (rc != 0) {
      sched(s).complete_yield(r.pid, r.tag, {}, socket_error(rc));
      return;
    }
    target.adopt_accepted(dup, r.pid, r.tag, s->nodelay);
  }

  // ---- connects
  // Connects to the next address; a socket that tried one already (and
  // failed) is made anew first, of the next address's family.
  static void try_connect(Sock* s) {
    int rc = UV_EAI_NONAME;
    while (s->next_addr < s->connect_addrs.size()) {
      const sockaddr_storage& a = s->connect_addrs[s->next_addr];
      if (s->next_addr++ > 0 && (rc = renew_handle(s, a.ss_family)) != 0) break;
      auto* req = new uv_connect_t;
      req->data = s;
      rc = uv_tcp_connect(req, tcp(s), reinterpret_cast<const sockaddr*>(&a), on_connected);
      if (rc == 0) {
        ++s->handles;
        return;
      }
      delete req;
    }
    finish_connect(s, rc);
  }
  // A fresh handle of family for s; a failure leaves s dead (no handle).
  static int renew_handle(Sock* s, int family) {
    uv_loop_t* loop = loop_of(s);
    close_handle(s, s->h);
    s->family = family;
    const int rc = init_handle(s, loop);
    if (rc != 0) s->state = Sock::Dead;
    return rc;
  }
  static void on_connected(uv_connect_t* req, int status) {
    auto* s = static_cast<Sock*>(req->data);
    delete req;
    if (--s->handles == 0 && s->forgotten) {
      delete s;
      return;
    }
    if (s->forgotten || !s->connect) return;  // timed out or closed meanwhile
    if (status == 0 || s->next_addr >= s->connect_addrs.size()) {
      finish_connect(s, status);
      return;
    }
    try_connect(s);  // the next address
  }
  static void finish_connect(Sock* s, int status) {
    if (!s->connect) return;
    Req r = std::move(*s->connect);
    s->connect.reset();
    s->connecting = false;
    s->connect_addrs.clear();
    if (status != 0) {
      sched(s).complete_yield(r.pid, r.tag, {}, socket_error(status));
    } else {
      s->state = Sock::Client;
      if (s->nodelay) uv_tcp_nodelay(tcp(s), 1);
      if (s->keepalive) uv_tcp_keepalive(tcp(s), 1, 60);
      resume_reading(s);
      sched(s).complete_yield(r.pid, r.tag, CallResultWriter().moved(s->id, "=tcp{client}").finish());
    }
    arm(s);
  }

  // ---- UDP
  static void on_udp_alloc(uv_handle_t*, std::size_t, uv_buf_t* buf) {
    static thread_local char chunk[65536];
    *buf = uv_buf_init(chunk, sizeof chunk);
  }
  static void on_udp_read(uv_udp_t* u, ssize_t n, const uv_buf_t* buf, const sockaddr* from, unsigned) {
    auto* s = static_cast<Sock*>(u->data);
    if (n < 0 || !from) return;  // nothing more now (or an error LuaSocket does not report)
    Datagram d{std::string(buf->base, static_cast<std::size_t>(n)), endpoint_of(from)};
    s->bytes_in += static_cast<double>(n);
    s->dgrams.push_back(std::move(d));
    if (s->dgrams.size() >= SocketService::kDatagramQueue) {
      uv_udp_recv_stop(u);
      s->reading = false;
    }
    serve_datagrams(s);
  }
  static void serve_datagrams(Sock* s) {
    while (!s->receives.empty() && !s->dgrams.empty()) {
      Req r = std::move(s->receives.front());
      s->receives.pop_front();
      Datagram d = std::move(s->dgrams.front());
      s->dgrams.pop_front();
      if (d.data.size() > r.n) d.data.resize(r.n);  // as recvfrom: the rest is lost
      CallResultWriter w;
      w.string(d.data);
      if (r.kind == 'f') w.string(d.from.ip).number(d.from.port);
      sched(s).complete_yield(r.pid, r.tag, w.finish());
    }
    if (!s->reading && s->h && s->state != Sock::Dead && s->dgrams.size() < SocketService::kDatagramQueue &&
        !s->receives.empty()) {
      if (uv_udp_recv_start(udp(s), on_udp_alloc, on_udp_read) == 0) s->reading = true;
    }
    arm(s);
  }

  // Requests on s from processes other than its owner answer closed.
  static void drop_requests_of_others(Sock* s) {
    auto others = [&](const Req& r) { return !(r.pid == s->owner); };
    for (auto it = s->receives.begin(); it != s->receives.end();) {
      if (!others(*it)) { ++it; continue; }
      sched(s).complete_yield(it->pid, it->tag, receive_failed(*it, "closed", {}));
      it = s->receives.erase(it);
    }
    for (auto it = s->sends.begin(); it != s->sends.end();) {
      if (it->detached || !others(*it)) { ++it; continue; }
      finish_send(s, *it, "closed");
      it = s->sends.erase(it);
    }
    for (auto it = s->accepts.begin(); it != s->accepts.end();) {
      if (!others(*it)) { ++it; continue; }
      sched(s).complete_yield(it->pid, it->tag, {}, "closed");
      it = s->accepts.erase(it);
    }
    if (s->connect && others(*s->connect)) {
      sched(s).complete_yield(s->connect->pid, s->connect->tag, {}, "closed");
      s->connect.reset();
      s->connecting = false;
    }
    if (s->handshake && others(*s->handshake)) {
      sched(s).complete_yield(s->handshake->pid, s->handshake->tag, {}, "closed");
      s->handshake.reset();
    }
    arm(s);
  }

  // ---- closing
  // A forgotten socket with sends that returned at once still unwritten,
  // or a chunk still in libuv's hands: it answers everything else closed
  // and stops reading, and its handle stays until those are written
  // (pump_sends then shuts it), the socket fails, or kLinger passes.
  static constexpr std::uint64_t kLingerMs = 10000;
  static bool linger(Sock* s) {
    // Sends that returned at once, or a chunk in libuv's hands (a timed-out
    // send counted it as sent): both must still go out.
    const bool pending = s->chunk_in_flight ||
                         std::any_of(s->sends.begin(), s->sends.end(), [](const Req& r) { return r.detached; });
    if (!pending || s->write_error || s->state != Sock::Client || !s->h) return false;
    // A TLS connection whose handshake did not end cannot write them.
    if (s->tls && s->tls->state() != TlsSession::State::Open) return false;
    for (auto it = s->sends.begin(); it != s->sends.end();) {
      if (it->detached) {
        ++it;
        continue;
      }
      finish_send(s, *it, "closed");
      it = s->sends.erase(it);
    }
    for (const Req& r : s->receives) sched(s).complete_yield(r.pid, r.tag, receive_failed(r, "closed", {}));
    s->receives.clear();
    if (s->reading) uv_read_stop(stream(s));
    s->reading = false;
    s->shut_receive = true;
    s->lingering = true;
    s->svc->lingering_.insert(s);
    s->linger_deadline = uv_now(loop_of(s)) + kLingerMs;
    arm(s);
    return true;
  }

  static void end_linger(Sock* s) {
    s->lingering = false;
    s->svc->lingering_.erase(s);
    shut(s);
  }

  // Answers every waiting request "closed" and closes the handles.
  static void shut(Sock* s) {
    s->state = Sock::Dead;
    for (const Req& r : s->receives) sched(s).complete_yield(r.pid, r.tag, receive_failed(r, "closed", {}));
    for (Req& r : s->sends) finish_send(s, r, "closed");
    for (const Req& r : s->accepts) sched(s).complete_yield(r.pid, r.tag, {}, "closed");
    s->receives.clear();
    s->sends.clear();
    s->accepts.clear();
    if (s->connect) {
      sched(s).complete_yield(s->connect->pid, s->connect->tag, {}, "closed");
      s->connect.reset();
    }
    if (s->handshake) {
      sched(s).complete_yield(s->handshake->pid, s->handshake->tag, {}, "closed");
      s->handshake.reset();
    }
    close_handle(s, s->h);
    close_handle(s, s->timer);
    s->rbuf.clear();
    s->rbuf.shrink_to_fit();
    s->dgrams.clear();
  }
};

SocketService::SocketService(Scheduler& scheduler, IoLoop& loop, unsigned shard_index, unsigned shard_count)
    : scheduler_(scheduler), loop_(loop), shard_index_(shard_index), shard_count_(shard_count) {
  loop_.on_stop([this](uv_loop_t*) { stop_all(); });
}

SocketService::~SocketService() = default;

void SocketService::post_op(const Pid& pid, std::uint64_t tag, std::vector<CallValue> args) {
  if (!loop_.post([this, pid, tag, a = std::move(args)](uv_loop_t* loop) mutable { run_op(loop, pid, tag, std::move(a)); }))
    scheduler_.complete_yield(pid, tag, {}, "closed");
}

void SocketService::adopt_accepted(int fd, const Pid& pid, std::uint64_t tag, bool nodelay) {
  const bool posted = loop_.post([this, fd, pid, tag, nodelay](uv_loop_t* loop) {
    Sock* c = make(loop, pid, false, AF_UNSPEC);
    if (!c) {
      ::close(fd);
      scheduler_.complete_yield(pid, tag, {}, "closed");
      return;
    }
    if (const int rc = uv_tcp_open(SockOps::tcp(c), fd); rc != 0) {
      ::close(fd);
      forget(c);
      scheduler_.complete_yield(pid, tag, {}, socket_error(rc));
      return;
    }
    c->state = Sock::Client;
    if (nodelay) uv_tcp_nodelay(SockOps::tcp(c), 1);
    SockOps::resume_reading(c);
    if (!scheduler_.complete_yield(pid, tag, CallResultWriter().moved(c->id, "+tcp{client}").finish())) forget(c);
  });
  if (!posted) {
    ::close(fd);
    scheduler_.complete_yield(pid, tag, {}, "closed");
  }
}

SocketShards::SocketShards(Scheduler& scheduler, const std::vector<IoLoop*>& loops) {
  const auto n = static_cast<unsigned>(loops.size());
  for (unsigned i = 0; i < n; ++i) shards_.push_back(std::make_unique<SocketService>(scheduler, *loops[i], i, n));
  if (n > 1)
    for (auto& shard : shards_) shard->set_accept_target([this] { return &next(); });
}

void SocketShards::dispatch(CommandRequest&& req) {
  std::vector<CallValue> args;
  if (!read_call_request(req, args)) return;
  // A call on a socket goes to its shard; one that makes a socket, or
  // looks a name up, to the next.
  const bool on_socket = args.size() > 1 && args[1].is_number();
  SocketService& shard = on_socket ? of(static_cast<std::uint64_t>(args[1].number)) : next();
  shard.post_op(req.pid, req.tag, std::move(args));
}

void SocketShards::close_owned(const Pid& owner) {
  for (auto& shard : shards_) shard->close_owned(owner);
}

std::size_t SocketShards::sockets() const {
  std::size_t n = 0;
  for (const auto& shard : shards_) n += shard->sockets();
  return n;
}

void SocketService::note_owner(const Pid& owner, int delta) {
  std::lock_guard lock(owners_mu_);
  int& n = owners_[owner];
  n += delta;
  if (n <= 0) owners_.erase(owner);
  any_owners_.store(!owners_.empty(), std::memory_order_release);
}

void SocketService::close_owned(const Pid& owner) {
  // Every process's exit comes here: most held no socket, and while no
  // process holds one they take no lock. (Acquire: pairs with note_owner's
  // store, which a claim or the socket's making ordered before this
  // process's end.)
  if (!any_owners_.load(std::memory_order_acquire)) return;
  {
    std::lock_guard lock(owners_mu_);
    if (owners_.find(owner) == owners_.end()) return;
  }
  auto done = std::make_shared<std::promise<void>>();
  auto closed = done->get_future();
  const bool posted = loop_.post([this, owner, done](uv_loop_t*) {
    if (auto it = owned_.find(owner); it != owned_.end()) {
      const auto ids = it->second;
      for (std::uint64_t id : ids)
        if (auto s = socks_.find(id); s != socks_.end()) forget(s->second);
    }
    done->set_value();
  });
  // Its monitors hear of its end only once its sockets are closed
  // (docs/LUA_API.md, socket); a loop that does not answer within a second is not waited
  // for longer.
  if (posted) closed.wait_for(std::chrono::seconds(1));
}

void SocketService::give(std::uint64_t id, const Pid& from) {
  loop_.post([this, id, from](uv_loop_t* loop) {
    auto it = socks_.find(id);
    if (it == socks_.end() || !(it->second->owner == from)) return;  // closed, or claimed already
    Sock* s = it->second;
    if (auto o = owned_.find(from); o != owned_.end()) {
      o->second.erase(id);
      if (o->second.empty()) owned_.erase(o);
    }
    note_owner(from, -1);
    s->owner = Pid{};
    s->transit_deadline = uv_now(loop) + kTransitMs;
    SockOps::arm(s);
  });
}

void SocketService::claim(std::uint64_t id, const Pid& new_owner) {
  // Counted for new_owner at once, on this thread: its exit hook may run
  // before the loop does the move below, and must then find it owns a
  // socket (its close_owned, posted after this, closes it). (Not an
  // alive() check on the loop: a process claims in its Init, while it is
  // not alive yet.)
  note_owner(new_owner, 1);
  const bool posted = loop_.post([this, id, new_owner](uv_loop_t*) {
    auto it = socks_.find(id);
    if (it == socks_.end() || it->second->owner == new_owner) {  // closed meanwhile, or its own already
      note_owner(new_owner, -1);
      return;
    }
    Sock* s = it->second;
    if (s->owner.valid()) {  // not given away first (a native sender's bytes): taken from its owner
      if (auto o = owned_.find(s->owner); o != owned_.end()) {
        o->second.erase(id);
        if (o->second.empty()) owned_.erase(o);
      }
      note_owner(s->owner, -1);
    }
    s->owner = new_owner;
    s->transit_deadline = kNoDeadline;
    owned_[new_owner].insert(id);
    // What the previous owner still waited for on it answers closed (its
    // sends that returned at once still go out, in order).
    SockOps::drop_requests_of_others(s);
  });
  if (!posted) note_owner(new_owner, -1);
}

SocketService::Sock* SocketService::make(uv_loop_t* loop, const Pid& owner, bool udp, int family) {
  auto* s = new Sock;
  s->svc = this;
  s->loop = loop;
  s->owner = owner;
  s->udp = udp;
  s->family = family;
  s->created = static_cast<double>(uv_now(loop)) / 1000.0;
  if (SockOps::init_handle(s, loop) != 0) {
    delete s;
    return nullptr;
  }
  s->id = ++next_id_ * shard_count_ + shard_index_;
  s->shared = new Shared;
  {
    std::lock_guard lock(shared_mu_);
    shared_.emplace(s->id, s->shared);
  }
  socks_.emplace(s->id, s);
  owned_[owner].insert(s->id);
  count_.store(socks_.size(), std::memory_order_relaxed);
  note_owner(owner, 1);
  return s;
}

SocketService::Sock* SocketService::find(const Pid& caller, double id) {
  auto it = socks_.find(static_cast<std::uint64_t>(id));
  if (it == socks_.end() || !(it->second->owner == caller)) fail("closed");
  return it->second;
}

void SocketService::forget(Sock* s, bool flush) {
  if (s->forgotten) return;
  socks_.erase(s->id);
  if (auto o = owned_.find(s->owner); o != owned_.end()) {
    o->second.erase(s->id);
    if (o->second.empty()) owned_.erase(o);
  }
  count_.store(socks_.size(), std::memory_order_relaxed);
  if (s->owner.valid()) note_owner(s->owner, -1);
  {
    std::lock_guard lock(shared_mu_);
    shared_.erase(s->id);
  }
  s->shared->failed.store(true, std::memory_order_release);  // its objects' sends now wait, and answer closed
  s->forgotten = true;
  if (flush && SockOps::linger(s)) return;
  if (flush) SockOps::tls_goodbye(s);
  SockOps::shut(s);
  if (s->handles == 0) delete s;
}

SocketService::Shared* SocketService::share(std::uint64_t id) {
  std::lock_guard lock(shared_mu_);
  auto it = shared_.find(id);
  if (it == shared_.end()) return nullptr;
  it->second->refs.fetch_add(1, std::memory_order_relaxed);
  return it->second;
}

void SocketService::release(Shared* shared) {
  if (shared->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete shared;
}

bool SocketService::send_now(std::uint64_t id, Shared* shared, std::string_view data) {
  const auto n = static_cast<std::int64_t>(data.size());
  // Acquire: pairs with the loop's release when it writes or fails.
  if (shared->failed.load(std::memory_order_acquire) || shared->waiting.load(std::memory_order_acquire) != 0 ||
      shared->unsent.load(std::memory_order_acquire) + n > kSendBuffer)
    return false;
  shared->unsent.fetch_add(n, std::memory_order_relaxed);
  shared->refs.fetch_add(1, std::memory_order_relaxed);  // the job's
  const bool posted = loop_.post([this, id, shared, d = std::string(data)](uv_loop_t*) mutable {
    auto it = socks_.find(id);
    if (it == socks_.end() || it->second->state != Sock::Client) {
      shared->unsent.fetch_sub(static_cast<std::int64_t>(d.size()), std::memory_order_release);
      shared->failed.store(true, std::memory_order_release);
    } else {
      Req r;
      r.detached = true;
      r.data = std::move(d);
      it->second->sends.push_back(std::move(r));
      SockOps::pump_sends(it->second);
    }
    release(shared);
  });
  if (!posted) {
    shared->unsent.fetch_sub(n, std::memory_order_relaxed);
    release(shared);
    return false;
  }
  return true;
}

void SocketService::stop_all() {
  std::vector<Sock*> all;
  for (auto& [id, s] : socks_) all.push_back(s);
  for (Sock* s : all) forget(s, false);  // the host is stopping: nothing lingers
  const std::vector<Sock*> lingering(lingering_.begin(), lingering_.end());
  for (Sock* s : lingering) SockOps::end_linger(s);
}

std::shared_ptr<const TlsContext> SocketService::tls_context(const TlsContext::Options& o, std::string* err) {
  const bool shared = !o.server && o.ca_file.empty() && o.cert_file.empty() && o.key_file.empty();
  const std::string key = o.protocol + (o.verify ? "/verify" : "/none");
  if (shared)
    if (auto it = tls_contexts_.find(key); it != tls_contexts_.end()) return it->second;
  std::shared_ptr<const TlsContext> ctx = TlsContext::make(o, err);
  if (ctx && shared) tls_contexts_.emplace(key, ctx);
  return ctx;
}

void SocketService::drop(std::uint64_t id, const Pid& owner) {
  loop_.post([this, id, owner](uv_loop_t*) {
    auto it = socks_.find(id);
    if (it != socks_.end() && it->second->owner == owner) forget(it->second);
  });
}

namespace {

// Looks up host (a name, or a numeric address) for a socket of family;
// then(status, addresses) runs on the loop.
using Resolved = std::function<void(int, std::vector<sockaddr_storage>)>;
void resolve(uv_loop_t* loop, const std::string& host, int port, int family, bool udp, Resolved then) {
  if (auto a = numeric(host, port, family)) {
    then(0, {*a});
    return;
  }
  struct Lookup {
    uv_getaddrinfo_t req{};
    Resolved then;
    int port;
  };
  auto* l = new Lookup{{}, std::move(then), port};
  l->req.data = l;
  addrinfo hints{};
  hints.ai_family = family;
  hints.ai_socktype = udp ? SOCK_DGRAM : SOCK_STREAM;
  const int rc = uv_getaddrinfo(
      loop, &l->req,
      [](uv_getaddrinfo_t* req, int status, addrinfo* res) {
        auto* l = static_cast<Lookup*>(req->data);
        std::vector<sockaddr_storage> out;
        for (addrinfo* a = res; status == 0 && a; a = a->ai_next) {
          sockaddr_storage ss{};
          std::memcpy(&ss, a->ai_addr, std::min<std::size_t>(a->ai_addrlen, sizeof ss));
          if (ss.ss_family == AF_INET) reinterpret_cast<sockaddr_in*>(&ss)->sin_port = htons(static_cast<uint16_t>(l->port));
          else if (ss.ss_family == AF_INET6) reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port = htons(static_cast<uint16_t>(l->port));
          else continue;
          out.push_back(ss);
        }
        uv_freeaddrinfo(res);
        auto then = std::move(l->then);
        delete l;
        const int rc = status != 0 ? status : out.empty() ? UV_EAI_NONAME : 0;  // before out is moved
        then(rc, std::move(out));
      },
      host.c_str(), nullptr, &hints);
  if (rc != 0) {
    auto then2 = std::move(l->then);
    delete l;
    then2(rc, {});
  }
}

// A host name or address: a NUL byte would end the C string the lookup
// is given, so another host than the one named would be reached.
std::string host_arg(const std::vector<CallValue>& args, std::size_t i) {
  const std::string& host = arg(args, i).string;
  if (host.find('\0') != std::string::npos) throw CallError{make_error(ErrorKind::Invalid, "host name contains a NUL byte")};
  return host;
}

int family_of(const CallValue& v) {
  if (v.string == "inet") return AF_INET;
  if (v.string == "inet6") return AF_INET6;
  return AF_UNSPEC;
}

}  // namespace

void SocketService::run_op(uv_loop_t* loop, const Pid& caller, std::uint64_t tag, std::vector<CallValue> args) {
  using Ops = SockOps;
  auto reply = [&](std::string bytes) { scheduler_.complete_yield(caller, tag, std::move(bytes)); };
  auto refuse = [&](const std::string& err) { scheduler_.complete_yield(caller, tag, {}, err); };
  try {
    const std::string& op = arg(args, 0).string;
    // ---- calls on no socket
    if (op == "tcp" || op == "udp") {
      Sock* s = make(loop, caller, op == "udp", family_of(arg(args, 1)));
      if (!s) fail("too many open files");
      if (!scheduler_.alive(caller)) {  // ended while this call came: its exit hook may have missed it
        forget(s);
        return;
      }
      if (s->family == AF_INET6 && !s->udp) {  // LuaSocket's tcp6: IPv6 only
        uv_os_fd_t fd;
        if (uv_fileno(s->h, &fd) == 0) {
          int on = 1;
          ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof on);
        }
      }
      return reply(CallResultWriter().moved(s->id, s->udp ? "+udp{unconnected}" : "+tcp{master}").finish());
    }
    if (op == "toip" || op == "getaddrinfo" || op == "tohostname") {
      const std::string host = host_arg(args, 1);
      if (host.empty()) fail("host not found");  // as LuaSocket: no name is no host (not 0.0.0.0)
      resolve(loop, host, 0, op == "toip" ? AF_INET : AF_UNSPEC, false,
              [this, loop, caller, tag, op, host](int status, std::vector<sockaddr_storage> addrs) {
                if (status != 0) {
                  scheduler_.complete_yield(caller, tag, {}, socket_error(status));
                  return;
                }
                CallResultWriter w;
                if (op == "getaddrinfo") {
                  w.table(addrs.size(), 0);
                  for (const auto& a : addrs) {
                    Endpoint e = endpoint_of(reinterpret_cast<const sockaddr*>(&a));
                    w.table(0, 2).key("family").string(e.family).key("addr").string(e.ip);
                  }
                } else if (op == "toip") {
                  Endpoint first = endpoint_of(reinterpret_cast<const sockaddr*>(&addrs[0]));
                  w.string(first.ip);
                  w.table(0, 3).key("name").string(host).key("alias").table(0, 0).key("ip").table(addrs.size(), 0);
                  for (const auto& a : addrs) w.string(endpoint_of(reinterpret_cast<const sockaddr*>(&a)).ip);
                } else {
                  // tohostname: the name of the first address.
                  struct Name {
                    uv_getnameinfo_t req{};
                    SocketService* svc;
                    Pid pid;
                    std::uint64_t tag;
                    std::string host;
                  };
                  auto* n = new Name{{}, this, caller, tag, host};
                  n->req.data = n;
                  const int rc = uv_getnameinfo(
                      loop, &n->req,
                      [](uv_getnameinfo_t* req, int status, const char* hostname, const char*) {
                        auto* n = static_cast<Name*>(req->data);
                        if (status != 0) {
                          n->svc->scheduler_.complete_yield(n->pid, n->tag, {}, socket_error(status));
                        } else {
                          CallResultWriter w;
                          w.string(hostname).table(0, 3).key("name").string(hostname).key("alias").table(0, 0).key("ip").table(1, 0).string(n->host);
                          n->svc->scheduler_.complete_yield(n->pid, n->tag, w.finish());
                        }
                        delete n;
                      },
                      reinterpret_cast<const sockaddr*>(&addrs[0]), 0);
                  if (rc != 0) {
                    delete n;
                    scheduler_.complete_yield(caller, tag, {}, socket_error(rc));
                  }
                  return;
                }
                scheduler_.complete_yield(caller, tag, w.finish());
              });
      return;
    }
    if (op == "resolve") {  // for TCP on the workers (bindings/socket_tcp.cpp): the addresses' texts
      const std::string host = host_arg(args, 1);
      if (host.empty()) fail("host not found");
      resolve(loop, host, 0, family_of(arg(args, 2)), false, [this, caller, tag](int status, std::vector<sockaddr_storage> addrs) {
        if (status != 0) return (void)scheduler_.complete_yield(caller, tag, {}, socket_error(status));
        CallResultWriter w;
        w.table(addrs.size(), 0);
        for (const auto& a : addrs) w.string(endpoint_of(reinterpret_cast<const sockaddr*>(&a)).ip);
        scheduler_.complete_yield(caller, tag, w.finish());
      });
      return;
    }
    if (op == "gethostname") {
      char name[256];
      std::size_t size = sizeof name;
      if (const int rc = uv_os_gethostname(name, &size); rc != 0) fail(uv_strerror(rc));
      return reply(one(std::string_view(name, size)));
    }

    // ---- calls on a socket
    Sock* s = find(caller, arg(args, 1).number);
    if (op == "close") {
      forget(s);
      return reply(ok());
    }
    if (s->state == Sock::Dead || !s->h) fail("closed");
    if (op == "bind") {
      const std::string host = host_arg(args, 2);
      const int port = static_cast<int>(arg(args, 3).number);
      const std::uint64_t id = s->id;
      resolve(loop, host, port, s->family, s->udp, [this, caller, tag, id](int status, std::vector<sockaddr_storage> addrs) {
        auto it = socks_.find(id);
        if (it == socks_.end()) {
          scheduler_.complete_yield(caller, tag, {}, "closed");
          return;
        }
        Sock* s = it->second;
        if (status != 0) {
          scheduler_.complete_yield(caller, tag, {}, socket_error(status));
          return;
        }
        const sockaddr* a = reinterpret_cast<const sockaddr*>(&addrs[0]);
        const int rc = s->udp ? uv_udp_bind(SockOps::udp(s), a, UV_UDP_REUSEADDR) : uv_tcp_bind(SockOps::tcp(s), a, 0);
        if (rc != 0) scheduler_.complete_yield(caller, tag, {}, socket_error(rc));
        else scheduler_.complete_yield(caller, tag, ok());
      });
      return;
    }
    if (op == "listen") {
      const int backlog = arg(args, 2).is_number() ? static_cast<int>(arg(args, 2).number) : 32;
      if (const int rc = uv_listen(Ops::stream(s), backlog, Ops::on_connection); rc != 0) fail(socket_error(rc));
      s->state = Sock::Server;
      return reply(CallResultWriter().moved(s->id, "=tcp{server}").finish());
    }
    if (op == "accept") {
      if (s->state != Sock::Server) fail("closed");
      Req r{caller, tag, Ops::deadline(loop, arg(args, 2))};
      if (s->pending_conns == 0 && r.deadline == uv_now(loop)) fail("timeout");
      s->accepts.push_back(std::move(r));
      Ops::serve_accepts(s);
      return;
    }
    if (op == "connect" && !s->udp) {
      if (s->state == Sock::Client) fail("already connected");
      if (s->connecting) fail("operation already in progress");
      const std::string host = host_arg(args, 2);
      const int port = static_cast<int>(arg(args, 3).number);
      s->connect = Req{caller, tag, Ops::deadline(loop, arg(args, 4))};
      s->connecting = true;
      Ops::arm(s);
      const std::uint64_t id = s->id;
      resolve(loop, host, port, s->family, false, [this, id](int status, std::vector<sockaddr_storage> addrs) {
        auto it = socks_.find(id);
        if (it == socks_.end()) return;  // closed meanwhile: answered then
        Sock* s = it->second;
        if (!s->connect) return;  // timed out meanwhile
        if (status != 0) {
          SockOps::finish_connect(s, status);
          return;
        }
        s->connect_addrs = std::move(addrs);
        s->next_addr = 0;
        SockOps::try_connect(s);
      });
      return;
    }
    if (op == "connect" && s->udp) {  // setpeername
      const std::string host = host_arg(args, 2);
      const int port = static_cast<int>(arg(args, 3).number);
      if (host == "*") {
        if (s->udp_connected) uv_udp_connect(Ops::udp(s), nullptr);
        s->udp_connected = false;
        return reply(CallResultWriter().moved(s->id, "=udp{unconnected}").finish());
      }
      const std::uint64_t id = s->id;
      resolve(loop, host, port, s->family, true, [this, caller, tag, id](int status, std::vector<sockaddr_storage> addrs) {
        auto it = socks_.find(id);
        if (it == socks_.end()) return (void)scheduler_.complete_yield(caller, tag, {}, "closed");
        Sock* s = it->second;
        if (status != 0) return (void)scheduler_.complete_yield(caller, tag, {}, socket_error(status));
        if (s->udp_connected) uv_udp_connect(SockOps::udp(s), nullptr);
        const int rc = uv_udp_connect(SockOps::udp(s), reinterpret_cast<const sockaddr*>(&addrs[0]));
        if (rc != 0) return (void)scheduler_.complete_yield(caller, tag, {}, socket_error(rc));
        s->udp_connected = true;
        scheduler_.complete_yield(caller, tag, CallResultWriter().moved(s->id, "=udp{connected}").finish());
      });
      return;
    }
    if (op == "send" && !s->udp) {
      if (s->state != Sock::Client) {
        s->shared->waiting.fetch_sub(1, std::memory_order_release);  // the object counted it (socket_object.cpp)
        fail("closed");
      }
      Req r{caller, tag, Ops::deadline(loop, arg(args, 3))};
      r.data = arg(args, 2).string;
      r.base = arg(args, 4).number;
      s->sends.push_back(std::move(r));
      Ops::pump_sends(s);
      return;
    }
    if ((op == "send" || op == "sendto") && s->udp) {
      const std::string& data = arg(args, 2).string;
      if (op == "send" && !s->udp_connected) fail("not connected");
      auto send_to = [this, caller, tag](Sock* s, const sockaddr* to, const std::string& data) {
        uv_buf_t b = uv_buf_init(const_cast<char*>(data.data()), static_cast<unsigned>(data.size()));
        const int rc = uv_udp_try_send(SockOps::udp(s), &b, 1, to);
        if (rc < 0) return (void)scheduler_.complete_yield(caller, tag, {}, socket_error(rc));
        s->bytes_out += rc;
        scheduler_.complete_yield(caller, tag, one(static_cast<double>(rc)));
      };
      if (op == "send") {
        send_to(s, nullptr, data);
        return;
      }
      const std::uint64_t id = s->id;
      resolve(loop, host_arg(args, 3), static_cast<int>(arg(args, 4).number), s->family, true,
              [this, caller, tag, id, data, send_to](int status, std::vector<sockaddr_storage> addrs) {
                auto it = socks_.find(id);
                if (it == socks_.end()) return (void)scheduler_.complete_yield(caller, tag, {}, "closed");
                if (status != 0) return (void)scheduler_.complete_yield(caller, tag, {}, socket_error(status));
                send_to(it->second, reinterpret_cast<const sockaddr*>(&addrs[0]), data);
              });
      return;
    }
    if (op == "receive" || op == "receivefrom") {
      Req r{caller, tag, Ops::deadline(loop, arg(args, 3))};
      const CallValue& pattern = arg(args, 2);
      if (s->udp) {
        r.kind = op == "receivefrom" ? 'f' : 'd';
        r.n = pattern.is_number() ? static_cast<std::size_t>(pattern.number) : 8192;
        s->receives.push_back(std::move(r));
        Ops::serve_datagrams(s);
        if (!s->receives.empty() && s->receives.back().tag == tag && s->receives.back().deadline <= uv_now(loop)) {
          s->receives.pop_back();
          fail("timeout");
        }
        return;
      }
      if (s->state != Sock::Client) fail("closed");
      if (s->tls) Ops::tls_start(s);  // a receive before dohandshake starts it, and waits for its data
      if (pattern.is_number()) {
        r.kind = 'n';
        r.n = static_cast<std::size_t>(std::min(pattern.number, 1e15));
      } else if (pattern.string == "any") {
        r.kind = 'y';
        r.n = static_cast<std::size_t>(std::max(1.0, arg(args, 5).number));
      } else {
        r.kind = pattern.string == "a" ? 'a' : 'l';
      }
      if (arg(args, 4).is_string()) r.data = arg(args, 4).string;
      s->receives.push_back(std::move(r));
      Ops::serve_receives(s);
      // A timeout of 0 never waits: what is there now, or timeout.
      if (!s->receives.empty() && s->receives.back().tag == tag && s->receives.back().deadline <= uv_now(loop)) {
        const bool head = s->receives.size() == 1;
        Req late = std::move(s->receives.back());
        s->receives.pop_back();
        std::string partial = head ? Ops::take_partial(s, late) : std::string();
        return reply(receive_failed(late, "timeout", partial));
      }
      return;
    }
    if (op == "shutdown") {
      const std::string how = arg(args, 2).is_string() ? arg(args, 2).string : "both";
      if (how == "receive" || how == "both") {
        s->shut_receive = true;
        if (s->reading && !s->udp) uv_read_stop(Ops::stream(s));
        s->reading = false;
        Ops::serve_receives(s);
      }
      if ((how == "send" || how == "both") && !s->udp && s->state == Sock::Client) {
        auto* req = new uv_shutdown_t;
        req->data = s;
        if (uv_shutdown(req, Ops::stream(s), [](uv_shutdown_t* r, int) {
              auto* s = static_cast<Sock*>(r->data);
              delete r;
              if (--s->handles == 0 && s->forgotten) delete s;
            }) == 0)
          ++s->handles;
        else
          delete req;
      }
      return reply(ok());
    }
    if (op == "sockname" || op == "peername") {
      sockaddr_storage ss{};
      int len = sizeof ss;
      int rc;
      if (s->udp) {
        rc = op == "sockname" ? uv_udp_getsockname(Ops::udp(s), reinterpret_cast<sockaddr*>(&ss), &len)
                              : uv_udp_getpeername(Ops::udp(s), reinterpret_cast<sockaddr*>(&ss), &len);
      } else {
        rc = op == "sockname" ? uv_tcp_getsockname(Ops::tcp(s), reinterpret_cast<sockaddr*>(&ss), &len)
                              : uv_tcp_getpeername(Ops::tcp(s), reinterpret_cast<sockaddr*>(&ss), &len);
      }
      if (rc != 0) fail(socket_error(rc));
      Endpoint e = endpoint_of(reinterpret_cast<const sockaddr*>(&ss));
      return reply(CallResultWriter().string(e.ip).number(e.port).string(e.family).finish());
    }
    if (op == "setoption" || op == "getoption") {
      const std::string& name = arg(args, 2).string;
      const CallValue& value = arg(args, 3);
      const bool on = value.type == CallValue::Type::Boolean ? value.boolean : value.is_number() && value.number != 0;
      uv_os_fd_t fd = -1;
      const bool has_fd = uv_fileno(s->h, &fd) == 0;
      auto sockopt = [&](int level, int opt) {
        if (!has_fd) fail("closed");
        if (op == "getoption") {
          int v = 0;
          socklen_t l = sizeof v;
          if (::getsockopt(fd, level, opt, &v, &l) != 0) fail(std::strerror(errno));
          return reply(CallResultWriter().boolean(v != 0).finish());
        }
        int v = on ? 1 : 0;
        if (::setsockopt(fd, level, opt, &v, sizeof v) != 0) fail(std::strerror(errno));
        reply(ok());
      };
      if (name == "tcp-nodelay" && !s->udp) {
        if (op == "setoption") {
          s->nodelay = on;
          if (has_fd) uv_tcp_nodelay(Ops::tcp(s), on);
          return reply(ok());
        }
        return sockopt(IPPROTO_TCP, TCP_NODELAY);
      }
      if (name == "keepalive" && !s->udp) {
        if (op == "setoption") {
          s->keepalive = on;
          if (has_fd) uv_tcp_keepalive(Ops::tcp(s), on, 60);
          return reply(ok());
        }
        return sockopt(SOL_SOCKET, SO_KEEPALIVE);
      }
      if (name == "reuseaddr") {
        if (!has_fd && op == "setoption") return reply(ok());  // libuv's bind sets it
        return sockopt(SOL_SOCKET, SO_REUSEADDR);
      }
      if (name == "reuseport") return sockopt(SOL_SOCKET, SO_REUSEPORT);
      if (name == "broadcast" && s->udp) return sockopt(SOL_SOCKET, SO_BROADCAST);
      if (name == "dontroute") return sockopt(SOL_SOCKET, SO_DONTROUTE);
      if (name == "ipv6-v6only") return sockopt(IPPROTO_IPV6, IPV6_V6ONLY);
      if (name == "linger") {
        if (!has_fd) fail("closed");
        linger lg{};
        if (op == "getoption") {
          socklen_t l = sizeof lg;
          if (::getsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, &l) != 0) fail(std::strerror(errno));
          return reply(CallResultWriter().table(0, 2).key("on").boolean(lg.l_onoff).key("timeout").number(lg.l_linger).finish());
        }
        const CallValue* v_on = value.field("on");
        const CallValue* v_t = value.field("timeout");
        lg.l_onoff = v_on && v_on->type == CallValue::Type::Boolean && v_on->boolean;
        lg.l_linger = v_t && v_t->is_number() ? static_cast<int>(v_t->number) : 0;
        if (::setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg) != 0) fail(std::strerror(errno));
        return reply(ok());
      }
      fail(std::string("unsupported option '") + name + "'");
    }
    if (op == "dirty")
      return reply(CallResultWriter().boolean(!s->rbuf.empty() || !s->dgrams.empty() || (s->tls && s->tls->readable())).finish());
    if (op == "tls_wrap") {
      if (s->udp || s->state != Sock::Client) fail("not connected");
      if (s->tls) fail("already wrapped");
      TlsContext::Options o;
      o.server = arg(args, 2).string == "server";
      o.protocol = arg(args, 3).string;
      o.verify = arg(args, 4).type == CallValue::Type::Boolean && arg(args, 4).boolean;
      o.ca_file = arg(args, 5).string;
      o.cert_file = arg(args, 6).string;
      o.key_file = arg(args, 7).string;
      // The files' contents, read by the calling process (stdlib/ssl.lua):
      // no file is opened on this thread.
      o.in_memory = true;
      o.ca_pem = arg(args, 8).string;
      o.cert_pem = arg(args, 9).string;
      o.key_pem = arg(args, 10).string;
      std::string err;
      std::shared_ptr<const TlsContext> ctx = tls_context(o, &err);
      if (!ctx) fail(err);
      auto session = std::make_unique<TlsSession>(std::move(ctx));
      if (session->state() == TlsSession::State::Failed) fail(session->error());
      s->tls = std::move(session);
      s->tls_started = false;
      // What came before is the peer's first flight; what waits to be sent
      // goes as it is, ahead of the handshake.
      s->tls->feed(s->rbuf);
      s->rbuf.clear();
      for (Req& r : s->sends) r.plain = true;
      return reply(CallResultWriter().moved(s->id, "=tls{connection}").finish());
    }
    if (op.starts_with("tls_") && !s->tls) fail("closed");
    if (op == "tls_sni") {
      if (s->tls->server()) fail("invalid: sni names a client's peer");
      if (s->tls_started) fail("invalid: sni after the handshake started");
      s->tls->set_host_name(arg(args, 2).string);
      return reply(ok());
    }
    if (op == "tls_handshake") {
      TlsSession& t = *s->tls;
      if (t.state() == TlsSession::State::Open || t.state() == TlsSession::State::Closed)
        return reply(CallResultWriter().boolean(true).finish());
      if (t.state() == TlsSession::State::Failed) fail(t.error());
      if (s->handshake) fail("handshake already in progress");
      s->handshake = Req{caller, tag, Ops::deadline(loop, arg(args, 2))};
      Ops::tls_start(s);
      Ops::tls_progress(s);
      Ops::serve_receives(s);  // receives made before it, if it ended already
      if (s->handshake && s->handshake->tag == tag && s->handshake->deadline <= uv_now(loop)) {  // timeout 0
        s->handshake.reset();
        fail("timeout");
      }
      Ops::arm(s);
      return;
    }
    if (op == "tls_info") {
      const TlsSession& t = *s->tls;
      const std::string protocol = t.protocol(), cipher = t.cipher();
      if (protocol.empty()) return reply(CallResultWriter().nil().finish());
      const std::string& field = arg(args, 2).string;
      if (field == "protocol") return reply(one(protocol));
      if (field == "cipher") return reply(one(cipher));
      if (!field.empty()) return reply(CallResultWriter().nil().finish());
      return reply(CallResultWriter().table(0, 2).key("protocol").string(protocol).key("cipher").string(cipher).finish());
    }
    if (op == "getstats") {
      const double age = static_cast<double>(uv_now(loop)) / 1000.0 - s->created;
      return reply(CallResultWriter().number(s->bytes_in).number(s->bytes_out).number(age).finish());
    }
    if (op == "setstats") {
      if (arg(args, 2).is_number()) s->bytes_in = arg(args, 2).number;
      if (arg(args, 3).is_number()) s->bytes_out = arg(args, 3).number;
      if (arg(args, 4).is_number()) s->created = static_cast<double>(uv_now(loop)) / 1000.0 - arg(args, 4).number;
      return reply(ok());
    }
    if (op == "getfd") {
      uv_os_fd_t fd;
      return reply(one(uv_fileno(s->h, &fd) == 0 ? static_cast<double>(fd) : -1.0));
    }
    fail("unknown socket operation '" + op + "'");
  } catch (const CallError& f) {
    refuse(f.text);
  }
}

}  // namespace host::io
