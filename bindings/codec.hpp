// The value codec: Lua values <-> compact bytes, for messages, spawn
// arguments and results (SPEC section 3). Threads: any; each call works on
// the lua_State it is given.
//
// Allowed: nil, booleans, numbers (integers as zigzag varints, every other
// number as its 8 IEEE bytes, so NaN, +-inf and -0.0 are exact), strings of
// any bytes, and tables of these (a table referenced twice arrives as two
// copies). Refused, naming the path of the offending value: functions,
// userdata, coroutines, tables with cycles, nesting deeper than kMaxDepth.
// The decoder treats its input as untrusted: bad bytes give an error.
#pragma once

#include <string>
#include <string_view>

struct lua_State;

namespace host::lua {

inline constexpr int kMaxDepth = 256;

// Appends the encoding of the n values at stack indices first..first+n-1 to
// out. On failure returns "invalid: cannot send <type> at <path>" (the root
// of the path is `root`, or `root<i>` for the i-th of several values) and
// leaves out unchanged.
std::string encode_values(lua_State* L, int first, int n, std::string& out, const char* root = "value");

class StringCache;

// Pushes the values encoded in bytes; returns how many, or -1 with *error set.
// Short strings come from `strings` when given (see StringCache).
int decode_values(lua_State* L, std::string_view bytes, std::string* error, StringCache* strings = nullptr);

}  // namespace host::lua
