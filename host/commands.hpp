// Command dispatch: the registry that maps a yield's command id to the
// handler that carries it out. Threads: handlers are registered before the
// scheduler runs processes; dispatch happens on workers.
//
// A handler receives the request and must eventually complete it exactly
// once with Scheduler::complete_yield(pid, tag, result, error) or
// Scheduler::complete_yield_copy(pid, tag, bytes), from any thread (one
// that throws queued nothing: complete the tag again, with an error). Inline handlers run on the worker and must not block; handlers
// registered as blocking run on the blocking pool. An unknown command or a
// handler that throws completes the yield with an error, never a hang.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "host/pid.hpp"
#include "host/process.hpp"

namespace host {

class Scheduler;
struct ProcessSlot;
struct Yield;

// Command ids the host itself handles. Bindings add theirs from kFirstUser.
namespace cmd {
inline constexpr CommandId kSleep = 1;      // arg: nanoseconds; completes with empty payload.
                                            // The scheduler's own handler (a direct one, on the
                                            // timer service: Scheduler::start_sleep).
inline constexpr CommandId kSpawnOn = 2;   // process.spawn_on: bytes, the node, entry and arguments
                                            // (host/cluster/nats_node.hpp, SpawnRequest); completes
                                            // with the new PID's text, codec-encoded.
inline constexpr CommandId kFirstUser = 64;
}  // namespace cmd

struct CommandRequest {
  Scheduler* scheduler;
  Pid pid;
  std::uint64_t tag;
  std::int64_t arg;
  std::string bytes;
};

struct CommandHandler {
  std::function<void(CommandRequest&&)> run;
  // Optional: drop the work of a yield its process stopped waiting for.
  // Returns true when the yield will now never complete (its completion
  // was not posted and will not be): it no longer counts as outstanding.
  std::function<bool(Scheduler&, Pid, std::uint64_t tag)> cancel;
  bool blocking = false;  // run on the blocking pool instead of the worker
  std::string name;
  // Instead of run and cancel, for the host's own commands on every
  // message's path (cmd::kSleep, the netpoller's wait): carried out on the
  // dispatching worker straight from the yield and the process's slot
  // (under no lock), without a request. Through run, a timed wait's sleep
  // and its cancel cost more (a std::function's call, a CommandRequest, a
  // guarded call: BENCHMARKS change 107), and so did each socket's wait
  // for readiness. context is passed to both as is; what it points to
  // must outlive the registry's dispatches. direct must not throw;
  // direct_cancel returns as cancel.
  void (*direct)(void* context, Scheduler&, ProcessSlot&, const Yield&) = nullptr;
  bool (*direct_cancel)(void* context, Scheduler&, ProcessSlot&, std::uint64_t tag) = nullptr;
  void* context = nullptr;
};

class CommandRegistry {
 public:
  // Registers or replaces a handler. Not thread-safe with dispatch: call
  // before processes that use the command run.
  void add(CommandId id, CommandHandler handler) {
    if (handlers_.size() <= id) handlers_.resize(id + 1);
    handlers_[id] = std::move(handler);
  }
  const CommandHandler* find(CommandId id) const {
    if (id >= handlers_.size() || !(handlers_[id].run || handlers_[id].direct)) return nullptr;
    return &handlers_[id];
  }

 private:
  std::vector<CommandHandler> handlers_;
};

}  // namespace host
