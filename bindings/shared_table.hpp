// require("shared"): the Lua face of host/io/shared_tables.hpp
// (docs/LUA_API.md, shared). Its calls never wait: each is a C function
// that works under one shard's lock, with the value encoded before the
// lock is taken and decoded after it is let go.
#pragma once

struct lua_State;

namespace host::lua {

// Pushes the module's table (a kNative registry line's open).
int open_shared(lua_State* L);

}  // namespace host::lua
