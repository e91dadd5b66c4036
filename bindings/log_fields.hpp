// The fields of a log entry, from Lua: log.info("text", { user = id })
// (docs/LUA_API.md, log). Which argument is the fields table, and each field as
// the log writes it (host/log.hpp's Field).
// Threads: the calling process's (it reads that process's state).
#pragma once

#include <string_view>
#include <vector>

#include <lua.hpp>

#include "host/log.hpp"

namespace host::lua {

// The number of values the string.format format `format` takes: its
// conversions, but "%%". A malformed one counts as one (string.format
// reports it).
int format_arguments(std::string_view format);

// Reads the table at `index` (argument `arg` of `call`, as "'log.info'")
// into `out`, sorted by key. Keys are strings, or numbers written as
// tostring writes them. A string value is its text; a finite number, a
// boolean, and a table of those (nested up to 32 deep, string or number
// keys, without a __tostring) are JSON values; anything else (a function,
// a cycle, NaN) is written as its tostring. Raises a Lua error at the
// caller's line for a key of another type, a key the entry itself uses
// (time, level, pid, module, message), or two keys that write alike (1
// and "1").
void read_log_fields(lua_State* L, int index, int arg, const char* call, std::vector<log::Field>& out);

}  // namespace host::lua
