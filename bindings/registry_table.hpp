// Tables a bindings file keeps in the registry under a key of its own (a
// static's address, as a light userdata): a userdata class's metatable,
// made at its first object, and the tables it makes on first need. A
// light userdata key is looked up without a string made and hashed (as
// luaL_newmetatable's name would be at each look-up), and the metatable
// is compared by identity. Threads: the one running the process.
#pragma once

#include <cstddef>

#include <lua.hpp>

namespace host::lua {

// Pushes the table kept under key; where there is none yet, make pushes a
// new one, kept from then on. Kept once made: a make that raises (out of
// memory) leaves none half made.
inline void push_registry_table(lua_State* L, const void* key, void (*make)(lua_State* L)) {
  lua_pushlightuserdata(L, const_cast<void*>(key));
  lua_rawget(L, LUA_REGISTRYINDEX);
  if (lua_istable(L, -1)) return;
  lua_pop(L, 1);
  make(L);
  lua_pushlightuserdata(L, const_cast<void*>(key));
  lua_pushvalue(L, -2);
  lua_rawset(L, LUA_REGISTRYINDEX);
}

// A new userdata of size bytes with the metatable kept under key, pushed.
// The metatable first: made after the userdata, its raise (out of memory)
// would leave an object with no __gc, which the collector frees while
// its host finalizer is still linked. So the caller links the finalizer
// after this returns (nothing between allocates: no collection runs
// before the object is filled in).
inline void* new_userdata_with(lua_State* L, std::size_t size, const void* key, void (*make)(lua_State* L)) {
  push_registry_table(L, key, make);
  void* p = lua_newuserdata(L, size);
  lua_insert(L, -2);
  lua_setmetatable(L, -2);
  return p;
}

// The userdata at idx where its metatable is the table kept under key;
// else null.
inline void* to_userdata(lua_State* L, int idx, const void* key) {
  void* p = lua_touserdata(L, idx);
  if (p == nullptr || !lua_getmetatable(L, idx)) return nullptr;
  lua_pushlightuserdata(L, const_cast<void*>(key));
  lua_rawget(L, LUA_REGISTRYINDEX);
  const bool ours = lua_rawequal(L, -1, -2);
  lua_pop(L, 2);
  return ours ? p : nullptr;
}

}  // namespace host::lua
