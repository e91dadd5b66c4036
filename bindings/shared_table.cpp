#include "bindings/shared_table.hpp"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include <lua.hpp>

#include "bindings/codec.hpp"
#include "host/io/shared_tables.hpp"

namespace host::lua {

namespace {

using io::SharedTable;
using Status = SharedTable::Status;

// The most a thread's value buffer keeps between calls.
constexpr std::size_t kKeptBuffer = std::size_t{64} << 10;

// Each method is a closure over its table's pointer (upvalue 1), so that a
// call finds the table without a lookup; self is only checked.
SharedTable* table_of(lua_State* L) {
  return static_cast<SharedTable*>(lua_touserdata(L, lua_upvalueindex(1)));
}

void check_self(lua_State* L) {
  if (!lua_istable(L, 1)) luaL_error(L, "invalid: call a shared table's methods with ':' (t:get(key))");
}

// A key's bytes: a type byte, then a string's bytes or a number's 8, so
// that 1 and "1" are two keys. -0.0 is 0 as it is for a Lua table's key.
// Reused per thread: a call allocates nothing for its key.
std::string& key_bytes(lua_State* L, int idx) {
  thread_local std::string key;
  key.clear();
  const int type = lua_type(L, idx);
  if (type == LUA_TSTRING) {
    std::size_t n;
    const char* s = lua_tolstring(L, idx, &n);
    key.push_back('s');
    key.append(s, n);
  } else if (type == LUA_TNUMBER) {
    double d = lua_tonumber(L, idx);
    if (std::isnan(d)) luaL_argerror(L, idx, "key is NaN");
    if (d == 0) d = 0;
    char buf[8];
    std::memcpy(buf, &d, 8);
    key.push_back('n');
    key.append(buf, 8);
  } else {
    luaL_argerror(L, idx, lua_pushfstring(L, "key: a string or a number expected, got %s", luaL_typename(L, idx)));
  }
  return key;
}

void push_key(lua_State* L, const std::string& key) {
  if (key[0] == 's') {
    lua_pushlstring(L, key.data() + 1, key.size() - 1);
  } else {
    double d;
    std::memcpy(&d, key.data() + 1, 8);
    lua_pushnumber(L, d);
  }
}

// An optional number argument (ttl, init, limit): `dflt` when absent.
double opt_number(lua_State* L, int idx, const char* what, double dflt) {
  const int type = lua_type(L, idx);
  if (type == LUA_TNONE || type == LUA_TNIL) return dflt;
  if (type != LUA_TNUMBER)
    luaL_argerror(L, idx, lua_pushfstring(L, "%s: a number expected, got %s", what, luaL_typename(L, idx)));
  return lua_tonumber(L, idx);
}

std::string& encoded(lua_State* L, int idx, std::string& out) {
  out.clear();
  std::string error = encode_value(L, idx, out, "value");
  if (!error.empty()) luaL_error(L, "%s", error.c_str());
  return out;
}

int fail(lua_State* L, const char* why) {
  lua_pushnil(L);
  lua_pushstring(L, why);
  return 2;
}

int answer(lua_State* L, Status st, const SharedTable* t) {
  switch (st) {
    case Status::kOk: lua_pushboolean(L, 1); return 1;
    case Status::kExists: return fail(L, "exists");
    case Status::kNotFound: return fail(L, "not_found");
    case Status::kChanged: return fail(L, "changed");
    case Status::kNotNumber: return fail(L, "invalid: the value is not a number");
    case Status::kTooLarge:
      lua_pushnil(L);
      lua_pushfstring(L, "limit: the entry is larger than the table allows (%d bytes)",
                      static_cast<int>(t->entry_limit()));
      return 2;
  }
  return 0;
}

int push_value(lua_State* L, std::string_view bytes) {
  if (push_simple_value(L, bytes, nullptr)) return 1;
  std::string error;
  const int n = decode_values(L, bytes, &error);
  if (n != 1) luaL_error(L, "shared: a stored value did not decode: %s", error.c_str());
  return 1;
}

int m_get(lua_State* L) {
  check_self(L);
  SharedTable* t = table_of(L);
  const std::string& key = key_bytes(L, 2);
  thread_local std::string value;
  if (!t->get(key, value)) {
    lua_pushnil(L);
    return 1;
  }
  push_value(L, value);
  // The buffer is the thread's for every table: one large value read
  // once is not kept for the thread's life.
  if (value.capacity() > kKeptBuffer) std::string().swap(value);
  return 1;
}

int store(lua_State* L, SharedTable::Mode mode) {
  check_self(L);
  SharedTable* t = table_of(L);
  thread_local std::string value;
  encoded(L, 3, value);  // before the key: its buffer is the thread's
  const double ttl = opt_number(L, 4, "ttl", 0);
  const std::string& key = key_bytes(L, 2);
  const Status st = t->store(key, value, ttl, mode);
  if (value.capacity() > kKeptBuffer) std::string().swap(value);
  return answer(L, st, t);
}

int m_set(lua_State* L) {
  if (lua_isnoneornil(L, 3)) {  // set(key, nil) removes the key, as a Lua table's assignment would
    check_self(L);
    table_of(L)->erase(key_bytes(L, 2));
    lua_pushboolean(L, 1);
    return 1;
  }
  return store(L, SharedTable::Mode::kSet);
}
int m_add(lua_State* L) { return store(L, SharedTable::Mode::kAdd); }
int m_replace(lua_State* L) { return store(L, SharedTable::Mode::kReplace); }

int m_delete(lua_State* L) {
  check_self(L);
  table_of(L)->erase(key_bytes(L, 2));
  lua_pushboolean(L, 1);
  return 1;
}

int m_incr(lua_State* L) {
  check_self(L);
  SharedTable* t = table_of(L);
  if (lua_type(L, 3) != LUA_TNUMBER)
    luaL_argerror(L, 3, lua_pushfstring(L, "n: a number expected, got %s", luaL_typename(L, 3)));
  const double n = lua_tonumber(L, 3);
  std::optional<double> init;
  if (!lua_isnoneornil(L, 4)) init = opt_number(L, 4, "init", 0);
  const double ttl = opt_number(L, 5, "ttl", 0);
  const std::string& key = key_bytes(L, 2);
  double result = 0;
  const Status st = t->incr(key, n, init, ttl, &result);
  if (st != Status::kOk) return answer(L, st, t);
  lua_pushnumber(L, result);
  return 1;
}

int m_cas(lua_State* L) {
  check_self(L);
  SharedTable* t = table_of(L);
  thread_local std::string old_value, new_value;
  encoded(L, 3, old_value);
  encoded(L, 4, new_value);
  const std::string& key = key_bytes(L, 2);
  return answer(L, t->cas(key, old_value, new_value), t);
}

int m_keys(lua_State* L) {
  check_self(L);
  const double limit = opt_number(L, 2, "limit", 0);
  if (limit < 0) luaL_argerror(L, 2, "limit: must not be negative");
  const auto keys = table_of(L)->keys(static_cast<std::size_t>(limit));
  lua_createtable(L, static_cast<int>(keys.size()), 0);
  for (std::size_t i = 0; i < keys.size(); ++i) {
    push_key(L, keys[i]);
    lua_rawseti(L, -2, static_cast<int>(i + 1));
  }
  return 1;
}

int m_size(lua_State* L) {
  check_self(L);
  lua_pushnumber(L, static_cast<double>(table_of(L)->size()));
  return 1;
}

int m_flush(lua_State* L) {
  check_self(L);
  table_of(L)->flush();
  lua_pushboolean(L, 1);
  return 1;
}

// max_bytes: a positive whole number, or a string of one with a K, M or
// G suffix (powers of 1024).
std::size_t max_bytes_of(lua_State* L, int idx) {
  double n = 0;
  if (lua_type(L, idx) == LUA_TNUMBER) {
    n = lua_tonumber(L, idx);
  } else if (lua_type(L, idx) == LUA_TSTRING) {
    const char* s = lua_tostring(L, idx);
    char* end = nullptr;
    n = std::strtod(s, &end);
    double unit = 1;
    if (end && (*end == 'K' || *end == 'k')) unit = 1024.0, ++end;
    else if (end && (*end == 'M' || *end == 'm')) unit = 1024.0 * 1024, ++end;
    else if (end && (*end == 'G' || *end == 'g')) unit = 1024.0 * 1024 * 1024, ++end;
    if (end == s || *end != '\0') luaL_error(L, "invalid: max_bytes '%s' is not a size (like 64K, 16M, 1G)", s);
    n *= unit;
  } else {
    luaL_error(L, "invalid: max_bytes must be a number or a string like '16M', got %s", luaL_typename(L, idx));
  }
  if (!(n >= 1) || n > 1e15 || n != std::floor(n))
    luaL_error(L, "invalid: max_bytes must be a positive whole number of bytes");
  return static_cast<std::size_t>(n);
}

int shared_table(lua_State* L) {
  if (lua_type(L, 1) != LUA_TSTRING)
    luaL_argerror(L, 1, lua_pushfstring(L, "name: a string expected, got %s", luaL_typename(L, 1)));
  std::optional<std::size_t> max_bytes;
  if (!lua_isnoneornil(L, 2)) {
    luaL_checktype(L, 2, LUA_TTABLE);
    lua_pushnil(L);
    while (lua_next(L, 2)) {
      lua_pop(L, 1);
      if (lua_type(L, -1) != LUA_TSTRING || std::strcmp(lua_tostring(L, -1), "max_bytes") != 0) {
        const char* option = lua_type(L, -1) == LUA_TSTRING || lua_type(L, -1) == LUA_TNUMBER
                                 ? lua_tostring(L, -1)  // a number key turns into a string here, as the error ends the walk
                                 : luaL_typename(L, -1);
        luaL_error(L, "invalid: unknown option '%s'", option);
      }
    }
    lua_getfield(L, 2, "max_bytes");
    if (!lua_isnil(L, -1)) max_bytes = max_bytes_of(L, lua_gettop(L));
    lua_pop(L, 1);
  }
  std::size_t n;
  const char* name = lua_tolstring(L, 1, &n);
  std::string error;
  SharedTable* t = io::SharedTables::instance().open(std::string_view(name, n), max_bytes, &error);
  if (!t) return fail(L, error.c_str());
  static const luaL_Reg methods[] = {
      {"get", m_get},       {"set", m_set},   {"add", m_add},   {"replace", m_replace},
      {"delete", m_delete}, {"incr", m_incr}, {"cas", m_cas},   {"keys", m_keys},
      {"size", m_size},     {"flush", m_flush}, {nullptr, nullptr}};
  lua_createtable(L, 0, 11);
  for (const luaL_Reg* r = methods; r->name; ++r) {
    lua_pushlightuserdata(L, t);
    lua_pushcclosure(L, r->func, 1);
    lua_setfield(L, -2, r->name);
  }
  lua_pushvalue(L, 1);
  lua_setfield(L, -2, "name");
  return 1;
}

}  // namespace

int open_shared(lua_State* L) {
  lua_createtable(L, 0, 1);
  lua_pushcfunction(L, shared_table);
  lua_setfield(L, -2, "table");
  return 1;
}

}  // namespace host::lua
