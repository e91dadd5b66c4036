// A step's events into the Lua state, by the paths of docs/ARCHITECTURE.md
// ("The message path", its table, in the order tried): a lone message
// handed to the task that waits for it (hand_over outside the step's
// protected call, inside the LuaJIT seam; hand_over_inside as that call's
// first act), runs of messages appended to the inbox (queue_run), and
// every other message to TaskKernel::message; completions and lifecycle
// events to the kernel too.
// Threads: the one running the process.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include <lua.hpp>

#include "bindings/codec.hpp"
#include "bindings/lua_process_internal.hpp"
#include "bindings/luajit/stack_args.hpp"
#include "host/cluster/buffer_pool.hpp"
#include "host/assert.hpp"
#include "host/log.hpp"

namespace host::lua {

namespace {
[[gnu::cold, gnu::noinline]] void log_dropped(const Event& ev, const std::string& err) {
  log::logger().error("message from {} on topic '{}' dropped: {}", ev.from.to_string(), ev.topic, err);
}
}  // namespace

// On the path of every message: the rare failure's logging is out of line.
// Both inlined into their callers (deliver_events, queue_run): out of line
// they cost every message a call and its register saves
// (BENCHMARKS.md's source figures).
[[gnu::always_inline]] inline bool LuaProcess::push_payload(lua_State* L, Event& ev) {
  // No bytes: nil (what send writes for a nil payload, and what a native
  // sender's empty payload reads as).
  if (ev.payload.empty()) {
    lua_pushnil(L);
    return true;
  }
  if (push_simple_value(L, ev.payload, &received_strings_)) return true;
  if (push_shaped_payload(L, ev.payload)) return true;
  std::string err;
  if (push_one_value(L, ev.payload, &err, &received_strings_)) {
    // A large payload is dead once decoded: its buffer goes back for the
    // node's next large message (one put together from parts is a kept
    // buffer: host/cluster/buffer_pool.hpp). Only on the decoder's path:
    // the inline paths above take no payload this large.
    if (ev.payload.size() >= cluster::kPooledMinBytes) [[unlikely]]
      cluster::give_back(std::move(ev.payload));
    return true;
  }
  log_dropped(ev, err);
  return false;
}

[[gnu::always_inline]] inline bool LuaProcess::push_message(lua_State* L, Event& ev) {
  peers_.push_sender(L, ev.from);
  received_strings_.push_topic(L, ev.topic);
  if (push_payload(L, ev)) return true;
  lua_pop(L, 2);
  return false;
}

[[gnu::noinline]] void LuaProcess::queue_run(lua_State* L, std::span<Event> run) {
  const int base = lua_gettop(L);
  kernel_.begin_queue(L, static_cast<int>(run.size()));
  // A message from the same sender on the same topic as the one before
  // (a producer's stream) takes that one's from and topic strings again,
  // copied on the stack, instead of finding them (the sender's registry
  // slot, the topic's cache), a cost Counting's consumer paid on every
  // message (BENCHMARKS.md's source figures). While the kernel takes each message off the stack, the two
  // are kept in two slots of their own.
  const bool popped = kernel_.queue_pops();
  int kept = 0;
  if (popped) {
    lua_pushnil(L);
    lua_pushnil(L);
    kept = lua_gettop(L) - 1;
  }
  const Event* prev = nullptr;  // the last message pushed
  int n = 0;
  for (Event& ev : run) {
    if (prev && ev.from == prev->from && StringCache::same(ev.topic, prev->topic)) {
      if (popped) {
        lua_pushvalue(L, kept);
        lua_pushvalue(L, kept + 1);
      } else {  // the one before is on top: from, topic, value
        lua_pushvalue(L, -3);
        lua_pushvalue(L, -3);
      }
      if (!push_payload(L, ev)) {
        lua_pop(L, 2);
        continue;
      }
    } else {
      if (!push_message(L, ev)) continue;
      if (popped) {
        lua_pushvalue(L, -3);
        lua_replace(L, kept);
        lua_pushvalue(L, -2);
        lua_replace(L, kept + 1);
      }
    }
    prev = &ev;
    kernel_.queue_pushed(L);
    ++n;
  }
  kernel_.end_queue(L, base, n);
}

namespace {
constexpr std::size_t kMaxQueueRun = 1024;
}  // namespace

// Hands each event to the kernel. A message whose payload cannot be decoded
// is logged and skipped.
void LuaProcess::deliver_events(lua_State* L, std::span<Event> events) {
  using Name = TaskKernel::EventName;
  std::size_t end = 0;  // where the run of messages from i ends
  for (std::size_t i = 0; i < events.size(); ++i) {
    Event& ev = events[i];
    if (end <= i)
      for (end = i; end < events.size() && events[end].kind == EventKind::Message;) ++end;
    // Two or more messages in a row that nobody waits for go to the end of
    // the inbox's buffer in one call to Lua (not worth its table of
    // arguments for one): appending changes nothing that decides where a
    // message goes. Asked again at each message handed over singly: a
    // parked task takes a run's first message, and the rest may then queue.
    // A run goes at most kMaxQueueRun at a time: an inbox of message
    // tables takes a run as the arguments of one call (TaskKernel::
    // end_queue), three stack slots a message, and a step that delivers
    // all its events at once (its task yielded) could bring tens of
    // thousands: past LuaJIT's stack limit, which failed the process.
    if (end - i >= 2 && kernel_.queues_directly(L)) {
      const std::size_t stop = std::min(end, i + kMaxQueueRun);
      queue_run(L, events.subspan(i, stop - i));
      i = stop - 1;
      continue;
    }
    switch (ev.kind) {
      case EventKind::Message:
        if (push_message(L, ev)) kernel_.message(L);
        break;
      case EventKind::YieldComplete:
        if (TaskKernel::is_call_tag(ev.tag)) {
          if (io_waits_ && io_wait_completed(L, ev)) break;
          kernel_.complete_call(L, ev.tag, ev.failed, ev.payload);
          break;
        }
        lua_pushnumber(L, static_cast<lua_Number>(ev.tag));
        if (!ev.failed) lua_pushnil(L);
        else lua_pushlstring(L, ev.payload.data(), ev.payload.size());
        kernel_.complete(L);
        break;
      case EventKind::Cancel:
        push_pid(L, ev.from);
        if (ev.tag != 1 || !push_payload(L, ev)) lua_pushlstring(L, ev.payload.data(), ev.payload.size());
        kernel_.event(L, Name::cancel, {Name::from, Name::reason});
        break;
      case EventKind::Exit: {
        // An exit ends its monitor. One already on its way when unmonitor or
        // unwatch dropped the monitor is dropped too: as with Erlang's
        // demonitor, none comes after.
        // A monitor by { name, node } is kept under its node's key (no
        // PID): the exit of the process the name found carries that
        // process's PID, which the second look finds under the key.
        if (!forget_monitor(ev.from, ev.tag) && !forget_monitor(Pid{ev.from.node, 0, 0}, ev.tag)) break;
        // A noproc or noconnection exit of a monitor by name names no
        // process: no `from`.
        if (ev.from.valid()) push_pid(L, ev.from);
        else lua_pushnil(L);
        const bool failed = ev.failed;
        if (failed) {
          lua_pushlstring(L, ev.payload.data(), ev.payload.size());
        } else {
          std::string err;
          // No result bytes, or bad ones: the result is nil.
          if (ev.payload.empty() || !push_one_value(L, ev.payload, &err)) lua_pushnil(L);
        }
        kernel_.event(L, Name::exit, {Name::from, failed ? Name::error : Name::result}, static_cast<double>(ev.tag));
        break;
      }
      case EventKind::Reload: {
        // Also into require("host.reloaded")'s set, when the process asked
        // for it: its code looks there between two pieces of work, without
        // reading its events (an HTTP connection between requests).
        lua_getfield(L, LUA_REGISTRYINDEX, kReloadedKey);
        const int fresh = lua_istable(L, -1) ? lua_gettop(L) : 0;
        lua_newtable(L);
        int i = 0;
        std::size_t start = 0;
        while (start < ev.payload.size()) {
          std::size_t end = ev.payload.find('\n', start);
          if (end == std::string::npos) end = ev.payload.size();
          lua_pushlstring(L, ev.payload.data() + start, end - start);
          if (fresh) {
            lua_pushvalue(L, -1);
            lua_pushboolean(L, 1);
            lua_rawset(L, fresh);
          }
          lua_rawseti(L, -2, ++i);
          start = end + 1;
        }
        lua_remove(L, -2);  // the set, or nil
        kernel_.event(L, Name::reload, {Name::modules});
        break;
      }
      case EventKind::LinkDown:
        push_pid(L, ev.from);
        lua_pushlstring(L, ev.payload.data(), ev.payload.size());
        kernel_.event(L, Name::link_down, {Name::from, Name::error});
        break;
      case EventKind::Node:  // process.monitor_node's
        lua_pushlstring(L, ev.payload.data(), ev.payload.size());
        kernel_.event(L, ev.tag ? Name::nodeup : Name::nodedown, {Name::node});
        break;
    }
  }
}

bool LuaProcess::may_hand_over(const std::string& payload) { return payload.empty() || payload.size() >= 2; }

bool LuaProcess::hand_over(const Event& ev) {
  // Three slots, so the pushes below never grow the stack (an
  // allocation); has_room is false without the seam.
  lua_State* co = kernel_.raw_receiver();
  if (!co || !stack_args::has_room(co, 3)) return false;
  check_handed_to(co);
  const char* from = peers_.known_sender(ev.from);  // nullptr for the host's (inbox.lua's receive needs a sender)
  if (!from) return false;
  const char* topic = received_strings_.find_topic(ev.topic);
  if (!topic) return false;
  if (ev.payload.size() >= 2 && static_cast<std::uint8_t>(ev.payload[1]) == kTable)
    return hand_over_shaped(co, from, topic, ev.payload);
  stack_args::push_string_object(co, from);
  stack_args::push_string_object(co, topic);
  if (!push_handed_payload(co, ev.payload)) {
    stack_args::drop_to(co, 0);
    return false;
  }
  return resume_handed(co);
}

bool LuaProcess::hand_over_shaped(lua_State* co, const char* from, const char* topic, const std::string& payload) {
  // A small payload of a shape the process keeps receiving goes to the
  // task as its shape's constructor (nil, the constructor, true), the
  // values in the cache's scratch table: the constructor makes the
  // message in the task's own code, its allocations protected by the
  // task's resume (shape_cache.hpp). A shape not compiled yet is
  // compiled by the step's delivery (push_shaped_payload).
  if (payload.size() > kHandOverTableBytes) return false;
  if (!shapes_) shapes_ = std::make_unique<ShapeCache>();
  if (shapes_->fill(payload, received_strings_, from, topic) != ShapeCache::Match::kFilled) return false;
  if (!stack_args::push_nil_function_true(co, shapes_->constructor())) {
    shapes_->clear_scratch();
    return false;
  }
  return resume_handed(co);
}

bool LuaProcess::hand_over_inside(lua_State* L) {
  // Route 1 inside step_body's protected call, on the public API: every
  // lone message for a sole waiting task that hand_over did not take (a
  // sender or topic not kept yet, a payload to decode or a shape to
  // compile, a build without the seam).
  // The message is made by the pushes deliver_events makes (kept strings,
  // shapes and the decoder), on the main thread, idle during a step, and
  // moved to the task, without deliver_events, message() and run around
  // the resume (what that saves: BENCHMARKS.md's ledger, entry 6).
  Event& ev = step_events_[0];
  // inbox.lua's form takes no message from the host (from nil): it could
  // not tell it from nil, "timeout".
  lua_State* co = ev.kind == EventKind::Message && ev.from.valid() ? kernel_.raw_receiver() : nullptr;
  if (!co) return false;
  check_handed_to(co);
  if (!push_message(L, ev)) {  // logged and dropped: the task waits on
    lua_settop(L, 0);
    step_events_ = {};
    return false;
  }
  if (!stack_args::move(L, co, 3)) {
    lua_checkstack(co, 3);  // room a C function's yield leaves: never grows
    lua_xmove(L, co, 3);
  }
  return resume_handed(co);
}

inline bool LuaProcess::push_handed_payload(lua_State* co, const std::string& payload) {
  if (payload.empty()) {
    lua_pushnil(co);
    return true;
  }
  return push_simple_value_with(co, payload, [this](lua_State* S, std::string_view s) {
    const char* kept = received_strings_.find(s);
    return kept && stack_args::push_string_object(S, kept);
  });
}

bool LuaProcess::compile_shape(lua_State* L, const std::string& payload) {
  // Compiled the second time in a row it is seen, in a protected call (a
  // few KB of heap: not near the memory limit).
  return used_ + kShapeCompileHeap > limit_ || !shapes_->wants_compile(payload) ||
         lua_cpcall(L, &ShapeCache::compile, shapes_.get()) == 0;
}

bool LuaProcess::push_shaped_payload(lua_State* L, const std::string& payload) {
  if (payload.size() < 2 || static_cast<std::uint8_t>(payload[1]) != kTable) return false;
  if (!shapes_) shapes_ = std::make_unique<ShapeCache>();
  switch (shapes_->fill_payload(payload, received_strings_)) {
    case ShapeCache::Match::kFilled:
      stack_args::push_kept(L, shapes_->payload_constructor(), stack_args::Object::kFunction,
                            shapes_->payload_constructor_ref());
      lua_call(L, 0, 1);
      return true;
    case ShapeCache::Match::kUnknown:
      if (!compile_shape(L, payload)) lua_error(L);  // out of memory: the step fails as any allocation would
      return false;
    case ShapeCache::Match::kNotShape:
      break;
  }
  return false;
}

}  // namespace host::lua
