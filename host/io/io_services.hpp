// What a Lua runtime's processes use to reach files and programs: the I/O
// thread and the fs, exec and socket services, with their commands registered on
// the scheduler and an exit hook that closes a process's files and kills
// its programs when it ends. Threads: made and destroyed with the
// runtime; its parts say their own.
#pragma once

#include <algorithm>
#include <memory>
#include <vector>

#include "host/io/exec_service.hpp"
#include "host/io/fs_service.hpp"
#include "host/io/http_server.hpp"
#include "host/io/socket_service.hpp"
#include "host/commands.hpp"
#include "host/io/io_loop.hpp"
#include "host/io/netpoll.hpp"
#include "host/io/tcp_socket.hpp"

namespace host {
class Scheduler;
}

namespace host::io {

// The commands of the services this layer makes itself. A module added
// by a registry line (bindings/module_registry.cpp) takes a free id below
// kFirstEmbedder in that line; embedders and tests take theirs from
// kFirstEmbedder.
namespace io_cmd {
inline constexpr CommandId kFs = cmd::kFirstUser;
inline constexpr CommandId kExec = cmd::kFirstUser + 1;
inline constexpr CommandId kSocket = cmd::kFirstUser + 2;
// A wait for a descriptor's readiness (NetPoller::arm; its tag names it).
inline constexpr CommandId kPollWait = cmd::kFirstUser + 4;
inline constexpr CommandId kFirstEmbedder = cmd::kFirstUser + 32;
}  // namespace io_cmd

struct IoServices {
  // io_threads loops (--io-threads): programs on the first, UDP sockets
  // and name lookups spread over all (TCP runs on the workers, through
  // netpoll).
  IoServices(Scheduler& scheduler, unsigned io_threads)
      : netpoll(poll_completion(scheduler)), loops(make_loops(io_threads)), exec(scheduler, *loops[0]), sockets(scheduler, loop_pointers()), http(netpoll, tcp_transit) {}
  ~IoServices() { stop(); }  // first: the loops' stop jobs use exec and the sockets
  void stop() {
    for (auto& l : loops) l->stop();
  }

  // TCP sockets on the workers: their readiness, and those moving
  // between processes (closed before the poller goes).
  NetPoller netpoll;
  TcpTransit tcp_transit;
  std::vector<std::unique_ptr<IoLoop>> loops;
  // Open sockets, all processes together (tests' leak checks): UDP's on
  // the I/O thread and TCP's with a descriptor on the workers.
  std::size_t open_sockets() const { return sockets.sockets() + netpoll.open_count(); }
  FsService fs;
  ExecService exec;
  SocketShards sockets;
  HttpServer http;  // the host's own (the inspector)

 private:
  // A readiness wait's completion: one true value, a non-empty payload
  // (a timeout's sleep has an empty one: the continuation tells them apart).
  static NetPoller::Complete poll_completion(Scheduler& scheduler);
  static std::vector<std::unique_ptr<IoLoop>> make_loops(unsigned n) {
    std::vector<std::unique_ptr<IoLoop>> v;
    for (unsigned i = 0; i < std::max(1u, n); ++i) v.push_back(std::make_unique<IoLoop>());
    return v;
  }
  std::vector<IoLoop*> loop_pointers() const {
    std::vector<IoLoop*> v;
    for (const auto& l : loops) v.push_back(l.get());
    return v;
  }
};

// Makes the services, registers kFs, kExec, kSocket and kPollWait and the exit hook
// (which keeps the services alive as long as the scheduler may call it).
std::shared_ptr<IoServices> install_io_services(Scheduler& scheduler, unsigned io_threads = 1);

}  // namespace host::io
