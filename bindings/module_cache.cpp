// Module lookup, compilation to bytecode, and refresh for hot reload.
#include "bindings/module_cache.hpp"

#include <fstream>
#include <sstream>

#include <lua.hpp>

#include "host/error.hpp"

namespace host::lua {
namespace {

int dump_writer(lua_State*, const void* p, size_t sz, void* ud) {
  static_cast<std::string*>(ud)->append(static_cast<const char*>(p), sz);
  return 0;
}

bool read_file(const std::filesystem::path& path, std::string& out, std::string* error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *error = make_error(ErrorKind::Invalid, "cannot read " + path.string());
    return false;
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  out = ss.str();
  return true;
}

}  // namespace

bool valid_module_name(const std::string& name) {
  if (name.empty() || name.front() == '.' || name.back() == '.') return false;
  for (std::size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    if (c == '.' && name[i + 1] == '.') return false;
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.')) return false;
  }
  return true;
}

ModuleCache::ModuleCache(std::vector<std::filesystem::path> roots) : roots_(std::move(roots)) {}

std::filesystem::path ModuleCache::locate(const std::string& name) const {
  if (!valid_module_name(name)) return {};
  std::string rel = name;
  for (char& c : rel)
    if (c == '.') c = '/';
  for (const auto& root : roots_) {
    for (const char* suffix : {".lua", "/init.lua"}) {
      std::filesystem::path p = root / (rel + suffix);
      std::error_code ec;
      if (std::filesystem::is_regular_file(p, ec)) return p;
    }
  }
  return {};
}

std::string ModuleCache::compile(const std::string& chunkname, const std::string& source, std::string& bytecode,
                                 bool strip) {
  lua_State* L = luaL_newstate();
  if (!L) return make_error(ErrorKind::Limit, "out of memory compiling " + chunkname);
  std::string err;
  if (luaL_loadbuffer(L, source.data(), source.size(), chunkname.c_str()) != 0) {
    err = make_error(ErrorKind::Invalid, lua_tostring(L, -1));
  } else if (strip) {
    // The C API's lua_dump keeps debug info; string.dump(f, true) strips it.
    luaopen_string(L);
    lua_getfield(L, -1, "dump");
    lua_pushvalue(L, -3);
    lua_pushboolean(L, 1);
    lua_call(L, 2, 1);
    std::size_t n;
    const char* p = lua_tolstring(L, -1, &n);
    bytecode.assign(p, n);
  } else {
    bytecode.clear();
    lua_dump(L, dump_writer, &bytecode);
  }
  lua_close(L);
  return err;
}

std::shared_ptr<const Module> ModuleCache::load(const std::string& name, std::string* error) {
  std::filesystem::path path = locate(name);
  if (path.empty()) {
    std::string where;
    std::string rel = name;
    for (char& c : rel)
      if (c == '.') c = '/';
    for (const auto& root : roots_) {
      // (Appended piece by piece: a const char* + string here made g++ 12
      // warn falsely, -Wstringop-overflow, once inlined more deeply.)
      if (!where.empty()) where += ", ";
      where += (root / (rel + ".lua")).string();
    }
    *error = make_error(ErrorKind::NotFound, "module '" + name + "' (no file " + where + ")");
    return nullptr;
  }
  std::string source;
  if (!read_file(path, source, error)) return nullptr;
  auto mod = std::make_shared<Module>();
  mod->name = name;
  mod->path = path.string();
  std::string err = compile("@" + mod->path, source, mod->bytecode);
  if (!err.empty()) {
    *error = err;
    return nullptr;
  }
  return mod;
}

bool ModuleCache::has(const std::string& name) {
  std::lock_guard lock(mu_);
  return modules_.contains(name);
}

std::shared_ptr<const Module> ModuleCache::get(const std::string& name, std::string* error) {
  {
    std::lock_guard lock(mu_);
    if (auto it = modules_.find(name); it != modules_.end()) return it->second;
  }
  // Compile outside the lock; two first users may both compile, one wins.
  auto mod = load(name, error);
  if (!mod) return nullptr;
  std::lock_guard lock(mu_);
  auto [it, inserted] = modules_.emplace(name, nullptr);
  if (inserted) {
    auto m = std::const_pointer_cast<Module>(mod);
    m->version = next_version_++;
    it->second = std::move(m);
  }
  return it->second;
}

std::shared_ptr<const Module> ModuleCache::find(const std::string& name, bool* absent, std::string* error) {
  *absent = false;
  {
    std::lock_guard lock(mu_);
    if (auto it = modules_.find(name); it != modules_.end()) return it->second;
    if (absent_.contains(name)) {
      *absent = true;
      return nullptr;
    }
  }
  if (locate(name).empty()) {
    std::lock_guard lock(mu_);
    if (absent_.size() < kMaxAbsent) absent_.insert(name);
    *absent = true;
    return nullptr;
  }
  return get(name, error);
}

std::shared_ptr<const Module> ModuleCache::compile_latest(const std::string& name, std::string* error) {
  return load(name, error);
}

void ModuleCache::install(std::shared_ptr<const Module> mod) {
  std::lock_guard lock(mu_);
  auto m = std::const_pointer_cast<Module>(std::move(mod));
  m->version = next_version_++;
  modules_[m->name] = std::move(m);
  absent_.clear();
}

void ModuleCache::forget(const std::string& name) {
  std::lock_guard lock(mu_);
  modules_.erase(name);
  absent_.clear();
}

}  // namespace host::lua
