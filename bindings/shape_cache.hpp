// ShapeCache: a constructor in Lua for each small table payload shape a
// process keeps receiving ({ n = i }, { x = 1, y = 2 }: the same string
// keys in the same order), so that a message handed to its waiting task
// (LuaProcess::hand_over) becomes its table in the task's own code, and
// a payload delivered inside a step (a listener's message, one queued in
// the inbox: LuaProcess::push_payload) is made in one call into Lua.
//
// Why. The hand-over made such a payload from C: lua_createtable, each key
// pushed and lua_rawset, for { n = i } a large share
// of a PingPong message's cost (BENCHMARKS.md's source figures). A constructor made for the shape,
//
//   local s = ...                       -- the cache's scratch table
//   return function()
//     local from, topic, v1 = s[1], s[2], s[3]
//     s[1], s[2], s[3] = nil, nil, nil
//     return { from = from, topic = topic, payload = { ["n"] = v1 } }
//   end
//
// copies two templates (LuaJIT's TDUP) and sets their values, in the task
// that receives the message (bindings/inbox.lua's receive calls it when the C
// receive returns nil, the constructor, true). Its allocations happen in
// the resumed task, protected by its resume like any other of its own.
// The same chunk returns a second constructor, of the payload alone
// (`return { ["n"] = v1 }` after taking s[3] and clearing it), which the
// step calls from C where a message is delivered inside its protected
// body: decoding { ref = r, value = v } through the C API there was
// a noticeable share of a request.call (its reply goes to a
// listener; BENCHMARKS.md's source figures).
//
// How. fill() matches a payload against the shapes (at most kShapes, each
// of 1 to kMaxKeys string keys; values nil-free scalars or strings the
// process's StringCache keeps) and writes the message's sender, topic and
// values into the scratch table's array part as raw values (no write
// barrier: each is a number, a boolean, or a string some registry slot
// keeps, and the constructor clears the slots before it allocates). A
// shape is compiled the second time it is seen in a row (compile(), in a
// protected call of the caller's), so that payloads of ever-new shapes
// cost one match each and nothing more. One per process; not thread-safe.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <lua.hpp>

#include "bindings/luajit/raw_slots.hpp"

namespace host::lua {

class StringCache;

class ShapeCache {
 public:
  static constexpr std::size_t kMaxKeys = 4;
  static constexpr std::size_t kShapes = 4;
  // The longest key a shape takes (StringCache's, so that the keys of a
  // hand-over's payloads are the same small words).
  static constexpr std::size_t kMaxKeyLength = 15;

  enum class Match : std::uint8_t {
    kFilled,    // the scratch table holds the message: push constructor() (or payload_constructor())
    kUnknown,   // a payload of a shape not cached (yet): see wants_compile
    kNotShape,  // not a flat table of 1 to kMaxKeys string keys, or a value not kept
  };

  ShapeCache() = default;
  ShapeCache(const ShapeCache&) = delete;
  ShapeCache& operator=(const ShapeCache&) = delete;

  // Matches payload (a message's encoded value) against the cached shapes;
  // on kFilled the constructor to call is constructor() and the scratch
  // table holds from, topic and the values. Allocates nothing.
  Match fill(std::string_view payload, const StringCache& kept, const char* from, const char* topic);
  // fill for the payload alone: on kFilled the scratch table holds the
  // values, and payload_constructor() makes the payload table.
  Match fill_payload(std::string_view payload, const StringCache& kept);
  // The GC objects (Lua functions) of the shape the last fill or
  // fill_payload matched; registry slots keep them (constructor_ref(),
  // payload_constructor_ref()).
  const void* constructor() const { return matched_->ctor; }
  int constructor_ref() const { return matched_->ref; }
  const void* payload_constructor() const { return matched_->payload_ctor; }
  int payload_constructor_ref() const { return matched_->payload_ref; }
  // Sets the scratch table's slots back to nil: for a filled message whose
  // constructor will not run (its strings must not stay there).
  void clear_scratch();

  // After fill said kUnknown: whether this payload's shape is the one the
  // last kUnknown was (seen twice in a row), so that compile() should run
  // now; otherwise it becomes that candidate.
  bool wants_compile(std::string_view payload);
  // Compiles the candidate shape's constructor (and the scratch table, the
  // first time), replacing the oldest shape when all kShapes are taken.
  // A lua_CFunction for lua_cpcall, whose userdata is the cache: it
  // raises on a memory error, with the cache as it was.
  static int compile(lua_State* L);

  // The Lua source of a constructor for these keys (for compile, and for
  // tests): each key's bytes as decimal escapes, so any bytes are safe.
  static std::string constructor_source(const std::string_view* keys, std::size_t n);

 private:
  struct Shape {
    std::string keys;  // each key as its length byte and its bytes, in order
    std::uint8_t count = 0;
    const void* ctor = nullptr;  // the message's constructor
    int ref = LUA_NOREF;
    const void* payload_ctor = nullptr;  // the payload's
    int payload_ref = LUA_NOREF;
  };
  // The key encodings of a flat table payload of 1 to kMaxKeys string keys
  // (each its length byte and bytes), and their count; false for any
  // other payload. Values are skipped, not checked.
  static bool shape_of(std::string_view payload, std::string& keys, std::uint8_t& count);
  bool fill_with(const Shape& shape, std::string_view payload, const StringCache& kept);
  Match fill_values(std::string_view payload, const StringCache& kept);

  std::array<Shape, kShapes> shapes_;
  std::size_t next_ = 0;  // the slot compile() fills next (round-robin)
  std::string candidate_;
  std::uint8_t candidate_count_ = 0;
  raw_slots::Slots scratch_;  // the scratch table's array part: [1] from, [2] topic, [3..] values
  int scratch_ref_ = LUA_NOREF;
  bool unavailable_ = false;  // the scratch table's array part could not be read: no shapes
  const Shape* matched_ = nullptr;
};

}  // namespace host::lua
