// The Lua runtime: what every Lua process shares. The scheduler it runs on,
// the module cache, the name registry, the per-process limits, and the
// compiled process kernel. Threads: any.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "host/io/io_services.hpp"
#include "bindings/c_modules.hpp"
#include "bindings/module_cache.hpp"
#include "bindings/module_registry.hpp"
#include "bindings/name_registry.hpp"
#include "bindings/spare_processes.hpp"
#include "host/scheduler.hpp"

namespace host::lua {

struct LuaOptions {
  std::filesystem::path dir;       // the script directory
  std::filesystem::path stdlib;    // the host's stdlib/ (may be empty)
  std::size_t mem_limit = 256u << 20;  // per process Lua heap
  double time_limit = 10.0;        // seconds a process may run without yielding
  // Live processes at most; spawns beyond it fail with "limit: ...", so a
  // process that spawns in a loop runs out of this before the machine runs
  // out of memory (about 35-200 KB a process).
  std::size_t max_processes = 1000000;
  // Record which process loaded which module, for reload events (--watch).
  // Off, spawn and exit skip a global lock and two map updates.
  bool track_module_uses = false;
  // I/O threads (--io-threads): UDP sockets and name lookups spread over
  // them (TCP, TLS and HTTP run on the workers).
  unsigned io_threads = 1;
  // An embedder's own modules, each one registry line (module_registry.hpp),
  // reached as the host's are. A line that clashes with another (its name,
  // its command) or lacks its Lua half makes the runtime throw.
  std::vector<ModuleLine> modules;
};

class LuaRuntime {
 public:
  // Makes spare processes on the scheduler's idle workers (its idle job)
  // until destroyed.
  LuaRuntime(Scheduler& scheduler, LuaOptions options);
  ~LuaRuntime();
  LuaRuntime(const LuaRuntime&) = delete;

  // Spawns a Lua process running `entry` ("module" or "module:method") with
  // the encoded arguments. Fails at once when the module is missing, does not
  // compile, or lacks the method (docs/LUA_API.md, Modules, globals and the standard libraries).
  SpawnResult spawn(const std::string& entry, std::string encoded_args, const SpawnOptions& options = {});
  // Spawns made from modules' top-level code, each inside the one loading
  // it, nest at most this deep on one thread; a deeper one fails with
  // "limit: ..." (a module that spawns itself as it loads).
  static constexpr int kMaxSpawnNesting = 64;

  Scheduler& scheduler() { return scheduler_; }
  ModuleCache& modules() { return modules_; }
  CModules& c_modules() { return c_modules_; }
  NameRegistry& names() { return names_; }
  const LuaOptions& options() const { return options_; }
  const std::string& kernel_ext_bytecode() const { return kernel_ext_bytecode_; }
  const std::string& inbox_bytecode() const { return inbox_bytecode_; }
  const std::string& metatable_calls_bytecode() const { return metatable_calls_bytecode_; }
  // The registry's modules: the host's own (host_modules), then the
  // embedder's (LuaOptions::modules). find_module gives the line require
  // knows by `name` (its name or its alias); null for any other.
  std::span<const ModuleLine> module_lines() const { return module_lines_; }
  const ModuleLine* find_module(std::string_view name) const;
  // A kLuaHalf module's chunk, compiled at its first use in this runtime,
  // once (most runs never load fs, exec or socket, so start-up does not
  // compile them); nullptr with *err set when it does not compile. Any
  // thread. m must be one of module_lines().
  const std::string* module_chunk(const ModuleLine& m, std::string* err) const;
  ::host::io::IoServices& io() { return *io_; }

  // Which modules each live process loaded, for reload events (only with
  // track_module_uses).
  void note_module_use(const Pid& pid, const std::string& module);
  std::vector<Pid> users_of(const std::string& module);
  // Releases a process's names and module records. Called from Close, which
  // the scheduler runs before the exit reaches any monitor.
  void forget_process(const Pid& pid);

 private:
  Scheduler& scheduler_;
  const LuaOptions options_;
  ModuleCache modules_;
  CModules c_modules_;
  NameRegistry names_;
  // Lua processes that exist, for --max-processes. A LuaProcess is destroyed
  // before its exit reaches its monitors (the scheduler's live count drops
  // only after), so a monitor that replaces a process it saw exit is never
  // refused. Changed by LuaProcess's constructor and destructor.
  friend class LuaProcess;
  std::atomic<std::size_t> processes_{0};
  std::string kernel_ext_bytecode_;
  std::string inbox_bytecode_;
  std::string metatable_calls_bytecode_;
  std::vector<ModuleLine> module_lines_;  // before io_: its services are installed from it
  // module_lines_ by name and by alias (find_module): a new HTTP
  // connection's process looks up four or five names, and the walk over
  // every line, a string comparison each, was 1.5% of its instructions.
  std::unordered_map<std::string_view, const ModuleLine*> module_index_;
  // One per module line, compiled on first use (module_chunk).
  struct LazyChunk {
    std::once_flag once;
    std::string bytecode, error;
  };
  std::unique_ptr<LazyChunk[]> chunks_;
  std::shared_ptr<::host::io::IoServices> io_;
  SpareProcesses spares_{*this};  // after what Prepare reads (options_, the bytecode)
  std::mutex uses_mu_;
  std::unordered_map<std::string, std::unordered_set<Pid>> users_;  // guarded by uses_mu_
  std::unordered_map<Pid, std::vector<std::string>> uses_;          // guarded by uses_mu_
};

// Splits "module:method" (method defaults to "main").
std::pair<std::string, std::string> split_entry(const std::string& entry);

}  // namespace host::lua
