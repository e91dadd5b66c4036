// C modules (a library with luaopen_NAME) that require finds on
// package.cpath, opened once per runtime. LuaJIT's own searchers try
// every package.path and package.cpath template and dlopen the library in
// each new state, and close it with the state: a process per connection
// that requires cjson paid a dozen failed opens and the library's load
// and unload each time. Here the first require's search is remembered
// and the library stays loaded for the runtime's life. Threads: any; a
// mutex guards the table.
#pragma once

#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <lua.hpp>

namespace host::lua {

class CModules {
 public:
  CModules() = default;
  CModules(const CModules&) = delete;
  CModules& operator=(const CModules&) = delete;

  // The opener of module `name` as the state's package.path and
  // package.cpath would find it: null where LuaJIT's own searchers must
  // decide (a preload entry, a Lua file on package.path, a name with a
  // '-', no library, no luaopen_ symbol), so their answers and errors stay
  // theirs.
  lua_CFunction find(lua_State* L, const char* name);

 private:
  std::mutex mu_;
  // Keyed by name and both paths (a process may change them); a null
  // opener: LuaJIT's searchers decide.
  std::unordered_map<std::string, lua_CFunction> openers_;  // guarded by mu_
  std::vector<void*> libraries_;                            // guarded by mu_; never closed
};

}  // namespace host::lua
