// The module cache: each Lua module of the script directory (and of the
// host's stdlib/) compiled once per version into bytecode that every new
// process loads. Threads: any; a mutex guards the table.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace host::lua {

struct Module {
  std::string name;       // "workers.echo"
  std::string path;       // the file it came from
  std::string bytecode;   // lua_dump of the compiled chunk, with debug info
  std::uint64_t version;  // bumped each time the file is recompiled
};

class ModuleCache {
 public:
  // Modules are searched in roots in order (the script directory, then stdlib).
  explicit ModuleCache(std::vector<std::filesystem::path> roots);

  // The newest good version of module `name`, compiled on first use. On
  // failure returns null and sets *error: "not_found: module 'x' (no file
  // DIR/x.lua)" or "invalid: DIR/x.lua:3: '=' expected near 'y'".
  std::shared_ptr<const Module> get(const std::string& name, std::string* error);

  // What a require of `name` finds: the module (as get), or null with
  // *absent set where no root holds it, or null with *error set. A name
  // found in no root is remembered as such until the next install or
  // forget (a file a reload adds), so that a process's require of a C
  // module or another path's costs no file lookups in the roots.
  std::shared_ptr<const Module> find(const std::string& name, bool* absent, std::string* error);

  // `name` compiled afresh from disk, not yet in use (install makes it
  // so); null with *error set as get's when it is missing or does not
  // compile.
  std::shared_ptr<const Module> compile_latest(const std::string& name, std::string* error);
  // From now on `get` gives mod (from compile_latest) as its name's newest
  // version; processes that loaded an older one keep it.
  void install(std::shared_ptr<const Module> mod);
  // Forgets a module whose file is gone; running processes keep their copy.
  void forget(const std::string& name);
  // Whether a good version of `name` is held (get or install gave one).
  bool has(const std::string& name);

  // Where `name` would be found; empty when it is in no root.
  std::filesystem::path locate(const std::string& name) const;
  const std::vector<std::filesystem::path>& roots() const { return roots_; }

  // Compiles source text; returns "" or the compile error. `strip` drops
  // debug info (line numbers, local names): smaller in every state that
  // loads it, but tracebacks lose their lines, so only for the kernel.
  static std::string compile(const std::string& chunkname, const std::string& source, std::string& bytecode,
                             bool strip = false);

 private:
  std::shared_ptr<const Module> load(const std::string& name, std::string* error);

  const std::vector<std::filesystem::path> roots_;
  std::mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<const Module>> modules_;  // guarded by mu_
  std::uint64_t next_version_ = 1;                                           // guarded by mu_
  std::unordered_set<std::string> absent_;  // guarded by mu_: names no root holds
  static constexpr std::size_t kMaxAbsent = 4096;
};

// True for names like "a", "a.b_c": letters, digits, '_', '-' and dots.
bool valid_module_name(const std::string& name);

}  // namespace host::lua
