// stack_args: a C function's stack slots (by positive index: its arguments
// and what it pushed) read straight from LuaJIT's stack, for the calls
// made once a message (process.send: its destination, topic and payload's
// type; the kernel's receive and delivery: whether a value is nil).
// Through the C API each of lua_type and lua_tolstring resolves its index
// (index2adr) and checks it, and a send made five such calls
// (BENCHMARKS.md's ledger). push_object writes a value onto the stack the
// same way, for objects that a registry slot keeps alive. Every read and
// write is luajit_private's; where that seam is unavailable (another
// LuaJIT build), each function here is the C API's call or declines, and
// built without it (HOST_LUAJIT_PRIVATE=OFF) only those paths are
// compiled. Threads: any; L is the state of the C function running on
// this thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include <lua.hpp>

#include "bindings/luajit/seam.hpp"
#if HOST_LUAJIT_PRIVATE
#include "bindings/luajit/luajit_private.hpp"
#endif

namespace host::lua::stack_args {

#if HOST_LUAJIT_PRIVATE
namespace LP = luajit_private;
#endif

// Whether the private reads are in use (seam::available()).
inline bool layout_matches() { return seam::available(); }

// The kinds of object push_object pushes.
enum class Object { kTable, kFunction, kThread };

#if HOST_LUAJIT_PRIVATE
namespace detail {
// The table in slot idx (> 0), or nullptr.
inline const unsigned char* table_in_slot(lua_State* L, int idx) {
  const unsigned char* at = LP::stack_slot(L, idx);
  if (!at) return nullptr;
  const LP::RawValue tv = LP::Raw::load(at);
  return LP::tag(tv) == LP::kTagTab ? LP::object(tv) : nullptr;
}
inline constexpr std::uint32_t tag_of(Object kind) {
  return kind == Object::kTable ? LP::kTagTab : kind == Object::kFunction ? LP::kTagFunc : LP::kTagThread;
}
}  // namespace detail
#endif

// lua_type(L, idx) for slot idx (>= 1) of the running C function.
inline int type(lua_State* L, int idx) {
#if HOST_LUAJIT_PRIVATE
  if (layout_matches()) {
    const unsigned char* at = LP::stack_slot(L, idx);
    return at ? LP::type_of(LP::Raw::load(at)) : LUA_TNONE;
  }
#endif
  return lua_type(L, idx);
}

// lua_tonumber(L, idx) for slot idx (>= 1) that holds a number.
inline double number(lua_State* L, int idx) {
#if HOST_LUAJIT_PRIVATE
  if (layout_matches() && idx > 0)
    if (const unsigned char* v = LP::stack_slot(L, idx)) {
      const LP::RawValue tv = LP::Raw::load(v);
      if (LP::is_number(tv)) return LP::number(tv);
    }
#endif
  return lua_tonumber(L, idx);
}

// The bytes of slot idx (>= 1) when it is a string (a number is not
// converted), with its length in *len; nullptr otherwise.
inline const char* string(lua_State* L, int idx, std::size_t* len) {
#if HOST_LUAJIT_PRIVATE
  if (layout_matches()) {
    const unsigned char* at = LP::stack_slot(L, idx);
    if (!at) return nullptr;
    const LP::RawValue tv = LP::Raw::load(at);
    if (LP::tag(tv) != LP::kTagStr) return nullptr;
    return LP::string_bytes(LP::object(tv), len);
  }
#endif
  return lua_type(L, idx) == LUA_TSTRING ? lua_tolstring(L, idx, len) : nullptr;
}

// lua_topointer(L, idx) when slot idx holds a table (its GCtab); nullptr
// otherwise. (Other indices than slots, idx <= 0, through the C API.)
inline const void* table(lua_State* L, int idx) {
#if HOST_LUAJIT_PRIVATE
  if (layout_matches() && idx > 0) return detail::table_in_slot(L, idx);
#endif
  return lua_type(L, idx) == LUA_TTABLE ? lua_topointer(L, idx) : nullptr;
}

// Whether n values more fit on L's stack as it is (pushed through the C
// API or push_object, none grows it); false where the seam is unavailable.
inline bool has_room([[maybe_unused]] lua_State* L, [[maybe_unused]] int n) {
#if HOST_LUAJIT_PRIVATE
  return layout_matches() && LP::stack_fits(L, LP::stack_top(L), static_cast<std::size_t>(n) * 8);
#else
  return false;
#endif
}

// Pushes the GC object obj of kind `kind`, as lua_rawgeti of a registry
// slot that holds it would, and returns true; false, pushing nothing,
// where the seam is unavailable or the stack has no room (the caller then
// reads the slot). A registry read is a C API call and its slot's line,
// often evicted in a process that runs one step in a hundred
// (BENCHMARKS.md's ledger, entry 5). The stack is a root of the collector, so a pushed copy of a
// kept object is safe from then on.
inline bool push_object([[maybe_unused]] lua_State* L, [[maybe_unused]] const void* obj,
                        [[maybe_unused]] Object kind) {
#if HOST_LUAJIT_PRIVATE
  if (!layout_matches()) return false;
  const LP::RawValue tv = LP::object_value(obj, detail::tag_of(kind));
  return LP::push_values(L, &tv, 1);
#else
  return false;
#endif
}

// push_object for a string given by its bytes (lua_tolstring's pointer).
inline bool push_string_object([[maybe_unused]] lua_State* L, [[maybe_unused]] const char* bytes) {
#if HOST_LUAJIT_PRIVATE
  if (!layout_matches()) return false;
  const LP::RawValue tv = LP::string_value(bytes);
  return LP::push_values(L, &tv, 1);
#else
  return false;
#endif
}

// Pushes true and returns true (a send's answer, without the C API's
// call); false, pushing nothing, where the seam is
// unavailable or the stack has no room (the caller then pushes it).
inline bool push_true([[maybe_unused]] lua_State* L) {
#if HOST_LUAJIT_PRIVATE
  if (!layout_matches()) return false;
  const LP::RawValue tv = LP::boolean(true);
  return LP::push_values(L, &tv, 1);
#else
  return false;
#endif
}

// Pushes nil, the function fn (kept alive by a reference of its own) and
// true, the three values a handed-over message of a cached shape resumes
// its task with (lua_process_delivery.cpp), and returns true; false,
// pushing nothing, as push_object.
inline bool push_nil_function_true([[maybe_unused]] lua_State* L, [[maybe_unused]] const void* fn) {
#if HOST_LUAJIT_PRIVATE
  if (!layout_matches()) return false;
  const LP::RawValue values[3] = {LP::nil(), LP::object_value(fn, LP::kTagFunc), LP::boolean(true)};
  return LP::push_values(L, values, 3);
#else
  return false;
#endif
}

// lua_xmove(from, to, n) (a state and one of its coroutines), with the
// room it needs on to's stack checked as lua_checkstack would; false,
// moving nothing, where the seam is unavailable or to's stack lacks the
// room (the caller then calls the C API). Like lua_xmove it needs no write
// barrier: the collector scans a thread's stack whole, at the end of its
// mark.
inline bool move([[maybe_unused]] lua_State* from, [[maybe_unused]] lua_State* to, [[maybe_unused]] int n) {
#if HOST_LUAJIT_PRIVATE
  if (!layout_matches()) return false;
  if (from == to) return true;  // as lua_xmove: the values stay where they are
  const std::size_t bytes = static_cast<std::size_t>(n) * 8;
  unsigned char* from_top = LP::stack_top(from) - bytes;
  if (!LP::push_values(to, reinterpret_cast<const LP::RawValue*>(from_top), static_cast<std::size_t>(n)))
    [[unlikely]] return false;
  LP::set_stack_top(from, from_top);
  return true;
#else
  return false;
#endif
}

// lua_rawseti(t, first), (t, first + 1), ... for the top n values of L's
// stack, the lowest first, popping them, where t is the table in slot idx:
// the values copied straight into t's array part when their keys are in
// it and t is not black, and true; false, doing nothing, otherwise (the
// caller then calls lua_rawseti, which grows the array and owes the
// collector a write barrier on a black table). A table not black needs
// none: a white one is traversed later, with what it then holds, or is
// garbage; a gray one waits to be traversed.
inline bool pop_into_array([[maybe_unused]] lua_State* L, [[maybe_unused]] int idx, [[maybe_unused]] int first,
                           [[maybe_unused]] int n) {
#if HOST_LUAJIT_PRIVATE
  if (!layout_matches() || idx <= 0 || first < 0) return false;
  const unsigned char* t = detail::table_in_slot(L, idx);
  if (!t || LP::is_black(t)) return false;
  if (static_cast<std::uint64_t>(first) + static_cast<std::uint64_t>(n) > LP::array_size(t)) return false;
  unsigned char* from = LP::stack_top(L) - static_cast<std::size_t>(n) * 8;
  std::memcpy(LP::array_slots(t) + static_cast<std::size_t>(first) * 8, from, static_cast<std::size_t>(n) * 8);
  LP::set_stack_top(L, from);
  return true;
#else
  return false;
#endif
}

// The number in array slot i of table t (a GCtab some reference keeps
// alive) into d, and true; false where the seam is unavailable, i is past
// its array part or the slot holds no number (the caller then asks the C
// API).
inline bool array_number([[maybe_unused]] const void* t, [[maybe_unused]] std::size_t i,
                         [[maybe_unused]] double& d) {
#if HOST_LUAJIT_PRIVATE
  if (!layout_matches() || !t) return false;
  const auto* tab = static_cast<const unsigned char*>(t);
  if (LP::array_size(tab) <= i) return false;
  const LP::RawValue tv = LP::Raw::load(LP::array_slots(tab) + 8 * i);
  if (!LP::is_number(tv)) return false;
  d = LP::number(tv);
  return true;
#else
  return false;
#endif
}

// lua_settop(L, idx) for an idx from 0 to the current top: the values
// above it dropped (the C API's function was a call of its own, and a
// message's receive made one).
inline void drop_to(lua_State* L, int idx) {
#if HOST_LUAJIT_PRIVATE
  if (layout_matches()) {
    LP::set_stack_top(L, const_cast<unsigned char*>(LP::stack_base(L)) + static_cast<std::size_t>(idx) * 8);
    return;
  }
#endif
  lua_settop(L, idx);
}

// The object kept in registry slot ref (obj, of kind `kind`, its address)
// onto the stack: by push_object, else by reading the slot. What each of
// the process's caches of kept values does.
inline void push_kept(lua_State* L, const void* obj, Object kind, int ref) {
  if (!push_object(L, obj, kind)) lua_rawgeti(L, LUA_REGISTRYINDEX, ref);
}
// push_kept for a string given by its bytes.
inline void push_kept_string(lua_State* L, const char* bytes, int ref) {
  if (!push_string_object(L, bytes)) lua_rawgeti(L, LUA_REGISTRYINDEX, ref);
}

}  // namespace host::lua::stack_args
