// The value codec's encoder and decoder.
#include "bindings/codec.hpp"

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include <lua.hpp>

#include "bindings/string_cache.hpp"
#include "host/error.hpp"

namespace host::lua {
namespace {

void put_long_varint(std::string& out, std::uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

// Most counts, lengths and integers sent take one byte: that case inline.
inline void put_varint(std::string& out, std::uint64_t v) {
  if (v < 0x80) out.push_back(static_cast<char>(v));
  else put_long_varint(out, v);
}

bool is_identifier(const char* s, std::size_t n) {
  if (n == 0 || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  for (std::size_t i = 1; i < n; ++i)
    if (!(std::isalnum(static_cast<unsigned char>(s[i])) || s[i] == '_')) return false;
  return true;
}

// Inline: out of line, its call cost ping-pong's encode of { n = i } 15
// instructions a message (callgrind).
[[gnu::always_inline]] inline void put_number(std::string& out, double d) {
  if (d >= -9.2233720368547758e18 && d < 9.2233720368547758e18 && std::floor(d) == d &&
      !(d == 0 && std::signbit(d))) {
    auto i = static_cast<std::int64_t>(d);
    out.push_back(kInt);
    put_varint(out, (static_cast<std::uint64_t>(i) << 1) ^ static_cast<std::uint64_t>(i >> 63));
    return;
  }
  out.push_back(kDouble);
  char b[8];
  std::memcpy(b, &d, 8);
  out.append(b, 8);
}

// Encodes the value at idx if it is of a type with no parts (nil, boolean,
// number, string: `type` is its lua_type); false, writing nothing, for any
// other.
inline bool put_scalar(lua_State* L, int idx, int type, std::string& out) {
  switch (type) {
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
  Encoder(lua_State* L, std::string& out) : L_(L), out_(out) {}

  // Encodes the value at absolute index idx (of type `type` when the
  // caller knows it).
  bool value(int idx, int type = LUA_TNONE) {
    if (type == LUA_TNONE) type = lua_type(L_, idx);
    if (put_scalar(L_, idx, type, out_)) return true;
    if (type == LUA_TTABLE) return table(idx);
    const char* what = type == LUA_TTHREAD ? "coroutine" : type == LUA_TFUNCTION ? "function" : "userdata";
    return fail(ErrorKind::Invalid, std::string("cannot send ") + what);
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
    // The root's address only once a nested table asks (in_cycle): a flat
    // table (most payloads) never pays for lua_topointer (30 instructions).
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
    out_.push_back(kTable);
    const std::size_t n_at = out_.size();
    out_.push_back(0);
    const std::size_t m_at = out_.size();
    out_.push_back(0);
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
    put_count(m_at, m);  // the later one first: widening n's moves m's
    put_count(n_at, n);
    --depth_;
    return true;
  }

  // Whether the table at address self is one of those being encoded; the
  // root's address is taken here, the first time a nested table asks.
  bool in_cycle(const void* self) {
    if (!ancestors_[0]) ancestors_[0] = lua_topointer(L_, root_index_);
    for (std::size_t i = 0; i < depth_; ++i)
      if (ancestors_[i] == self) return true;
    return false;
  }

  // Writes count into its one-byte placeholder at `at`, widening it where
  // the count takes more bytes (out of line: rare).
  void put_count(std::size_t at, std::size_t count) {
    if (count < 0x80) [[likely]] out_[at] = static_cast<char>(count);
    else widen_count(at, count);
  }
  [[gnu::noinline]] void widen_count(std::size_t at, std::size_t count) {
    std::string bytes;
    put_varint(bytes, count);
    out_.replace(at, 1, bytes);
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
        if (strings_) strings_->push(L_, std::string_view(p_, n));
        else lua_pushlstring(L_, p_, n);
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
        if (depth > 0 && !lua_checkstack(L_, 4)) return fail("out of Lua stack");
        lua_createtable(L_, static_cast<int>(n), static_cast<int>(m));
        for (std::uint64_t i = 1; i <= n; ++i) {
          if (!value(depth + 1)) return false;
          lua_rawseti(L_, -2, static_cast<int>(i));
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
      default: return fail("unknown tag");
    }
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
  StringCache* strings_;
  const char* p_;
  const char* end_;
  bool bad_key_ = false;  // the last value decoded was nil or NaN: no table key
  std::string error_;
};

}  // namespace

std::string encode_value(lua_State* L, int idx, std::string& out, const char* root) {
  return encode_value(L, idx, lua_type(L, idx), out, root);
}

std::string encode_value(lua_State* L, int idx, int type, std::string& out, const char* root) {
  // One value of no parts, most messages' payload: no encoder to set up.
  if (type == LUA_TNONE) type = LUA_TNIL;
  const std::size_t mark = out.size();
  out.push_back(1);  // the count, a one-byte varint
  if (put_scalar(L, idx, type, out)) return {};
  Encoder enc(L, out);
  if (enc.value(idx, type)) return {};
  out.resize(mark);
  return enc.error(root);
}

std::string encode_values(lua_State* L, int first, int n, std::string& out, const char* root) {
  if (n == 1) return encode_value(L, first, out, root);
  const std::size_t mark = out.size();
  put_varint(out, static_cast<std::uint64_t>(n));
  Encoder enc(L, out);
  for (int i = 0; i < n; ++i) {
    if (!enc.value(first + i)) {
      out.resize(mark);
      return enc.error(root + std::to_string(i + 1));
    }
  }
  return {};
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

}  // namespace host::lua
