#include "bindings/shape_cache.hpp"

#include <cstring>

#include "bindings/codec.hpp"
#include "bindings/luajit/raw_slots.hpp"
#include "bindings/string_cache.hpp"

namespace host::lua {

namespace {

// The scratch table's slots: [1] from, [2] topic, [3..] the values.
constexpr std::size_t kFirstValue = 3;
constexpr std::size_t kScratchSlots = kFirstValue + ShapeCache::kMaxKeys;  // with [0], unused

// A payload of one flat table: its count of values (1), its tag, an empty
// array section, and 1 to kMaxKeys keys (one-byte counts all). Returns the
// key count, or 0.
std::uint8_t flat_table_keys(std::string_view b) {
  if (b.size() < 4 || b[0] != 1 || static_cast<std::uint8_t>(b[1]) != kTable || b[2] != 0) return 0;
  const auto m = static_cast<std::uint8_t>(b[3]);
  return m >= 1 && m <= ShapeCache::kMaxKeys ? m : 0;
}

// The string value at p (its tag, a varint length, its bytes) as its
// bytes, advancing p past it; false, p unchanged, for anything else.
bool read_string(const char*& p, const char* end, std::string_view& bytes) {
  if (p >= end || static_cast<std::uint8_t>(*p) != kString) return false;
  const char* q = p + 1;
  std::uint64_t n;
  if (read_varint(q, end, n) != Varint::kOk || n > static_cast<std::uint64_t>(end - q)) return false;
  bytes = std::string_view(q, n);
  p = q + n;
  return true;
}

// Reads one value at p (a table's, so never nil) into slot i of slots,
// advancing p; false at anything but a boolean, a number or a string
// `kept` keeps.
[[gnu::always_inline]] inline bool read_value(const char*& p, const char* end, const StringCache& kept,
                                              const raw_slots::Slots& slots, std::size_t i) {
  if (p >= end || static_cast<std::uint8_t>(*p) != kString) return slots.read_scalar(i, p, end);
  const char* q = p;
  std::string_view bytes;
  if (!read_string(q, end, bytes)) return false;
  const char* text = kept.find(bytes);
  if (!text) return false;
  p = q;
  slots.set_string(i, text);
  return true;
}

// Skips one value at p as read_value reads it (any string).
bool skip_value(const char*& p, const char* end) {
  std::string_view bytes;
  return read_string(p, end, bytes) || raw_slots::skip_scalar(p, end);
}

// The key at p (kString, a one-byte length, its bytes) as its length byte
// and bytes, advancing p past it; an empty view for anything else.
std::string_view read_key(const char*& p, const char* end) {
  if (end - p < 2 || static_cast<std::uint8_t>(p[0]) != kString) return {};
  const auto n = static_cast<std::uint8_t>(p[1]);
  if (n > ShapeCache::kMaxKeyLength || static_cast<std::size_t>(end - p) < 2u + n) return {};
  const std::string_view key(p + 1, 1u + n);
  p += 2 + n;
  return key;
}
}  // namespace

bool ShapeCache::shape_of(std::string_view payload, std::string& keys, std::uint8_t& count) {
  count = flat_table_keys(payload);
  if (count == 0) return false;
  keys.clear();
  const char* p = payload.data() + 4;
  const char* end = payload.data() + payload.size();
  for (std::uint8_t i = 0; i < count; ++i) {
    const std::string_view key = read_key(p, end);
    if (key.empty() || !skip_value(p, end)) return false;
    keys.append(key);
  }
  return p == end;
}

[[gnu::always_inline]] inline bool ShapeCache::fill_with(const Shape& shape, std::string_view payload, const StringCache& kept) {
  const char* p = payload.data() + 4;
  const char* end = payload.data() + payload.size();
  const char* want = shape.keys.data();
  const raw_slots::Slots& slots = scratch_;
  // Written straight into the table; a payload that fails half way sets
  // what it wrote back to nil, so that no string of its own stays there.
  const auto fail = [&slots](std::size_t written) {
    slots.set_nil(kFirstValue, written);
    return false;
  };
  for (std::uint8_t i = 0; i < shape.count; ++i) {
    // The key: its tag, then its length byte and bytes as the shape has
    // them (one compare covers both), then at least a value's tag.
    const std::size_t n = 1u + static_cast<std::uint8_t>(*want);
    if (static_cast<std::size_t>(end - p) < n + 2 || static_cast<std::uint8_t>(*p) != kString ||
        !StringCache::same(std::string_view(p + 1, n), std::string_view(want, n)))
      return fail(i);
    p += 1 + n;
    want += n;
    if (!read_value(p, end, kept, slots, kFirstValue + i)) return fail(i);
  }
  return p == end || fail(shape.count);
}

[[gnu::always_inline]] inline ShapeCache::Match ShapeCache::fill_values(std::string_view payload,
                                                                        const StringCache& kept) {
  const std::uint8_t count = flat_table_keys(payload);
  if (count == 0) return Match::kNotShape;
  if (scratch_) {
    for (const Shape& shape : shapes_) {
      if (shape.count != count || !fill_with(shape, payload, kept)) continue;
      matched_ = &shape;
      return Match::kFilled;
    }
  }
  return Match::kUnknown;
}

ShapeCache::Match ShapeCache::fill(std::string_view payload, const StringCache& kept, const char* from,
                                   const char* topic) {
  const Match m = fill_values(payload, kept);
  if (m == Match::kFilled) {
    scratch_.set_string(1, from);
    scratch_.set_string(2, topic);
  }
  return m;
}

ShapeCache::Match ShapeCache::fill_payload(std::string_view payload, const StringCache& kept) {
  return fill_values(payload, kept);
}

void ShapeCache::clear_scratch() {
  if (scratch_) scratch_.set_nil(1, kScratchSlots - 1);
}

bool ShapeCache::wants_compile(std::string_view payload) {
  if (unavailable_) return false;
  std::string keys;
  std::uint8_t count;
  if (!shape_of(payload, keys, count)) return false;
  for (const Shape& shape : shapes_)
    if (shape.count == count && shape.keys == keys) return false;  // cached: a value was not kept
  if (count == candidate_count_ && keys == candidate_) return true;
  candidate_.swap(keys);
  candidate_count_ = count;
  return false;
}

std::string ShapeCache::constructor_source(const std::string_view* keys, std::size_t n) {
  // (Appends, not a + chain: g++ 12 warns falsely on those, -Wrestrict.)
  std::string locals, slots, fields;
  for (std::size_t i = 0; i < n; ++i) {
    std::string v = "v";
    v += std::to_string(i + 1);
    locals += ", ";
    locals += v;
    slots += ", s[";
    slots += std::to_string(kFirstValue + i);
    slots += ']';
    fields += i ? ", [\"" : "[\"";
    for (unsigned char c : keys[i]) {
      fields += '\\';
      fields += std::to_string(c);
    }
    fields += "\"] = ";
    fields += v;
  }
  std::string nils = "nil, nil";
  for (std::size_t i = 0; i < n; ++i) nils += ", nil";
  // (The values are taken and their slots cleared before the tables are
  // made: fill wrote them raw, and the collector must not find them there.)
  return "local s = ...\n"
         "return function()\n"
         "  local from, topic" + locals + " = s[1], s[2]" + slots + "\n"
         "  s[1], s[2]" + slots + " = " + nils + "\n"
         "  return { from = from, topic = topic, payload = { " + fields + " } }\n"
         "end, function()\n"
         "  local " + locals.substr(2) + " = " + slots.substr(2) + "\n"
         "  " + slots.substr(2) + " = " + nils.substr(10) + "\n"
         "  return { " + fields + " }\n"
         "end\n";
}

int ShapeCache::compile(lua_State* L) {
  auto& self = *static_cast<ShapeCache*>(lua_touserdata(L, 1));
  if (!self.scratch_) {
    lua_createtable(L, static_cast<int>(kScratchSlots - 1), 0);
    const raw_slots::Slots array = raw_slots::Slots::of_table(L, lua_gettop(L), kScratchSlots);
    if (!array) {  // LuaJIT's layout is not the one expected: no shapes
      self.unavailable_ = true;
      return 0;
    }
    const int ref = luaL_ref(L, LUA_REGISTRYINDEX);
    self.scratch_ = array;
    self.scratch_ref_ = ref;
  }
  // The candidate's keys, as views of its bytes (each its length byte first).
  std::string_view keys[kMaxKeys];
  const char* p = self.candidate_.data();
  for (std::uint8_t i = 0; i < self.candidate_count_; ++i) {
    const std::size_t n = static_cast<std::uint8_t>(*p);
    keys[i] = std::string_view(p + 1, n);
    p += 1 + n;
  }
  const std::string source = constructor_source(keys, self.candidate_count_);
  if (luaL_loadbuffer(L, source.data(), source.size(), "=message shape") != 0) return lua_error(L);
  lua_rawgeti(L, LUA_REGISTRYINDEX, self.scratch_ref_);
  lua_call(L, 1, 2);
  const void* payload_ctor = lua_topointer(L, -1);
  const int payload_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  const void* ctor = lua_topointer(L, -1);
  const int ref = luaL_ref(L, LUA_REGISTRYINDEX);  // (its memory error leaves payload_ref taken till the state closes)
  Shape& slot = self.shapes_[self.next_];
  if (slot.ref != LUA_NOREF) luaL_unref(L, LUA_REGISTRYINDEX, slot.ref);
  if (slot.payload_ref != LUA_NOREF) luaL_unref(L, LUA_REGISTRYINDEX, slot.payload_ref);
  slot.keys.swap(self.candidate_);
  slot.count = self.candidate_count_;
  slot.ctor = ctor;
  slot.ref = ref;
  slot.payload_ctor = payload_ctor;
  slot.payload_ref = payload_ref;
  self.next_ = (self.next_ + 1) % kShapes;
  self.candidate_.clear();
  self.candidate_count_ = 0;
  return 0;
}

}  // namespace host::lua
