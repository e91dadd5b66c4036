// gc_pressure: the collector's threshold lowered near the memory limit,
// through luajit_private's fields (compiled only with
// HOST_LUAJIT_PRIVATE). Threads: the thread running L.
#include "bindings/luajit/gc_pressure.hpp"

#if HOST_LUAJIT_PRIVATE
#include "bindings/luajit/luajit_private.hpp"

#include <cstdint>

namespace host::lua::gc_pressure {
namespace {

namespace LP = luajit_private;

// collectgarbage("stop") sets the threshold to LuaJIT's largest heap
// (2^47 bytes in GC64 builds); no heap gets near this one.
constexpr std::uint64_t kStopped = std::uint64_t{1} << 46;

}  // namespace

void collect_sooner(lua_State* L, std::size_t limit) {
  if (!LP::gc_between_cycles(L)) return;  // a cycle runs: it sets the next threshold itself
  const std::uint64_t threshold = LP::gc_threshold(L);
  if (threshold >= kStopped) return;
  const std::uint64_t live = LP::gc_estimate(L);
  const std::uint64_t total = LP::gc_total(L);
  std::uint64_t start = live < limit ? live + (limit - live) / 2 : total;
  if (start < total) start = total;
  if (threshold > start) LP::set_gc_threshold(L, start);
}


bool stopped(lua_State* L) { return LP::gc_threshold(L) >= kStopped; }

}  // namespace host::lua::gc_pressure
#endif
