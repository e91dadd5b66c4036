// LuaJIT 2.1's object layout in GC64 mode (lj_obj.h), for the four places
// that use it directly: small_globals (the globals table's hash part),
// the codec's table walk (codec.cpp), stack_args (a C function's
// arguments, and pushes of values that are kept alive elsewhere) and
// gc_pressure (the collector's schedule near the memory limit). None trusts it blindly: each checks it against the C API on
// a real state first and keeps to the C API where the check fails
// (another LuaJIT build). Threads: any.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace host::lua::luajit_layout {

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

// lua_State: the first argument of a running C function (base) at 32, the
// slot above its last (top) at 40.
inline constexpr std::size_t kStateBaseOffset = 32;
inline constexpr std::size_t kStateTopOffset = 40;
// The end of its stack's usable part (maxstack): a push must leave top
// below it, or the stack grows first.
inline constexpr std::size_t kStateMaxstackOffset = 48;

// lua_State: its global state (global_State, G(L)) at 16.
inline constexpr std::size_t kStateGlobalOffset = 16;
// global_State (as Debian's and Ubuntu's LuaJIT 2.1 lays it out): the
// allocator and its data at 0 and 8, then the collector's state: the
// bytes allocated (total) at 16, the total at which the next step runs
// (threshold) at 24, its phase (a byte; 0 between cycles) at 33, its
// estimate of the live heap (set as a cycle ends) at 96, stepmul and
// pause (32 bits) at 104 and 108. Only gc_pressure.cpp uses these.
inline constexpr std::size_t kGlobalAllocfOffset = 0;
inline constexpr std::size_t kGlobalAllocdOffset = 8;
inline constexpr std::size_t kGcTotalOffset = 16;
inline constexpr std::size_t kGcThresholdOffset = 24;
inline constexpr std::size_t kGcStateOffset = 33;
inline constexpr std::size_t kGcEstimateOffset = 96;
inline constexpr std::size_t kGcStepmulOffset = 104;
inline constexpr std::size_t kGcPauseOffset = 108;
inline constexpr unsigned char kGcPhasePause = 0;

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

inline bool is_nil(std::uint64_t tv) { return tv == ~std::uint64_t{0}; }
inline std::uint32_t tag(std::uint64_t tv) { return static_cast<std::uint32_t>(static_cast<std::int64_t>(tv) >> 47); }
inline bool is_number(std::uint64_t tv) { return tag(tv) < kTagNumX; }
inline double number(std::uint64_t tv) {
  double d;
  std::memcpy(&d, &tv, sizeof d);
  return d;
}
// The TValue of false or true (kTagFalse, kTagTrue; nil: ~0).
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

}  // namespace host::lua::luajit_layout
