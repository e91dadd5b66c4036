// A TCP socket used on its owner's worker (docs/ARCHITECTURE.md, "Sockets
// on the workers"): a non-blocking descriptor with a slot of the
// netpoller's (registered at its first wait), a master until it binds, listens or connects (LuaSocket's
// classes), a client's bytes through a ByteStream. Every call here is a
// system call that does not block; a caller that gets kAgain waits for
// readiness (NetPoller) and calls again. Lua-free: the socket methods
// (bindings/socket_tcp.cpp) drive it, and a moved socket travels as this
// object (TcpTransit).
//
// Threads: one at a time (the owning process's); TcpTransit any.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "host/io/byte_stream.hpp"
#include "host/io/netpoll.hpp"

namespace host::io {

struct SocketAddress {
  sockaddr_storage ss{};
  socklen_t len = 0;
  int family() const { return ss.ss_family; }
};
// A numeric address ("*" and "" are any address of family), or false
// (then it is a name to resolve).
bool parse_numeric(const std::string& host, int port, int family, SocketAddress* out);
// An address's IP text, port and family name ("inet", "inet6").
void describe(const SocketAddress& a, std::string* ip, int* port, const char** family);

class TcpSocket {
 public:
  enum class Kind { kMaster, kClient, kServer };
  using Io = ByteStream::Io;

  // A master of family (AF_UNSPEC: made once an address names one).
  TcpSocket(NetPoller& poller, int family);
  // An accepted connection (fd given its poller slot here), its family and peer
  // the address accept gave; fd_nodelay: whether it has TCP_NODELAY
  // already (inherited from its listener).
  TcpSocket(NetPoller& poller, int fd, const SocketAddress& peer, bool fd_nodelay);
  ~TcpSocket();
  TcpSocket(const TcpSocket&) = delete;
  TcpSocket& operator=(const TcpSocket&) = delete;

  Kind kind() const { return kind_; }
  int fd() const { return fd_; }
  int slot() const { return slot_; }
  int family() const { return family_; }
  bool connecting() const { return connecting_; }
  ByteStream* stream() const { return stream_.get(); }
  NetPoller& poller() const { return poller_; }
  // Makes the descriptor of a master of a known family now (LuaSocket's
  // tcp4 and tcp6 do; a master of no family yet makes it at its bind or
  // connect). An error's words, or empty.
  std::string open() { return family_ == AF_UNSPEC ? std::string() : ensure_fd(family_); }
  // Closes it (the netpoller first: a wait still armed completes).
  void close();
  bool closed() const { return closed_; }

  // Errors are LuaSocket's words ("address already in use"); empty: done.
  std::string bind(const SocketAddress& a);
  std::string listen(int backlog);
  // Starts a connect: kDone (connected), kAgain (wait for writable, then
  // finish_connect), kEnd (*err).
  Io start_connect(const SocketAddress& a, std::string* err);
  Io finish_connect(std::string* err);
  // After a connect that failed, before the next address is tried: the
  // descriptor goes, and the family is the master's again.
  void discard_fd();
  // An accepted connection, or kAgain (wait for readable), kEnd (*err).
  Io accept(std::unique_ptr<TcpSocket>* out, std::string* err);

  // The socket's own address, or its peer's: an accepted connection's
  // peer is the address accept gave (no system call, and still known
  // once the client has reset the connection).
  std::string name(bool peer, std::string* ip, int* port, const char** family) const;
  // setoption / getoption; value: a boolean (number for linger's timeout).
  std::string set_option(const std::string& name, bool on, int linger_timeout);
  std::string get_option(const std::string& name, bool* on, int* linger_timeout) const;

  double created() const { return created_; }
  void set_created(double t) { created_ = t; }

  // What a server's connection is to be served with (bindings/
  // http_conn.cpp: its server's configuration), set by the acceptor and
  // taken by the process that serves it: held by the socket, it travels
  // with it and outlives an acceptor that ends meanwhile, and goes with a
  // socket that is closed unserved. Opaque here.
  std::shared_ptr<const void> serve_with;

 private:
  std::string ensure_fd(int family);
  void become_client();

  NetPoller& poller_;
  int fd_ = -1;
  int slot_ = -1;
  int family_;
  int master_family_ = AF_UNSPEC;
  Kind kind_ = Kind::kMaster;
  bool connecting_ = false;
  bool closed_ = false;
  bool nodelay_ = true;  // TCP_NODELAY by default, as Go: small writes go at once
  bool fd_nodelay_ = false;  // the descriptor has TCP_NODELAY on (set, or inherited at accept)
  // A listener whose flag was on at listen and never changed since: its
  // accepted connections have it (Linux copies it), with no setsockopt.
  bool inherits_nodelay_ = false;
  bool keepalive_ = false;
  bool reuseaddr_ = false;
  double created_;
  // An accepted connection's peer (room for either family: sockaddr_in
  // fits in sockaddr_in6); AF_UNSPEC where the kernel is asked instead.
  sockaddr_in6 peer_{};
  std::unique_ptr<ByteStream> stream_;
};

// Sockets on their way between processes (a message or spawn argument):
// given by one, claimed by the other by id. One nobody claims within
// kTransitTime is closed (the message that carried it was dropped).
class TcpTransit {
 public:
  static constexpr std::chrono::seconds kTransitTime{60};
  std::uint64_t give(std::unique_ptr<TcpSocket> s);
  std::unique_ptr<TcpSocket> claim(std::uint64_t id);
  ~TcpTransit();

 private:
  struct Entry {
    std::unique_ptr<TcpSocket> socket;
    std::chrono::steady_clock::time_point since;
  };
  std::mutex mu_;
  std::uint64_t next_ = 0;
  std::unordered_map<std::uint64_t, Entry> moving_;  // guarded by mu_
};

}  // namespace host::io
