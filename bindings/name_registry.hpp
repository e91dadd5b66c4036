// Registered process names (process.registry): name -> PID, released when
// the process exits. Threads: any; one mutex guards both maps.
//
// version() changes with every change of the names (never to 0), so that a
// process can keep the PID of the name it sends to and look it up again only
// once the names changed: a lookup under the lock cost a send to a name
// more than a send to a PID (PeerStrings; BENCHMARKS.md's source figures).
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "host/pid.hpp"

namespace host::lua {

class NameRegistry {
 public:
  // "" on success, else "exists: name 'x' is taken by <0.4.1>".
  std::string register_name(const std::string& name, const Pid& pid);
  std::optional<Pid> lookup(const std::string& name);
  // "" on success, else "not_found: no process registered as 'x'".
  std::string unregister(const std::string& name);
  // The names pid holds (process.info).
  std::vector<std::string> names_of(const Pid& pid);
  // Releases every name of a process that exited. Every exit comes here, and
  // most processes never hold a name: while none does, it takes no lock.
  void release_all(const Pid& pid);
  // Read before a lookup, it is older than what the lookup saw: a PID kept
  // with it is looked up again at the next change.
  std::uint32_t version() const { return version_.load(std::memory_order_acquire); }

 private:
  // Under mu_, after the maps changed.
  void changed();

  std::atomic<std::uint32_t> version_{1};
  // by_pid_.size(), stored under mu_ after each change and read without it
  // by release_all. A name registered for a process that is still alive is
  // seen by its exit: the registrar's alive check (lua_process_api.cpp,
  // register_name) and the exit's end of life (Scheduler::finish) take the
  // same slot lock, so the exit comes after the store; one that came before
  // is released by the registrar itself.
  std::atomic<std::size_t> holders_{0};
  std::mutex mu_;
  std::unordered_map<std::string, Pid> by_name_;              // guarded by mu_
  std::unordered_map<Pid, std::vector<std::string>> by_pid_;  // guarded by mu_
};

}  // namespace host::lua
