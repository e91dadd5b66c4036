// The host's own HTTP server (the inspector, --inspect): http.serve's
// shape (stdlib/http/server.lua, docs/ARCHITECTURE.md "HTTP on the
// workers") started from C++ before any process runs. The listening
// socket is bound here, so that an address it cannot have is a usage
// error at once; it then moves (TcpTransit) to an acceptor process, owned
// by no process, which lives as long as the host. Its connections'
// processes are counted (internal_processes) so that the inspector can
// leave them out of what it shows.
//
// Threads: serve_internal from the main thread before the root spawns;
// the count from any.
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <string>

#include "host/io/tcp_socket.hpp"

namespace host {
struct SpawnResult;
}  // namespace host

namespace host::io {

class HttpServer {
 public:
  // Spawns a process: entry, encoded arguments.
  using Spawner = std::function<SpawnResult(const std::string&, std::string)>;

  HttpServer(NetPoller& poller, TcpTransit& transit) : poller_(poller), transit_(transit) {}
  HttpServer(const HttpServer&) = delete;

  // Set once by the runtime, before any process runs.
  void attach(Spawner spawn) { spawn_ = std::move(spawn); }

  // Serves host:port with conn_entry's processes (which call
  // stdlib/http/conn.lua's serve), with entry's method per request.
  // Returns the address bound, or throws CallError.
  std::string serve_internal(const std::string& host, int port, const std::string& conn_entry, const std::string& entry);

  // Live processes of the host's own servers (their acceptor and their
  // connections' processes), which the inspector leaves out of its counts.
  std::size_t internal_processes() const { return internal_.load(std::memory_order_relaxed); }
  void note_internal(int delta) { internal_.fetch_add(static_cast<std::size_t>(delta), std::memory_order_relaxed); }

 private:
  NetPoller& poller_;
  TcpTransit& transit_;
  Spawner spawn_;
  std::atomic<std::size_t> internal_{0};
};

}  // namespace host::io
