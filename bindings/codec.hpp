// The value codec: Lua values <-> compact bytes, for messages, spawn
// arguments and results (docs/LUA_API.md, Errors, PIDs and messages). Threads: any; each call works on
// the lua_State it is given.
//
// Allowed: nil, booleans, numbers (integers as zigzag varints, every other
// number as its 8 IEEE bytes, so NaN, +-inf and -0.0 are exact), strings of
// any bytes, the NULL light userdata (JSON's null: cjson.null, json.null;
// docs/LUA_API.md, stdlib: json), and tables of these (a table referenced twice arrives as
// two copies; a metatable stays behind). Refused, naming the path of the
// offending value: functions, other userdata, coroutines, tables with
// cycles, nesting deeper than kMaxDepth.
// The decoder treats its input as untrusted: bad bytes give an error.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include <lua.hpp>

#include "host/io/value_format.hpp"

namespace host::lua {

// Appends the encoding of the n values at stack indices first..first+n-1 to
// out. On failure returns "invalid: cannot send <type> at <path>" (the root
// of the path is `root`, or `root<i>` for the i-th of several values) and
// leaves out unchanged.
std::string encode_values(lua_State* L, int first, int n, std::string& out, const char* root = "value");
// The encoding of the strings given, as values (what encode_values makes
// of them, with no Lua state): a process's arguments from C++ (the script
// arguments, the reloader's check).
std::string encode_strings(std::span<const std::string> values);
// The first value of bytes when it is a string (encode_values' bytes, or
// encode_strings'); nullopt for anything else.
std::optional<std::string> decode_first_string(std::string_view bytes);
// The same for the one value at idx, or nil where the stack ends before idx
// (a call's missing argument): what send encodes, without a lua_settop.
std::string encode_value(lua_State* L, int idx, std::string& out, const char* root = "value");
// The same when the caller has the value's type (lua_type(L, idx)) already.
std::string encode_value(lua_State* L, int idx, int type, std::string& out, const char* root = "value");
// encode_value's short cases, into buf: a number, a string of up to 15
// bytes, or a small flat table (up to 8 string keys of up to 15 bytes,
// with numbers, booleans or such strings as values). Returns the bytes'
// length, or 0 for any other value (encode_value's to write). For a send,
// whose payload then goes into the receiver's queue in one copy
// (Scheduler::send_copy) instead of an append and a move.
inline constexpr std::size_t kSmallPayloadBytes = 276;
std::size_t encode_small(lua_State* L, int idx, int type, char* buf);
// encode_value for a value encode_small declined (the rest of its work).
std::string encode_value_large(lua_State* L, int idx, int type, std::string& out, const char* root = "value");

// Whether tables are read straight from LuaJIT's memory (codec.cpp,
// raw_table: far less work than the C API walk; BENCHMARKS.md's ledger, entry 4), which holds where
// a check on a state of the codec's own, made at the first encode, found
// LuaJIT's layout as expected; else every table goes through the C API.
bool reads_tables_raw();
// encode_values through the C API walk alone, whatever reads_tables_raw
// says (the root of a refused value's path is "value<i>"): for tests that
// compare the two walks.
std::string encode_values_through_api(lua_State* L, int first, int n, std::string& out);

class StringCache;

// Pushes the values encoded in bytes; returns how many, or -1 with *error set.
// Short strings come from `strings` when given (see StringCache).
int decode_values(lua_State* L, std::string_view bytes, std::string* error, StringCache* strings = nullptr);

// Pushes s, from `strings` when given: out of line, so that the cache's
// lookup is not inlined into every caller of push_simple_value (inlined
// there too, it cost the topic's lookup in deliver_events a call). The
// decoder keeps the lookup inline: through this call, PingPong's table key
// cost more (BENCHMARKS.md's source figures).
void push_string(lua_State* L, std::string_view s, StringCache* strings);

// Values that move between processes instead of being copied
// (docs/LUA_API.md, socket: a socket in a message or spawn arguments): the encoder meets
// them as userdata, which it otherwise refuses, and the decoder as kMoved,
// followed by the value's id (a varint) and its class (a string). Set
// once by the bindings (LuaRuntime); until then both refuse.
struct MovedValueHooks {
  // Writes the userdata at idx (kMoved, id, class) and returns true, or
  // returns false, writing nothing, when it is not a value that moves.
  bool (*encode)(lua_State* L, int idx, std::string& out) = nullptr;
  // Pushes the receiving process's object for the moved value; false,
  // nothing pushed, when it cannot be made here.
  bool (*decode)(lua_State* L, std::uint64_t id, std::string_view cls) = nullptr;
};
inline MovedValueHooks moved_value_hooks;

// The most common message payloads without the decoder: when bytes encode
// one value that is nil, a boolean, a number or a string shorter than 128
// bytes, pushes it (the caller has a stack slot free) and returns true;
// else pushes nothing and returns false, and decode_values has the last
// word, errors included. Inline: a payload it declines (a table) pays a
// few compares, not a call. A string is pushed by push_str(L, bytes),
// which may decline it too (returning false, pushing nothing): see
// push_simple_value's two uses of it.
template <typename PushString>
inline bool push_simple_value_with(lua_State* L, std::string_view bytes, PushString&& push_str) {
  if (bytes.size() < 2 || bytes[0] != 1) return false;
  const auto tag = static_cast<std::uint8_t>(bytes[1]);
  if (tag >= kTable) return false;
  switch (tag) {
    case kNil:
    case kFalse:
    case kTrue:
      if (bytes.size() != 2) return false;
      if (tag == kNil) lua_pushnil(L);
      else lua_pushboolean(L, tag == kTrue);
      return true;
    case kInt: {
      // A zigzag varint that ends exactly where the bytes do.
      const char* p = bytes.data() + 2;
      const char* end = bytes.data() + bytes.size();
      std::uint64_t z;
      if (read_varint(p, end, z) != Varint::kOk || p != end) return false;
      lua_pushnumber(L, static_cast<lua_Number>(unzigzag(z)));
      return true;
    }
    case kDouble: {
      if (bytes.size() != 10) return false;
      double d;
      std::memcpy(&d, bytes.data() + 2, 8);
      lua_pushnumber(L, d);
      return true;
    }
    case kString: {
      std::string_view s;
      return short_string_value(bytes, &s) && push_str(L, s);
    }
    default: return false;
  }
}

// push_simple_value_with any string, from `strings` when given.
inline bool push_simple_value(lua_State* L, std::string_view bytes, StringCache* strings) {
  return push_simple_value_with(L, bytes, [strings](lua_State* S, std::string_view s) {
    push_string(S, s, strings);
    return true;
  });
}

}  // namespace host::lua
