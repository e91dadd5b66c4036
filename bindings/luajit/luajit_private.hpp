// The one seam onto LuaJIT's private object layout (LuaJIT 2.1, GC64 mode,
// as lj_obj.h lays it out). Every offset and tag the host knows is here,
// and every read or write through one goes through an operation here; a
// value's bits are a RawValue, which only this header builds or reads.
// Included by bindings/luajit/ alone (tests/check_layout.sh), and compiled
// only with HOST_LUAJIT_PRIVATE (tests/check_seam_symbols.sh): the code
// elsewhere calls the operations of bindings/luajit/'s other headers,
// each with a public-API path beside. Its users: stack_args (a C
// function's arguments read, values pushed and moved), table_walk (the
// codec's table reads), raw_slots (values written into a table's array
// part: the decoder's and the shape cache's), small_globals (the globals
// table's hash part), small_strings (the string table) and gc_pressure
// (the collector's threshold near the memory limit).
//
// Whether the layout holds is decided once, as the program starts
// (luajit_private.cpp checks every operation against the C API on states
// of its own; seam::available() says the outcome); where any check fails
// (another LuaJIT build), every user takes its public path. Threads: any.
#pragma once

#include "bindings/luajit/seam.hpp"

#if !HOST_LUAJIT_PRIVATE
#error "luajit_private.hpp is compiled only with HOST_LUAJIT_PRIVATE: guard its include"
#endif

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include <lua.hpp>

namespace host::lua::luajit_private {

// Whether every layout check passes (run once; seam::checked's answer).
bool layout_holds();
// Whether the string table is as small_strings expects too (run once): on
// its own, so that a string table that differs turns off that one
// feature, not every user of the seam.
bool strings_layout_holds();

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
// traversed in this cycle) and its type (a byte at 9; 11 for a table, 4
// for a string).
inline constexpr std::size_t kMarkedOffset = 8;
inline constexpr std::size_t kGctOffset = 9;
inline constexpr unsigned char kMarkBlack = 0x04;
inline constexpr unsigned char kGctTable = 11;
inline constexpr unsigned char kGctString = 4;
// Node: its value, then its key (TValues), then its chain link: 24 bytes.
inline constexpr std::size_t kNodeBytes = 24;
inline constexpr std::size_t kNodeKeyOffset = 8;
// GCstr: 24 bytes, its length (32 bits) at 20, its bytes right after it;
// the link to the next string of its string table chain (its nextgc) at 0,
// which hash algorithm made its hash (a byte; 0: the primary one) at 11,
// the hash (32 bits) at 16.
inline constexpr std::size_t kStrBytes = 24;
inline constexpr std::size_t kStrLenOffset = 20;
inline constexpr std::size_t kStrNextOffset = 0;
inline constexpr std::size_t kStrHashAlgOffset = 11;
inline constexpr std::size_t kStrHashOffset = 16;
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
// The string table (global_State's str): its slots (a pointer to mask + 1
// chain heads, each a string's address whose low bit, where set, marks a
// chain moved to the secondary hash) at 152, mask (32 bits) at 160, the
// number of strings in it at 164.
inline constexpr std::size_t kStrTabOffset = 152;
inline constexpr std::size_t kStrMaskOffset = 160;
inline constexpr std::size_t kStrNumOffset = 164;
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

// A TValue's bits, as a type: built and read only by Raw (below), so that
// no code outside this header makes or takes apart a value's bits.
class RawValue {
 public:
  friend constexpr bool operator==(RawValue a, RawValue b) { return a.bits_ == b.bits_; }

 private:
  friend struct Raw;
  explicit constexpr RawValue(std::uint64_t bits) : bits_(bits) {}
  std::uint64_t bits_;
};
static_assert(sizeof(RawValue) == 8 && std::is_trivially_copyable_v<RawValue>);

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

// The one builder and reader of RawValues' bits.
struct Raw {
  static constexpr RawValue of(std::uint64_t bits) { return RawValue(bits); }
  static constexpr std::uint64_t bits(RawValue v) { return v.bits_; }
  // The TValue at p (a slot of a stack, an array part or a node).
  static RawValue load(const void* p) { return RawValue(load64(p)); }
  // Writes v into the TValue at p.
  static void store(void* p, RawValue v) { std::memcpy(p, &v.bits_, sizeof v.bits_); }
};

inline constexpr RawValue nil() { return Raw::of(~std::uint64_t{0}); }
inline bool is_nil(RawValue tv) { return tv == nil(); }
inline std::uint32_t tag(RawValue tv) {
  return static_cast<std::uint32_t>(static_cast<std::int64_t>(Raw::bits(tv)) >> 47);
}
inline bool is_number(RawValue tv) { return tag(tv) < kTagNumX; }
inline double number(RawValue tv) {
  const std::uint64_t bits = Raw::bits(tv);
  double d;
  std::memcpy(&d, &bits, sizeof d);
  return d;
}
// The TValue of false or true (kTagFalse, kTagTrue).
inline constexpr RawValue primitive(std::uint32_t tag) { return Raw::of(~(std::uint64_t{~tag} << 47)); }
inline constexpr RawValue boolean(bool b) { return primitive(b ? kTagTrue : kTagFalse); }
// The TValue of a number: its double's bits, a NaN as LuaJIT's one NaN
// (another NaN's bits could read as a tag).
inline RawValue number_value(double d) {
  if (d != d) return Raw::of(0xfff8000000000000ull);
  std::uint64_t v;
  std::memcpy(&v, &d, sizeof v);
  return Raw::of(v);
}
// The TValue of a GC object of type `tag` at address obj.
inline RawValue object_value(const void* obj, std::uint32_t tag) {
  return Raw::of(static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(obj)) | (std::uint64_t{tag} << 47));
}
inline const unsigned char* object(RawValue tv) {
  return reinterpret_cast<const unsigned char*>(static_cast<std::uintptr_t>(Raw::bits(tv) & kPointerMask));
}
// lua_type's answer for a TValue, by its tag (-2: no type a slot holds).
inline int type_of(RawValue tv) {
  if (is_number(tv)) return LUA_TNUMBER;
  switch (tag(tv)) {
    case ~0u: return LUA_TNIL;
    case kTagFalse:
    case kTagTrue: return LUA_TBOOLEAN;
    case kTagLightUserdata: return LUA_TLIGHTUSERDATA;
    case kTagStr: return LUA_TSTRING;
    case kTagThread: return LUA_TTHREAD;
    case kTagFunc: return LUA_TFUNCTION;
    case kTagCdata: return 10;  // LuaJIT's LUA_TCDATA
    case kTagTab: return LUA_TTABLE;
    case kTagUserdata: return LUA_TUSERDATA;
    default: return -2;
  }
}

// --- Strings -----------------------------------------------------------------
// The bytes of the string object s, and its length in *len.
inline const char* string_bytes(const unsigned char* s, std::size_t* len) {
  if (len) *len = load32(s + layout::kStrLenOffset);
  return reinterpret_cast<const char*>(s + layout::kStrBytes);
}
// The TValue of the string whose bytes start at text (lua_tolstring's).
inline RawValue string_value(const char* text) { return object_value(text - layout::kStrBytes, kTagStr); }

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
inline RawValue array_value(const TableParts& p, std::size_t i) { return Raw::load(p.array + 8 * i); }
inline unsigned char* array_slots(const unsigned char* t) {
  return const_cast<unsigned char*>(load_ptr(t + layout::kArrayOffset));
}
inline RawValue node_value(const TableParts& p, std::size_t i) { return Raw::load(p.node + layout::kNodeBytes * i); }
inline RawValue node_key(const TableParts& p, std::size_t i) {
  return Raw::load(p.node + layout::kNodeBytes * i + layout::kNodeKeyOffset);
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

// --- The string table ------------------------------------------------------------
struct StringTable {
  unsigned char* slots;
  std::uint32_t mask;
  std::uint32_t count;
};
inline StringTable string_table_of(const unsigned char* g) {
  return {const_cast<unsigned char*>(load_ptr(g + layout::kStrTabOffset)), load32(g + layout::kStrMaskOffset),
          load32(g + layout::kStrNumOffset)};
}
// Makes `slots` (half as many as g's table has) g's string table: its
// slot i holds the chains of the old slots i and i + half, since a
// string in either has the same hash bits below half. Every chain must
// use the primary hash (no low bit set, as in a fresh state's). The old
// slots are neither read again nor freed. (LuaJIT's own resize rehashes
// string by string; this walks only the chains two old slots share.)
inline void halve_string_table(unsigned char* g, unsigned char* slots) {
  const StringTable old = string_table_of(g);
  const std::uint32_t half = (old.mask + 1) / 2;
  // The lower half copied whole, then the upper half's chains added: most
  // slots of a fresh state's table are empty, so this is mostly one load
  // and test a slot.
  std::memcpy(slots, old.slots, 8 * std::size_t{half});
  for (std::uint32_t i = 0; i < half; ++i) {
    const unsigned char* b = load_ptr(old.slots + 8 * (i + half));
    if (!b) continue;
    const unsigned char* a = load_ptr(slots + 8 * i);
    if (!a) {
      std::memcpy(slots + 8 * i, &b, 8);
      continue;
    }
    unsigned char* tail = const_cast<unsigned char*>(a);
    while (const unsigned char* next = load_ptr(tail + layout::kStrNextOffset)) tail = const_cast<unsigned char*>(next);
    std::memcpy(tail + layout::kStrNextOffset, &b, 8);
  }
  const std::uint32_t mask = half - 1;
  std::memcpy(g + layout::kStrTabOffset, &slots, sizeof slots);
  std::memcpy(g + layout::kStrMaskOffset, &mask, sizeof mask);
}

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
inline bool push_values(lua_State* L, const RawValue* tvs, std::size_t n) {
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
inline void set_gc_total(lua_State* L, std::uint64_t v) {
  std::memcpy(global_state(L) + layout::kGcTotalOffset, &v, sizeof v);
}
inline std::uint64_t gc_threshold(lua_State* L) { return load64(global_state(L) + layout::kGcThresholdOffset); }
inline void set_gc_threshold(lua_State* L, std::uint64_t v) {
  std::memcpy(global_state(L) + layout::kGcThresholdOffset, &v, sizeof v);
}
inline std::uint64_t gc_estimate(lua_State* L) { return load64(global_state(L) + layout::kGcEstimateOffset); }
// Whether the collector is between cycles.
inline bool gc_between_cycles(lua_State* L) { return global_state(L)[layout::kGcStateOffset] == layout::kGcPhasePause; }

}  // namespace host::lua::luajit_private
