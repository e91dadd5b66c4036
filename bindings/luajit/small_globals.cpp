// Small globals: the scratch block and the check of LuaJIT's table layout
// (compiled only with HOST_LUAJIT_PRIVATE). Threads: any; each thread its
// own scratch block.
#include "bindings/luajit/small_globals.hpp"

#if HOST_LUAJIT_PRIVATE

#include <atomic>

#include <lua.hpp>

#include "bindings/luajit/luajit_private.hpp"

namespace host::lua::small_globals {

namespace {

namespace LP = luajit_private;

static_assert(kHashBytes == LP::hash_part_bytes(kHashNodes), "the globals hash part's size is luajit_private's");

std::atomic<bool> enabled{true};

}  // namespace

void* take_scratch() {
  if (!seam::available() || !enabled.load(std::memory_order_relaxed)) return nullptr;
  alignas(16) static thread_local unsigned char block[kHashBytes];
  return block;
}

bool holds_globals(lua_State* L, const void* scratch) {
  const void* t = lua_topointer(L, LUA_GLOBALSINDEX);
  if (!t || !scratch) return false;
  const LP::HashPart h = LP::read_hash_part(t);
  return h.node == scratch && h.hmask == kHashNodes - 1 &&
         h.freetop == static_cast<const unsigned char*>(scratch) + kHashBytes;
}

bool replace(lua_State* L) {
  // An empty table's hash part: the state's empty node, its own freetop.
  lua_createtable(L, 0, 0);
  const LP::HashPart empty = LP::read_hash_part(lua_topointer(L, -1));
  lua_pop(L, 1);
  if (empty.hmask != 0 || !empty.node || empty.freetop != empty.node) return false;
  LP::write_hash_part(const_cast<void*>(lua_topointer(L, LUA_GLOBALSINDEX)), empty);
  lua_createtable(L, 0, 4);
  lua_pushvalue(L, -1);
  lua_replace(L, LUA_GLOBALSINDEX);
  lua_replace(L, LUA_ENVIRONINDEX);
  return true;
}

void disable() { enabled.store(false, std::memory_order_relaxed); }

}  // namespace host::lua::small_globals
#endif
