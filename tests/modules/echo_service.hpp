// A test-only module's service, written as the recipe asks of any module's
// (docs/ARCHITECTURE.md, "A call that waits"): its handler answers a call
// with its string arguments back, upper-cased; "hold" records the calling
// process as holding something, which the exit hook frees when it ends.
// tests/test_module_registry.cpp installs it through a registry line.
// Threads: the handler runs on a worker, the hook on whichever thread
// finishes the process; both under mu.
#pragma once

#include <cctype>
#include <memory>
#include <mutex>
#include <unordered_set>
#include <string>
#include <vector>

#include "host/io/call_values.hpp"
#include "host/scheduler.hpp"

namespace host::testing {

struct EchoService {
  std::mutex mu;
  std::unordered_set<Pid> holders;  // processes that called hold and have not ended; guarded by mu
  int installs = 0;       // guarded by mu
};

// The service the last install made, for the test to look into.
inline std::shared_ptr<EchoService> echo_service;

inline void install_echo(Scheduler& s, const std::shared_ptr<io::IoServices>&, CommandId command) {
  auto svc = std::make_shared<EchoService>();
  svc->installs = 1;
  echo_service = svc;
  CommandHandler h;
  h.name = "echo";
  h.run = [svc](CommandRequest&& req) {  // inline: nothing here blocks
    std::vector<io::CallValue> args;
    if (!io::read_call_request(req, args)) return;
    if (!args.empty() && args[0].is_string() && args[0].string == "hold") {
      {
        std::lock_guard lock(svc->mu);
        svc->holders.insert(req.pid);
      }
      req.scheduler->complete_yield(req.pid, req.tag, io::CallResultWriter().boolean(true).finish());
      return;
    }
    io::CallResultWriter w;
    for (const auto& a : args) {
      if (!a.is_string()) {
        req.scheduler->complete_yield(req.pid, req.tag, {}, "invalid: echo takes strings");
        return;
      }
      std::string up = a.string;
      for (char& c : up) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      w.string(up);
    }
    req.scheduler->complete_yield(req.pid, req.tag, w.finish());
  };
  s.commands().add(command, std::move(h));
  s.add_exit_hook([svc](const ExitInfo& info) {
    std::lock_guard lock(svc->mu);
    svc->holders.erase(info.pid);
  });
}

}  // namespace host::testing
