// TCP sockets on the workers (tcp_socket.hpp).
#include "host/io/tcp_socket.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace host::io {
namespace {

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

bool set_flag(int fd, int level, int opt, bool on) {
  int v = on ? 1 : 0;
  return ::setsockopt(fd, level, opt, &v, sizeof v) == 0;
}

}  // namespace

bool parse_numeric(const std::string& host, int port, int family, SocketAddress* out) {
  std::string h = host;
  if (h == "*" || h.empty()) h = family == AF_INET6 ? "::" : "0.0.0.0";
  *out = SocketAddress{};
  if (family != AF_INET6) {
    auto* in = reinterpret_cast<sockaddr_in*>(&out->ss);
    if (inet_pton(AF_INET, h.c_str(), &in->sin_addr) == 1) {
      in->sin_family = AF_INET;
      in->sin_port = htons(static_cast<std::uint16_t>(port));
      out->len = sizeof(sockaddr_in);
      return true;
    }
  }
  if (family != AF_INET) {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&out->ss);
    if (inet_pton(AF_INET6, h.c_str(), &in6->sin6_addr) == 1) {
      in6->sin6_family = AF_INET6;
      in6->sin6_port = htons(static_cast<std::uint16_t>(port));
      out->len = sizeof(sockaddr_in6);
      return true;
    }
  }
  return false;
}

void describe(const SocketAddress& a, std::string* ip, int* port, const char** family) {
  char buf[INET6_ADDRSTRLEN] = "";
  if (a.family() == AF_INET6) {
    auto* in6 = reinterpret_cast<const sockaddr_in6*>(&a.ss);
    inet_ntop(AF_INET6, &in6->sin6_addr, buf, sizeof buf);
    *port = ntohs(in6->sin6_port);
    *family = "inet6";
  } else {
    auto* in = reinterpret_cast<const sockaddr_in*>(&a.ss);
    inet_ntop(AF_INET, &in->sin_addr, buf, sizeof buf);
    *port = ntohs(in->sin_port);
    *family = "inet";
  }
  *ip = buf;
}

TcpSocket::TcpSocket(NetPoller& poller, int family)
    : poller_(poller), family_(family), master_family_(family), created_(wall_seconds()) {}

void TcpSocket::discard_fd() {
  if (kind_ != Kind::kMaster || fd_ < 0) return;
  poller_.close(slot_);
  ::close(fd_);
  slot_ = fd_ = -1;
  connecting_ = false;
  fd_nodelay_ = false;
  family_ = master_family_;
}

TcpSocket::TcpSocket(NetPoller& poller, int fd, const SocketAddress& peer, bool fd_nodelay)
    : poller_(poller), fd_(fd), family_(peer.family()), fd_nodelay_(fd_nodelay), created_(wall_seconds()) {
  std::memcpy(&peer_, &peer.ss, std::min<std::size_t>(peer.len, sizeof peer_));
  slot_ = poller_.open(fd_);
  become_client();
}

TcpSocket::~TcpSocket() { close(); }

void TcpSocket::close() {
  if (closed_) return;
  closed_ = true;
  poller_.close(slot_);
  slot_ = -1;
  if (stream_) stream_->close();  // closes fd_
  else if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

std::string TcpSocket::ensure_fd(int family) {
  if (fd_ >= 0) return {};
  if (family_ == AF_UNSPEC) family_ = family;
  fd_ = ::socket(family_, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd_ < 0) return errno == EMFILE || errno == ENFILE ? "too many open files" : socket_errno_text(errno);
  if (family_ == AF_INET6) set_flag(fd_, IPPROTO_IPV6, IPV6_V6ONLY, true);  // LuaSocket's tcp6: IPv6 only
  if (reuseaddr_) set_flag(fd_, SOL_SOCKET, SO_REUSEADDR, true);
  if (keepalive_) set_flag(fd_, SOL_SOCKET, SO_KEEPALIVE, true);
  slot_ = poller_.open(fd_);
  if (slot_ < 0) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    return socket_errno_text(err);
  }
  return {};
}

void TcpSocket::become_client() {
  kind_ = Kind::kClient;
  connecting_ = false;
  if (nodelay_ && !fd_nodelay_) fd_nodelay_ = set_flag(fd_, IPPROTO_TCP, TCP_NODELAY, true);
  stream_ = std::make_unique<ByteStream>(fd_);
}

std::string TcpSocket::bind(const SocketAddress& a) {
  if (family_ != AF_UNSPEC && a.family() != family_) return "address family not supported";
  if (std::string err = ensure_fd(a.family()); !err.empty()) return err;
  if (::bind(fd_, reinterpret_cast<const sockaddr*>(&a.ss), a.len) != 0) return socket_errno_text(errno);
  return {};
}

std::string TcpSocket::listen(int backlog) {
  if (fd_ < 0) {
    // LuaSocket listens on an unbound socket at an ephemeral port.
    if (std::string err = ensure_fd(family_ == AF_UNSPEC ? AF_INET : family_); !err.empty()) return err;
  }
  // An accepted connection inherits TCP_NODELAY from its listener (Linux
  // copies it when the connection's handshake completes): set once, here,
  // and before listen, so that no connection completes without it.
  if (nodelay_ && !fd_nodelay_) fd_nodelay_ = set_flag(fd_, IPPROTO_TCP, TCP_NODELAY, true);
  if (::listen(fd_, backlog) != 0) return socket_errno_text(errno);
  kind_ = Kind::kServer;
  inherits_nodelay_ = fd_nodelay_;
  return {};
}

TcpSocket::Io TcpSocket::start_connect(const SocketAddress& a, std::string* err) {
  if (kind_ == Kind::kClient) {
    *err = "already connected";
    return Io::kEnd;
  }
  if (connecting_) {
    *err = "operation already in progress";
    return Io::kEnd;
  }
  if (family_ != AF_UNSPEC && a.family() != family_) {
    *err = "address family not supported";
    return Io::kEnd;
  }
  if (std::string e = ensure_fd(a.family()); !e.empty()) {
    *err = e;
    return Io::kEnd;
  }
  if (::connect(fd_, reinterpret_cast<const sockaddr*>(&a.ss), a.len) == 0) {
    become_client();
    return Io::kDone;
  }
  if (errno == EINPROGRESS || errno == EINTR) {
    connecting_ = true;
    return Io::kAgain;
  }
  *err = socket_errno_text(errno);
  return Io::kEnd;
}

TcpSocket::Io TcpSocket::finish_connect(std::string* err) {
  int so = 0;
  socklen_t len = sizeof so;
  if (::getsockopt(fd_, SOL_SOCKET, SO_ERROR, &so, &len) != 0) so = errno;
  if (so == 0) {
    // Writable without an error may still be early (a spurious wake):
    // connected only once the peer's name is known.
    sockaddr_storage ss{};
    socklen_t sl = sizeof ss;
    if (::getpeername(fd_, reinterpret_cast<sockaddr*>(&ss), &sl) != 0) {
      if (errno == ENOTCONN) return Io::kAgain;
      so = errno;
    }
  }
  if (so == EINPROGRESS || so == EALREADY) return Io::kAgain;
  connecting_ = false;
  if (so != 0) {
    *err = socket_errno_text(so);
    return Io::kEnd;
  }
  become_client();
  return Io::kDone;
}

TcpSocket::Io TcpSocket::accept(std::unique_ptr<TcpSocket>* out, std::string* err) {
  for (;;) {
    // The peer's address gives the family (a socket's own and its peer's
    // are the same), where a getsockname was one more system call a
    // connection.
    SocketAddress peer;
    peer.len = sizeof peer.ss;
    const int fd = ::accept4(fd_, reinterpret_cast<sockaddr*>(&peer.ss), &peer.len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      auto s = std::make_unique<TcpSocket>(poller_, fd, peer, inherits_nodelay_);
      if (s->slot_ < 0) {
        *err = socket_errno_text(errno);
        return Io::kEnd;
      }
      *out = std::move(s);
      return Io::kDone;
    }
    if (errno == EINTR || errno == ECONNABORTED) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return Io::kAgain;
    *err = errno == EMFILE || errno == ENFILE ? "too many open files" : socket_errno_text(errno);
    return Io::kEnd;
  }
}

std::string TcpSocket::name(bool peer, std::string* ip, int* port, const char** family) const {
  if (fd_ < 0) return peer ? "closed" : "not bound";
  SocketAddress a;
  if (peer && peer_.sin6_family != AF_UNSPEC) {
    std::memcpy(&a.ss, &peer_, sizeof peer_);
    describe(a, ip, port, family);
    return {};
  }
  a.len = sizeof a.ss;
  const int rc = peer ? ::getpeername(fd_, reinterpret_cast<sockaddr*>(&a.ss), &a.len)
                      : ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a.ss), &a.len);
  if (rc != 0) return socket_errno_text(errno);
  describe(a, ip, port, family);
  return {};
}

std::string TcpSocket::set_option(const std::string& name, bool on, int linger_timeout) {
  if (name == "tcp-nodelay") {
    nodelay_ = on;
    if (fd_ >= 0) fd_nodelay_ = set_flag(fd_, IPPROTO_TCP, TCP_NODELAY, on) ? on : fd_nodelay_;
    // Connections already in the accept queue took the listener's earlier
    // flag: from now on each accepted one sets its own.
    if (kind_ == Kind::kServer) inherits_nodelay_ = false;
    return {};
  }
  if (name == "keepalive") {
    keepalive_ = on;
    if (fd_ >= 0) set_flag(fd_, SOL_SOCKET, SO_KEEPALIVE, on);
    return {};
  }
  if (name == "reuseaddr") {
    reuseaddr_ = on;
    if (fd_ >= 0) set_flag(fd_, SOL_SOCKET, SO_REUSEADDR, on);
    return {};
  }
  int level = SOL_SOCKET, opt;
  if (name == "reuseport") opt = SO_REUSEPORT;
  else if (name == "dontroute") opt = SO_DONTROUTE;
  else if (name == "ipv6-v6only") level = IPPROTO_IPV6, opt = IPV6_V6ONLY;
  else if (name == "linger") opt = SO_LINGER;
  else return "unsupported option '" + name + "'";
  if (fd_ < 0) {
    if (std::string err = ensure_fd(family_ == AF_UNSPEC ? AF_INET : family_); !err.empty()) return err;
  }
  if (opt == SO_LINGER) {
    linger lg{};
    lg.l_onoff = on;
    lg.l_linger = linger_timeout;
    if (::setsockopt(fd_, SOL_SOCKET, SO_LINGER, &lg, sizeof lg) != 0) return std::strerror(errno);
    return {};
  }
  int v = on ? 1 : 0;
  if (::setsockopt(fd_, level, opt, &v, sizeof v) != 0) return std::strerror(errno);
  return {};
}

std::string TcpSocket::get_option(const std::string& name, bool* on, int* linger_timeout) const {
  int level = SOL_SOCKET, opt;
  if (name == "tcp-nodelay") level = IPPROTO_TCP, opt = TCP_NODELAY;
  else if (name == "keepalive") opt = SO_KEEPALIVE;
  else if (name == "reuseaddr") opt = SO_REUSEADDR;
  else if (name == "reuseport") opt = SO_REUSEPORT;
  else if (name == "dontroute") opt = SO_DONTROUTE;
  else if (name == "ipv6-v6only") level = IPPROTO_IPV6, opt = IPV6_V6ONLY;
  else if (name == "linger") opt = SO_LINGER;
  else return "unsupported option '" + name + "'";
  if (fd_ < 0) {
    // Nothing made yet: what setoption asked for.
    *on = name == "tcp-nodelay" ? nodelay_ : name == "keepalive" ? keepalive_ : name == "reuseaddr" && reuseaddr_;
    *linger_timeout = 0;
    return {};
  }
  if (opt == SO_LINGER) {
    linger lg{};
    socklen_t l = sizeof lg;
    if (::getsockopt(fd_, SOL_SOCKET, SO_LINGER, &lg, &l) != 0) return std::strerror(errno);
    *on = lg.l_onoff != 0;
    *linger_timeout = lg.l_linger;
    return {};
  }
  int v = 0;
  socklen_t l = sizeof v;
  if (::getsockopt(fd_, level, opt, &v, &l) != 0) return std::strerror(errno);
  *on = v != 0;
  return {};
}

std::uint64_t TcpTransit::give(std::unique_ptr<TcpSocket> s) {
  std::vector<std::unique_ptr<TcpSocket>> expired;  // closed outside the lock
  std::lock_guard lock(mu_);
  const auto now = std::chrono::steady_clock::now();
  for (auto it = moving_.begin(); it != moving_.end();) {
    if (now - it->second.since > kTransitTime) {
      expired.push_back(std::move(it->second.socket));
      it = moving_.erase(it);
    } else {
      ++it;
    }
  }
  const std::uint64_t id = ++next_;
  moving_.emplace(id, Entry{std::move(s), now});
  return id;
}

std::unique_ptr<TcpSocket> TcpTransit::claim(std::uint64_t id) {
  std::lock_guard lock(mu_);
  auto it = moving_.find(id);
  if (it == moving_.end()) return nullptr;
  auto s = std::move(it->second.socket);
  moving_.erase(it);
  return s;
}

TcpTransit::~TcpTransit() = default;

}  // namespace host::io
