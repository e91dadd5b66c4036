// gc_pressure: the collector's threshold lowered near the memory limit,
// and the one-time check of the fields it reads and writes.
#include "bindings/gc_pressure.hpp"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>

#include <lua.hpp>

#include "bindings/luajit_layout.hpp"

namespace host::lua::gc_pressure {
namespace {

namespace LL = luajit_layout;

// collectgarbage("stop") sets the threshold to LuaJIT's largest heap
// (2^47 bytes in GC64 builds); no heap gets near this one.
constexpr std::uint64_t kStopped = std::uint64_t{1} << 46;

unsigned char* global_of(lua_State* L) {
  return const_cast<unsigned char*>(LL::load_ptr(reinterpret_cast<const unsigned char*>(L) + LL::kStateGlobalOffset));
}

void store64(unsigned char* p, std::uint64_t v) { std::memcpy(p, &v, sizeof v); }

std::uint64_t total_by_api(lua_State* L) {
  return static_cast<std::uint64_t>(lua_gc(L, LUA_GCCOUNT, 0)) * 1024 + static_cast<std::uint64_t>(lua_gc(L, LUA_GCCOUNTB, 0));
}

void* probe_allocate(void*, void* ptr, std::size_t, std::size_t nsize) {
  if (nsize == 0) {
    std::free(ptr);
    return nullptr;
  }
  return std::realloc(ptr, nsize);
}

// On a state of its own: its global state is the one its allocator and
// data name; the total, pause and stepmul read what the C API says; a full
// collection leaves the pause phase and the threshold LuaJIT sets then; a
// stopped collector's threshold reads as stopped; and a threshold written
// below the total starts a cycle at the next allocation check.
bool check() {
  int data = 0;
  const std::unique_ptr<lua_State, decltype(&lua_close)> state(lua_newstate(&probe_allocate, &data), &lua_close);
  lua_State* L = state.get();
  if (!L) return false;
  unsigned char* g = global_of(L);
  const auto allocate_address = reinterpret_cast<std::uintptr_t>(&probe_allocate);
  if (!g || LL::load64(g + LL::kGlobalAllocfOffset) != allocate_address ||
      LL::load_ptr(g + LL::kGlobalAllocdOffset) != reinterpret_cast<const unsigned char*>(&data))
    return false;
  if (LL::load64(g + LL::kGcTotalOffset) != total_by_api(L)) return false;
  lua_gc(L, LUA_GCSETPAUSE, 137);
  lua_gc(L, LUA_GCSETSTEPMUL, 211);
  if (LL::load32(g + LL::kGcPauseOffset) != 137 || LL::load32(g + LL::kGcStepmulOffset) != 211) return false;
  // Enough live tables that one step cannot finish a cycle, and garbage.
  lua_createtable(L, 4000, 0);
  for (int i = 1; i <= 4000; ++i) {
    lua_createtable(L, 0, 0);
    if (i % 2 == 0) lua_rawseti(L, 1, i);
    else lua_pop(L, 1);
  }
  lua_gc(L, LUA_GCCOLLECT, 0);
  const std::uint64_t live = LL::load64(g + LL::kGcEstimateOffset);
  const std::uint64_t total = LL::load64(g + LL::kGcTotalOffset);
  if (g[LL::kGcStateOffset] != LL::kGcPhasePause || total != total_by_api(L) || live == 0 || live > total ||
      LL::load64(g + LL::kGcThresholdOffset) != (live / 100) * 137)
    return false;
  lua_gc(L, LUA_GCSTOP, 0);
  if (LL::load64(g + LL::kGcThresholdOffset) < kStopped) return false;
  lua_gc(L, LUA_GCRESTART, 0);
  store64(g + LL::kGcThresholdOffset, total);
  lua_createtable(L, 0, 0);  // checks the collector: a step runs
  return g[LL::kGcStateOffset] != LL::kGcPhasePause;
}

}  // namespace

const bool detail::fields_ok = check();

void collect_sooner(lua_State* L, std::size_t limit) {
  unsigned char* g = global_of(L);
  if (g[LL::kGcStateOffset] != LL::kGcPhasePause) return;  // a cycle runs: it sets the next threshold itself
  const std::uint64_t threshold = LL::load64(g + LL::kGcThresholdOffset);
  if (threshold >= kStopped) return;
  const std::uint64_t live = LL::load64(g + LL::kGcEstimateOffset);
  const std::uint64_t total = LL::load64(g + LL::kGcTotalOffset);
  std::uint64_t start = live < limit ? live + (limit - live) / 2 : total;
  if (start < total) start = total;
  if (threshold > start) store64(g + LL::kGcThresholdOffset, start);
}

bool below_threshold(lua_State* L, std::size_t bytes) {
  const unsigned char* g = global_of(L);
  return LL::load64(g + LL::kGcTotalOffset) + bytes < LL::load64(g + LL::kGcThresholdOffset);
}

bool stopped(lua_State* L) { return LL::load64(global_of(L) + LL::kGcThresholdOffset) >= kStopped; }

}  // namespace host::lua::gc_pressure
