// Log fields from a Lua table (log_fields.hpp).
#include "bindings/log_fields.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

namespace host::lua {
namespace {

// Deep enough for any record a script logs; a cycle ends here too.
constexpr int kMaxDepth = 32;

// Lua 5.1's tostring: __tostring, else the value's own text.
std::string to_text(lua_State* L, int index) {
  index = index < 0 ? lua_gettop(L) + index + 1 : index;
  if (luaL_callmeta(L, index, "__tostring")) {
    std::size_t len = 0;
    const char* s = lua_tolstring(L, -1, &len);
    std::string text = s ? std::string(s, len) : std::string("(__tostring returned ") + luaL_typename(L, -1) + ")";
    lua_pop(L, 1);
    return text;
  }
  switch (lua_type(L, index)) {
    case LUA_TNIL: return "nil";
    case LUA_TBOOLEAN: return lua_toboolean(L, index) ? "true" : "false";
    case LUA_TNUMBER:
    case LUA_TSTRING: {
      lua_pushvalue(L, index);  // a copy: lua_tolstring turns a number into a string in place
      std::size_t len = 0;
      const char* s = lua_tolstring(L, -1, &len);
      std::string text(s, len);
      lua_pop(L, 1);
      return text;
    }
    default: {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%s: %p", luaL_typename(L, index), lua_topointer(L, index));
      return buf;
    }
  }
}

using log::append_json_string;

bool append_json_number(lua_Number v, std::string& out) {
  if (!std::isfinite(v)) return false;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.14g", v);  // tostring's digits
  out += buf;
  return true;
}

// The value at `index` as JSON onto `out`; false when it has none.
bool append_json(lua_State* L, int index, int depth, std::string& out) {
  index = index < 0 ? lua_gettop(L) + index + 1 : index;
  switch (lua_type(L, index)) {
    case LUA_TBOOLEAN: out += lua_toboolean(L, index) ? "true" : "false"; return true;
    case LUA_TNUMBER: return append_json_number(lua_tonumber(L, index), out);
    case LUA_TSTRING: {
      std::size_t len = 0;
      const char* s = lua_tolstring(L, index, &len);
      append_json_string(std::string_view(s, len), out);
      return true;
    }
    case LUA_TTABLE: break;
    default: return false;
  }
  if (depth >= kMaxDepth || !lua_checkstack(L, 4)) return false;
  if (luaL_getmetafield(L, index, "__tostring")) {  // the script made it printable: its text, not its insides
    lua_pop(L, 1);
    return false;
  }
  // A sequence 1..n is an array; anything else an object, keys sorted.
  std::vector<std::pair<std::string, int>> keys;  // key text, and for a number key 1..n its position
  std::size_t count = 0;
  bool sequence = true;
  lua_pushnil(L);
  while (lua_next(L, index)) {
    ++count;
    const int kt = lua_type(L, -2);
    if (kt != LUA_TSTRING && kt != LUA_TNUMBER) {
      lua_pop(L, 2);
      return false;
    }
    if (kt == LUA_TNUMBER) {
      const lua_Number k = lua_tonumber(L, -2);
      if (!(k >= 1 && k == std::floor(k) && k <= 1e9)) sequence = false;
    } else {
      sequence = false;
    }
    lua_pop(L, 1);
  }
  if (sequence) {
    // Every key an integer from 1: an array when they are 1..count.
    for (std::size_t i = 1; i <= count; ++i) {
      lua_rawgeti(L, index, static_cast<int>(i));
      const bool present = !lua_isnil(L, -1);
      lua_pop(L, 1);
      if (!present) {
        sequence = false;
        break;
      }
    }
  }
  if (sequence && count > 0) {
    out += '[';
    for (std::size_t i = 1; i <= count; ++i) {
      if (i > 1) out += ',';
      lua_rawgeti(L, index, static_cast<int>(i));
      const bool ok = append_json(L, -1, depth + 1, out);
      lua_pop(L, 1);
      if (!ok) return false;
    }
    out += ']';
    return true;
  }
  std::vector<std::pair<std::string, std::string>> members;
  lua_pushnil(L);
  while (lua_next(L, index)) {
    std::string value;
    if (!append_json(L, -1, depth + 1, value)) {
      lua_pop(L, 2);
      return false;
    }
    members.emplace_back(to_text(L, -2), std::move(value));
    lua_pop(L, 1);
  }
  std::sort(members.begin(), members.end());
  out += '{';
  for (std::size_t i = 0; i < members.size(); ++i) {
    if (i > 0) {
      if (members[i].first == members[i - 1].first) return false;  // 1 and "1": one JSON key
      out += ',';
    }
    append_json_string(members[i].first, out);
    out += ':';
    out += members[i].second;
  }
  out += '}';
  return true;
}

[[noreturn]] void field_error(lua_State* L, int arg, const char* call, const std::string& why) {
  luaL_where(L, 1);
  lua_pushfstring(L, "bad argument #%d to %s (%s)", arg, call, why.c_str());
  lua_concat(L, 2);
  lua_error(L);
  __builtin_unreachable();
}

}  // namespace

int format_arguments(std::string_view format) {
  int n = 0;
  for (std::size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') continue;
    if (i + 1 < format.size() && format[i + 1] == '%') {
      ++i;
      continue;
    }
    ++n;
    // Flags, width, precision, then the conversion (lstrlib's scanformat).
    ++i;
    while (i < format.size() && std::strchr("-+ #0", format[i])) ++i;
    while (i < format.size() && (std::isdigit(static_cast<unsigned char>(format[i])) || format[i] == '.')) ++i;
  }
  return n;
}

void read_log_fields(lua_State* L, int index, int arg, const char* call, std::vector<log::Field>& out) {
  static constexpr std::string_view kReserved[] = {"time", "level", "pid", "module", "message"};
  luaL_checkstack(L, 4, "log fields");
  lua_pushnil(L);
  while (lua_next(L, index)) {
    const int kt = lua_type(L, -2);
    if (kt != LUA_TSTRING && kt != LUA_TNUMBER)
      field_error(L, arg, call, std::string("field keys must be strings or numbers, got ") + luaL_typename(L, -2));
    log::Field f;
    f.key = to_text(L, -2);
    if (std::find(std::begin(kReserved), std::end(kReserved), f.key) != std::end(kReserved))
      field_error(L, arg, call, "field '" + f.key + "' is the entry's own: use another name");
    if (lua_type(L, -1) == LUA_TSTRING) {
      f.value = to_text(L, -1);
    } else if (append_json(L, -1, 0, f.value)) {
      f.is_string = false;
    } else {
      f.value = to_text(L, -1);  // cannot be encoded: its tostring
    }
    out.push_back(std::move(f));
    lua_pop(L, 1);
  }
  std::sort(out.begin(), out.end(), [](const log::Field& a, const log::Field& b) { return a.key < b.key; });
  for (std::size_t i = 1; i < out.size(); ++i)
    if (out[i].key == out[i - 1].key) field_error(L, arg, call, "field '" + out[i].key + "' given twice (as a number and a string)");
}

}  // namespace host::lua
