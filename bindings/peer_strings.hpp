// PeerStrings: the PID strings of the processes one process talks to, kept
// as Lua strings so that a message's `from` is not formatted and interned
// again for every message, nor a send's destination parsed again for every
// send. Threads: the one stepping the process.
//
// The last sender and the last destination each keep their string in a
// registry slot: a ping-pong partner or a ring node, which hears from one
// process and sends to one, never needs more. A process that talks to many
// (a server, a mall, Big's workers) missed there on most messages, and each
// miss cost the sender's string (to_chars, LuaJIT's hash
// and intern of the string) and a destination's parse (Pid::parse and the
// slot's update; BENCHMARKS.md's ledger, entry 11). After kMissesBeforeCache misses it also gets a cache:
// kSlots senders direct-mapped by their slot index, kSlots destinations
// direct-mapped by their string's address, each entry's string held in a
// registry slot of its own (so an address in the cache always names the
// same text, and a cached sender is one lua_rawgeti,
// where the strings in one Lua table took three calls and
// several times the work: BENCHMARKS.md's source figures): 6 KB of entries and up to 256 registry slots (2 KB of the
// registry's array part) and PID strings kept alive, only in such
// processes.
//
// The last destination may be a registered name instead (remember_name):
// then find does not know it, and find_name does while the names have not
// changed since (NameRegistry::version). Names never go in the cache.
#pragma once

#include <cstdint>
#include <memory>

#include <lua.hpp>

#include "bindings/luajit/stack_args.hpp"
#include "host/pid.hpp"

namespace host::lua {

// Pushes pid's string, or nil for a PID that names no process (the host's).
void push_pid(lua_State* L, const Pid& pid);

class PeerStrings {
 public:
  static constexpr std::uint32_t kSlots = 128;
  static constexpr std::uint32_t kMissesBeforeCache = 64;

  // Sets up the two registry slots; `pin` pops the value on top of L into a
  // slot of the state's life and returns its number (TaskKernel::pin).
  template <typename Pin>
  void init(lua_State* L, Pin&& pin) {
    lua_pushboolean(L, 0);
    last_from_ref_ = pin(L);
    lua_pushboolean(L, 0);
    last_dest_ref_ = pin(L);
  }

  // Pushes the string of a message's sender (nil for the host's, which has
  // no PID), and makes it the last sender. Inline: messages mostly come
  // from the sender of the one before.
  void push_sender(lua_State* L, const Pid& from) {
    if (from == last_from_ && from.valid() && !cache_) stack_args::push_kept_string(L, last_from_text_, last_from_ref_);
    else push_new_sender(L, from);
  }

  // push_sender's string for a sender this knows already (the last one,
  // or one in the cache), its bytes, kept alive by its registry slot; the
  // sender becomes the last one, as with push_sender. nullptr, changing
  // nothing, for any other: making its string is push_sender's. For
  // LuaProcess::hand_over, which may make nothing.
  const char* known_sender(const Pid& from) {
    if (!from.valid()) return nullptr;
    if (!cache_) return from == last_from_ ? last_from_text_ : nullptr;
    const Entry& e = cache_->senders[sender_slot(from)];
    if (!(e.pid == from) || !e.text) return nullptr;
    last_from_ = from;
    last_from_text_ = e.text;
    return e.text;
  }

  // The PID whose string is s (a Lua string's bytes, so the same text is
  // the same address while the string lives), if s is the last sender's,
  // the last destination's (when that is a PID's) or a cached destination's.
  bool find(const char* s, Pid& out) const {
    if (s == last_dest_text_ && dest_name_version_ == 0) {
      out = last_dest_;
      return true;
    }
    if (s == last_from_text_) {
      out = last_from_;
      return true;
    }
    if (cache_) {
      const Entry& d = cache_->dests[dest_slot(s)];
      if (d.text == s) {
        out = d.pid;
        return true;
      }
    }
    return false;
  }

  // A destination find did not know: its string s at stack index idx names
  // pid. It becomes the last destination (and is cached, once there is a
  // cache).
  void remember_dest(lua_State* L, int idx, const char* s, const Pid& pid);

  // The PID of the registered name whose string is s, if it is the last
  // destination's and the names' version is still the one it was looked up
  // with.
  bool find_name(const char* s, std::uint32_t version, Pid& out) const {
    if (s != last_dest_text_ || dest_name_version_ != version) return false;
    out = last_dest_;
    return true;
  }
  // The name at stack index idx (string s) named pid when the names were at
  // `version` (read before the lookup; never 0): it becomes the last
  // destination.
  void remember_name(lua_State* L, int idx, const char* s, const Pid& pid, std::uint32_t version);

  // Starts loading the cache entry of a message's sender without waiting
  // for it, for a step that pushes the sender soon (LuaProcess::Step): in
  // a process that hears from many, the entry's line is mostly evicted, and
  // its load was two thirds of push_new_sender's perf samples in Big.
  void prefetch_sender(const Pid& from) const {
    if (cache_) __builtin_prefetch(&cache_->senders[sender_slot(from)]);
  }

 private:
  // A PID and its string's bytes, which the registry holds at ref (made
  // when the entry is first filled, then reused by every string after).
  struct Entry {
    Pid pid;
    int ref = LUA_NOREF;
    const char* text = nullptr;
  };
  // Once there is a cache, the last sender and the last destination are
  // always in it (only push_new_sender and remember_dest replace entries,
  // and each makes what it puts in the last), so their strings live there
  // and the two registry slots are no longer written.
  struct Cache {
    Entry senders[kSlots];
    Entry dests[kSlots];
  };

  void push_new_sender(lua_State* L, const Pid& from);
  static std::uint32_t sender_slot(const Pid& pid) { return pid.index % kSlots; }
  static std::uint32_t dest_slot(const char* s) {
    const auto a = reinterpret_cast<std::uintptr_t>(s);
    return static_cast<std::uint32_t>((a >> 4) ^ (a >> 11)) % kSlots;
  }
  // Counts a miss; at the kMissesBeforeCache-th makes the cache and puts
  // the last sender and destination in it.
  void note_miss(lua_State* L);
  // Puts the string at stack index idx, with pid, in `entry` (its registry
  // slot); returns the string's bytes.
  static const char* put(lua_State* L, int idx, Entry& entry, const Pid& pid);

  // (Ordered to pack: LuaProcess, which holds this, must stay within 1 KB.)
  Pid last_from_;
  Pid last_dest_;
  int last_from_ref_ = -2;
  int last_dest_ref_ = -2;
  std::uint32_t misses_ = 0;
  std::uint32_t dest_name_version_ = 0;  // the last destination is a name: its version (0: a PID)
  const char* last_from_text_ = nullptr;  // its string's bytes (nullptr: no sender)
  const char* last_dest_text_ = nullptr;
  std::unique_ptr<Cache> cache_;
};

}  // namespace host::lua
