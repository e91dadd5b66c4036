// The Lua runtime: kernel compilation, spawning Lua processes, and the
// record of which process uses which module (for reload events).
#include "bindings/lua_runtime.hpp"

#include <stdexcept>

#include "bindings/codec.hpp"
#include "bindings/lua_process.hpp"
#include "host/error.hpp"

namespace host::lua {

// Generated from bindings/kernel_ext.lua, bindings/inbox.lua,
// bindings/metatable_calls.lua, bindings/fs.lua, bindings/exec.lua and
// bindings/socket.lua.
extern const char* const k_kernel_ext_source;
extern const char* const k_inbox_source;
extern const char* const k_metatable_calls_source;
extern const char* const k_fs_source;
extern const char* const k_exec_source;
extern const char* const k_socket_source;

std::pair<std::string, std::string> split_entry(const std::string& entry) {
  auto colon = entry.find(':');
  if (colon == std::string::npos) return {entry, "main"};
  return {entry.substr(0, colon), entry.substr(colon + 1)};
}

const std::string* LuaRuntime::LazyChunk::bytecode(std::string* err) const {
  std::call_once(once_, [this] {
    error_ = ModuleCache::compile(name_, source_, bytecode_, /*strip=*/true);
    if (!error_.empty()) error_ = std::string("the ") + (name_ + 1) + " module does not compile: " + error_;
  });
  if (error_.empty()) return &bytecode_;
  *err = error_;
  return nullptr;
}

LuaRuntime::LuaRuntime(Scheduler& scheduler, LuaOptions options)
    : scheduler_(scheduler),
      options_(std::move(options)),
      modules_([&] {
        std::vector<std::filesystem::path> roots{options_.dir};
        if (!options_.stdlib.empty()) roots.push_back(options_.stdlib);
        return roots;
      }()),
      fs_chunk_("=fs", k_fs_source),
      exec_chunk_("=exec", k_exec_source),
      socket_chunk_("=socket", k_socket_source) {
  std::string err = ModuleCache::compile("=kernel_ext", k_kernel_ext_source, kernel_ext_bytecode_, /*strip=*/true);
  if (!err.empty()) throw std::runtime_error("the extension kernel does not compile: " + err);
  err = ModuleCache::compile("=inbox", k_inbox_source, inbox_bytecode_, /*strip=*/true);
  if (!err.empty()) throw std::runtime_error("the inbox's Lua half does not compile: " + err);
  // The codec's check of LuaJIT's table layout (reads_tables_raw) runs
  // once; here, rather than in some process's first send.
  (void)reads_tables_raw();
  err = ModuleCache::compile("=metatable_calls", k_metatable_calls_source, metatable_calls_bytecode_, /*strip=*/true);
  if (!err.empty()) throw std::runtime_error("the metatable calls do not compile: " + err);
  io_ = io::install_io_services(scheduler_, options_.io_threads);
  io_->fs.set_read_limit(options_.mem_limit);
  io_->fs.set_alive([this](const Pid& pid) { return scheduler_.alive(pid); });
  io_->http.attach([this](const std::string& entry, std::string args) { return spawn(entry, std::move(args)); },
                   [this](const std::string& module) { return !modules_.locate(module).empty(); });
  install_moved_value_hooks();
  scheduler_.set_idle_job([this] { return spares_.make_one(); });
}

LuaRuntime::~LuaRuntime() {
  scheduler_.set_idle_job({});  // waits for a worker making a spare
  io_->stop();  // the I/O threads end with the runtime (the exit hook keeps only the services' memory)
}

void LuaRuntime::forget_process(const Pid& pid) {
  names_.release_all(pid);
  if (!options_.track_module_uses) return;
  std::lock_guard lock(uses_mu_);
  auto it = uses_.find(pid);
  if (it == uses_.end()) return;
  for (const auto& m : it->second) {
    auto u = users_.find(m);
    if (u != users_.end()) {
      u->second.erase(pid);
      if (u->second.empty()) users_.erase(u);
    }
  }
  uses_.erase(it);
}

SpawnResult LuaRuntime::spawn(const std::string& entry, std::string encoded_args, const SpawnOptions& options) {
  if (processes_.load(std::memory_order_acquire) >= options_.max_processes)
    return {{}, make_error(ErrorKind::Limit, "too many processes (" + std::to_string(options_.max_processes) +
                                                 " live; see --max-processes)")};
  // The new process's module runs its top-level code inside this call (its
  // Init), on this thread's stack, so that a bad module fails the spawn at
  // once. A module whose top-level code spawns itself (or a cycle of
  // modules doing so) would nest spawns until the stack overflowed and the
  // host crashed; past kMaxSpawnNesting the innermost spawn fails instead.
  thread_local int nesting = 0;
  if (nesting >= kMaxSpawnNesting)
    return {{}, make_error(ErrorKind::Limit, "spawn of '" + entry + "' nested " + std::to_string(nesting) +
                                                 " deep in modules' top-level code (does a module spawn while it "
                                                 "loads, itself or a module that spawns it?)")};
  ++nesting;
  struct Unnest {
    ~Unnest() { --nesting; }
  } unnest;
  std::unique_ptr<LuaProcess> process = spares_.take(split_entry(entry).first);
  if (!process) process = std::make_unique<LuaProcess>(*this);
  return scheduler_.spawn(std::move(process), entry, std::move(encoded_args), options);
}

void LuaRuntime::note_module_use(const Pid& pid, const std::string& module) {
  if (!options_.track_module_uses) return;
  std::lock_guard lock(uses_mu_);
  auto& mods = uses_[pid];
  for (const auto& m : mods)
    if (m == module) return;
  mods.push_back(module);
  users_[module].insert(pid);
}

std::vector<Pid> LuaRuntime::users_of(const std::string& module) {
  std::lock_guard lock(uses_mu_);
  auto it = users_.find(module);
  if (it == users_.end()) return {};
  return {it->second.begin(), it->second.end()};
}

}  // namespace host::lua
