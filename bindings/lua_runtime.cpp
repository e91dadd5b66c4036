// The Lua runtime: kernel compilation, spawning Lua processes, and the
// record of which process uses which module (for reload events).
#include "bindings/lua_runtime.hpp"

#include <stdexcept>

#include "bindings/codec.hpp"
#include "bindings/lua_process.hpp"
#include "host/assert.hpp"
#include "host/error.hpp"

namespace host::lua {

// Generated from bindings/kernel_ext.lua, bindings/inbox.lua and
// bindings/metatable_calls.lua (the modules' Lua halves: embedded_lua).
extern const char* const k_kernel_ext_source;
extern const char* const k_inbox_source;
extern const char* const k_metatable_calls_source;

std::pair<std::string, std::string> split_entry(const std::string& entry) {
  auto colon = entry.find(':');
  if (colon == std::string::npos) return {entry, "main"};
  return {entry.substr(0, colon), entry.substr(colon + 1)};
}

namespace {

// The host's lines and the embedder's, checked: every name and command
// once, every command in the range bindings may use, every Lua half
// present. A wrong line is a build's or an embedder's bug, found as the
// runtime is made rather than when some process first asks.
std::vector<ModuleLine> checked_lines(const std::vector<ModuleLine>& extra) {
  std::vector<ModuleLine> lines(host_modules().begin(), host_modules().end());
  lines.insert(lines.end(), extra.begin(), extra.end());
  auto fail = [](const std::string& what) { throw std::runtime_error("module registry: " + what); };
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const ModuleLine& m = lines[i];
    const std::string name = m.name;
    for (std::size_t j = 0; j < i; ++j) {
      const ModuleLine& o = lines[j];
      if (name == o.name || (o.alias && name == o.alias) || (m.alias && std::string(m.alias) == o.name))
        fail("module '" + name + "' is registered twice");
      if (m.command != 0 && m.command == o.command)
        fail("modules '" + std::string(o.name) + "' and '" + name + "' share command " + std::to_string(m.command));
    }
    const bool calls = m.kind == ModuleKind::kLuaHalf || m.kind == ModuleKind::kService;
    if (calls && m.command < cmd::kFirstUser)
      fail("module '" + name + "': command " + std::to_string(m.command) + " is below cmd::kFirstUser (" +
           std::to_string(cmd::kFirstUser) + "), the host's own");
    if (m.kind == ModuleKind::kNative && !m.open) fail("module '" + name + "' is kNative without an open function");
    if (m.kind == ModuleKind::kLuaHalf && !m.source && !embedded_lua(name))
      fail("module '" + name + "' has no Lua half (no bindings/" + name + ".lua is embedded, and its line gives no source)");
  }
  return lines;
}

}  // namespace

const ModuleLine* LuaRuntime::find_module(std::string_view name) const {
  auto it = module_index_.find(name);
  return it == module_index_.end() ? nullptr : it->second;
}

const std::string* LuaRuntime::module_chunk(const ModuleLine& m, std::string* err) const {
  HOST_ASSERT(&m >= module_lines_.data() && &m < module_lines_.data() + module_lines_.size(),
              "a module chunk is asked for by one of the runtime's own lines");
  LazyChunk& c = chunks_[&m - module_lines_.data()];
  std::call_once(c.once, [&] {
    const char* source = m.source ? m.source : embedded_lua(m.name);
    c.error = ModuleCache::compile(std::string("=") + m.name, source, c.bytecode, /*strip=*/true);
    if (!c.error.empty()) c.error = std::string("the ") + m.name + " module does not compile: " + c.error;
  });
  if (c.error.empty()) return &c.bytecode;
  *err = c.error;
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
      module_lines_(checked_lines(options_.modules)),
      chunks_(std::make_unique<LazyChunk[]>(module_lines_.size())) {
  // The names are the lines' own (static) strings; checked_lines made sure
  // no name or alias is there twice.
  for (const ModuleLine& m : module_lines_) {
    module_index_.emplace(m.name, &m);
    if (m.alias) module_index_.emplace(m.alias, &m);
  }
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
  io_->exec.set_read_limit(options_.mem_limit);
  io_->fs.set_alive([this](const Pid& pid) { return scheduler_.alive(pid); });
  for (const ModuleLine& m : module_lines_)
    if (m.install) m.install(scheduler_, io_, m.command);
  io_->http.attach([this](const std::string& entry, std::string args) { return spawn(entry, std::move(args)); });
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
  // The module's name, up to the entry's method (split_entry's first half,
  // without the two strings it makes on every spawn).
  std::unique_ptr<LuaProcess> process = spares_.take(std::string_view(entry).substr(0, entry.find(':')));
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
