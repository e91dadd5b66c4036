// The http module's server (docs/LUA_API.md, stdlib: http): HTTP/1.1 parsed in C++ on
// the first I/O thread's libuv loop with the distribution's http-parser,
// each connection served by a Lua process of its own (stdlib/http/conn.lua)
// that the loop spawns when it accepts the connection. Threads: dispatch()
// and close_owned() from any thread; everything else on the loop thread,
// so the tables of servers and connections need no lock (but for the
// owners' set, which the exit hook reads).
//
// What a bad client can do is bounded here, before any Lua runs: a request
// that does not parse gets 400, headers over the server's max_header_bytes
// 431, a body over max_body_bytes 413, a request that takes longer than
// request_timeout to arrive 408; each is answered in order after the
// responses before it, and the connection then closes. Connections past
// max_connections get 503 and close. Requests are queued per connection
// (pipelining) and handed to its process one at a time, in order: the
// process's "next" call completes with the next parsed request; its
// "respond" call writes the response and waits for the one after, so a
// keep-alive request costs one waiting call. Reading pauses while
// kMaxQueued requests wait, so a pipelining client cannot queue without
// bound.
//
// Ownership: a server belongs to the process that called serve, a
// connection to the process serving it. When a server's owner ends (or it
// is closed) the server stops accepting, and each of its connections
// closes once the request it is serving is answered. When a connection's
// process ends in the middle of a request (a limit, an error the handler
// did not catch), the client gets a 500, and the connection closes.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
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
struct SpawnResult;
}  // namespace host

namespace host::io {

class HttpServer {
 public:
  // Requests parsed and waiting for a connection's process, at most,
  // before reading pauses.
  static constexpr std::size_t kMaxQueued = 16;
  // A "chunk" call (a streamed response body) returns once what the
  // connection has still to write is under this.
  static constexpr std::size_t kWriteLowWater = 64 * 1024;
  // The Lua module that serves a connection (stdlib/http/conn.lua).
  static constexpr const char* kConnEntry = "http.conn:serve";

  // Spawns a connection's process: entry, encoded arguments.
  using Spawner = std::function<SpawnResult(const std::string&, std::string)>;
  // Whether a module exists (serve checks its entry's module at once).
  using ModuleCheck = std::function<bool(const std::string&)>;

  HttpServer(Scheduler& scheduler, IoLoop& loop);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;

  // Set once by the runtime, before any process runs.
  void attach(Spawner spawn, ModuleCheck module_exists) {
    spawn_ = std::move(spawn);
    module_exists_ = std::move(module_exists);
  }

  // A server of the host's own (the inspector, --inspect), owned by no
  // process: its connections are served by conn_entry's processes (which
  // call stdlib/http/conn.lua's serve), with entry's method per request.
  // Waits for the loop; returns the address bound, or throws CallError.
  std::string serve_internal(const std::string& host, int port, const std::string& conn_entry, const std::string& entry);
  // Live processes serving connections of the host's own servers (the
  // inspector leaves them out of its counts).
  std::size_t internal_processes() const { return internal_processes_.load(std::memory_order_relaxed); }

  // The host is stopping: every server stops accepting, and each
  // connection closes once the request it serves is answered, so that
  // connection processes waiting for a request end at once (posted).
  void stop_serving();

  // The http command's handler: posts the call to the loop.
  void dispatch(CommandRequest&& req);
  // The exit hook: closes owner's servers (gracefully) and its connection
  // (answering 500 when a request was being served). Posted; cheap while
  // nothing is served.
  void close_owned(const Pid& owner);
  // Open connections and servers (tests' leak checks).
  std::size_t connections() const { return conn_count_.load(std::memory_order_relaxed); }
  std::size_t servers() const { return server_count_.load(std::memory_order_relaxed); }

  struct Server;
  struct Conn;

 private:
  friend struct HttpOps;
  void run_op(uv_loop_t* loop, const Pid& caller, std::uint64_t tag, std::vector<CallValue> args);
  void note_owner(const Pid& owner, int delta);
  void stop_all();

  Scheduler& scheduler_;
  IoLoop& loop_;
  Spawner spawn_;
  ModuleCheck module_exists_;
  // The loop thread's alone.
  std::uint64_t next_id_ = 0;
  std::unordered_map<std::uint64_t, Server*> servers_;
  std::unordered_map<std::uint64_t, Conn*> conns_;
  std::unordered_map<Pid, std::vector<std::uint64_t>> owned_;  // servers and connections by owner
  std::atomic<std::size_t> conn_count_{0};
  std::atomic<std::size_t> server_count_{0};
  std::atomic<std::size_t> internal_processes_{0};  // internal_pids_.size()
  // Owners of anything, for the exit hook's check (any thread).
  std::mutex owners_mu_;
  std::unordered_map<Pid, int> owners_;   // guarded by owners_mu_
  std::unordered_set<Pid> internal_pids_; // guarded by owners_mu_
  std::atomic<bool> any_owners_{false};   // !owners_.empty(), written under owners_mu_
};

}  // namespace host::io
