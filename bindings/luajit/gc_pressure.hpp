// gc_pressure: a process's collector starts its next cycle sooner once
// its heap nears the memory limit (--mem-limit), so that the limit caps
// what the process keeps alive rather than its garbage. Threads: any (one
// state at a time, from its allocator).
//
// Why. LuaJIT starts a cycle when the heap reaches `pause` times what the
// last cycle left alive (300% here: config::kLuaGcPause), and it has no
// emergency collection: an allocation past the limit fails the process.
// A process that kept 18 MB alive and made garbage besides failed with
// `limit: memory` under a 64 MB limit, its garbage never collected in
// time. Go's GOMEMLIMIT answers the same way: near the limit the
// collector's trigger moves down, whatever the usual pacing says.
//
// How. The allocator (LuaProcess::allocate_slow) calls collect_sooner for
// each allocation made while the heap is past half the limit. Between
// cycles, it lowers the collector's threshold to halfway from the last
// cycle's live estimate to the limit (or to now, if the heap is past that
// already), so that the cycle starts at the next allocation check of the
// interpreter or the C API and has the other half of the gap to finish in.
// It only writes a threshold; the collector itself runs where LuaJIT runs
// it. The fields are luajit_private's; where that seam is unavailable,
// processes keep LuaJIT's own pacing, and built without it
// (HOST_LUAJIT_PRIVATE=OFF) the functions below do nothing.
#pragma once

#include <cstddef>

#include "bindings/luajit/seam.hpp"

struct lua_State;

namespace host::lua::gc_pressure {

// Whether the collector's fields may be used (seam::available()).
inline bool available() { return seam::available(); }

#if HOST_LUAJIT_PRIVATE
// The collector of L's state starts its next cycle by the time the heap
// is halfway from its live estimate to `limit` bytes (see above). No
// effect during a cycle, or while a script has stopped the collector
// (collectgarbage("stop")). Only when available().
void collect_sooner(lua_State* L, std::size_t limit);

// Whether a script has stopped L's collector (collectgarbage("stop")), so
// that code which pauses it for a while knows not to restart it after.
// Only when available().
bool stopped(lua_State* L);
#else
inline void collect_sooner(lua_State*, std::size_t) {}
inline bool stopped(lua_State*) { return false; }
#endif

}  // namespace host::lua::gc_pressure
