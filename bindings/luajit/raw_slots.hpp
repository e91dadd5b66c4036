// raw_slots: values written straight into a new table's array part as
// LuaJIT holds them, for the decoder's arrays of numbers and booleans and
// the shape cache's scratch table (shape_cache.hpp): each lua_rawseti
// was two C API calls an element. Only values that owe the collector
// nothing are written: numbers, booleans, nil, and strings that a
// reference of their own keeps alive. Without the seam (unavailable, or
// built with HOST_LUAJIT_PRIVATE=OFF) of_table gives no slots and every
// caller takes the C API. Threads: the thread running L.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include <lua.hpp>

#include "bindings/luajit/seam.hpp"
#include "host/io/value_format.hpp"
#if HOST_LUAJIT_PRIVATE
#include "bindings/luajit/luajit_private.hpp"
#endif

namespace host::lua::raw_slots {

// Reads the boolean or number at p (the codec's bytes, its tag first),
// handing it to got (a bool or a double), and moves p past it; false, p
// unchanged, for any other tag or bytes that end too soon. (No layout in
// it: skip_scalar's in either build.)
template <typename Got>
[[gnu::always_inline]] inline bool parse_scalar(const char*& p, const char* end, Got&& got) {
  if (p >= end) return false;
  const char* next = p + 1;  // past the tag, then past the value
  switch (static_cast<std::uint8_t>(*p)) {
    case kFalse: got(false); break;
    case kTrue: got(true); break;
    case kInt: {
      std::uint64_t z;
      if (read_varint(next, end, z) != Varint::kOk) return false;
      got(static_cast<double>(unzigzag(z)));
      break;
    }
    case kDouble: {
      if (end - next < 8) return false;
      double d;
      std::memcpy(&d, next, 8);
      next += 8;
      got(d);
      break;
    }
    default: return false;
  }
  p = next;
  return true;
}

// A table's array part, slots 0 to the size asked for (none without the
// seam). It stays where it is until the table grows.
class Slots {
 public:
  Slots() = default;

  // The array part of the table in stack slot idx (> 0) of L when it
  // holds keys 0 to n - 1; no slots otherwise or without the seam.
  static Slots of_table([[maybe_unused]] lua_State* L, [[maybe_unused]] int idx, [[maybe_unused]] std::size_t n) {
#if HOST_LUAJIT_PRIVATE
    namespace LP = luajit_private;
    if (!seam::available() || idx <= 0) return {};
    const unsigned char* at = LP::stack_slot(L, idx);
    if (!at) return {};
    const LP::RawValue tv = LP::Raw::load(at);
    if (LP::tag(tv) != LP::kTagTab) return {};
    const unsigned char* t = LP::object(tv);
    if (LP::array_size(t) < n) return {};
    return Slots(LP::array_slots(t));
#else
    return {};
#endif
  }

  explicit operator bool() const { return array_ != nullptr; }

  // Reads the boolean or number at p (the codec's bytes, its tag first)
  // into slot i, moving p past it; false, p unchanged and the slot as it
  // was, for any other tag or bytes that end too soon.
  bool read_scalar([[maybe_unused]] std::size_t i, [[maybe_unused]] const char*& p,
                   [[maybe_unused]] const char* end) const {
#if HOST_LUAJIT_PRIVATE
    namespace LP = luajit_private;
    unsigned char* slot = array_ + 8 * i;
    return parse_scalar(p, end, [slot](auto v) {
      if constexpr (std::is_same_v<decltype(v), bool>) LP::Raw::store(slot, LP::boolean(v));
      else LP::Raw::store(slot, LP::number_value(v));
    });
#else
    return false;
#endif
  }

  // Writes the string whose bytes start at text (lua_tolstring's pointer;
  // a reference of its own keeps it) into slot i.
  void set_string([[maybe_unused]] std::size_t i, [[maybe_unused]] const char* text) const {
#if HOST_LUAJIT_PRIVATE
    luajit_private::Raw::store(array_ + 8 * i, luajit_private::string_value(text));
#endif
  }

  // Sets slots first to first + n - 1 back to nil.
  void set_nil([[maybe_unused]] std::size_t first, [[maybe_unused]] std::size_t n) const {
#if HOST_LUAJIT_PRIVATE
    for (std::size_t i = first; i < first + n; ++i) luajit_private::Raw::store(array_ + 8 * i, luajit_private::nil());
#endif
  }

 private:
  explicit Slots(unsigned char* array) : array_(array) {}
  unsigned char* array_ = nullptr;
};

// Moves p past the boolean or number at p, as Slots::read_scalar reads
// it; false, p unchanged, for anything else.
inline bool skip_scalar(const char*& p, const char* end) {
  return parse_scalar(p, end, [](auto) {});
}

}  // namespace host::lua::raw_slots
