// What a Lua runtime's processes use to reach files and programs: the I/O
// thread and the fs, exec and socket services, with their commands registered on
// the scheduler and an exit hook that closes a process's files and kills
// its programs when it ends. Threads: made and destroyed with the
// runtime; its parts say their own.
#pragma once

#include <memory>

#include "bindings/exec_service.hpp"
#include "bindings/fs_service.hpp"
#include "bindings/socket_service.hpp"
#include "host/commands.hpp"
#include "host/io_loop.hpp"

namespace host {
class Scheduler;
}

namespace host::lua {

// The commands of the waiting calls the host's own Lua modules make.
// Embedders and tests take theirs from kFirstEmbedder.
namespace io_cmd {
inline constexpr CommandId kFs = cmd::kFirstUser;
inline constexpr CommandId kExec = cmd::kFirstUser + 1;
inline constexpr CommandId kSocket = cmd::kFirstUser + 2;
inline constexpr CommandId kFirstEmbedder = cmd::kFirstUser + 32;
}  // namespace io_cmd

struct IoServices {
  explicit IoServices(Scheduler& scheduler) : exec(scheduler, loop), sockets(scheduler, loop) {}
  ~IoServices() { loop.stop(); }  // first: the loop's stop jobs use exec

  IoLoop loop;
  FsService fs;
  ExecService exec;
  SocketService sockets;
};

// Makes the services, registers kFs and kExec and the exit hook (which
// keeps the services alive as long as the scheduler may call it).
std::shared_ptr<IoServices> install_io_services(Scheduler& scheduler);

}  // namespace host::lua
