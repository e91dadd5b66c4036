// Small globals: a Lua state's globals table without LuaJIT's 64-slot
// start. Threads: any; each thread has its own scratch block.
//
// lua_newstate makes the globals table with room for 64 keys (1.5 KB of
// hash part, LJ_MIN_GLOBAL), sized for the standard libraries. A process
// opens its libraries on first use, so an idle one keeps two globals in
// it: a tenth of its heap, for nothing. The state's allocator hands that
// one hash part a per-thread scratch block instead of arena memory
// (take_scratch), and Prepare, before anything reads the table, empties it
// (its hash part becomes the state's shared empty node, as in any table
// made without one) and puts a small new table in its place (replace).
// LuaJIT then never reads, writes or frees the scratch block for that
// state again, and the next state made on the thread reuses it. LuaJIT's
// own count (collectgarbage("count")) keeps the 1.5 KB it handed out; the
// process's memory figure never counted it.
//
// Which allocation is the hash part is known only from LuaJIT's order
// (the first of that size in lua_newstate), so holds_globals checks it
// after lua_newstate against the table itself (read and written through
// luajit_private, and only while that seam is available). Where the check
// fails, the state is dropped unused and the scratch is switched off for
// good (disable): the states keep LuaJIT's own table.
#pragma once

#include <cstddef>

#include "bindings/luajit/seam.hpp"

struct lua_State;

namespace host::lua::small_globals {

// The size of lua_newstate's globals hash part: 64 nodes of 24 bytes
// (small_globals.cpp checks it against luajit_private's layout).
inline constexpr std::size_t kHashNodes = 64;
inline constexpr std::size_t kHashBytes = kHashNodes * 24;

#if HOST_LUAJIT_PRIVATE
// While enabled: this thread's scratch block for a new state's globals
// hash part; nullptr once disabled.
void* take_scratch();
// Whether the globals table of L (fresh from lua_newstate) keeps its hash
// part in `scratch`, with the 64 slots expected.
bool holds_globals(lua_State* L, const void* scratch);
// In a protected call on L's main thread, from a C function, with the
// globals table as holds_globals found it: empties that table and makes a
// new one the globals, and the running function's environment (the C
// functions it makes take that one). Raises on a memory error; returns
// false (and changes nothing) if an empty table is not as expected.
bool replace(lua_State* L);
// For good: the next states keep LuaJIT's own globals table.
void disable();
#else
// Built without the seam: no scratch, LuaJIT's own globals table.
inline void* take_scratch() { return nullptr; }
inline bool holds_globals(lua_State*, const void*) { return false; }
inline bool replace(lua_State*) { return false; }
inline void disable() {}
#endif

}  // namespace host::lua::small_globals
