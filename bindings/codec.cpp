// The value codec's encoder and decoder.
#include "bindings/codec.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include <lua.hpp>

#include "bindings/luajit/raw_slots.hpp"
#include "bindings/luajit/seam.hpp"
#include "bindings/luajit/stack_args.hpp"
#include "bindings/luajit/table_walk.hpp"
#include "bindings/string_cache.hpp"
#include "host/error.hpp"

namespace host::lua {
namespace {

bool raw_tables_checked();

template <typename Out>
void put_long_varint(Out& out, std::uint64_t v);

// Appends to a string through a pointer into its buffer, for the table
// walk read from LuaJIT's memory (Encoder::raw_only, table_walk.hpp): std::string's
// push_back, out of line, was a call a byte, and the walk's
// appends most of PingPong's encode of { n = i } (BENCHMARKS.md's source figures). It writes into the
// string's whole capacity (its 15-byte inline buffer for most messages:
// no allocation that the string would not make) and doubles it when full;
// finish() cuts the string to what was written. Only its own calls may
// touch the string meanwhile.
class RawOut {
 public:
  explicit RawOut(std::string& s) : s_(s) {
    const std::size_t size = s_.size();
    s_.resize(s_.capacity());
    p_ = s_.data() + size;
    end_ = s_.data() + s_.size();
  }
  RawOut(const RawOut&) = delete;

  void push_back(char c) {
    if (p_ == end_) [[unlikely]] grow(1);
    *p_++ = c;
  }
  void append(const char* bytes, std::size_t n) {
    if (static_cast<std::size_t>(end_ - p_) < n) [[unlikely]] grow(n);
    if (n <= 8) {  // most keys and short strings: no call to memcpy
      for (std::size_t i = 0; i < n; ++i) p_[i] = bytes[i];
    } else {
      std::memcpy(p_, bytes, n);
    }
    p_ += n;
  }
  // A varint, inline whatever its length (up to 10 bytes). Near the end
  // of the buffer a byte at a time: growing it for room it may not need
  // would move a message that fits the string's inline buffer to the heap.
  void put_varint(std::uint64_t v) {
    if (end_ - p_ >= 10) [[likely]] p_ = write_varint(p_, v);
    else put_long_varint(*this, v);
  }
  std::size_t size() const { return static_cast<std::size_t>(p_ - s_.data()); }
  char& operator[](std::size_t i) { return s_[i]; }
  // std::string's replace, on what was written so far.
  void replace(std::size_t at, std::size_t n, const std::string& bytes) {
    s_.resize(size());
    s_.replace(at, n, bytes);
    reopen(s_.size());
  }
  void finish() { s_.resize(size()); }

 private:
  [[gnu::noinline]] void grow(std::size_t n) {
    const std::size_t size = this->size();
    s_.resize(std::max(size + n, 2 * s_.size()));
    reopen(size);
  }
  void reopen(std::size_t size) {
    s_.resize(std::max(s_.capacity(), size));
    p_ = s_.data() + size;
    end_ = s_.data() + s_.size();
  }

  std::string& s_;
  char* p_;
  char* end_;
};

// The writes below take a std::string, a RawOut or a PtrOut (below).
template <typename Out>
[[gnu::noinline]] void put_long_varint(Out& out, std::uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

// Most counts, lengths and integers sent take one byte: that case inline.
template <typename Out>
inline void put_varint(Out& out, std::uint64_t v) {
  if (v < 0x80) out.push_back(static_cast<char>(v));
  else put_long_varint(out, v);
}
inline void put_varint(RawOut& out, std::uint64_t v) { out.put_varint(v); }

bool is_identifier(const char* s, std::size_t n) {
  if (n == 0 || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  for (std::size_t i = 1; i < n; ++i)
    if (!(std::isalnum(static_cast<unsigned char>(s[i])) || s[i] == '_')) return false;
  return true;
}

// Inline: out of line, its call cost ping-pong's encode of { n = i }
// a call on every message (BENCHMARKS.md's source figures).
template <typename Out>
[[gnu::always_inline]] inline void put_number(Out& out, double d) {
  if (encodes_as_int(d)) {
    out.push_back(kInt);
    put_varint(out, zigzag(static_cast<std::int64_t>(d)));
    return;
  }
  out.push_back(kDouble);
  char b[8];
  std::memcpy(b, &d, 8);
  out.append(b, 8);
}

// Encodes the value at idx if it is of a type with no parts (nil, boolean,
// number, string, the NULL light userdata: `type` is its lua_type); false,
// writing nothing, for any other.
inline bool put_scalar(lua_State* L, int idx, int type, std::string& out) {
  switch (type) {
    case LUA_TLIGHTUSERDATA:
      // Any other pointer means nothing in another process: refused, as
      // userdata (Encoder::value names it).
      if (lua_touserdata(L, idx) != nullptr) return false;
      out.push_back(kNullPointer);
      return true;
    case LUA_TNIL: out.push_back(kNil); return true;
    case LUA_TBOOLEAN: out.push_back(lua_toboolean(L, idx) ? kTrue : kFalse); return true;
    case LUA_TNUMBER: put_number(out, lua_tonumber(L, idx)); return true;
    case LUA_TSTRING: {
      std::size_t n;
      const char* s = lua_tolstring(L, idx, &n);
      out.push_back(kString);
      put_varint(out, n);
      out.append(s, n);
      return true;
    }
    default: return false;
  }
}

// Encodes values; on success it allocates nothing beyond the output. The
// path of an offending value ("value.handler") is only built when encoding
// fails: each table on the way out adds its key, innermost first.
class Encoder {
 public:
  // raw: tables may be read straight from LuaJIT's memory (raw_only).
  Encoder(lua_State* L, std::string& out, bool raw = raw_tables_checked()) : L_(L), out_(out), raw_(raw) {}

  // Encodes the value at absolute index idx (of type `type` when the
  // caller knows it).
  bool value(int idx, int type = LUA_TNONE) {
    if (type == LUA_TNONE) type = lua_type(L_, idx);
    if (put_scalar(L_, idx, type, out_)) return true;
    if (type == LUA_TTABLE) return table(idx);
    if (type == LUA_TUSERDATA && moved_value_hooks.encode && moved_value_hooks.encode(L_, idx, out_)) return true;
    // lua_typename names a cdata "cdata" (LuaJIT's type 10), not "userdata".
    const char* what = type == LUA_TTHREAD ? "coroutine" : lua_typename(L_, type);
    return fail(ErrorKind::Invalid, std::string("cannot send ") + what);
  }

  // The table at idx read straight from LuaJIT's memory alone
  // (table_walk::walk, the same bytes as table()'s), for table() and for
  // its check: false (out_ partly written) at anything but nil, booleans,
  // numbers, strings and such tables, and table() then walks it again
  // through the C API, which names what was wrong. False without the seam.
  bool raw_only([[maybe_unused]] int idx) {
#if HOST_LUAJIT_PRIVATE
    const void* t = stack_args::table(L_, idx);
    if (!t) return false;
    RawOut out(out_);
    RawSink sink{*this, out};
    const bool ok = table_walk::walk(sink, t);
    out.finish();
    return ok;
#else
    return false;
#endif
  }

  // The error of a failed value(), naming the value's path under root.
  std::string error(const std::string& root) const {
    std::string path = root;
    for (auto it = reversed_path_.rbegin(); it != reversed_path_.rend(); ++it) path += *it;
    return make_error(error_kind_, error_ + " at " + path);
  }

 private:
  bool fail(ErrorKind kind, std::string what) {
    error_kind_ = kind;
    error_ = std::move(what);
    return false;
  }

  // One pass of lua_next (no lua_objlen, no second walk of the array):
  // LuaJIT yields the array part first, in order, so the keys 1, 2, ...
  // that come first are the array section; every entry after the first
  // other key goes in the hash section, integer keys included (the
  // receiver gets the same contents). Both counts are known only at the
  // end: one-byte placeholders, widened in the rare count of 128 or more.
  bool table(int idx) {
    if (depth_ == 0 && raw_) {
      const std::size_t mark = out_.size();
      if (raw_only(idx)) return true;
      out_.resize(mark);
    }
    // The root's address only once a nested table asks (in_cycle): a flat
    // table (most payloads) never pays for lua_topointer (a C API call).
    const void* self = nullptr;
    if (depth_ > 0) {
      self = lua_topointer(L_, idx);
      if (in_cycle(self)) return fail(ErrorKind::Invalid, "cannot send a table with a cycle");
    } else {
      root_index_ = idx;
    }
    if (depth_ >= ancestors_.size())
      return fail(ErrorKind::Invalid, "cannot send a table nested deeper than " + std::to_string(kMaxDepth));
    if (!lua_checkstack(L_, 4)) return fail(ErrorKind::Limit, "out of Lua stack");
    ancestors_[depth_++] = self;
    const std::size_t n_at = open_table(out_);
    std::size_t n = 0;
    std::size_t m = 0;
    bool in_array = true;
    lua_pushnil(L_);
    while (lua_next(L_, idx)) {
      const int top = lua_gettop(L_);
      const int key_type = lua_type(L_, top - 1);
      if (in_array && key_type == LUA_TNUMBER && lua_tonumber(L_, top - 1) == static_cast<double>(n + 1)) {
        ++n;
        if (!value(top)) {
          std::string key = "[";  // not "[" + ...: g++ 12 warns falsely (-Wrestrict) on that
          key += std::to_string(n);
          key += ']';
          reversed_path_.push_back(std::move(key));
          lua_pop(L_, 2);
          return false;
        }
        lua_pop(L_, 1);
        continue;
      }
      in_array = false;
      if (!value(top - 1, key_type) || !value(top)) {
        reversed_path_.push_back(key_text(top - 1));
        lua_pop(L_, 2);
        return false;
      }
      lua_pop(L_, 1);
      ++m;
    }
    close_table(out_, n_at, n, m);
    --depth_;
    return true;
  }

#if HOST_LUAJIT_PRIVATE
  // What table_walk::walk hands over, written as table() writes it: a
  // fraction of its instructions, which are mostly the C API's checks of
  // each call (BENCHMARKS.md's ledger, entry 4).
  struct RawSink {
    Encoder& enc;
    RawOut& out;
    // Declines a table nested too deep or met again inside itself.
    bool enter(const void* t, std::size_t depth) {
      if (depth >= enc.ancestors_.size()) return false;
      for (std::size_t i = 0; i < depth; ++i)
        if (enc.ancestors_[i] == t) return false;
      enc.ancestors_[depth] = t;
      return true;
    }
    std::size_t open() { return open_table(out); }
    void close(std::size_t n_at, std::size_t n, std::size_t m) { close_table(out, n_at, n, m); }
    void number(double d) { put_number(out, d); }
    void string(const char* bytes, std::size_t n) {
      out.push_back(kString);
      put_varint(out, n);
      out.append(bytes, n);
    }
    void boolean(bool b) { out.push_back(b ? kTrue : kFalse); }
  };
#endif

  // Whether the table at address self is one of those being encoded; the
  // root's address is taken here, the first time a nested table asks.
  bool in_cycle(const void* self) {
    if (!ancestors_[0]) ancestors_[0] = lua_topointer(L_, root_index_);
    for (std::size_t i = 0; i < depth_; ++i)
      if (ancestors_[i] == self) return true;
    return false;
  }

  // Writes a table's tag and its two counts' one-byte placeholders;
  // returns where the first is (close_table fills them).
  // (Each on out_, or on the RawOut over it that raw_only writes through.)
  template <typename Out>
  static std::size_t open_table(Out& out) {
    out.push_back(kTable);
    const std::size_t at = out.size();
    out.push_back(0);
    out.push_back(0);
    return at;
  }
  // The later count first: widening n's moves m's.
  template <typename Out>
  static void close_table(Out& out, std::size_t n_at, std::size_t n, std::size_t m) {
    put_count(out, n_at + 1, m);
    put_count(out, n_at, n);
  }

  // Writes count into its one-byte placeholder at `at`, widening it where
  // the count takes more bytes (out of line: rare).
  template <typename Out>
  static void put_count(Out& out, std::size_t at, std::size_t count) {
    if (count < 0x80) [[likely]] out[at] = static_cast<char>(count);
    else widen_count(out, at, count);
  }
  template <typename Out>
  [[gnu::noinline]] static void widen_count(Out& out, std::size_t at, std::size_t count) {
    std::string bytes;
    put_varint(bytes, count);
    out.replace(at, 1, bytes);
  }

  // ".name", "[\"odd key\"]", "[3.5]" or "[<boolean key>]".
  std::string key_text(int key_idx) {
    std::string out;
    if (lua_type(L_, key_idx) == LUA_TSTRING) {
      std::size_t n;
      const char* s = lua_tolstring(L_, key_idx, &n);
      if (is_identifier(s, n)) {
        out += '.';
        out.append(s, n);
      } else {
        out += "[\"";
        out.append(s, std::min<std::size_t>(n, 40));
        out += "\"]";
      }
    } else if (lua_type(L_, key_idx) == LUA_TNUMBER) {
      lua_pushvalue(L_, key_idx);
      out += '[';
      out += lua_tostring(L_, -1);
      out += ']';
      lua_pop(L_, 1);
    } else {
      out += "[<";
      out += luaL_typename(L_, key_idx);
      out += " key>]";
    }
    return out;
  }

  lua_State* L_;
  std::string& out_;
  const bool raw_;
  // The tables being encoded, outermost first: their addresses, the root's
  // null until in_cycle needs it (its stack index is root_index_).
  std::array<const void*, kMaxDepth> ancestors_;
  int root_index_ = 0;
  std::size_t depth_ = 0;
  ErrorKind error_kind_ = ErrorKind::Invalid;
  std::string error_;                        // what went wrong, without the path
  std::vector<std::string> reversed_path_;  // the path's keys, innermost first
};

class Decoder {
 public:
  Decoder(lua_State* L, std::string_view in, StringCache* strings)
      : L_(L), strings_(strings), p_(in.data()), end_(in.data() + in.size()) {}

  bool value(int depth) {
    if (p_ >= end_) return fail("truncated");
    const auto tag = static_cast<std::uint8_t>(*p_++);
    bad_key_ = tag == kNil;
    switch (tag) {
      case kNil: lua_pushnil(L_); return true;
      case kFalse: lua_pushboolean(L_, 0); return true;
      case kTrue: lua_pushboolean(L_, 1); return true;
      case kInt: {
        std::uint64_t z;
        if (!varint(z)) return false;
        lua_pushnumber(L_, static_cast<lua_Number>(unzigzag(z)));
        return true;
      }
      case kDouble: {
        if (end_ - p_ < 8) return fail("truncated number");
        double d;
        std::memcpy(&d, p_, 8);
        p_ += 8;
        bad_key_ = std::isnan(d);
        lua_pushnumber(L_, d);
        return true;
      }
      case kString: {
        std::uint64_t n;
        if (!varint(n)) return false;
        if (n > static_cast<std::uint64_t>(end_ - p_)) return fail("truncated string");
        if (strings_) {
          strings_->push(L_, std::string_view(p_, n));
        } else {
          lua_pushlstring(L_, p_, n);
        }
        p_ += n;
        return true;
      }
      case kTable: {
        if (depth >= kMaxDepth) return fail("nested too deep");
        std::uint64_t n, m;
        if (!varint(n) || !varint(m)) return false;
        // Every element takes at least one byte: a count beyond the rest of
        // the input is corrupt (and must not size an allocation).
        std::uint64_t left = static_cast<std::uint64_t>(end_ - p_);
        if (n > left || m > left || n + 2 * m > left) return fail("table size beyond the input");
        // A table takes three slots (itself, a key, a value); at depth 0
        // decode_values has made room for them (n + 4 slots for n values).
        if (depth > 0 && !lua_checkstack(L_, 4))
          return fail("out of Lua stack");
        lua_createtable(L_, static_cast<int>(n), static_cast<int>(m));
        const int t = lua_gettop(L_);
        // Numbers and booleans straight into the array part (nil is there
        // already); the rest through the stack, where an element takes two
        // C API calls and the element's decode (BENCHMARKS.md's source figures).
        const raw_slots::Slots array = n > 0 ? raw_slots::Slots::of_table(L_, t, n + 1) : raw_slots::Slots();
        for (std::uint64_t i = 1; i <= n; ++i) {
          if (array && scalar_into(array, i)) continue;
          if (!value(depth + 1)) return false;
          if (!stack_args::pop_into_array(L_, t, static_cast<int>(i), 1)) lua_rawseti(L_, t, static_cast<int>(i));
        }
        for (std::uint64_t i = 0; i < m; ++i) {
          if (!value(depth + 1)) return false;
          if (bad_key_) return fail("table key is nil or NaN");
          if (!value(depth + 1)) return false;
          lua_rawset(L_, -3);
        }
        bad_key_ = false;  // a table is a valid key, whatever it holds
        return true;
      }
      case kNullPointer:
        lua_pushlightuserdata(L_, nullptr);
        return true;
      case kMoved: {
        std::uint64_t id, n;
        if (!varint(id) || !varint(n)) return false;
        if (n > static_cast<std::uint64_t>(end_ - p_)) return fail("truncated string");
        const std::string_view cls(p_, n);
        p_ += n;
        if (!moved_value_hooks.decode) return fail("a moved value cannot be received here");
        if (!moved_value_hooks.decode(L_, id, cls)) return fail("a moved value could not be made");
        return true;
      }
      default: return fail("unknown tag");
    }
  }
  // Decodes a number, boolean or nil into slot i of array (a new
  // table's array part, nil already) and returns true; false, reading
  // nothing, for any other tag (or bytes that would not decode: value()
  // then says why).
  bool scalar_into(const raw_slots::Slots& array, std::size_t i) {
    if (p_ < end_ && static_cast<std::uint8_t>(*p_) == kNil) {
      ++p_;
      return true;
    }
    return array.read_scalar(i, p_, end_);
  }
  bool at_end() const { return p_ == end_; }
  std::size_t remaining() const { return static_cast<std::size_t>(end_ - p_); }
  bool count(std::uint64_t& n) { return varint(n); }
  const std::string& error() const { return error_; }
  bool fail(const char* why) {
    error_ = make_error(ErrorKind::Invalid, std::string("corrupt value: ") + why);
    return false;
  }

 private:
  bool varint(std::uint64_t& v) {
    switch (read_varint(p_, end_, v)) {
      case Varint::kOk: return true;
      case Varint::kTruncated: return fail("truncated varint");
      case Varint::kTooLong: break;
    }
    return fail("varint too long");
  }

  lua_State* L_;
  StringCache* strings_ = nullptr;
  const char* p_;
  const char* end_;
  bool bad_key_ = false;  // the last value decoded was nil or NaN: no table key
  std::string error_;
};

#if HOST_LUAJIT_PRIVATE
// Tables of the shapes the raw walk meets, made by Lua itself (no library
// needed): array parts with holes and a key 0, hash parts of every key
// type, nesting, a table met twice, keys past the array part, grown
// tables. Small: this runs at every start (the walk's paths themselves are
// tests/test_codec.cpp's to cover).
constexpr const char* kRawCheckTables = R"lua(
local t = {}
t[1] = {}
t[2] = { n = 1 }
t[3] = { 1, 2, 3, "x", true, false, -0.0, 0/0, 1/0, -1/0, -1.5, 2^53, 2^63, -2^70 }
t[4] = { [0] = 1, 2, 3 }
t[5] = { 1, nil, 3, nil, 5 }
t[6] = { a = true, b = false, [1.5] = "f", [-3] = 0/0, [true] = "t", [false] = "", [""] = 0 }
t[7] = { x = { y = { z = "deep", { 1, { 2 } } } } }
t[8] = { 1, 2, x = 3, [10] = 4, [3] = 5 }
local grown = {} for i = 1, 20 do grown[i] = i end for i = 1, 20, 3 do grown[i] = nil end grown.s = "s"
t[9] = grown
local shared = { 1 }
t[10] = { shared, shared, { shared } }
local holes = {} holes[2] = 2 holes[3] = 3
t[11] = holes
return t, { 1, function() end }, { x = { y = {} } }
)lua";

// Whether raw_only, on the seam's reads, gives table()'s bytes: checked
// once on a state of its own, for tables of every shape, with its refusal
// of a function and of a cycle. False where the seam is unavailable.
bool check_raw_tables() {
  if (!seam::checked()) return false;
  const std::unique_ptr<lua_State, decltype(&lua_close)> state(luaL_newstate(), &lua_close);
  lua_State* L = state.get();
  if (!L) return false;
  if (luaL_loadstring(L, kRawCheckTables) != 0 || lua_pcall(L, 0, 3, 0) != 0) return false;
  // The tables: the same bytes both ways.
  for (int i = 1; i <= static_cast<int>(lua_objlen(L, 1)); ++i) {
    lua_rawgeti(L, 1, i);
    const int idx = lua_gettop(L);
    std::string api, raw;
    if (!Encoder(L, api, false).value(idx) || !Encoder(L, raw, false).raw_only(idx) || api != raw) return false;
    lua_pop(L, 1);
  }
  // A function, and a cycle (made here): refused, for table() to name.
  std::string out;
  if (Encoder(L, out, false).raw_only(2)) return false;
  lua_getfield(L, 3, "x");
  lua_getfield(L, -1, "y");
  lua_pushvalue(L, 3);
  lua_setfield(L, -2, "back");
  lua_pop(L, 2);
  out.clear();
  return !Encoder(L, out, false).raw_only(3);
}

// Checked once, as the program starts (as gc_pressure's fields are): a
// function-local static cost its guard's check and a call on every send.
// (stack_args's own check, in another file, may not have run yet; its
// table() then takes the C API's pointer, the same table.)
const bool raw_tables_ok = check_raw_tables();
#else
constexpr bool raw_tables_ok = false;
#endif

bool raw_tables_checked() { return raw_tables_ok; }

// Writes through a pointer into a buffer sized for the worst case: no
// bounds to check (put_small_table's).
struct PtrOut {
  char* p;
  void push_back(char c) { *p++ = c; }
  void append(const char* b, std::size_t n) {
    std::memcpy(p, b, n);
    p += n;
  }
  void put_varint(std::uint64_t v) { p = write_varint(p, v); }
};
inline void put_varint(PtrOut& out, std::uint64_t v) { out.put_varint(v); }

// One value and its count (the encoding of a whole payload) for a small
// flat table: up to kSmallEntries string keys of up to kSmallString
// bytes, with numbers, booleans or such strings as values, its array part
// empty (table_walk::walk_flat). The bytes are raw_only's, written into
// buf (kSmallPayloadBytes, so with no bounds to check): through the
// encoder's setup and RawOut's checked byte writes, PingPong's { n = i }
// took more (BENCHMARKS.md's ledger, entry 4).
// Returns their length; 0 for any other table, or without the seam.
constexpr std::uint32_t kSmallString = 15;
constexpr std::uint32_t kSmallEntries = 8;
std::size_t put_small_table([[maybe_unused]] const void* t, [[maybe_unused]] char* buf) {
#if HOST_LUAJIT_PRIVATE
  // Each entry at most 17 bytes of key and 17 of value (a string's, or a
  // number's tag and 10-byte varint), after the count and the header.
  static_assert(kSmallPayloadBytes >= 4 + kSmallEntries * 2 * (2 + kSmallString));
  struct Sink {
    PtrOut o;
    char m = 0;  // the entries
    void key(const char* bytes, std::size_t n) {
      ++m;
      string(bytes, n);
    }
    void number(double d) { put_number(o, d); }
    void boolean(bool b) { o.push_back(b ? kTrue : kFalse); }
    // A string of up to kSmallString bytes: its tag, its length (one
    // byte) and its bytes.
    void string(const char* bytes, std::size_t n) {
      o.push_back(kString);
      o.push_back(static_cast<char>(n));
      for (std::size_t i = 0; i < n; ++i) o.p[i] = bytes[i];
      o.p += n;
    }
  };
  Sink sink{PtrOut{buf}};
  PtrOut& o = sink.o;
  o.push_back(1);       // the count of values
  o.push_back(kTable);
  o.push_back(0);       // no array section
  char* m_at = o.p++;   // the hash section's count, at most kSmallEntries
  if (!table_walk::walk_flat<kSmallEntries, kSmallString>(sink, t)) return 0;
  *m_at = sink.m;
  return static_cast<std::size_t>(o.p - buf);
#else
  return 0;
#endif
}

// encode_values' general case, with the table walk chosen.
std::string encode_values_through(lua_State* L, int first, int n, std::string& out, const char* root, bool raw) {
  const std::size_t mark = out.size();
  put_varint(out, static_cast<std::uint64_t>(n));
  Encoder enc(L, out, raw);
  for (int i = 0; i < n; ++i) {
    if (!enc.value(first + i)) {
      out.resize(mark);
      return enc.error(root + std::to_string(i + 1));
    }
  }
  return {};
}

}  // namespace

std::string encode_value(lua_State* L, int idx, std::string& out, const char* root) {
  return encode_value(L, idx, lua_type(L, idx), out, root);
}

std::size_t encode_small(lua_State* L, int idx, int type, char* buf) {
  if (type == LUA_TNUMBER) return encode_number(stack_args::number(L, idx), buf);
  // A short string likewise (Chameneos's colours), whatever the compiler
  // inlines of std::string's push_back (with link-time optimisation it
  // became a call a byte).
  if (type == LUA_TSTRING) {
    std::size_t n;
    const char* s = stack_args::string(L, idx, &n);
    if (!s || n > kSmallString) return 0;
    buf[0] = 1;  // the count
    buf[1] = static_cast<char>(kString);
    buf[2] = static_cast<char>(n);  // a one-byte varint
    std::memcpy(buf + 3, s, n);
    return 3 + n;
  }
  if (type == LUA_TTABLE && raw_tables_checked()) {
    const void* t = stack_args::table(L, idx);
    if (t) return put_small_table(t, buf);
  }
  return 0;
}

std::string encode_value(lua_State* L, int idx, int type, std::string& out, const char* root) {
  // One value of no parts, most messages' payload: no encoder to set up.
  if (type == LUA_TNONE) type = LUA_TNIL;
  char buf[kSmallPayloadBytes];
  if (const std::size_t n = encode_small(L, idx, type, buf)) {
    out.append(buf, n);
    return {};
  }
  return encode_value_large(L, idx, type, out, root);
}

std::string encode_value_large(lua_State* L, int idx, int type, std::string& out, const char* root) {
  if (type == LUA_TNONE) type = LUA_TNIL;
  const std::size_t mark = out.size();
  out.push_back(1);  // the count, a one-byte varint
  if (put_scalar(L, idx, type, out)) return {};
  Encoder enc(L, out);
  if (enc.value(idx, type)) return {};
  out.resize(mark);
  return enc.error(root);
}

bool reads_tables_raw() { return raw_tables_checked(); }

std::string encode_values(lua_State* L, int first, int n, std::string& out, const char* root) {
  if (n == 1) return encode_value(L, first, out, root);
  return encode_values_through(L, first, n, out, root, raw_tables_checked());
}

std::string encode_values_through_api(lua_State* L, int first, int n, std::string& out) {
  return encode_values_through(L, first, n, out, "value", false);
}

void push_string(lua_State* L, std::string_view s, StringCache* strings) {
  if (strings) strings->push(L, s);
  else lua_pushlstring(L, s.data(), s.size());
}

int decode_values(lua_State* L, std::string_view bytes, std::string* error, StringCache* strings) {
  const int top = lua_gettop(L);
  Decoder dec(L, bytes, strings);
  std::uint64_t n = 0;
  auto fail = [&](const std::string& why) {
    lua_settop(L, top);
    if (error) *error = why;
    return -1;
  };
  if (!dec.count(n)) return fail(dec.error());
  // Each value takes at least a byte: a count beyond the input is corrupt.
  if (n > dec.remaining() || !lua_checkstack(L, static_cast<int>(n) + 4))
    return fail(make_error(ErrorKind::Invalid, "corrupt value: count beyond the input"));
  for (std::uint64_t i = 0; i < n; ++i)
    if (!dec.value(0)) return fail(dec.error());
  if (!dec.at_end()) return fail(make_error(ErrorKind::Invalid, "corrupt value: trailing bytes"));
  return static_cast<int>(n);
}

std::string encode_strings(std::span<const std::string> values) {
  std::string out;
  put_varint(out, values.size());
  for (const std::string& v : values) {
    out.push_back(kString);
    put_varint(out, v.size());
    out.append(v);
  }
  return out;
}

std::optional<std::string> decode_first_string(std::string_view bytes) {
  const char* p = bytes.data();
  const char* end = p + bytes.size();
  std::uint64_t count = 0, n = 0;
  if (read_varint(p, end, count) != Varint::kOk || count == 0 || p >= end || static_cast<std::uint8_t>(*p) != kString)
    return std::nullopt;
  ++p;
  if (read_varint(p, end, n) != Varint::kOk || n > static_cast<std::uint64_t>(end - p)) return std::nullopt;
  return std::string(p, n);
}

}  // namespace host::lua
