// stack_args: a C function's stack slots (by positive index: its arguments
// and what it pushed) read straight from LuaJIT's stack, for the calls
// made once a message (process.send: its destination, topic and payload's
// type; the kernel's receive and delivery: whether a value is nil).
// Through the C API each of lua_type and lua_tolstring resolves its index
// (index2adr) and checks it, 30-40 instructions a call, and a send made
// five such calls: read here, Counting's send takes about 420 instructions
// instead of 540 (`callgrind`, BENCHMARKS.md change 67). push_object
// writes a value onto the stack the same way, for objects that a registry
// slot keeps alive. The layout (luajit_layout.hpp) is checked once,
// against the C API on a state of its own (layout_matches); where it does
// not match (another LuaJIT build), all of them are the C API's. Threads:
// any; L is the state of the C function running on this thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include <lua.hpp>

#include "bindings/luajit_layout.hpp"

namespace host::lua::stack_args {

namespace detail {
// Set by stack_args.cpp's check when the program starts (a static
// initialiser: a plain load on the hot path, where a function-local static
// cost a call and its guard). Read before that, it is false, which is
// safe: the C API's path.
extern const bool layout_ok;
// Set by the same check: a table's header and array part are as
// luajit_layout.hpp says too (pop_into_array, array_part).
extern const bool array_writes_ok;
}  // namespace detail

// Whether this LuaJIT lays out a running C function's arguments, their
// types and strings as luajit_layout.hpp says.
inline bool layout_matches() { return detail::layout_ok; }

namespace detail {
// Slot idx's TValue, or nullptr at or above the top (as index2adr).
inline const unsigned char* slot(lua_State* L, int idx) {
  namespace LL = luajit_layout;
  const unsigned char* base = LL::load_ptr(reinterpret_cast<const unsigned char*>(L) + LL::kStateBaseOffset);
  const unsigned char* top = LL::load_ptr(reinterpret_cast<const unsigned char*>(L) + LL::kStateTopOffset);
  const unsigned char* at = base + static_cast<std::size_t>(idx - 1) * 8;
  return at < top ? at : nullptr;
}

// lua_type's answer for a TValue, by its tag.
inline int type_of(std::uint64_t tv) {
  namespace LL = luajit_layout;
  if (LL::is_number(tv)) return LUA_TNUMBER;
  switch (LL::tag(tv)) {
    case ~0u: return LUA_TNIL;
    case LL::kTagFalse:
    case LL::kTagTrue: return LUA_TBOOLEAN;
    case LL::kTagLightUserdata: return LUA_TLIGHTUSERDATA;
    case LL::kTagStr: return LUA_TSTRING;
    case LL::kTagThread: return LUA_TTHREAD;
    case LL::kTagFunc: return LUA_TFUNCTION;
    case LL::kTagCdata: return 10;  // LuaJIT's LUA_TCDATA
    case LL::kTagTab: return LUA_TTABLE;
    case LL::kTagUserdata: return LUA_TUSERDATA;
    default: return -2;  // no type a stack slot holds: layout_matches fails on it
  }
}
}  // namespace detail

// lua_type(L, idx) for slot idx (>= 1) of the running C function.
inline int type(lua_State* L, int idx) {
  if (!layout_matches()) return lua_type(L, idx);
  const unsigned char* at = detail::slot(L, idx);
  return at ? detail::type_of(luajit_layout::load64(at)) : LUA_TNONE;
}

// lua_tonumber(L, idx) for slot idx (>= 1) that holds a number (a
// TValue that is not a tagged object is the double itself).
inline double number(lua_State* L, int idx) {
  if (layout_matches() && idx > 0)
    if (const unsigned char* v = detail::slot(L, idx)) {
      const std::uint64_t tv = luajit_layout::load64(v);
      if (luajit_layout::is_number(tv)) return luajit_layout::number(tv);
    }
  return lua_tonumber(L, idx);
}

// The bytes of slot idx (>= 1) when it is a string (a number is not
// converted), with its length in *len; nullptr otherwise.
inline const char* string(lua_State* L, int idx, std::size_t* len) {
  namespace LL = luajit_layout;
  if (!layout_matches()) return lua_type(L, idx) == LUA_TSTRING ? lua_tolstring(L, idx, len) : nullptr;
  const unsigned char* at = detail::slot(L, idx);
  if (!at) return nullptr;
  const std::uint64_t tv = LL::load64(at);
  if (LL::tag(tv) != LL::kTagStr) return nullptr;
  const unsigned char* s = LL::object(tv);
  if (len) *len = LL::load32(s + LL::kStrLenOffset);
  return reinterpret_cast<const char*>(s + LL::kStrBytes);
}

namespace detail {
// table() for a slot (idx > 0), read as the layout says.
inline const unsigned char* table_in_slot(lua_State* L, int idx) {
  namespace LL = luajit_layout;
  const unsigned char* at = slot(L, idx);
  if (!at) return nullptr;
  const std::uint64_t tv = LL::load64(at);
  return LL::tag(tv) == LL::kTagTab ? LL::object(tv) : nullptr;
}
}  // namespace detail

// lua_topointer(L, idx) when slot idx holds a table (its GCtab); nullptr
// otherwise. (Other indices than slots, idx <= 0, through the C API.)
inline const void* table(lua_State* L, int idx) {
  if (!layout_matches() || idx <= 0) return lua_type(L, idx) == LUA_TTABLE ? lua_topointer(L, idx) : nullptr;
  return detail::table_in_slot(L, idx);
}

namespace detail {
// A state's stack top, and its move, read and written as luajit_layout
// says; whether bytes more fit below the stack's end (a push must leave
// the top below it, as LuaJIT's own pushes do).
inline unsigned char* top(lua_State* L) {
  unsigned char* t;
  std::memcpy(&t, reinterpret_cast<unsigned char*>(L) + luajit_layout::kStateTopOffset, sizeof t);
  return t;
}
inline void set_top(lua_State* L, unsigned char* t) {
  std::memcpy(reinterpret_cast<unsigned char*>(L) + luajit_layout::kStateTopOffset, &t, sizeof t);
}
inline bool fits(lua_State* L, const unsigned char* t, std::size_t bytes) {
  namespace LL = luajit_layout;
  return t + bytes < LL::load_ptr(reinterpret_cast<const unsigned char*>(L) + LL::kStateMaxstackOffset);
}

// push_object without the layout's check (which uses it).
inline bool push_raw(lua_State* L, const void* obj, std::uint32_t tag) {
  unsigned char* t = top(L);
  if (!fits(L, t, 8)) [[unlikely]] return false;
  const std::uint64_t tv = luajit_layout::tvalue(obj, tag);
  std::memcpy(t, &tv, sizeof tv);
  set_top(L, t + 8);
  return true;
}
}  // namespace detail

// Whether n values more fit on L's stack as it is (pushed through the C
// API or push_object, none grows it), read as push_object reads it; false
// where the layout does not match.
inline bool has_room(lua_State* L, int n) {
  return layout_matches() && detail::fits(L, detail::top(L), static_cast<std::size_t>(n) * 8);
}

// Pushes the GC object obj of type `tag` (luajit_layout's kTag*), as
// lua_rawgeti of a registry slot that holds it would, and returns true;
// false, pushing nothing, where the layout does not match or the stack
// has no room (the caller then reads the slot). obj must be kept alive
// by a reference of its own (that registry slot): the stack is a root of
// the collector, so the pushed copy is safe from then on. A registry read
// is about 35 instructions and its slot's line, often evicted in a
// process that runs one step in a hundred (lua_rawgeti was 4.4% of Big's
// samples for 1.8% of its instructions).
inline bool push_object(lua_State* L, const void* obj, std::uint32_t tag) {
  return layout_matches() && detail::push_raw(L, obj, tag);
}

// Pushes the n values tvs (TValues as luajit_layout makes them: nil,
// booleans, numbers, or objects that references of their own keep alive,
// as push_object's) and returns true; false, pushing nothing, where the
// layout does not match or the stack has no room.
inline bool push_tvalues(lua_State* L, const std::uint64_t* tvs, int n) {
  if (!layout_matches()) return false;
  unsigned char* t = detail::top(L);
  const std::size_t bytes = static_cast<std::size_t>(n) * 8;
  if (!detail::fits(L, t, bytes)) [[unlikely]] return false;
  std::memcpy(t, tvs, bytes);
  detail::set_top(L, t + bytes);
  return true;
}

// lua_xmove(from, to, n) (a state and one of its coroutines), with the
// room it needs on to's stack checked as lua_checkstack would, read and
// written as push_object does; false, moving nothing, where the layout
// does not match or to's stack lacks the room (the caller then calls the
// C API). Like lua_xmove it needs no write barrier: the collector scans a
// thread's stack whole, at the end of its mark. Both calls took about 70
// instructions a message handed to a waiting task (TaskKernel::wake).
inline bool move(lua_State* from, lua_State* to, int n) {
  if (!layout_matches()) return false;
  if (from == to) return true;  // as lua_xmove: the values stay where they are
  const std::size_t bytes = static_cast<std::size_t>(n) * 8;
  unsigned char* to_top = detail::top(to);
  if (!detail::fits(to, to_top, bytes)) [[unlikely]] return false;
  unsigned char* from_top = detail::top(from) - bytes;
  std::memcpy(to_top, from_top, bytes);
  detail::set_top(to, to_top + bytes);
  detail::set_top(from, from_top);
  return true;
}

namespace detail {
// pop_into_array without the layout's check (which uses it).
inline bool pop_into_array_raw(lua_State* L, int idx, int first, int n) {
  namespace LL = luajit_layout;
  const unsigned char* t = idx > 0 && first >= 0 ? table_in_slot(L, idx) : nullptr;
  if (!t || (t[LL::kMarkedOffset] & LL::kMarkBlack) != 0) return false;
  if (static_cast<std::uint64_t>(first) + static_cast<std::uint64_t>(n) > LL::load32(t + LL::kAsizeOffset)) return false;
  unsigned char* array = const_cast<unsigned char*>(LL::load_ptr(t + LL::kArrayOffset));
  unsigned char* from = top(L) - static_cast<std::size_t>(n) * 8;
  std::memcpy(array + static_cast<std::size_t>(first) * 8, from, static_cast<std::size_t>(n) * 8);
  set_top(L, from);
  return true;
}
}  // namespace detail

// lua_rawseti(t, first), (t, first + 1), ... for the top n values of L's
// stack, the lowest first, popping them, where t is the table in slot idx:
// the values copied straight into t's array part when their keys are in
// it and t is not black, and true; false, doing nothing, otherwise (the
// caller then calls lua_rawseti, which grows the array and owes the
// collector a write barrier on a black table). A table not black needs
// none: a white one is traversed later, with what it then holds, or is
// garbage; a gray one waits to be traversed. Three lua_rawseti were about
// 160 instructions of a message queued in an inbox (Counting's 900).
inline bool pop_into_array(lua_State* L, int idx, int first, int n) {
  return detail::array_writes_ok && detail::pop_into_array_raw(L, idx, first, n);
}

// The array part of the table in slot idx (its TValues, keys 0 to
// asize - 1) when it holds keys 0 to n - 1; nullptr otherwise or where
// the layout does not match. For values that are no GC objects (numbers,
// booleans), which owe the collector nothing: written there, they are what
// lua_rawseti would write. It stays where it is until the table grows.
inline unsigned char* array_part(lua_State* L, int idx, std::size_t n) {
  namespace LL = luajit_layout;
  const unsigned char* t = detail::array_writes_ok && idx > 0 ? detail::table_in_slot(L, idx) : nullptr;
  if (!t || LL::load32(t + LL::kAsizeOffset) < n) return nullptr;
  return const_cast<unsigned char*>(LL::load_ptr(t + LL::kArrayOffset));
}

// The value in array slot i of table t (a GCtab some reference keeps
// alive) into tv, read as luajit_layout says, and true; false where the
// layout does not match or i is past its array part (the caller then asks
// the C API).
inline bool array_slot(const void* t, std::size_t i, std::uint64_t& tv) {
  namespace LL = luajit_layout;
  if (!detail::array_writes_ok || !t) return false;
  const auto* tab = static_cast<const unsigned char*>(t);
  if (LL::load32(tab + LL::kAsizeOffset) <= i) return false;
  tv = LL::load64(LL::load_ptr(tab + LL::kArrayOffset) + 8 * i);
  return true;
}

// lua_settop(L, idx) for an idx from 0 to the current top: the values
// above it dropped, read and written as push_object does (the C API's
// call was about 22 instructions, a message's receive made one).
inline void drop_to(lua_State* L, int idx) {
  namespace LL = luajit_layout;
  if (!layout_matches()) {
    lua_settop(L, idx);
    return;
  }
  const unsigned char* base = LL::load_ptr(reinterpret_cast<const unsigned char*>(L) + LL::kStateBaseOffset);
  detail::set_top(L, const_cast<unsigned char*>(base) + static_cast<std::size_t>(idx) * 8);
}

// push_object for a string given by its bytes (lua_tolstring's pointer).
inline bool push_string_object(lua_State* L, const char* bytes) {
  namespace LL = luajit_layout;
  return push_object(L, bytes - LL::kStrBytes, LL::kTagStr);
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
