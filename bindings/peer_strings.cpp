// PeerStrings: the last sender's and destination's slots, and the cache.
#include "bindings/peer_strings.hpp"

namespace host::lua {

void push_pid(lua_State* L, const Pid& pid) {
  if (!pid.valid()) {
    lua_pushnil(L);
    return;
  }
  char text[Pid::kMaxText];
  lua_pushlstring(L, text, pid.format(text));
}

void PeerStrings::push_new_sender(lua_State* L, const Pid& from) {
  last_from_ = from;
  if (!from.valid()) {
    lua_pushnil(L);
    last_from_text_ = nullptr;
    return;
  }
  if (cache_) {
    const std::uint32_t slot = sender_slot(from);
    Entry& e = cache_->senders[slot];
    if (e.pid == from) {
      stack_args::push_kept_string(L, e.text, e.ref);
      last_from_text_ = e.text;
    } else {
      push_pid(L, from);
      last_from_text_ = put(L, lua_gettop(L), e, from);
    }
    return;
  }
  push_pid(L, from);
  last_from_text_ = lua_tostring(L, -1);
  lua_pushvalue(L, -1);
  lua_rawseti(L, LUA_REGISTRYINDEX, last_from_ref_);
  note_miss(L);
}

void PeerStrings::remember_dest(lua_State* L, int idx, const char* s, const Pid& pid) {
  last_dest_ = pid;
  last_dest_text_ = s;
  dest_name_version_ = 0;
  if (cache_) {
    // A miss of find: the slot holds another string, or none.
    put(L, idx, cache_->dests[dest_slot(s)], pid);
    return;
  }
  lua_pushvalue(L, idx);
  lua_rawseti(L, LUA_REGISTRYINDEX, last_dest_ref_);
  note_miss(L);
}

void PeerStrings::remember_name(lua_State* L, int idx, const char* s, const Pid& pid, std::uint32_t version) {
  last_dest_ = pid;
  last_dest_text_ = s;
  dest_name_version_ = version;
  // Held in the last destination's slot even once there is a cache (which
  // holds PID strings only, and no longer needs the slot).
  lua_pushvalue(L, idx);
  lua_rawseti(L, LUA_REGISTRYINDEX, last_dest_ref_);
}

const char* PeerStrings::put(lua_State* L, int idx, Entry& entry, const Pid& pid) {
  lua_pushvalue(L, idx);
  if (entry.ref == LUA_NOREF) entry.ref = luaL_ref(L, LUA_REGISTRYINDEX);
  else lua_rawseti(L, LUA_REGISTRYINDEX, entry.ref);
  entry.pid = pid;
  entry.text = lua_tostring(L, idx);
  return entry.text;
}

void PeerStrings::note_miss(lua_State* L) {
  if (++misses_ < kMissesBeforeCache) return;
  cache_ = std::make_unique<Cache>();
  // The last sender and destination go in, as the cache's rule wants (the
  // same string objects: their bytes stay where they were).
  if (last_from_.valid()) {
    lua_rawgeti(L, LUA_REGISTRYINDEX, last_from_ref_);
    put(L, lua_gettop(L), cache_->senders[sender_slot(last_from_)], last_from_);
    lua_pop(L, 1);
  }
  if (last_dest_text_ && dest_name_version_ == 0) {
    lua_rawgeti(L, LUA_REGISTRYINDEX, last_dest_ref_);
    put(L, lua_gettop(L), cache_->dests[dest_slot(last_dest_text_)], last_dest_);
    lua_pop(L, 1);
  }
}

}  // namespace host::lua
