// The `socket` module's command handler (docs/LUA_API.md, socket): TCP and UDP
// sockets and name lookups on the I/O thread's libuv loop (host/io/io_loop.hpp),
// under LuaSocket's API (bindings/socket.lua). Threads: dispatch() and
// close_owned() from any thread; everything else on the loop thread, so
// the sockets' table needs no lock (but for owners_, which the exit hook
// reads).
//
// Each call of a socket method is one waiting call, carried out here:
//   - Reads are buffered per socket. A receive completes once what it asked
//     for is there (a line, n bytes, everything until the peer closes), one
//     resume per request however many packets it took; meanwhile the socket
//     reads ahead at most kReadAhead bytes nobody asked for, then stops
//     reading until a receive takes from the buffer (bounded memory: the
//     peer waits, as TCP makes it).
//   - Writes go to the kernel at once where it takes them (uv_try_write);
//     the rest is written one chunk of at most kWriteChunk at a time, and a
//     send returns once its last chunk is handed to libuv. So a socket holds
//     at most one chunk beyond what the kernel took, and a fast writer to a
//     slow peer waits.
//   - Every request has a deadline (LuaSocket's timeouts, computed by the
//     Lua side); one timer a socket, armed for the earliest, times them out.
//   - A socket belongs to the process that made it (or accepted it); when
//     the process ends its sockets are closed, before its monitors hear of
//     it (close_owned waits for the loop when the process owns any), and
//     requests still waiting are answered "closed".
//   - TLS (ssl.wrap, stdlib/ssl.lua) runs here too, on a socket that stays
//     itself (its id, owner, deadlines and moves): a TlsSession
//     (tls_session.hpp) decrypts what is read into the same buffer, so a
//     receive completes once the plaintext it asked for is there, and a
//     send's chunks are encrypted as they are written.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "host/io/call_values.hpp"
#include "host/io/tls_session.hpp"
#include "host/commands.hpp"
#include "host/io/io_loop.hpp"
#include "host/pid.hpp"

namespace host {
class Scheduler;
}

namespace host::io {

class SocketService {
 public:
  static constexpr std::size_t kReadAhead = 64 * 1024;
  static constexpr std::size_t kWriteChunk = 64 * 1024;
  // Datagrams a UDP socket keeps that nobody asked for, at most.
  static constexpr std::size_t kDatagramQueue = 64;

  // What a socket object shares with the I/O thread, so that a send that
  // fits its bounded buffer returns at once (send_now): the bytes handed
  // over that the loop has not yet given to the kernel (or to libuv, one
  // chunk), and whether the socket failed or closed. Counted: the socket
  // holds one reference, each object that shares it another (released by
  // its __gc).
  struct Shared {
    std::atomic<std::int64_t> unsent{0};
    std::atomic<bool> failed{false};
    std::atomic<int> refs{1};
    // Sends that wait (too large for the buffer): while one is out, a
    // later send waits too, behind it, so that sends keep their order.
    std::atomic<int> waiting{0};
  };
  // The bytes a socket may hold for sends that returned at once.
  static constexpr std::int64_t kSendBuffer = 64 * 1024;
  // A socket object was collected while its process held it: closed
  // (posted; only where it still belongs to owner).
  void drop(std::uint64_t id, const Pid& owner);
  // Any thread: a new reference to socket id's shared state, or nullptr.
  Shared* share(std::uint64_t id);
  static void release(Shared* shared);
  // A worker: hands data to the socket without waiting, where it fits the
  // buffer; false (nothing done) where it does not, or the socket failed:
  // the caller then waits in a send call, which reports why.
  bool send_now(std::uint64_t id, Shared* shared, std::string_view data);

  // One shard of shard_count (--io-threads): its sockets' ids are
  // shard_index modulo shard_count, so any thread finds a socket's shard.
  SocketService(Scheduler& scheduler, IoLoop& loop, unsigned shard_index = 0, unsigned shard_count = 1);
  ~SocketService();
  SocketService(const SocketService&) = delete;

  // Runs a decoded call on this shard's loop.
  void post_op(const Pid& pid, std::uint64_t tag, std::vector<CallValue> args);
  // Where accepted connections go (their shard, round robin), set by
  // SocketShards when there are several; none: this one.
  void set_accept_target(std::function<SocketService*()> pick) { accept_target_ = std::move(pick); }
  // A connection accepted on another shard, as a duplicated descriptor:
  // made a socket of this shard's, owned by pid, and pid's accept call
  // completed with it.
  void adopt_accepted(int fd, const Pid& pid, std::uint64_t tag, bool nodelay);
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
  Sock* make(uv_loop_t* loop, const Pid& owner, bool udp, int family);
  // Out of the tables, its waiting requests answered closed; its handle
  // closes once the sends that returned at once are written (flush).
  void forget(Sock* s, bool flush = true);
  void stop_all();
  void note_owner(const Pid& owner, int delta);
  // A TLS context for ssl.wrap's options; the clients' that verify against
  // the system's store are made once (loading the store takes
  // milliseconds), others at each wrap (their files are read then).
  std::shared_ptr<const TlsContext> tls_context(const TlsContext::Options& o, std::string* err);

  Scheduler& scheduler_;
  IoLoop& loop_;
  const unsigned shard_index_, shard_count_;
  std::function<SocketService*()> accept_target_;
  // The loop thread's alone.
  std::uint64_t next_id_ = 0;
  std::unordered_map<std::uint64_t, Sock*> socks_;
  std::unordered_map<Pid, std::unordered_set<std::uint64_t>> owned_;
  std::unordered_set<Sock*> lingering_;  // forgotten, writing what they still hold
  std::unordered_map<std::string, std::shared_ptr<const TlsContext>> tls_contexts_;  // by protocol and verify
  std::atomic<std::size_t> count_{0};
  // The open sockets' shared states, for share() (any thread).
  std::mutex shared_mu_;
  std::unordered_map<std::uint64_t, Shared*> shared_;  // guarded by shared_mu_
  // Sockets per owner, for the exit hook's check (any thread).
  std::mutex owners_mu_;
  std::unordered_map<Pid, int> owners_;  // guarded by owners_mu_
  std::atomic<bool> any_owners_{false};  // !owners_.empty(), written under owners_mu_
};

// The sockets' shards, one a I/O thread (--io-threads N): a new socket
// goes to the next shard, a call on a socket to the shard its id names,
// and a server spreads the connections it accepts over them all (each
// moved to its shard as a duplicated descriptor). With one shard it is
// that shard. Threads: any.
class SocketShards {
 public:
  SocketShards(Scheduler& scheduler, const std::vector<IoLoop*>& loops);

  void dispatch(CommandRequest&& req);
  void close_owned(const Pid& owner);
  void claim(std::uint64_t id, const Pid& new_owner) { of(id).claim(id, new_owner); }
  void give(std::uint64_t id, const Pid& from) { of(id).give(id, from); }
  void drop(std::uint64_t id, const Pid& owner) { of(id).drop(id, owner); }
  SocketService::Shared* share(std::uint64_t id) { return of(id).share(id); }
  bool send_now(std::uint64_t id, SocketService::Shared* shared, std::string_view data) {
    return of(id).send_now(id, shared, data);
  }
  std::size_t sockets() const;

 private:
  SocketService& of(std::uint64_t id) { return *shards_[id % shards_.size()]; }
  SocketService& next() { return *shards_[next_.fetch_add(1, std::memory_order_relaxed) % shards_.size()]; }
  std::vector<std::unique_ptr<SocketService>> shards_;
  std::atomic<unsigned> next_{0};
};

}  // namespace host::io
