// UDP sockets and name lookups on the I/O thread (socket_service.hpp).
#include "host/io/socket_service.hpp"

#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <future>
#include <limits>
#include <optional>

#include "host/error.hpp"
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

// One waiting receive on a socket.
struct Req {
  Pid pid;
  std::uint64_t tag = 0;
  std::uint64_t deadline = kNoDeadline;  // the loop's ms (uv_now)
  char kind = 0;                         // 'd' receive, 'f' receivefrom
  std::size_t n = 0;                     // the most bytes it takes
};

// A receive that ends without a datagram: nil, why, and no partial data.
std::string receive_failed(const char* err) {
  CallResultWriter w;
  w.nil().string(err).string("");
  return w.finish();
}

// A socket's queues hold a request or two: a vector (nothing allocated
// while empty) rather than std::deque, which allocates its first block,
// about 600 bytes, as it is made.
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
  int family = AF_UNSPEC;
  bool dead = false;
  uv_udp_t* h = nullptr;  // of its own allocation
  uv_timer_t* timer = nullptr;
  int handles = 0;
  bool forgotten = false;
  bool reading = false;
  Fifo<Req> receives;
  Fifo<Datagram> dgrams;
  bool connected = false;  // setpeername named a peer
  // getstats / setstats.
  double bytes_in = 0, bytes_out = 0;
  double created = 0;
  // Given away (owner invalid) and not yet claimed: closed if nobody claims
  // it by then (the message that carried it was dropped, or its encode
  // failed on another value).
  std::uint64_t transit_deadline = kNoDeadline;
};

struct SockOps {
  using Sock = SocketService::Sock;

  static Scheduler& sched(Sock* s) { return s->svc->scheduler_; }
  static uv_handle_t* handle(Sock* s) { return reinterpret_cast<uv_handle_t*>(s->h); }

  static void on_closed(uv_handle_t* h) {
    auto* s = static_cast<Sock*>(h->data);
    if (h->type == UV_UDP) delete reinterpret_cast<uv_udp_t*>(h);
    else delete reinterpret_cast<uv_timer_t*>(h);
    if (--s->handles == 0 && s->forgotten) delete s;
  }
  template <typename T>
  static void close_handle(T*& h) {
    if (!h) return;
    auto* g = reinterpret_cast<uv_handle_t*>(h);
    if (!uv_is_closing(g)) uv_close(g, on_closed);
    h = nullptr;
  }

  // s's UDP handle (of its family, or none yet).
  static int init_handle(Sock* s, uv_loop_t* loop) {
    auto* u = new uv_udp_t;
    const int rc = s->family == AF_UNSPEC ? uv_udp_init(loop, u) : uv_udp_init_ex(loop, u, static_cast<unsigned>(s->family));
    if (rc != 0) {
      delete u;
      return rc;
    }
    s->h = u;
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
    std::uint64_t next = s->transit_deadline;
    for (const Req& r : s->receives) next = std::min(next, r.deadline);
    if (next == kNoDeadline) {
      if (s->timer) uv_timer_stop(s->timer);
      return;
    }
    if (!s->timer) {
      s->timer = new uv_timer_t;
      uv_timer_init(s->loop, s->timer);
      s->timer->data = s;
      ++s->handles;
    }
    const std::uint64_t now = uv_now(s->timer->loop);
    uv_timer_start(s->timer, on_timer, next > now ? next - now : 0, 0);
  }
  static void on_timer(uv_timer_t* t) {
    auto* s = static_cast<Sock*>(t->data);
    const std::uint64_t now = uv_now(t->loop);
    if (s->transit_deadline <= now) {  // given away, and nobody claimed it
      s->svc->forget(s);
      return;
    }
    for (std::size_t i = 0; i < s->receives.size();) {
      if (s->receives[i].deadline > now) {
        ++i;
        continue;
      }
      Req r = std::move(s->receives[i]);
      s->receives.erase(s->receives.begin() + static_cast<std::ptrdiff_t>(i));
      sched(s).complete_yield(r.pid, r.tag, receive_failed("timeout"));
    }
    arm(s);
  }

  // ---- reads
  static void on_alloc(uv_handle_t*, std::size_t, uv_buf_t* buf) {
    static thread_local char chunk[65536];  // one read at a time on the loop thread, copied out at once
    *buf = uv_buf_init(chunk, sizeof chunk);
  }
  static void on_read(uv_udp_t* u, ssize_t n, const uv_buf_t* buf, const sockaddr* from, unsigned) {
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
  // Completes the receives the queue satisfies, in order; reads while one
  // waits and the queue has room.
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
    if (!s->reading && s->h && !s->dead && s->dgrams.size() < SocketService::kDatagramQueue && !s->receives.empty()) {
      if (uv_udp_recv_start(s->h, on_alloc, on_read) == 0) s->reading = true;
    }
    arm(s);
  }

  // Requests on s from processes other than its owner answer closed.
  static void drop_requests_of_others(Sock* s) {
    for (auto it = s->receives.begin(); it != s->receives.end();) {
      if (it->pid == s->owner) {
        ++it;
        continue;
      }
      sched(s).complete_yield(it->pid, it->tag, receive_failed("closed"));
      it = s->receives.erase(it);
    }
    arm(s);
  }

  // ---- closing: answers every waiting request "closed" and closes the handles.
  static void shut(Sock* s) {
    s->dead = true;
    for (const Req& r : s->receives) sched(s).complete_yield(r.pid, r.tag, receive_failed("closed"));
    s->receives.clear();
    close_handle(s->h);
    close_handle(s->timer);
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

SocketShards::SocketShards(Scheduler& scheduler, const std::vector<IoLoop*>& loops) {
  const auto n = static_cast<unsigned>(loops.size());
  for (unsigned i = 0; i < n; ++i) shards_.push_back(std::make_unique<SocketService>(scheduler, *loops[i], i, n));
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
    // What the previous owner still waited for on it answers closed.
    SockOps::drop_requests_of_others(s);
  });
  if (!posted) note_owner(new_owner, -1);
}

SocketService::Sock* SocketService::make(uv_loop_t* loop, const Pid& owner, int family) {
  auto* s = new Sock;
  s->svc = this;
  s->loop = loop;
  s->owner = owner;
  s->family = family;
  s->created = static_cast<double>(uv_now(loop)) / 1000.0;
  if (SockOps::init_handle(s, loop) != 0) {
    delete s;
    return nullptr;
  }
  s->id = ++next_id_ * shard_count_ + shard_index_;
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

void SocketService::forget(Sock* s) {
  if (s->forgotten) return;
  socks_.erase(s->id);
  if (auto o = owned_.find(s->owner); o != owned_.end()) {
    o->second.erase(s->id);
    if (o->second.empty()) owned_.erase(o);
  }
  count_.store(socks_.size(), std::memory_order_relaxed);
  if (s->owner.valid()) note_owner(s->owner, -1);
  s->forgotten = true;
  SockOps::shut(s);
  if (s->handles == 0) delete s;
}

void SocketService::stop_all() {
  std::vector<Sock*> all;
  for (auto& [id, s] : socks_) all.push_back(s);
  for (Sock* s : all) forget(s);
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
    if (op == "udp") {
      Sock* s = make(loop, caller, family_of(arg(args, 1)));
      if (!s) fail("too many open files");
      if (!scheduler_.alive(caller)) {  // ended while this call came: its exit hook may have missed it
        forget(s);
        return;
      }
      return reply(CallResultWriter().moved(s->id, "+udp{unconnected}").finish());
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
    if (s->dead || !s->h) fail("closed");
    if (op == "bind") {  // setsockname
      const std::string host = host_arg(args, 2);
      const int port = static_cast<int>(arg(args, 3).number);
      const std::uint64_t id = s->id;
      resolve(loop, host, port, s->family, true, [this, caller, tag, id](int status, std::vector<sockaddr_storage> addrs) {
        auto it = socks_.find(id);
        if (it == socks_.end()) return (void)scheduler_.complete_yield(caller, tag, {}, "closed");
        if (status != 0) return (void)scheduler_.complete_yield(caller, tag, {}, socket_error(status));
        const int rc = uv_udp_bind(it->second->h, reinterpret_cast<const sockaddr*>(&addrs[0]), UV_UDP_REUSEADDR);
        if (rc != 0) scheduler_.complete_yield(caller, tag, {}, socket_error(rc));
        else scheduler_.complete_yield(caller, tag, ok());
      });
      return;
    }
    if (op == "connect") {  // setpeername
      const std::string host = host_arg(args, 2);
      const int port = static_cast<int>(arg(args, 3).number);
      if (host == "*") {
        if (s->connected) uv_udp_connect(s->h, nullptr);
        s->connected = false;
        return reply(CallResultWriter().moved(s->id, "=udp{unconnected}").finish());
      }
      const std::uint64_t id = s->id;
      resolve(loop, host, port, s->family, true, [this, caller, tag, id](int status, std::vector<sockaddr_storage> addrs) {
        auto it = socks_.find(id);
        if (it == socks_.end()) return (void)scheduler_.complete_yield(caller, tag, {}, "closed");
        Sock* s = it->second;
        if (status != 0) return (void)scheduler_.complete_yield(caller, tag, {}, socket_error(status));
        if (s->connected) uv_udp_connect(s->h, nullptr);
        const int rc = uv_udp_connect(s->h, reinterpret_cast<const sockaddr*>(&addrs[0]));
        if (rc != 0) return (void)scheduler_.complete_yield(caller, tag, {}, socket_error(rc));
        s->connected = true;
        scheduler_.complete_yield(caller, tag, CallResultWriter().moved(s->id, "=udp{connected}").finish());
      });
      return;
    }
    if (op == "send" || op == "sendto") {
      const std::string& data = arg(args, 2).string;
      if (op == "send" && !s->connected) fail("not connected");
      auto send_to = [this, caller, tag](Sock* s, const sockaddr* to, const std::string& data) {
        uv_buf_t b = uv_buf_init(const_cast<char*>(data.data()), static_cast<unsigned>(data.size()));
        const int rc = uv_udp_try_send(s->h, &b, 1, to);
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
      const CallValue& size = arg(args, 2);
      r.kind = op == "receivefrom" ? 'f' : 'd';
      // (The binding clamps the size; never cast what is out of range.)
      r.n = !size.is_number() ? 8192 : size.number >= 0 && size.number < 1125899906842624.0 ? static_cast<std::size_t>(size.number) : std::size_t{1} << 50;
      s->receives.push_back(std::move(r));
      Ops::serve_datagrams(s);
      // A timeout of 0 never waits: a datagram that is there now, or timeout.
      if (!s->receives.empty() && s->receives.back().tag == tag && s->receives.back().deadline <= uv_now(loop)) {
        s->receives.pop_back();
        fail("timeout");
      }
      return;
    }
    if (op == "sockname" || op == "peername") {
      sockaddr_storage ss{};
      int len = sizeof ss;
      const int rc = op == "sockname" ? uv_udp_getsockname(s->h, reinterpret_cast<sockaddr*>(&ss), &len)
                                      : uv_udp_getpeername(s->h, reinterpret_cast<sockaddr*>(&ss), &len);
      if (rc != 0) fail(socket_error(rc));
      Endpoint e = endpoint_of(reinterpret_cast<const sockaddr*>(&ss));
      return reply(CallResultWriter().string(e.ip).number(e.port).string(e.family).finish());
    }
    if (op == "setoption" || op == "getoption") {
      const std::string& name = arg(args, 2).string;
      const CallValue& value = arg(args, 3);
      const bool on = value.type == CallValue::Type::Boolean ? value.boolean : value.is_number() && value.number != 0;
      uv_os_fd_t fd = -1;
      const bool has_fd = uv_fileno(Ops::handle(s), &fd) == 0;
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
      if (name == "reuseaddr") {
        if (!has_fd && op == "setoption") return reply(ok());  // libuv's bind sets it
        return sockopt(SOL_SOCKET, SO_REUSEADDR);
      }
      if (name == "reuseport") return sockopt(SOL_SOCKET, SO_REUSEPORT);
      if (name == "broadcast") return sockopt(SOL_SOCKET, SO_BROADCAST);
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
    if (op == "dirty") return reply(CallResultWriter().boolean(!s->dgrams.empty()).finish());
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
      return reply(one(uv_fileno(Ops::handle(s), &fd) == 0 ? static_cast<double>(fd) : -1.0));
    }
    fail("unknown socket operation '" + op + "'");
  } catch (const CallError& f) {
    refuse(f.text);
  }
}

}  // namespace host::io
