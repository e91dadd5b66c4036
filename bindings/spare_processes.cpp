#include "bindings/spare_processes.hpp"

#include <algorithm>
#include <iterator>

#include "bindings/lua_process.hpp"

namespace host::lua {

SpareProcesses::SpareProcesses(LuaRuntime& runtime) : rt_(runtime) {}

SpareProcesses::~SpareProcesses() = default;

std::unique_ptr<LuaProcess> SpareProcesses::take(std::string_view module) {
  std::lock_guard lock(mu_);
  if (module_ != module) module_ = module;
  if (spares_.empty()) {
    target_ = std::min(std::max(target_ * 2, kFirstTarget), kMaxSpares);
    return nullptr;
  }
  // A hit: one fewer wanted. A server that spawns a process a connection
  // kept the 64 an early burst of misses asked for, about 1 MB that its
  // idle connections then carried (BENCHMARKS.md, "An idle connection
  // within its first chunk").
  if (target_ > kFirstTarget) --target_;
  // The newest spare that loaded this module, else the newest: a spare
  // that loaded another module loads this one again and keeps the other's
  // chunk as garbage (about 1.5 KB) until its first collection.
  auto it = std::find_if(spares_.rbegin(), spares_.rend(), [&](const auto& s) { return s->preloaded(module); });
  auto chosen = it == spares_.rend() ? spares_.end() - 1 : std::prev(it.base());
  auto p = std::move(*chosen);
  spares_.erase(chosen);
  return p;
}

bool SpareProcesses::make_one() {
  std::string module;
  {
    std::lock_guard lock(mu_);
    if (spares_.size() + making_ >= target_) return false;
    ++making_;
    module = module_;
  }
  auto p = std::make_unique<LuaProcess>(rt_);
  const bool ok = p->Prepare();
  if (ok && !module.empty()) p->Preload(module);
  std::lock_guard lock(mu_);
  --making_;
  if (!ok) {
    target_ = 0;  // out of memory (or a tiny --mem-limit): none until the next miss
    return false;
  }
  spares_.push_back(std::move(p));
  return true;
}

}  // namespace host::lua
