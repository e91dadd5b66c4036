// C modules opened once per runtime (c_modules.hpp).
#include "bindings/c_modules.hpp"

#include <dlfcn.h>

#include <cstring>

namespace host::lua {
namespace {

// package.searchpath(name, package[field]): the file, or "" (on the stack: nothing left).
std::string search(lua_State* L, int package, const char* name, const char* field) {
  lua_getfield(L, package, "searchpath");
  if (!lua_isfunction(L, -1)) {
    lua_pop(L, 1);
    return {};
  }
  lua_pushstring(L, name);
  lua_getfield(L, package, field);
  if (!lua_isstring(L, -1) || lua_pcall(L, 2, 1, 0) != 0) {
    lua_pop(L, lua_gettop(L) - package);
    return {};
  }
  std::string found = lua_isstring(L, -1) ? lua_tostring(L, -1) : "";
  lua_pop(L, 1);
  return found;
}

}  // namespace

lua_CFunction CModules::find(lua_State* L, const char* name) {
  if (std::strchr(name, '-')) return nullptr;  // LuaJIT's rule for the opener's name: its searcher's
  const int top = lua_gettop(L);
  luaL_findtable(L, LUA_REGISTRYINDEX, "_LOADED", 1);
  lua_getfield(L, -1, "package");
  if (!lua_istable(L, -1)) {
    lua_settop(L, top);
    return nullptr;
  }
  const int package = lua_gettop(L);
  lua_getfield(L, package, "preload");
  const bool preloaded = lua_istable(L, -1) && (lua_getfield(L, -1, name), !lua_isnil(L, -1));
  lua_settop(L, package);
  if (preloaded) {
    lua_settop(L, top);
    return nullptr;
  }
  std::string key = name;
  for (const char* field : {"path", "cpath"}) {
    lua_getfield(L, package, field);
    key += '\n';
    if (const char* s = lua_tostring(L, -1)) key += s;
    lua_pop(L, 1);
  }
  {
    std::lock_guard lock(mu_);
    if (auto it = openers_.find(key); it != openers_.end()) {
      lua_settop(L, top);
      return it->second;
    }
  }
  lua_CFunction opener = nullptr;
  if (search(L, package, name, "path").empty()) {
    const std::string file = search(L, package, name, "cpath");
    if (!file.empty()) {
      // As LuaJIT's loader opens it (RTLD_NOW, local symbols); kept open.
      if (void* lib = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL)) {
        std::string symbol = std::string("luaopen_") + name;
        for (char& c : symbol)
          if (c == '.') c = '_';
        opener = reinterpret_cast<lua_CFunction>(dlsym(lib, symbol.c_str()));
        std::lock_guard lock(mu_);
        if (opener) libraries_.push_back(lib);
        else dlclose(lib);
      }
    }
  }
  lua_settop(L, top);
  std::lock_guard lock(mu_);
  openers_.emplace(std::move(key), opener);
  return opener;
}

}  // namespace host::lua
