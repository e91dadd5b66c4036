// The `socket` module's command handler (docs/LUA_API.md, socket) for what
// does not run on the workers: UDP sockets and name lookups (toip,
// tohostname, getaddrinfo, gethostname, and "resolve", which a TCP
// socket's connect or bind by name calls: bindings/socket_tcp.cpp), on the
// I/O thread's libuv loop (host/io/io_loop.hpp), under LuaSocket's API
// (bindings/socket.lua). TCP sockets run on their owners' workers instead
// (host/io/tcp_socket.hpp; docs/ARCHITECTURE.md, "Sockets on the
// workers"). Threads: dispatch() and close_owned() from any thread;
// everything else on the loop thread, so the sockets' table needs no lock
// (but for owners_, which the exit hook reads).
//
// Each call of a UDP socket's method is one waiting call, carried out here:
//   - Datagrams are read while a receive waits, and kept (at most
//     kDatagramQueue nobody asked for: reading stops there until a receive
//     takes one); a receive takes the oldest, cut to the size it asked for.
//   - A send (sendto, or send on a connected socket) goes to the kernel at
//     once (uv_udp_try_send) and answers with what it took.
//   - Every receive has a deadline (LuaSocket's timeouts, computed by the
//     Lua side); one timer a socket, armed for the earliest, times them out.
//   - A socket belongs to the process that made it; when the process ends
//     its sockets are closed, before its monitors hear of it (close_owned
//     waits for the loop when the process owns any), and requests still
//     waiting are answered "closed". A socket moves between processes in
//     messages and spawn arguments (give, claim).
//   - Name lookups are uv_getaddrinfo / uv_getnameinfo on the loop (libuv
//     runs them on its thread pool); a numeric address is parsed at once.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "host/io/call_values.hpp"
#include "host/commands.hpp"
#include "host/io/io_loop.hpp"
#include "host/pid.hpp"

namespace host {
class Scheduler;
}

namespace host::io {

class SocketService {
 public:
  // Datagrams a UDP socket keeps that nobody asked for, at most.
  static constexpr std::size_t kDatagramQueue = 64;

  // A socket object was collected while its process held it: closed
  // (posted; only where it still belongs to owner).
  void drop(std::uint64_t id, const Pid& owner);

  // One shard of shard_count (--io-threads): its sockets' ids are
  // shard_index modulo shard_count, so any thread finds a socket's shard.
  SocketService(Scheduler& scheduler, IoLoop& loop, unsigned shard_index = 0, unsigned shard_count = 1);
  ~SocketService();
  SocketService(const SocketService&) = delete;

  // Runs a decoded call on this shard's loop.
  void post_op(const Pid& pid, std::uint64_t tag, std::vector<CallValue> args);
  // Closes every socket of owner's; returns once the loop has closed them
  // (at most a second), when it owns any.
  void close_owned(const Pid& owner);
  // A socket object was put in a message or spawn arguments: the socket
  // leaves from's ownership at once (posted, ahead of from's exit hook's
  // close), so that from may end before the receiver claims it; one
  // nobody claims within kTransitMs is closed.
  static constexpr std::uint64_t kTransitMs = 60000;
  void give(std::uint64_t id, const Pid& from);
  // The socket moved to new_owner (it arrived in a message or spawn
  // arguments): posted, so it takes effect before any call new_owner makes
  // on it. The old owner's calls on it answer closed from then on, and
  // what it still waited for on it too. (A spawn that fails after its
  // Init claimed a socket leaves that socket open until the host ends: no
  // exit hook runs for a process that never lived.)
  void claim(std::uint64_t id, const Pid& new_owner);
  // Open sockets, all processes together (tests' leak checks).
  std::size_t sockets() const { return count_.load(std::memory_order_relaxed); }

  struct Sock;

 private:
  friend struct SockOps;
  void run_op(uv_loop_t* loop, const Pid& caller, std::uint64_t tag, std::vector<CallValue> args);
  Sock* find(const Pid& caller, double id);
  Sock* make(uv_loop_t* loop, const Pid& owner, int family);
  // Out of the tables, its waiting requests answered closed, its handles
  // closed.
  void forget(Sock* s);
  void stop_all();
  void note_owner(const Pid& owner, int delta);

  Scheduler& scheduler_;
  IoLoop& loop_;
  const unsigned shard_index_, shard_count_;
  // The loop thread's alone.
  std::uint64_t next_id_ = 0;
  std::unordered_map<std::uint64_t, Sock*> socks_;
  std::unordered_map<Pid, std::unordered_set<std::uint64_t>> owned_;
  std::atomic<std::size_t> count_{0};
  // Sockets per owner, for the exit hook's check (any thread).
  std::mutex owners_mu_;
  std::unordered_map<Pid, int> owners_;  // guarded by owners_mu_
  std::atomic<bool> any_owners_{false};  // !owners_.empty(), written under owners_mu_
};

// The sockets' shards, one a I/O thread (--io-threads N): a new socket or
// a name lookup goes to the next shard, a call on a socket to the shard
// its id names. With one shard it is that shard. Threads: any.
class SocketShards {
 public:
  SocketShards(Scheduler& scheduler, const std::vector<IoLoop*>& loops);

  void dispatch(CommandRequest&& req);
  void close_owned(const Pid& owner);
  void claim(std::uint64_t id, const Pid& new_owner) { of(id).claim(id, new_owner); }
  void give(std::uint64_t id, const Pid& from) { of(id).give(id, from); }
  void drop(std::uint64_t id, const Pid& owner) { of(id).drop(id, owner); }
  std::size_t sockets() const;

 private:
  SocketService& of(std::uint64_t id) { return *shards_[id % shards_.size()]; }
  SocketService& next() { return *shards_[next_.fetch_add(1, std::memory_order_relaxed) % shards_.size()]; }
  std::vector<std::unique_ptr<SocketService>> shards_;
  std::atomic<unsigned> next_{0};
};

}  // namespace host::io
