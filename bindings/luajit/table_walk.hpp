// table_walk: a table's entries read straight from LuaJIT's memory, in
// the order lua_next gives them (the array part, then the hash part), for
// the codec's encoder (codec.cpp), which writes what a sink is handed.
// Compiled only with HOST_LUAJIT_PRIVATE; used only while
// seam::available(), and by the codec only once its own check (the same
// bytes as its C API walk) has passed. Threads: the thread running the
// table's state.
#pragma once

#include "bindings/luajit/seam.hpp"

#if HOST_LUAJIT_PRIVATE
#include <cstddef>
#include <cstdint>

#include "bindings/luajit/luajit_private.hpp"

namespace host::lua::table_walk {

namespace detail {
namespace LP = luajit_private;

template <typename Sink>
bool walk_table(Sink& sink, const unsigned char* t, std::size_t depth);

// One value of a table at depth `depth`: a scalar handed over (most are),
// a table walked in turn.
template <typename Sink>
[[gnu::always_inline]] inline bool walk_value(Sink& sink, LP::RawValue v, std::size_t depth) {
  if (LP::is_number(v)) {
    sink.number(LP::number(v));
    return true;
  }
  const std::uint32_t tag = LP::tag(v);
  if (tag == LP::kTagStr) {
    std::size_t n = 0;
    const char* bytes = LP::string_bytes(LP::object(v), &n);
    sink.string(bytes, n);
    return true;
  }
  if (tag == LP::kTagFalse || tag == LP::kTagTrue) {
    sink.boolean(tag == LP::kTagTrue);
    return true;
  }
  // A light userdata (JSON's null among them) declines too: in GC64 its
  // TValue holds the pointer's segment in the state's own map, not the
  // pointer, so only the C API (lua_touserdata) tells NULL from others.
  return tag == LP::kTagTab && walk_table(sink, LP::object(v), depth + 1);
}

template <typename Sink>
bool walk_table(Sink& sink, const unsigned char* t, std::size_t depth) {
  if (!sink.enter(t, depth)) return false;
  const std::size_t n_at = sink.open();
  std::size_t n = 0;
  std::size_t m = 0;
  bool in_array = true;  // keys 1, 2, ... while they come first
  const LP::TableParts parts = LP::table_parts(t);
  for (std::uint32_t i = 0; i < parts.asize; ++i) {
    const LP::RawValue v = LP::array_value(parts, i);
    if (LP::is_nil(v)) continue;
    if (in_array && i == n + 1) {
      ++n;
    } else {
      in_array = false;
      sink.number(static_cast<double>(i));
      ++m;
    }
    if (!walk_value(sink, v, depth)) return false;
  }
  for (std::uint32_t i = 0; i <= parts.hmask; ++i) {
    const LP::RawValue v = LP::node_value(parts, i);
    if (LP::is_nil(v)) continue;
    const LP::RawValue k = LP::node_key(parts, i);
    if (in_array && LP::is_number(k) && LP::number(k) == static_cast<double>(n + 1)) {
      ++n;
    } else {
      in_array = false;
      if (!walk_value(sink, k, depth)) return false;
      ++m;
    }
    if (!walk_value(sink, v, depth)) return false;
  }
  sink.close(n_at, n, m);
  return true;
}

// The bytes of a string value of up to max_string bytes, its length in
// n; nullptr for any other value.
[[gnu::always_inline]] inline const char* flat_string(LP::RawValue v, std::size_t max_string, std::size_t& n) {
  if (LP::tag(v) != LP::kTagStr) return nullptr;
  const char* bytes = LP::string_bytes(LP::object(v), &n);
  return n > max_string ? nullptr : bytes;
}
}  // namespace detail

// Walks the table t (a GCtab: stack_args::table's pointer), nested tables
// included, handing the sink what the C API walk of lua_next would meet:
//   bool enter(const void* table, std::size_t depth): false declines it
//     (nested too deep, or a cycle);
//   std::size_t open(), then close(that, n, m): a table's start and end,
//     with the count of its array section (keys 1, 2, ... first) and of
//     the rest;
//   number(double), string(const char*, std::size_t), boolean(bool): a
//     key (outside the array section) or a value.
// Tables of nil, booleans, numbers, strings and such tables only: false
// (the sink partly written) at anything else, and the caller then walks
// it through the C API, which names what was wrong.
template <typename Sink>
bool walk(Sink& sink, const void* t) {
  return detail::walk_table(sink, static_cast<const unsigned char*>(t), 0);
}

// The hash part of a flat table t of string keys, for the codec's small
// payloads: its array part of at most 4 slots, all nil, and its hash part
// of fewer than max_nodes nodes, each key a string of up to max_string
// bytes and each value a number, a boolean or such a string. Hands the
// sink each entry (key(bytes, n), then number, boolean or string) and
// returns true; false, at the first entry that does not fit (the sink
// partly written), for any other table.
template <std::uint32_t kMaxNodes, std::size_t kMaxString, typename Sink>
bool walk_flat(Sink& sink, const void* table) {
  namespace LP = luajit_private;
  const LP::TableParts parts = LP::table_parts(static_cast<const unsigned char*>(table));
  if (parts.asize > 4) return false;
  for (std::uint32_t i = 0; i < parts.asize; ++i)
    if (!LP::is_nil(LP::array_value(parts, i))) return false;
  if (parts.hmask >= kMaxNodes) return false;
  for (std::uint32_t i = 0; i <= parts.hmask; ++i) {
    const LP::RawValue v = LP::node_value(parts, i);
    if (LP::is_nil(v)) continue;
    std::size_t n = 0;
    const char* key = detail::flat_string(LP::node_key(parts, i), kMaxString, n);
    if (!key) return false;
    sink.key(key, n);
    if (LP::is_number(v)) {
      sink.number(LP::number(v));
    } else if (LP::tag(v) == LP::kTagTrue || LP::tag(v) == LP::kTagFalse) {
      sink.boolean(LP::tag(v) == LP::kTagTrue);
    } else if (const char* text = detail::flat_string(v, kMaxString, n)) {
      sink.string(text, n);
    } else {
      return false;
    }
  }
  return true;
}

}  // namespace host::lua::table_walk
#endif
