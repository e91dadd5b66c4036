// The one seam onto LuaJIT's private object layout (LuaJIT 2.1, GC64 mode,
// as lj_obj.h lays it out). Every offset and tag the host knows is here,
// and every read or write through one goes through an operation here.
// Its users are optimisations that each keep a public-API path beside:
// stack_args (a C function's arguments read, values pushed and moved),
// the codec's table walk, small_globals (the globals table's hash part),
// gc_pressure (the collector's threshold near the memory limit) and the
// shape cache's prepared values.
//
// Whether the layout holds is decided once, as the program starts
// (luajit_private.cpp checks every operation against the C API on states
// of its own); where any check fails (another LuaJIT build), available()
// is false for good and every user takes its public path. Built with
// -DHOST_LUAJIT_PRIVATE=OFF, available() is a constant false: no check
// runs, and the compiler drops every private path. Threads: any.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#ifndef HOST_LUAJIT_PRIVATE
#define HOST_LUAJIT_PRIVATE 1
#endif

struct lua_State;

namespace host::lua::luajit_private {

// Whether this build has the private paths at all (CMake's
// HOST_LUAJIT_PRIVATE).
inline constexpr bool kBuilt = HOST_LUAJIT_PRIVATE != 0;

namespace detail {
// Set by the checks as the program starts (a static initialiser: a plain
// load on the hot paths, where a function-local static cost a call and
// its guard). Read before that, it is false: the public paths.
extern const bool ok;
}  // namespace detail

// Whether the private operations below may be used (see above).
inline bool available() {
  if constexpr (!kBuilt) return false;
  else return detail::ok;
}
// available(), for another static initialiser: runs the checks if they
// have not run yet (the order of initialisers across files is not fixed).
bool checked();

// --- The layout ------------------------------------------------------------
namespace layout {
// GCtab: 64 bytes. Its array part (TValues, keys 0 .. asize-1) at 16, the
// hash part (Nodes, hmask + 1 of them) at 40, asize at 48, hmask at 52,
// the hash part's first free node from the end (freetop) at 56.
inline constexpr std::size_t kTableBytes = 64;
inline constexpr std::size_t kArrayOffset = 16;
inline constexpr std::size_t kNodeOffset = 40;
inline constexpr std::size_t kAsizeOffset = 48;
inline constexpr std::size_t kHmaskOffset = 52;
inline constexpr std::size_t kFreetopOffset = 56;
// A GC object's header: its collector marks (a byte at 8; black, 0x04:
// traversed in this cycle) and its type (a byte at 9; 11 for a table).
inline constexpr std::size_t kMarkedOffset = 8;
inline constexpr std::size_t kGctOffset = 9;
inline constexpr unsigned char kMarkBlack = 0x04;
inline constexpr unsigned char kGctTable = 11;
// Node: its value, then its key (TValues), then its chain link: 24 bytes.
inline constexpr std::size_t kNodeBytes = 24;
inline constexpr std::size_t kNodeKeyOffset = 8;
// GCstr: 24 bytes, its length (32 bits) at 20, its bytes right after it.
inline constexpr std::size_t kStrBytes = 24;
inline constexpr std::size_t kStrLenOffset = 20;
// lua_State: its global state at 16, the first argument of a running C
// function (base) at 32, the slot above its last (top) at 40, the end of
// its stack's usable part (maxstack) at 48: a push must leave top below
// it, or the stack grows first.
inline constexpr std::size_t kStateGlobalOffset = 16;
inline constexpr std::size_t kStateBaseOffset = 32;
inline constexpr std::size_t kStateTopOffset = 40;
inline constexpr std::size_t kStateMaxstackOffset = 48;
// global_State (as Debian's and Ubuntu's LuaJIT 2.1 lays it out): the
// allocator and its data at 0 and 8, then the collector's state: the bytes
// allocated (total) at 16, the total at which the next step runs
// (threshold) at 24, its phase (a byte; 0 between cycles) at 33, its
// estimate of the live heap (set as a cycle ends) at 96, stepmul and pause
// (32 bits) at 104 and 108.
inline constexpr std::size_t kGlobalAllocfOffset = 0;
inline constexpr std::size_t kGlobalAllocdOffset = 8;
inline constexpr std::size_t kGcTotalOffset = 16;
inline constexpr std::size_t kGcThresholdOffset = 24;
inline constexpr std::size_t kGcStateOffset = 33;
inline constexpr std::size_t kGcEstimateOffset = 96;
inline constexpr std::size_t kGcStepmulOffset = 104;
inline constexpr std::size_t kGcPauseOffset = 108;
inline constexpr unsigned char kGcPhasePause = 0;
}  // namespace layout

// --- Values (TValues) --------------------------------------------------------
// A TValue is 64 bits: a double, or a type tag in its top 17 bits (read
// sign-extended) over a 47-bit pointer; nil is all ones.
inline constexpr std::uint32_t kTagFalse = ~1u;
inline constexpr std::uint32_t kTagTrue = ~2u;
inline constexpr std::uint32_t kTagLightUserdata = ~3u;
inline constexpr std::uint32_t kTagStr = ~4u;
inline constexpr std::uint32_t kTagThread = ~6u;
inline constexpr std::uint32_t kTagFunc = ~8u;
inline constexpr std::uint32_t kTagCdata = ~10u;
inline constexpr std::uint32_t kTagTab = ~11u;
inline constexpr std::uint32_t kTagUserdata = ~12u;
inline constexpr std::uint32_t kTagNumX = ~13u;  // tags below this one are numbers (doubles)
inline constexpr std::uint64_t kPointerMask = (std::uint64_t{1} << 47) - 1;
inline constexpr std::uint64_t kNil = ~std::uint64_t{0};

inline std::uint64_t load64(const void* p) {
  std::uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline std::uint32_t load32(const void* p) {
  std::uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline const unsigned char* load_ptr(const void* p) {
  const unsigned char* v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline bool is_nil(std::uint64_t tv) { return tv == kNil; }
inline std::uint32_t tag(std::uint64_t tv) { return static_cast<std::uint32_t>(static_cast<std::int64_t>(tv) >> 47); }
inline bool is_number(std::uint64_t tv) { return tag(tv) < kTagNumX; }
inline double number(std::uint64_t tv) {
  double d;
  std::memcpy(&d, &tv, sizeof d);
  return d;
}
// The TValue of false or true (kTagFalse, kTagTrue).
inline std::uint64_t primitive(std::uint32_t tag) { return ~(std::uint64_t{~tag} << 47); }
// The TValue of a number: its double's bits, a NaN as LuaJIT's one NaN
// (another NaN's bits could read as a tag).
inline std::uint64_t number_tvalue(double d) {
  if (d != d) return 0xfff8000000000000ull;
  std::uint64_t v;
  std::memcpy(&v, &d, sizeof v);
  return v;
}
// The TValue of a GC object of type `tag` at address obj.
inline std::uint64_t tvalue(const void* obj, std::uint32_t tag) {
  return static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(obj)) | (std::uint64_t{tag} << 47);
}
inline const unsigned char* object(std::uint64_t tv) {
  return reinterpret_cast<const unsigned char*>(static_cast<std::uintptr_t>(tv & kPointerMask));
}

// --- Strings -----------------------------------------------------------------
// The bytes of the string object s, and its length in *len.
inline const char* string_bytes(const unsigned char* s, std::size_t* len) {
  if (len) *len = load32(s + layout::kStrLenOffset);
  return reinterpret_cast<const char*>(s + layout::kStrBytes);
}
// The TValue of the string whose bytes start at text (lua_tolstring's).
inline std::uint64_t string_tvalue(const char* text) { return tvalue(text - layout::kStrBytes, kTagStr); }

// --- Tables ------------------------------------------------------------------
// A table's array part (keys 0 .. asize - 1) and hash part (hmask + 1 nodes).
struct TableParts {
  const unsigned char* array;
  std::uint32_t asize;
  const unsigned char* node;
  std::uint32_t hmask;
};
inline TableParts table_parts(const unsigned char* t) {
  return {load_ptr(t + layout::kArrayOffset), load32(t + layout::kAsizeOffset), load_ptr(t + layout::kNodeOffset),
          load32(t + layout::kHmaskOffset)};
}
inline std::uint32_t array_size(const unsigned char* t) { return load32(t + layout::kAsizeOffset); }
inline std::uint64_t array_value(const TableParts& p, std::size_t i) { return load64(p.array + 8 * i); }
inline unsigned char* array_slots(const unsigned char* t) {
  return const_cast<unsigned char*>(load_ptr(t + layout::kArrayOffset));
}
inline std::uint64_t node_value(const TableParts& p, std::size_t i) { return load64(p.node + layout::kNodeBytes * i); }
inline std::uint64_t node_key(const TableParts& p, std::size_t i) {
  return load64(p.node + layout::kNodeBytes * i + layout::kNodeKeyOffset);
}
// Whether the collector has traversed table t in this cycle (black): a
// value written into it then owes a write barrier.
inline bool is_black(const unsigned char* t) { return (t[layout::kMarkedOffset] & layout::kMarkBlack) != 0; }

// A table's hash part as a whole, for small_globals' swap of the globals
// table's.
struct HashPart {
  void* node;
  std::uint32_t hmask;
  void* freetop;
};
inline HashPart read_hash_part(const void* table) {
  const auto* t = static_cast<const unsigned char*>(table);
  HashPart h{};
  std::memcpy(&h.node, t + layout::kNodeOffset, sizeof h.node);
  std::memcpy(&h.hmask, t + layout::kHmaskOffset, sizeof h.hmask);
  std::memcpy(&h.freetop, t + layout::kFreetopOffset, sizeof h.freetop);
  return h;
}
inline void write_hash_part(void* table, const HashPart& h) {
  auto* t = static_cast<unsigned char*>(table);
  std::memcpy(t + layout::kNodeOffset, &h.node, sizeof h.node);
  std::memcpy(t + layout::kHmaskOffset, &h.hmask, sizeof h.hmask);
  std::memcpy(t + layout::kFreetopOffset, &h.freetop, sizeof h.freetop);
}
// The bytes of a hash part of n nodes.
inline constexpr std::size_t hash_part_bytes(std::size_t n) { return n * layout::kNodeBytes; }

// --- A state's stack -----------------------------------------------------------
// The first slot of the running C function, the slot above the last, and
// whether `bytes` more fit below the stack's end.
inline const unsigned char* stack_base(lua_State* L) {
  return load_ptr(reinterpret_cast<const unsigned char*>(L) + layout::kStateBaseOffset);
}
inline unsigned char* stack_top(lua_State* L) {
  unsigned char* t;
  std::memcpy(&t, reinterpret_cast<unsigned char*>(L) + layout::kStateTopOffset, sizeof t);
  return t;
}
inline void set_stack_top(lua_State* L, unsigned char* t) {
  std::memcpy(reinterpret_cast<unsigned char*>(L) + layout::kStateTopOffset, &t, sizeof t);
}
inline const unsigned char* stack_end(lua_State* L) {
  return load_ptr(reinterpret_cast<const unsigned char*>(L) + layout::kStateMaxstackOffset);
}
inline bool stack_fits(lua_State* L, const unsigned char* top, std::size_t bytes) { return top + bytes < stack_end(L); }
// Slot idx's TValue (idx >= 1, from the running C function's base), or
// nullptr at or above the top (as index2adr).
inline const unsigned char* stack_slot(lua_State* L, int idx) {
  const unsigned char* at = stack_base(L) + static_cast<std::size_t>(idx - 1) * 8;
  return at < stack_top(L) ? at : nullptr;
}
// Pushes n TValues; false, pushing nothing, where the stack has no room.
inline bool push_tvalues(lua_State* L, const std::uint64_t* tvs, std::size_t n) {
  unsigned char* t = stack_top(L);
  const std::size_t bytes = n * 8;
  if (!stack_fits(L, t, bytes)) [[unlikely]] return false;
  std::memcpy(t, tvs, bytes);
  set_stack_top(L, t + bytes);
  return true;
}

// --- The collector -------------------------------------------------------------
inline unsigned char* global_state(lua_State* L) {
  return const_cast<unsigned char*>(load_ptr(reinterpret_cast<const unsigned char*>(L) + layout::kStateGlobalOffset));
}
// The allocator's userdata of L's state (lua_getallocf's).
inline void* allocator_data(lua_State* L) {
  return const_cast<unsigned char*>(load_ptr(global_state(L) + layout::kGlobalAllocdOffset));
}
inline std::uint64_t gc_total(lua_State* L) { return load64(global_state(L) + layout::kGcTotalOffset); }
inline std::uint64_t gc_threshold(lua_State* L) { return load64(global_state(L) + layout::kGcThresholdOffset); }
inline void set_gc_threshold(lua_State* L, std::uint64_t v) {
  std::memcpy(global_state(L) + layout::kGcThresholdOffset, &v, sizeof v);
}
inline std::uint64_t gc_estimate(lua_State* L) { return load64(global_state(L) + layout::kGcEstimateOffset); }
// Whether the collector is between cycles.
inline bool gc_between_cycles(lua_State* L) { return global_state(L)[layout::kGcStateOffset] == layout::kGcPhasePause; }

}  // namespace host::lua::luajit_private
