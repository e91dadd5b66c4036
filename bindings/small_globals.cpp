// Small globals: the scratch block and the check of LuaJIT's table layout.
#include "bindings/small_globals.hpp"

#include <atomic>
#include <cstdint>
#include <cstring>

#include <lua.hpp>

#include "bindings/luajit_layout.hpp"

namespace host::lua::small_globals {

namespace {

using luajit_layout::kFreetopOffset;
using luajit_layout::kHmaskOffset;
using luajit_layout::kNodeOffset;
using luajit_layout::kTableBytes;

std::atomic<bool> enabled{true};

struct HashPart {
  void* node;
  std::uint32_t hmask;
  void* freetop;
};

HashPart read(const void* table) {
  static_assert(kFreetopOffset + sizeof(void*) <= kTableBytes);
  const auto* t = static_cast<const unsigned char*>(table);
  HashPart h{};
  std::memcpy(&h.node, t + kNodeOffset, sizeof h.node);
  std::memcpy(&h.hmask, t + kHmaskOffset, sizeof h.hmask);
  std::memcpy(&h.freetop, t + kFreetopOffset, sizeof h.freetop);
  return h;
}

}  // namespace

void* take_scratch() {
  if (!enabled.load(std::memory_order_relaxed)) return nullptr;
  alignas(16) static thread_local unsigned char block[kHashBytes];
  return block;
}

bool holds_globals(lua_State* L, const void* scratch) {
  const void* t = lua_topointer(L, LUA_GLOBALSINDEX);
  if (!t || !scratch) return false;
  const HashPart h = read(t);
  return h.node == scratch && h.hmask == kHashNodes - 1 &&
         h.freetop == static_cast<const unsigned char*>(scratch) + kHashBytes;
}

bool replace(lua_State* L) {
  // An empty table's hash part: the state's empty node, its own freetop.
  lua_createtable(L, 0, 0);
  const HashPart empty = read(lua_topointer(L, -1));
  lua_pop(L, 1);
  if (empty.hmask != 0 || !empty.node || empty.freetop != empty.node) return false;
  auto* old = const_cast<unsigned char*>(static_cast<const unsigned char*>(lua_topointer(L, LUA_GLOBALSINDEX)));
  std::memcpy(old + kNodeOffset, &empty.node, sizeof empty.node);
  std::memcpy(old + kHmaskOffset, &empty.hmask, sizeof empty.hmask);
  std::memcpy(old + kFreetopOffset, &empty.freetop, sizeof empty.freetop);
  lua_createtable(L, 0, 4);
  lua_pushvalue(L, -1);
  lua_replace(L, LUA_GLOBALSINDEX);
  lua_replace(L, LUA_ENVIRONINDEX);
  return true;
}

void disable() { enabled.store(false, std::memory_order_relaxed); }

}  // namespace host::lua::small_globals
