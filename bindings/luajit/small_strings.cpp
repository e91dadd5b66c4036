// Small strings: the scratch block and the move of a fresh state's strings
// into a smaller table (compiled only with HOST_LUAJIT_PRIVATE). Threads:
// any; each thread its own scratch block.
#include "bindings/luajit/small_strings.hpp"

#if HOST_LUAJIT_PRIVATE

#include <atomic>

#include <lua.hpp>

#include "bindings/luajit/luajit_private.hpp"

namespace host::lua::small_strings {

namespace {

namespace LP = luajit_private;

std::atomic<bool> enabled{true};
// Checked once, at start (not in the allocator call that asks for the
// scratch).
const bool layout_ok = LP::strings_layout_holds();

}  // namespace

void* take_scratch() {
  if (!seam::available() || !layout_ok || !enabled.load(std::memory_order_relaxed)) return nullptr;
  alignas(16) static thread_local unsigned char block[kNewstateBytes];
  return block;
}

bool holds_strings(lua_State* L, const void* scratch) {
  if (!scratch) return false;
  const LP::StringTable t = LP::string_table_of(LP::global_state(L));
  return t.slots == scratch && t.mask == kNewstateSlots - 1 && t.count < kSlots;
}

void shrink(lua_State* L, void* slots) {
  static_assert(kSlots * 2 == kNewstateSlots, "the table is halved");
  LP::halve_string_table(LP::global_state(L), static_cast<unsigned char*>(slots));
  LP::set_gc_total(L, LP::gc_total(L) - (kNewstateBytes - kBytes));
}

void disable() { enabled.store(false, std::memory_order_relaxed); }

}  // namespace host::lua::small_strings
#endif
