// A step's events into the Lua state, by the three routes
// (docs/ARCHITECTURE.md, "The message path"): the hand-over of a lone
// message to the sole waiting task, outside the step's protected call
// (hand_over and its variants); and, inside it (deliver_events, from
// step_body), runs of messages appended to the inbox (queue_run), single
// messages, completions and lifecycle events to the kernel. Threads: the
// one running the process.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include <lua.hpp>

#include "bindings/codec.hpp"
#include "bindings/gc_pressure.hpp"
#include "bindings/lua_process_internal.hpp"
#include "bindings/stack_args.hpp"
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
// they cost a message about 25 instructions of call and register saves
// (PingPong, callgrind).
[[gnu::always_inline]] inline bool LuaProcess::push_payload(lua_State* L, const Event& ev) {
  // No bytes: nil (what send writes for a nil payload, and what a native
  // sender's empty payload reads as).
  if (ev.payload.empty()) {
    lua_pushnil(L);
    return true;
  }
  if (push_simple_value(L, ev.payload, &received_strings_)) return true;
  if (push_shaped_payload(L, ev.payload)) return true;
  std::string err;
  if (push_one_value(L, ev.payload, &err, &received_strings_)) return true;
  log_dropped(ev, err);
  return false;
}

[[gnu::always_inline]] inline bool LuaProcess::push_message(lua_State* L, const Event& ev) {
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
  // slot, the topic's cache): Counting's consumer, about 80 instructions a
  // message. While the kernel takes each message off the stack, the two
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
  for (const Event& ev : run) {
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
        if (!forget_monitor(ev.from, ev.tag)) break;
        push_pid(L, ev.from);
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
        lua_newtable(L);
        int i = 0;
        std::size_t start = 0;
        while (start < ev.payload.size()) {
          std::size_t end = ev.payload.find('\n', start);
          if (end == std::string::npos) end = ev.payload.size();
          lua_pushlstring(L, ev.payload.data() + start, end - start);
          lua_rawseti(L, -2, ++i);
          start = end + 1;
        }
        kernel_.event(L, Name::reload, {Name::modules});
        break;
      }
      case EventKind::LinkDown:
        push_pid(L, ev.from);
        lua_pushlstring(L, ev.payload.data(), ev.payload.size());
        kernel_.event(L, Name::link_down, {Name::from, Name::error});
        break;
    }
  }
}

bool LuaProcess::may_hand_over(const std::string& payload) { return payload.empty() || payload.size() >= 2; }

LuaProcess::HandOver LuaProcess::hand_over(const Event& ev) {
  lua_State* co = kernel_.raw_receiver();
  if (!co) return hand_over_plain(ev);
  // What every push below relies on: the task is suspended in receive,
  // with nothing on its stack, and is not the main thread the step runs.
  HOST_ASSERT(co != L_ && lua_status(co) == LUA_YIELD && lua_gettop(co) == 0,
              "a message is handed over only to a task waiting in receive");
  // Three slots, so the pushes below never grow the stack (an allocation).
  if (!stack_args::has_room(co, 3)) return HandOver::kDeclined;
  const char* from = peers_.known_sender(ev.from);  // nullptr for the host's (receive.lua needs a sender)
  if (!from) return HandOver::kDeclined;
  const char* topic = received_strings_.find_topic(ev.topic);
  if (!topic) return HandOver::kDeclined;
  if (ev.payload.size() >= 2 && static_cast<std::uint8_t>(ev.payload[1]) == kTable)
    return hand_over_table(co, from, topic, ev.payload, true);
  stack_args::push_string_object(co, from);
  stack_args::push_string_object(co, topic);
  if (!push_handed_payload(co, ev.payload)) return hand_over_decoded(co, from, topic, ev.payload, true);
  return resume_handed(co);
}

LuaProcess::HandOver LuaProcess::hand_over_decoded(lua_State* co, const char* from, const char* topic,
                                                   const std::string& payload, bool raw) {
  // What the other ways do not make (a string the process does not keep,
  // a table with one, a large or nested table, a heap near the collector's
  // threshold or the memory limit) the decoder makes in a protected call
  // on the main thread (idle during a step), which moves it to the task:
  // about 600 instructions less than step_body's delivery. For a task in
  // the C function of process.receive (not raw), message.lua's
  // constructor makes the message of it there too. An error there
  // (memory, the collector's step and its finalizers) fails the step as
  // step_body's would; a payload that does not decode goes to step_body,
  // which logs and drops it.
  stack_args::drop_to(co, 0);  // a waiting task's stack holds nothing else
  if (raw) {
    stack_args::push_string_object(co, from);
    stack_args::push_string_object(co, topic);
  }
  struct Made {
    LuaProcess* self;
    const std::string& payload;
    lua_State* to;
    const char* from;
    const char* topic;
    bool raw;
    bool ok = false;
  } made{this, payload, co, from, topic, raw};
  const int rc = lua_cpcall(
      L_,
      [](lua_State* S) {
        auto* m = static_cast<Made*>(lua_touserdata(S, 1));
        if (!m->raw) {
          m->self->kernel_.push_message_ctor(S);
          stack_args::push_string_object(S, m->from);
          stack_args::push_string_object(S, m->topic);
        }
        // A string alone is made as it is: through the cache, a stream of
        // new ones would push out the strings the process keeps (its
        // topics among them). A table's keep their cache.
        if (std::string_view s; short_string_value(m->payload, &s)) {
          lua_pushlstring(S, s.data(), s.size());
        } else {
          std::string err;
          if (!push_one_value(S, m->payload, &err, &m->self->received_strings_)) return 0;
        }
        if (!m->raw) lua_call(S, 3, 1);
        if (!stack_args::move(S, m->to, 1)) lua_xmove(S, m->to, 1);
        m->ok = true;
        return 0;
      },
      &made);
  if (rc != 0) return HandOver::kFailed;
  if (!made.ok) {
    stack_args::drop_to(co, 0);
    return HandOver::kDeclined;
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

LuaProcess::HandOver LuaProcess::hand_over_plain(const Event& ev) {
  // Only once message.lua's constructor is loaded: until then step_body
  // delivers each message and counts it, and the count's 16th loads the
  // constructor and puts receive.lua's form into the process table (which
  // a process that does not keep a copy of the C function then takes).
  lua_State* co = kernel_.plain_receiver();
  if (!co || !kernel_.message_ctor_loaded() || !stack_args::has_room(co, 1)) return HandOver::kDeclined;
  const char* from = peers_.known_sender(ev.from);
  if (!from) return HandOver::kDeclined;
  const char* topic = received_strings_.find_topic(ev.topic);
  if (!topic) return HandOver::kDeclined;
  if (ev.payload.size() >= 2 && static_cast<std::uint8_t>(ev.payload[1]) == kTable)
    return hand_over_table(co, from, topic, ev.payload, false);
  // message.lua's constructor makes the table.
  lua_State* L = L_;
  kernel_.push_message_ctor(L);
  stack_args::push_string_object(L, from);
  stack_args::push_string_object(L, topic);
  if (!push_handed_payload(L, ev.payload)) {
    lua_settop(L, 0);
    return hand_over_decoded(co, from, topic, ev.payload, false);
  }
  return hand_over_made(co, 3);
}

LuaProcess::HandOver LuaProcess::hand_over_made(lua_State* co, int nargs) {
  // On the main thread, idle during a step. An error (memory, the time
  // limit's hook, a finalizer's) fails the step as step_body's would.
  lua_State* L = L_;
  if (lua_pcall(L, nargs, 1, 0) != 0) return HandOver::kFailed;
  if (!stack_args::move(L, co, 1)) lua_xmove(L, co, 1);
  return resume_handed(co);
}

LuaProcess::HandOver LuaProcess::hand_over_table(lua_State* co, const char* from, const char* topic,
                                                 const std::string& payload, bool raw) {
  // A small payload of a shape seen before goes to the task as its shape's
  // constructor, which makes the message in the task's own code, its
  // allocations protected by the task's resume (shape_cache.hpp);
  // hand_over left the three slots that takes. A task in the C function
  // of process.receive takes the message the constructor made for it.
  // After a small table with a string the process does not keep, the
  // next kHandOverBackoff go straight to the decoder.
  const bool small = payload.size() <= kHandOverTableBytes && !received_strings_.skip_find();
  if (small) {
    if (!shapes_) shapes_ = std::make_unique<ShapeCache>();
    switch (shapes_->fill(payload, received_strings_, from, topic)) {
      case ShapeCache::Match::kFilled: {
        namespace LL = luajit_private;
        if (!raw) {
          stack_args::push_kept(L_, shapes_->constructor(), LL::kTagFunc, shapes_->constructor_ref());
          return hand_over_made(co, 0);
        }
        const std::uint64_t values[3] = {~std::uint64_t{0}, LL::tvalue(shapes_->constructor(), LL::kTagFunc),
                                         LL::primitive(LL::kTagTrue)};  // nil, the constructor, true
        if (!stack_args::push_tvalues(co, values, 3)) {
          shapes_->clear_scratch();
          return HandOver::kDeclined;
        }
        return resume_handed(co);
      }
      case ShapeCache::Match::kUnknown:
        if (!compile_shape(L_, payload)) return HandOver::kFailed;
        break;
      case ShapeCache::Match::kNotShape:
        break;
    }
  }
  if (!raw) return hand_over_decoded(co, from, topic, payload, false);
  // A small table of kept strings is made here, outside the protected
  // call, where none of its allocations can fail (the limit) nor step
  // the collector (its finalizers, its errors). Three slots more than
  // hand_over's: the table's first key and value. Else the decoder.
  const std::size_t heap = hand_over_table_heap(payload.size());
  if (!small || !stack_args::has_room(co, 6) || used_ + heap > limit_ || !gc_pressure::available() ||
      !gc_pressure::below_threshold(co, heap))
    return hand_over_decoded(co, from, topic, payload, true);
  stack_args::push_string_object(co, from);
  stack_args::push_string_object(co, topic);
  if (!push_value_of_kept_strings(co, payload, received_strings_)) {
    received_strings_.missed_find(kHandOverBackoff);
    return hand_over_decoded(co, from, topic, payload, true);
  }
  return resume_handed(co);
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
      stack_args::push_kept(L, shapes_->payload_constructor(), luajit_private::kTagFunc,
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
