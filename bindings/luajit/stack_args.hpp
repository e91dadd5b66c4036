// stack_args: a C function's stack slots (by positive index: its arguments
// and what it pushed) read straight from LuaJIT's stack, for the calls
// made once a message (process.send: its destination, topic and payload's
// type; the kernel's receive and delivery: whether a value is nil).
// Through the C API each of lua_type and lua_tolstring resolves its index
// (index2adr) and checks it on every call, and a send made
// five such calls (BENCHMARKS.md's ledger, entry 5, and its source figures). push_object writes a value
// onto the stack the same way, for objects that a registry slot keeps
// alive. Every read and write is luajit_private's; where that seam is
// unavailable (another LuaJIT build, or built without it), each function
// here is the C API's call or declines. Threads: any; L is the state of
// the C function running on this thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include <lua.hpp>

#include "bindings/luajit/luajit_private.hpp"

namespace host::lua::stack_args {

namespace LP = luajit_private;

// Whether the private reads are in use (luajit_private::available()).
inline bool layout_matches() { return LP::available(); }

namespace detail {
// lua_type's answer for a TValue, by its tag.
inline int type_of(std::uint64_t tv) {
  if (LP::is_number(tv)) return LUA_TNUMBER;
  switch (LP::tag(tv)) {
    case ~0u: return LUA_TNIL;
    case LP::kTagFalse:
    case LP::kTagTrue: return LUA_TBOOLEAN;
    case LP::kTagLightUserdata: return LUA_TLIGHTUSERDATA;
    case LP::kTagStr: return LUA_TSTRING;
    case LP::kTagThread: return LUA_TTHREAD;
    case LP::kTagFunc: return LUA_TFUNCTION;
    case LP::kTagCdata: return 10;  // LuaJIT's LUA_TCDATA
    case LP::kTagTab: return LUA_TTABLE;
    case LP::kTagUserdata: return LUA_TUSERDATA;
    default: return -2;  // no type a stack slot holds
  }
}

// The table in slot idx (> 0), or nullptr.
inline const unsigned char* table_in_slot(lua_State* L, int idx) {
  const unsigned char* at = LP::stack_slot(L, idx);
  if (!at) return nullptr;
  const std::uint64_t tv = LP::load64(at);
  return LP::tag(tv) == LP::kTagTab ? LP::object(tv) : nullptr;
}
}  // namespace detail

// lua_type(L, idx) for slot idx (>= 1) of the running C function.
inline int type(lua_State* L, int idx) {
  if (!layout_matches()) return lua_type(L, idx);
  const unsigned char* at = LP::stack_slot(L, idx);
  return at ? detail::type_of(LP::load64(at)) : LUA_TNONE;
}

// lua_tonumber(L, idx) for slot idx (>= 1) that holds a number.
inline double number(lua_State* L, int idx) {
  if (layout_matches() && idx > 0)
    if (const unsigned char* v = LP::stack_slot(L, idx)) {
      const std::uint64_t tv = LP::load64(v);
      if (LP::is_number(tv)) return LP::number(tv);
    }
  return lua_tonumber(L, idx);
}

// The bytes of slot idx (>= 1) when it is a string (a number is not
// converted), with its length in *len; nullptr otherwise.
inline const char* string(lua_State* L, int idx, std::size_t* len) {
  if (!layout_matches()) return lua_type(L, idx) == LUA_TSTRING ? lua_tolstring(L, idx, len) : nullptr;
  const unsigned char* at = LP::stack_slot(L, idx);
  if (!at) return nullptr;
  const std::uint64_t tv = LP::load64(at);
  if (LP::tag(tv) != LP::kTagStr) return nullptr;
  return LP::string_bytes(LP::object(tv), len);
}

// lua_topointer(L, idx) when slot idx holds a table (its GCtab); nullptr
// otherwise. (Other indices than slots, idx <= 0, through the C API.)
inline const void* table(lua_State* L, int idx) {
  if (!layout_matches() || idx <= 0) return lua_type(L, idx) == LUA_TTABLE ? lua_topointer(L, idx) : nullptr;
  return detail::table_in_slot(L, idx);
}

// Whether n values more fit on L's stack as it is (pushed through the C
// API or push_object, none grows it); false where the seam is unavailable.
inline bool has_room(lua_State* L, int n) {
  return layout_matches() && LP::stack_fits(L, LP::stack_top(L), static_cast<std::size_t>(n) * 8);
}

// Pushes the n values tvs (TValues as luajit_private makes them: nil,
// booleans, numbers, or objects that references of their own keep alive)
// and returns true; false, pushing nothing, where the seam is unavailable
// or the stack has no room. The stack is a root of the collector, so a
// pushed copy of a kept object is safe from then on.
inline bool push_tvalues(lua_State* L, const std::uint64_t* tvs, int n) {
  return layout_matches() && LP::push_tvalues(L, tvs, static_cast<std::size_t>(n));
}

// Pushes the GC object obj of type `tag` (luajit_private's kTag*), as
// lua_rawgeti of a registry slot that holds it would, and returns true;
// false, pushing nothing, where the seam is unavailable or the stack has
// no room (the caller then reads the slot). A registry read is a C API call
// and its slot's line, often evicted in a process that runs
// one step in a hundred.
inline bool push_object(lua_State* L, const void* obj, std::uint32_t tag) {
  const std::uint64_t tv = LP::tvalue(obj, tag);
  return push_tvalues(L, &tv, 1);
}

// lua_xmove(from, to, n) (a state and one of its coroutines), with the
// room it needs on to's stack checked as lua_checkstack would; false,
// moving nothing, where the seam is unavailable or to's stack lacks the
// room (the caller then calls the C API). Like lua_xmove it needs no write
// barrier: the collector scans a thread's stack whole, at the end of its
// mark.
inline bool move(lua_State* from, lua_State* to, int n) {
  if (!layout_matches()) return false;
  if (from == to) return true;  // as lua_xmove: the values stay where they are
  const std::size_t bytes = static_cast<std::size_t>(n) * 8;
  unsigned char* from_top = LP::stack_top(from) - bytes;
  if (!LP::push_tvalues(to, reinterpret_cast<const std::uint64_t*>(from_top), static_cast<std::size_t>(n)))
    [[unlikely]] return false;
  LP::set_stack_top(from, from_top);
  return true;
}

// lua_rawseti(t, first), (t, first + 1), ... for the top n values of L's
// stack, the lowest first, popping them, where t is the table in slot idx:
// the values copied straight into t's array part when their keys are in
// it and t is not black, and true; false, doing nothing, otherwise (the
// caller then calls lua_rawseti, which grows the array and owes the
// collector a write barrier on a black table). A table not black needs
// none: a white one is traversed later, with what it then holds, or is
// garbage; a gray one waits to be traversed.
inline bool pop_into_array(lua_State* L, int idx, int first, int n) {
  if (!layout_matches() || idx <= 0 || first < 0) return false;
  const unsigned char* t = detail::table_in_slot(L, idx);
  if (!t || LP::is_black(t)) return false;
  if (static_cast<std::uint64_t>(first) + static_cast<std::uint64_t>(n) > LP::array_size(t)) return false;
  unsigned char* from = LP::stack_top(L) - static_cast<std::size_t>(n) * 8;
  std::memcpy(LP::array_slots(t) + static_cast<std::size_t>(first) * 8, from, static_cast<std::size_t>(n) * 8);
  LP::set_stack_top(L, from);
  return true;
}

// The array part of the table in slot idx (its TValues, keys 0 to
// asize - 1) when it holds keys 0 to n - 1; nullptr otherwise or where
// the seam is unavailable. For values that are no GC objects (numbers,
// booleans), which owe the collector nothing: written there, they are what
// lua_rawseti would write. It stays where it is until the table grows.
inline unsigned char* array_part(lua_State* L, int idx, std::size_t n) {
  const unsigned char* t = layout_matches() && idx > 0 ? detail::table_in_slot(L, idx) : nullptr;
  if (!t || LP::array_size(t) < n) return nullptr;
  return LP::array_slots(t);
}

// The value in array slot i of table t (a GCtab some reference keeps
// alive) into tv, and true; false where the seam is unavailable or i is
// past its array part (the caller then asks the C API).
inline bool array_slot(const void* t, std::size_t i, std::uint64_t& tv) {
  if (!layout_matches() || !t) return false;
  const auto* tab = static_cast<const unsigned char*>(t);
  if (LP::array_size(tab) <= i) return false;
  tv = LP::load64(LP::array_slots(tab) + 8 * i);
  return true;
}

// lua_settop(L, idx) for an idx from 0 to the current top: the values
// above it dropped (the C API's function was a call of its own, and a
// message's receive made one).
inline void drop_to(lua_State* L, int idx) {
  if (!layout_matches()) {
    lua_settop(L, idx);
    return;
  }
  LP::set_stack_top(L, const_cast<unsigned char*>(LP::stack_base(L)) + static_cast<std::size_t>(idx) * 8);
}

// push_object for a string given by its bytes (lua_tolstring's pointer).
inline bool push_string_object(lua_State* L, const char* bytes) {
  const std::uint64_t tv = LP::string_tvalue(bytes);
  return push_tvalues(L, &tv, 1);
}

// The object kept in registry slot ref (obj, of type `tag`, its address)
// onto the stack: by push_object, else by reading the slot. What each of
// the process's caches of kept values does.
inline void push_kept(lua_State* L, const void* obj, std::uint32_t tag, int ref) {
  if (!push_object(L, obj, tag)) lua_rawgeti(L, LUA_REGISTRYINDEX, ref);
}
// push_kept for a string given by its bytes.
inline void push_kept_string(lua_State* L, const char* bytes, int ref) {
  if (!push_string_object(L, bytes)) lua_rawgeti(L, LUA_REGISTRYINDEX, ref);
}

}  // namespace host::lua::stack_args
