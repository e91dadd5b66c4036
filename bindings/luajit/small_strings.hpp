// Small strings: a Lua state's string table of 128 slots where LuaJIT
// starts it at 256. Threads: any; each thread has its own scratch block.
//
// lua_newstate makes its string table (the chain heads of every interned
// string) with 256 slots, 2 KB, and never shrinks it below that. An idle
// process holds some 50 to 80 strings (LuaJIT's own names, the module's
// constants): 128 slots keep every chain short, and LuaJIT grows the table
// itself (to 256, then on) once a process holds more than 128 strings.
// The 1 KB saved is what brings an idle connection's heap within a
// state's first arena chunk (BENCHMARKS.md).
//
// As small_globals does for the globals hash part: the state's allocator
// hands lua_newstate's string table a per-thread scratch block instead of
// arena memory (take_scratch); right after lua_newstate, Prepare moves the
// strings into 128 slots of the arena (shrink) and the scratch is free
// for the next state made on the thread. LuaJIT never reads, writes or
// frees the scratch for that state again.
//
// Which allocation is the table is known only from LuaJIT's order (the
// first of its size in lua_newstate), so holds_strings checks it after
// lua_newstate against the global state (read and written through
// luajit_private, and only while that seam is available). Where the check
// fails, the state is dropped unused and the scratch is switched off for
// good (disable): the states keep LuaJIT's own table.
#pragma once

#include <cstddef>

#include "bindings/luajit/seam.hpp"

struct lua_State;

namespace host::lua::small_strings {

// The size of lua_newstate's string table: 256 slots of 8 bytes, and of
// the one shrink makes (luajit_private.cpp checks the first against a
// fresh state).
inline constexpr std::size_t kNewstateSlots = 256;
inline constexpr std::size_t kNewstateBytes = kNewstateSlots * 8;
inline constexpr std::size_t kSlots = 128;
inline constexpr std::size_t kBytes = kSlots * 8;

#if HOST_LUAJIT_PRIVATE
// While enabled: this thread's scratch block for a new state's string
// table; nullptr once disabled.
void* take_scratch();
// Whether the string table of L (fresh from lua_newstate) is `scratch`,
// with its 256 slots and fewer than kSlots strings.
bool holds_strings(lua_State* L, const void* scratch);
// Moves L's strings (holds_strings was true) into `slots`, kBytes from
// L's allocator, which become its string table; LuaJIT's count of its
// memory drops by the difference.
void shrink(lua_State* L, void* slots);
// For good: the next states keep LuaJIT's own string table.
void disable();
#else
// Built without the seam: no scratch, LuaJIT's own string table.
inline void* take_scratch() { return nullptr; }
inline bool holds_strings(lua_State*, const void*) { return false; }
inline void shrink(lua_State*, void*) {}
inline void disable() {}
#endif

}  // namespace host::lua::small_strings
