// Registered process names (process.registry): name -> PID, released when
// the process exits. Threads: any; one mutex guards both maps.
#pragma once

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
  // Releases every name of a process that exited.
  void release_all(const Pid& pid);

 private:
  std::mutex mu_;
  std::unordered_map<std::string, Pid> by_name_;              // guarded by mu_
  std::unordered_map<Pid, std::vector<std::string>> by_pid_;  // guarded by mu_
};

}  // namespace host::lua
