// The name registry's maps, kept consistent under one lock.
#include "bindings/name_registry.hpp"

#include <algorithm>

#include "host/error.hpp"

namespace host::lua {

std::string NameRegistry::register_name(const std::string& name, const Pid& pid) {
  std::lock_guard lock(mu_);
  auto [it, inserted] = by_name_.emplace(name, pid);
  if (!inserted) {
    if (it->second == pid) return {};
    return make_error(ErrorKind::Exists, "name '" + name + "' is taken by " + it->second.to_string());
  }
  by_pid_[pid].push_back(name);
  changed();
  return {};
}

std::optional<Pid> NameRegistry::lookup(const std::string& name) {
  std::lock_guard lock(mu_);
  auto it = by_name_.find(name);
  if (it == by_name_.end()) return std::nullopt;
  return it->second;
}

std::string NameRegistry::unregister(const std::string& name) {
  std::lock_guard lock(mu_);
  auto it = by_name_.find(name);
  if (it == by_name_.end()) return make_error(ErrorKind::NotFound, "no process registered as '" + name + "'");
  auto& names = by_pid_[it->second];
  names.erase(std::remove(names.begin(), names.end(), name), names.end());
  if (names.empty()) by_pid_.erase(it->second);
  by_name_.erase(it);
  changed();
  return {};
}

std::vector<std::string> NameRegistry::names_of(const Pid& pid) {
  std::lock_guard lock(mu_);
  auto it = by_pid_.find(pid);
  return it == by_pid_.end() ? std::vector<std::string>{} : it->second;
}

void NameRegistry::release_all(const Pid& pid) {
  if (holders_.load(std::memory_order_acquire) == 0) return;
  std::lock_guard lock(mu_);
  auto it = by_pid_.find(pid);
  if (it == by_pid_.end()) return;
  for (const auto& name : it->second) by_name_.erase(name);
  by_pid_.erase(it);
  changed();
}

void NameRegistry::changed() {
  holders_.store(by_pid_.size(), std::memory_order_release);
  std::uint32_t next = version_.load(std::memory_order_relaxed) + 1;
  if (next == 0) next = 1;  // 0 is PeerStrings's "not a name"
  version_.store(next, std::memory_order_release);
}

}  // namespace host::lua
