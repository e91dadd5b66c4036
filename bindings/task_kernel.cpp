// TaskKernel: tasks as threads, the run loop, the inbox's fast paths.
#include "bindings/task_kernel.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <iterator>

#include <lua.hpp>

#include "bindings/codec.hpp"
#include "bindings/duration.hpp"
#include "bindings/luajit/gc_pressure.hpp"
#include "host/assert.hpp"
#include "bindings/luajit/stack_args.hpp"
#include "host/error.hpp"

namespace host::lua {

namespace {

// The sentinels a task yields (see kernel_ext.lua): their addresses, pushed
// as light userdata, which no script can make.
char kBlock, kYield, kUpgrade, kReceive;

// Queues as kernel_ext.lua lays them out (its queue functions; the inbox's
// buffer is one, which bindings/inbox.lua writes too): { head, tail,
// items... } with the items from index 3. QueueRef and new_queue are their
// C side.
constexpr int kHead = 1, kTail = 2, kFirst = 3;
// The inbox's fields (a channel of kernel_ext.lua).
constexpr int kBuf = 1, kRecvq = 2, kSendq = 3, kClosed = 4;
// The inbox's own flag: true once kernel_ext.lua handles it (slow_inbox_),
// for process.receive's drain loop (bindings/inbox.lua).
constexpr int kSlow = 5;
// inbox[kTables]: true once the inbox's buffer holds message tables (see
// TaskKernel::flat_inbox_), for bindings/inbox.lua.
constexpr int kTables = 6;

int abs_index(lua_State* L, int idx) { return idx > 0 ? idx : lua_gettop(L) + idx + 1; }

// A queue (that layout) at a stack index, its head and tail
// read once (each C API call costs a few ns on the message path).
class QueueRef {
 public:
  QueueRef(lua_State* L, int idx) : L_(L), idx_(abs_index(L, idx)) {
    lua_rawgeti(L, idx_, kHead);
    lua_rawgeti(L, idx_, kTail);
    head_ = static_cast<int>(lua_tointeger(L, -2));
    tail_ = static_cast<int>(lua_tointeger(L, -1));
    lua_pop(L, 2);
    HOST_ASSERT(head_ >= kFirst && tail_ >= head_ - 1, "a queue's bounds: items from kFirst, tail at most one before head");
  }
  int size() const { return tail_ - head_ + 1; }
  int head() const { return head_; }
  int tail() const { return tail_; }
  // Pushes the first value (the queue must not be empty).
  void peek() {
    HOST_ASSERT(size() > 0, "peek at an empty queue");
    lua_rawgeti(L_, idx_, head_);
  }
  // Pushes the first value and removes it (the queue must not be empty).
  void shift() { shift_values(1); }
  // Pushes the first n values, in order, and removes them (the queue must
  // hold n or more).
  void shift_values(int n) {
    HOST_ASSERT(n >= 0 && n <= size(), "a queue gives up no more values than it holds");
    for (int i = 0; i < n; ++i) lua_rawgeti(L_, idx_, head_ + i);
    drop(n);
  }
  // Removes the first n values (the queue must hold n or more); the bounds
  // are written once.
  void drop(int n) {
    HOST_ASSERT(n >= 0 && n <= size(), "a queue gives up no more values than it holds");
    for (int i = 0; i < n; ++i) {
      lua_pushnil(L_);
      lua_rawseti(L_, idx_, head_ + i);
    }
    // Back to the start when empty, so keys stay in the array part.
    if (head_ + n - 1 == tail_) set_bounds(kFirst, kFirst - 1);
    else set_bounds(head_ + n, tail_);
  }
  // Appends the value on top of L, popping it.
  void push() {
    lua_rawseti(L_, idx_, tail_ + 1);
    set_bounds(head_, tail_ + 1);
  }
  // Appends the n values at stack indices first.. (nil ones too: the
  // bounds count them), leaving them there.
  void push_values(int first, int n) {
    for (int i = 0; i < n; ++i) {
      lua_pushvalue(L_, first + i);
      lua_rawseti(L_, idx_, tail_ + 1 + i);
    }
    set_bounds(head_, tail_ + n);
  }
  void clear() { truncate(head_ - 1); }
  // Removes the values after index last (head - 1 for all of them).
  void truncate(int last) {
    HOST_ASSERT(last >= head_ - 1 && last <= tail_, "a queue is cut within its bounds");
    for (int i = last + 1; i <= tail_; ++i) {
      lua_pushnil(L_);
      lua_rawseti(L_, idx_, i);
    }
    if (last < head_) set_bounds(kFirst, kFirst - 1);
    else set_bounds(head_, last);
  }

 private:
  void set_bounds(int head, int tail) {
    if (head != head_) {
      lua_pushinteger(L_, head);
      lua_rawseti(L_, idx_, kHead);
      head_ = head;
    }
    if (tail != tail_) {
      lua_pushinteger(L_, tail);
      lua_rawseti(L_, idx_, kTail);
      tail_ = tail;
    }
  }

  lua_State* L_;
  int idx_;
  int head_, tail_;
};

void new_queue(lua_State* L, int slots = 4) {
  lua_createtable(L, slots, 0);
  lua_pushinteger(L, kFirst);
  lua_rawseti(L, -2, kHead);
  lua_pushinteger(L, kFirst - 1);
  lua_rawseti(L, -2, kTail);
}

// The task first in a channel's receive queue, taken off it, if that task
// waits in a plain ch:receive() (queued as the task itself, where a select
// or a timed wait queues a record of it); else nullptr, the queue as it was.
// The caller wakes it with the value and true, as kernel_ext's
// finish_receiver would.
lua_State* take_plain_receiver(lua_State* L, QueueRef& recvq) {
  if (recvq.size() == 0) return nullptr;
  recvq.peek();
  lua_State* co = lua_type(L, -1) == LUA_TTHREAD ? lua_tothread(L, -1) : nullptr;
  lua_pop(L, 1);
  if (co) recvq.drop(1);
  return co;
}

// A channel of kernel_ext.lua's shape, { buf, recvq, sendq, closed } (it
// adds cap and the metatable when it loads); with_queues false leaves the
// three queues to be made later (the inbox's, push_inbox_queue).
void new_channel(lua_State* L, bool with_queues = true) {
  lua_createtable(L, 5, 1);
  if (with_queues) {
    for (int i = kBuf; i <= kSendq; ++i) {
      new_queue(L);
      lua_rawseti(L, -2, i);
    }
  }
  lua_pushboolean(L, 0);
  lua_rawseti(L, -2, kClosed);
}

// Pushes an error value as text: strings as they are, else its __tostring,
// else "error object: " and what it is.
void push_error_text(lua_State* L, int idx) {
  if (lua_type(L, idx) == LUA_TSTRING) {
    lua_pushvalue(L, idx);
    return;
  }
  if (luaL_callmeta(L, idx, "__tostring")) {
    if (lua_isstring(L, -1)) return;
    lua_pop(L, 1);
  }
  switch (lua_type(L, idx)) {
    case LUA_TNIL: lua_pushliteral(L, "error object: nil"); break;
    case LUA_TBOOLEAN: lua_pushstring(L, lua_toboolean(L, idx) ? "error object: true" : "error object: false"); break;
    case LUA_TNUMBER: lua_pushfstring(L, "error object: %s", lua_tostring(L, idx)); break;
    default: {
      char buf[64];
      std::snprintf(buf, sizeof buf, "error object: %s: %p", luaL_typename(L, idx), lua_topointer(L, idx));
      lua_pushstring(L, buf);
    }
  }
}

// LuaJIT's message when a task blocks where it cannot yield, and what we
// put in front of it.
constexpr const char* kCYield = "attempt to yield across C-call boundary";
constexpr const char* kCBoundary =
    "blocking call inside a C function boundary (require, a C iterator, string.gsub or table.sort callback, ...)";

std::string with_hint(const char* msg) {
  std::string s = msg ? msg : "(error object is not a string)";
  if (s.find(kCYield) != std::string::npos) s = std::string(kCBoundary) + ": " + s;
  return s;
}

// The error that ended task co (lua_resume returned rc) as text: for a
// runtime error, with the traceback of co's stack, which LuaJIT leaves in
// place when a coroutine dies. LuaJIT has forgotten the line of the frame
// on top by then; when that frame is Lua code, the line comes from the
// error's "chunk:line:" prefix, as an error handler run in place (xpcall)
// would have shown it.
std::string failure_text(lua_State* L, lua_State* co, int rc) {
  // A memory error is the limit's, wherever LuaJIT raised it (an
  // allocation the limit refused, or a string too long to make, which
  // LuaJIT refuses itself: string.rep("abc", 1e9)); docs/LUA_API.md, Limits.
  if (rc == LUA_ERRMEM) {
    lua_pop(co, 1);
    return make_error(ErrorKind::Limit, "memory");
  }
  // The value's __tostring runs on L: co is dead.
  lua_xmove(co, L, 1);
  push_error_text(L, -1);
  std::string msg = with_hint(lua_tostring(L, -1));
  lua_pop(L, 2);
  if (rc != LUA_ERRRUN) return msg;  // out of memory: no stack to speak of
  luaL_traceback(L, co, msg.c_str(), 0);
  std::size_t n = 0;
  const char* tb = lua_tolstring(L, -1, &n);
  std::string text(tb, n);
  lua_pop(L, 1);
  lua_Debug ar;
  if (lua_getstack(co, 0, &ar) && lua_getinfo(co, "Sl", &ar) && ar.currentline < 0 && *ar.what != 'C') {
    const std::string src = ar.short_src;
    const std::string frame = msg + "\nstack traceback:\n\t" + src + ":";
    if (text.compare(0, frame.size(), frame) == 0 && msg.compare(0, src.size() + 1, src + ":") == 0) {
      std::size_t digits = src.size() + 1, end = digits;
      while (end < msg.size() && std::isdigit(static_cast<unsigned char>(msg[end]))) ++end;
      if (end > digits && end < msg.size() && msg[end] == ':') text.insert(frame.size(), msg, digits, end - digits + 1);
    }
  }
  return text;
}

}  // namespace

inline TaskKernel& TaskKernel::self(lua_State*) {
  HOST_ASSERT(running_ != nullptr, "a kernel's C function runs only while its process runs");
  return *running_;
}

int TaskKernel::pin(lua_State* L) {
  lua_rawgeti(L, LUA_REGISTRYINDEX, pinned_ + 1);
  const bool free = lua_isnil(L, -1);
  lua_pop(L, 1);
  if (!free) return luaL_ref(L, LUA_REGISTRYINDEX);  // someone numbered slots first
  lua_rawseti(L, LUA_REGISTRYINDEX, ++pinned_);
  return pinned_;
}

void TaskKernel::init(lua_State* L, KernelHost& host) {
  host_ = &host;
  // A fresh state's registry is an empty table without an array part: its
  // first dozen slots (the pins) grew it four times, a rehash each, work
  // every spawn paid (BENCHMARKS.md's source figures). This one is sized for them. (It replaces
  // the empty one before anything is in it, and while the collector is
  // stopped, as LuaProcess::Prepare keeps it.)
  lua_createtable(L, kRegistrySlots, 1);
  lua_replace(L, LUA_REGISTRYINDEX);
  lua_createtable(L, 0, 1);
  tasks_ref_ = pin(L);
  calls_ref_ = -2;  // made at the first waiting call (map_call)
  // The inbox: a channel with a fifth field, the slow flag. Its queues
  // come on first use (push_inbox_queue): a process waiting in
  // process.receive takes each message as it arrives and needs none, and
  // they were a large part of an idle process's own heap and of
  // a spawn's work (BENCHMARKS.md's source figures).
  new_channel(L, false);
  lua_pushboolean(L, 0);
  lua_rawseti(L, -2, kSlow);
  inbox_ref_ = pin(L);
  lua_pushboolean(L, 0);  // until set_coroutine_lib
  coroutine_ref_ = pin(L);
}

void TaskKernel::set_coroutine_lib(lua_State* L) { lua_rawseti(L, LUA_REGISTRYINDEX, coroutine_ref_); }

void TaskKernel::new_task(lua_State* L, int idx, int nargs) {
  idx = abs_index(L, idx);
  lua_State* co = lua_newthread(L);
  // The task's body is fn itself, not xpcall(fn, handler): xpcall comes with
  // the base library, which a process opens only if its code names a base
  // function. A failed task's traceback is read from its dead coroutine
  // (failure_text).
  lua_checkstack(co, nargs + 2);
  lua_pushvalue(L, idx);
  lua_xmove(L, co, 1);
  for (int i = 1; i <= nargs; ++i) {
    lua_pushvalue(L, idx + i);
    lua_xmove(L, co, 1);
  }
  lua_replace(L, idx);
  lua_settop(L, idx);
  lua_rawgeti(L, LUA_REGISTRYINDEX, tasks_ref_);
  lua_pushlightuserdata(L, co);
  lua_pushvalue(L, idx);
  lua_rawset(L, -3);
  lua_pop(L, 1);
  ready_.push(co);
}

void TaskKernel::push_task(lua_State* L, lua_State* co) {
  lua_rawgeti(L, LUA_REGISTRYINDEX, tasks_ref_);
  lua_pushlightuserdata(L, co);
  lua_rawget(L, -2);
  lua_remove(L, -2);
}

void TaskKernel::finish(lua_State* L, lua_State* co) {
  lua_settop(co, 0);
  lua_rawgeti(L, LUA_REGISTRYINDEX, tasks_ref_);
  lua_pushlightuserdata(L, co);
  lua_pushnil(L);
  lua_rawset(L, -3);
  lua_pop(L, 1);
}

void TaskKernel::start(lua_State* L, int nargs) {
  int idx = lua_gettop(L) - nargs;
  new_task(L, idx, nargs);
  main_ = lua_tothread(L, idx);
  lua_pop(L, 1);
}

void TaskKernel::wake(lua_State* L, lua_State* co, int n) {
  auto it = std::find(receive_one_.begin(), receive_one_.end(), co);
  if (it != receive_one_.end()) {
    receive_one_.erase(it);
    if (n > 1) {
      lua_pop(L, n - 1);
      n = 1;
    }
  }
  if (!stack_args::move(L, co, n)) {
    lua_checkstack(co, n);
    lua_xmove(L, co, n);
  }
  ready_.push(co);
}

void TaskKernel::fail(std::string err) {
  if (outcome_ != kWaiting) return;
  outcome_ = kFailed;
  failure_ = std::make_unique<std::string>(std::move(err));
}

void TaskKernel::push_inbox_queue(lua_State* L, int which) {
  int& ref = inbox_queue_refs_[which - 1];
  if (ref != -2) [[likely]] {
    lua_rawgeti(L, LUA_REGISTRYINDEX, ref);
    return;
  }
  // The buffer's bounds and a flat message's three values without a
  // resize of its array part (one is costly: BENCHMARKS.md's source figures).
  new_queue(L, which == kBuf ? 8 : 4);
  inbox_queues_[which - 1] = lua_topointer(L, -1);
  lua_pushvalue(L, -1);
  ref = pin(L);
  lua_rawgeti(L, LUA_REGISTRYINDEX, inbox_ref_);
  lua_pushvalue(L, -2);
  lua_rawseti(L, -2, which);
  lua_pop(L, 1);
}

void TaskKernel::make_inbox_queues(lua_State* L) {
  for (int which = kBuf; which <= kSendq; ++which) {
    if (inbox_queue_refs_[which - 1] != -2) continue;
    push_inbox_queue(L, which);
    lua_pop(L, 1);
  }
}

bool TaskKernel::inbox_queue_empty(lua_State* L, int which) {
  if (inbox_queue_refs_[which - 1] == -2) return true;
  // Its tail read from its table where the layout allows: a receive of a
  // process with kernel_ext loaded asks each time (inbox_recvq_empty),
  // and the C API's reads were a costly part of it (BENCHMARKS.md's source figures).
  double tail;
  if (stack_args::array_number(inbox_queues_[which - 1], kTail, tail)) return tail == kFirst - 1;
  push_inbox_queue(L, which);
  lua_rawgeti(L, -1, kTail);
  // An emptied queue always starts again at kFirst (QueueRef::shift and
  // clear, kernel_ext's qshift and qclear), so its tail alone tells.
  const bool empty = lua_tointeger(L, -1) == kFirst - 1;
  lua_pop(L, 2);
  return empty;
}

std::size_t TaskKernel::queued_messages(lua_State* L) {
  if (inbox_queue_refs_[kBuf - 1] == -2) return 0;
  double head, tail;
  int n;
  if (stack_args::array_number(inbox_queues_[kBuf - 1], kHead, head) &&
      stack_args::array_number(inbox_queues_[kBuf - 1], kTail, tail)) {
    n = static_cast<int>(tail - head) + 1;
  } else {
    push_inbox_queue(L, kBuf);
    n = QueueRef(L, -1).size();
    lua_pop(L, 1);
  }
  // A message is three values (from, topic, payload) until the buffer
  // holds message tables (flat_inbox_).
  return static_cast<std::size_t>(n < 0 ? 0 : flat_inbox_ ? n / 3 : n);
}

bool TaskKernel::inbox_recvq_empty(lua_State* L) {
  // Only kernel_ext's receives (and the ones queued behind them) wait there.
  return !ext_loaded() || inbox_queue_empty(L, kRecvq);
}

bool TaskKernel::inbox_takes_directly(lua_State* L) {
  return (flat_inbox_ || message_ctor_ref_ != -2) && !slow_inbox_ && parked_.empty() && inbox_recvq_empty(L);
}

bool TaskKernel::queues_directly(lua_State* L) { return !listening_ && inbox_takes_directly(L); }

void TaskKernel::begin_queue(lua_State* L, int n) {
  inbox_queued_ = true;
  // Its messages queue up: receive's drain loop takes them without a C call each.
  enable_fast_receive();
  if (flat_inbox_) {
    // Each message's values go into the buffer as they come (queue_pushed).
    luaL_checkstack(L, 8, "queued messages");
    push_inbox_queue(L, kBuf);
    queue_buf_ = lua_gettop(L);
    lua_rawgeti(L, queue_buf_, kTail);
    queue_tail_ = static_cast<int>(lua_tointeger(L, -1));
    lua_pop(L, 1);
    return;
  }
  luaL_checkstack(L, 3 * n + 8, "queued messages");
  lua_rawgeti(L, LUA_REGISTRYINDEX, message_append_ref_);
  push_inbox_queue(L, kBuf);
}

void TaskKernel::queue_pushed(lua_State* L) {
  if (!flat_inbox_) return;  // they wait on the stack for end_queue's append
  if (!stack_args::pop_into_array(L, queue_buf_, queue_tail_ + 1, 3))
    for (int i = 3; i >= 1; --i) lua_rawseti(L, queue_buf_, queue_tail_ + i);
  queue_tail_ += 3;
}

void TaskKernel::end_queue(lua_State* L, int base, int n) {
  if (n == 0) {
    lua_settop(L, base);
    return;
  }
  if (flat_inbox_) {
    lua_pushinteger(L, queue_tail_);
    lua_rawseti(L, base + 1, kTail);  // the head stays: the bounds as QueueRef keeps them
    lua_settop(L, base);
    return;
  }
  lua_pushinteger(L, n);
  lua_insert(L, base + 3);  // append(buf, n, from, topic, payload, ...)
  lua_call(L, 3 * n + 2, 0);
}

void TaskKernel::load_inbox(lua_State* L) {
  if (message_ctor_ref_ != -2) return;
  if (luaL_loadbuffer(L, inbox_chunk_->data(), inbox_chunk_->size(), "=inbox") != 0) lua_error(L);
  lua_call(L, 0, 2);  // new, append (receive_form dropped: push_receive_form)
  message_append_ref_ = pin(L);
  message_ctor_ref_ = pin(L);
}

void TaskKernel::push_receive_form(lua_State* L, bool draining, int level) {
  // The chunk loaded again for its receive_form alone, as for each form
  // (a process makes one or two): kept beside the constructor, receive_form
  // would keep both forms' prototypes, and its own, alive in every process
  // that receives 16 messages (about 1 KB each).
  if (draining) make_inbox_queues(L);
  if (luaL_loadbuffer(L, inbox_chunk_->data(), inbox_chunk_->size(), "=inbox") != 0) lua_error(L);
  lua_call(L, 0, 3);
  lua_replace(L, -3);
  lua_pop(L, 1);
  lua_pushinteger(L, level);
  lua_pushcclosure(L, l_receive_raw, 1);
  if (draining) lua_rawgeti(L, LUA_REGISTRYINDEX, inbox_ref_);
  else lua_pushnil(L);
  lua_call(L, 2, 1);
}

void TaskKernel::push_ctor_call(lua_State* L, int base) {
  lua_rawgeti(L, LUA_REGISTRYINDEX, message_ctor_ref_);
  for (int i = 1; i <= 3; ++i) lua_pushvalue(L, base + i);
}

inline void TaskKernel::push_message_table(lua_State* L, int first) {
  if (message_ctor_ref_ != -2) {
    push_ctor_call(L, first - 1);
    lua_call(L, 3, 1);
    return;
  }
  // The keys are made at the first message: a process that gets none
  // (a Fib leaf, a worker that only sends) never interns them.
  if (message_key_refs_[0] == -2) [[unlikely]] {
    static const char* const keys[] = {"from", "topic", "payload"};
    for (int i = 0; i < 3; ++i) {
      lua_pushstring(L, keys[i]);
      message_key_refs_[i] = pin(L);
    }
  }
  lua_createtable(L, 0, 3);
  for (int i = 0; i < 3; ++i) {
    lua_rawgeti(L, LUA_REGISTRYINDEX, message_key_refs_[i]);
    lua_pushvalue(L, first + i);
    lua_rawset(L, -3);
  }
}

void TaskKernel::inbox_to_tables(lua_State* L) {
  if (!flat_inbox_) return;
  flat_inbox_ = false;
  lua_rawgeti(L, LUA_REGISTRYINDEX, inbox_ref_);
  lua_pushboolean(L, 1);
  lua_rawseti(L, -2, kTables);
  lua_pop(L, 1);
  if (inbox_queue_empty(L, kBuf)) return;
  // In place, front to back: the k-th table goes where the k-th message's
  // values began, never past a value not read yet. (Through the stack, a
  // buffer of more messages than the stack holds, about 20k, failed.)
  luaL_checkstack(L, 8, "queued messages");
  const int base = lua_gettop(L);
  push_inbox_queue(L, kBuf);
  const int buf = base + 1;
  QueueRef queue(L, buf);
  int to = queue.head();
  for (int from = queue.head(); from + 2 <= queue.tail(); from += 3, ++to) {
    for (int i = 0; i < 3; ++i) lua_rawgeti(L, buf, from + i);
    push_message_table(L, buf + 1);
    lua_rawseti(L, buf, to);
    lua_settop(L, buf);
  }
  queue.truncate(to - 1);
  lua_settop(L, base);
}

// A message the step's hand-over and runs did not take (docs/ARCHITECTURE.md,
// "The message path", paths 5-10, in that order): to a listener's channel,
// then by three routes, to a task that waits for it, to the end of the
// inbox's buffer, or to kernel_ext.lua. The message's from, topic and
// value are at base + 1..3; each route leaves the stack at base.
void TaskKernel::message(lua_State* L) {
  const int base = lua_gettop(L) - 3;
  // { from =, topic =, payload = }: from a process's kMessagesBeforeCtor-th
  // message on, by bindings/inbox.lua's constructor (loading it costs
  // about what 10 messages save, so a process that gets a few messages
  // never pays for it); until then through the C API, with the keys made
  // once (lua_setfield would hash and look up each key every time).
  // The count goes on when something else loaded the chunk first
  // (kernel_ext, a Lua receive): its 16th also gives the process the Lua
  // receive, and lets the hand-over serve a task in the C function.
  if (messages_ < kMessagesBeforeCtor && inbox_chunk_ && ++messages_ == kMessagesBeforeCtor) {
    load_inbox(L);
    enable_waiting_receive();  // messages come one by one: see push_receive
  }
  // A listener's topic goes to its channel (kernel_ext's topic -> channel
  // table), by route 3.
  if (listening_) {
    lua_rawgeti(L, LUA_REGISTRYINDEX, listeners_ref_);
    lua_pushvalue(L, base + 2);
    lua_rawget(L, -2);
    if (!lua_isnil(L, -1)) {
      const int channel = lua_gettop(L);
      push_message_table(L, base + 1);
      to_kernel_ext(L, base, channel);
      return;
    }
    lua_settop(L, base + 3);
  }
  // Senders on the inbox, or a closed inbox: kernel_ext's rules alone.
  if (!slow_inbox_ && (to_waiting_task(L, base) || to_inbox(L, base))) return;
  inbox_queued_ = true;  // with no live waiter, deliver queues it
  // kernel_ext's channel code (its waiters are selects and timed receives)
  // takes the buffer as message tables.
  inbox_to_tables(L);
  lua_rawgeti(L, LUA_REGISTRYINDEX, inbox_ref_);
  push_message_table(L, base + 1);
  to_kernel_ext(L, base, base + 4);
}

// Route 1: the task first in line for the inbox, when it is parked in
// process.receive (its timer stopped, if it waits with a timeout). A task
// in the inbox's receive queue (kernel_ext loaded, and another waiter
// before it: a plain ch:receive(), a select or a timed receive) takes
// route 3, by kernel_ext's rules.
[[gnu::always_inline]] inline bool TaskKernel::to_waiting_task(lua_State* L, int base) {
  if (!parked_.empty()) {
    // A task waiting in bindings/inbox.lua's C call takes the message as
    // its three values and makes the table itself, in its own code; not
    // one from the host (from nil), which inbox.lua could not tell from
    // nil, "timeout".
    if (parked_.front().raw && stack_args::type(L, base + 1) != LUA_TNIL) {
      wake(L, unpark_front(), 3);  // takes the three values off: the stack is at base again
      return true;
    }
    push_message_table(L, base + 1);
    wake(L, unpark_front(), 1);
    lua_settop(L, base);
    return true;
  }
  return false;
}

// Route 2: nobody waits (no task parked, none in the inbox's receive
// queue), so the message goes to the end of the inbox's buffer: as its
// three values while the buffer holds them (flat_inbox_: no table made),
// else as its table, which the constructor appends itself (the buffer
// holds tables only once kernel_ext has loaded, which loads the
// constructor). The usual case of a flood.
[[gnu::always_inline]] inline bool TaskKernel::to_inbox(lua_State* L, int base) {
  if (!inbox_recvq_empty(L)) return false;
  inbox_queued_ = true;
  if (flat_inbox_) {
    push_inbox_queue(L, kBuf);
    QueueRef(L, -1).push_values(base + 1, 3);
  } else {
    push_ctor_call(L, base);
    push_inbox_queue(L, kBuf);
    lua_call(L, 4, 0);
  }
  lua_settop(L, base);
  return true;
}

// Route 3: kernel_ext.lua's E.deliver, with the channel at stack index
// channel (a listener's, or the inbox) and the message's table on top.
void TaskKernel::to_kernel_ext(lua_State* L, int base, int channel) {
  const int msg = lua_gettop(L);
  push_ext(L);
  lua_getfield(L, -1, "deliver");
  lua_pushvalue(L, channel);
  lua_pushvalue(L, msg);
  lua_call(L, 2, 0);
  lua_settop(L, base);
}

bool TaskKernel::blockable(lua_State* L) const { return current_ != nullptr && lua_isyieldable(L); }

void TaskKernel::check_blockable(lua_State* L) const {
  if (current_ == nullptr) luaL_error(L, "blocking call outside a process task");
  if (!lua_isyieldable(L)) luaL_error(L, "%s", kCBoundary);
}

void TaskKernel::map_call(lua_State* L, std::uint64_t tag, lua_State* co) {
  if (calls_ref_ == -2) {
    // Two nodes: with one, every insert takes the collision path and
    // rehashes.
    // A reference, not a pin: pins are taken at init, and a slot pinned
    // later could be one luaL_unref left on its free list.
    lua_createtable(L, 0, 2);
    calls_ref_ = luaL_ref(L, LUA_REGISTRYINDEX);
  }
  lua_rawgeti(L, LUA_REGISTRYINDEX, calls_ref_);
  lua_pushnumber(L, static_cast<lua_Number>(tag));
  push_task(L, co);
  lua_rawset(L, -3);
  lua_pop(L, 1);
}

void TaskKernel::unmap_call(lua_State* L, std::uint64_t tag) {
  lua_rawgeti(L, LUA_REGISTRYINDEX, calls_ref_);
  lua_pushnumber(L, static_cast<lua_Number>(tag));
  lua_pushnil(L);
  lua_rawset(L, -3);
  lua_pop(L, 1);
}

int TaskKernel::block_in_sleep(lua_State* L, double secs) {
  add_timer(monotonic_seconds() + secs, TimerKind::kSleep, current_);
  // BLOCK: the task waits for a wake (kernel_ext's coroutine wrapper passes
  // it up from a user's coroutine).
  lua_pushlightuserdata(L, &kBlock);
  return lua_yield(L, 1);
}

int TaskKernel::block_in_call(lua_State* L, std::uint64_t tag) {
  map_call(L, tag, current_);
  lua_pushlightuserdata(L, &kBlock);
  return lua_yield(L, 1);
}

lua_State* TaskKernel::take_call(lua_State* L, std::uint64_t tag) {
  if (calls_ref_ == -2) return nullptr;  // no call made yet
  lua_rawgeti(L, LUA_REGISTRYINDEX, calls_ref_);
  lua_pushnumber(L, static_cast<lua_Number>(tag));
  lua_rawget(L, -2);
  lua_State* co = lua_tothread(L, -1);
  lua_pop(L, 2);
  if (co) unmap_call(L, tag);
  return co;
}

void TaskKernel::complete_call(lua_State* L, std::uint64_t tag, bool failed, std::string_view payload) {
  lua_State* co = take_call(L, tag);
  if (!co) return;  // stopped, or dropped by an upgrade: nobody waits for it
  std::string err;
  if (!failed) {
    const int n = decode_values(L, payload, &err);
    if (n >= 0) {
      wake(L, co, n);
      return;
    }
    payload = err;  // results that do not decode: the call fails with why
  }
  lua_pushnil(L);
  lua_pushlstring(L, payload.data(), payload.size());
  wake(L, co, 2);
}

void TaskKernel::Timers::push(const Timer& t) {
  entries.push_back(t);
  sift_up(entries.size() - 1);
}

void TaskKernel::Timers::remove_at(std::size_t i) {
  entries[i] = entries.back();
  entries.pop_back();
  if (i < entries.size()) {
    sift_up(i);
    sift_down(i);
  }
}

namespace {
// The timers' heap order: the earlier deadline first, and of two equal
// ones the older timer.
template <typename T>
bool fires_before(const T& a, const T& b) {
  return a.due < b.due || (a.due == b.due && a.id < b.id);
}
}  // namespace

void TaskKernel::Timers::sift_up(std::size_t i) {
  while (i > 0) {
    const std::size_t parent = (i - 1) / 2;
    if (!fires_before(entries[i], entries[parent])) break;
    std::swap(entries[i], entries[parent]);
    i = parent;
  }
}

void TaskKernel::Timers::sift_down(std::size_t i) {
  for (;;) {
    std::size_t first = i;
    for (std::size_t c = 2 * i + 1; c <= 2 * i + 2 && c < entries.size(); ++c)
      if (fires_before(entries[c], entries[first])) first = c;
    if (first == i) break;
    std::swap(entries[i], entries[first]);
    i = first;
  }
}

std::uint64_t TaskKernel::add_timer(double due, TimerKind kind, lua_State* co) {
  if (!timers_) timers_ = std::make_unique<Timers>();
  const std::uint64_t id = ++timers_->next_id;
  timers_->push(Timer{due, id, co, kind});
  return id;
}

void TaskKernel::stop_timer(std::uint64_t id) {
  if (!timers_) return;
  // Usually the only entry, or one of a few; the newest are nearer the end.
  std::vector<Timer>& e = timers_->entries;
  for (std::size_t i = e.size(); i-- > 0;)
    if (e[i].id == id) return timers_->remove_at(i);
}

void TaskKernel::drop_timers() {
  if (timers_) timers_->entries.clear();  // the command goes at the step's end (settle_timers)
}

void TaskKernel::drop_receive_timers() {
  for (const Parked& w : parked_)
    if (w.timer) stop_timer(w.timer);
}

void TaskKernel::settle_timers() {
  if (!timers_) return;
  Timers& t = *timers_;
  if (t.entries.empty()) {
    if (t.armed) host_->cancel_timer(t.armed);
    timers_.reset();  // an idle process that once slept holds none
    return;
  }
  // One armed for an earlier deadline stays: it fires early, and the
  // next is armed then (fire_timers).
  const double due = t.entries.front().due;
  if (t.armed && t.armed_due <= due) return;
  if (t.armed) host_->cancel_timer(t.armed);
  t.armed = host_->start_timer(std::max(0.0, due - monotonic_seconds()));
  t.armed_due = due;
}

void TaskKernel::fire_timers(lua_State* L, bool failed) {
  Timers& t = *timers_;
  t.armed = 0;
  // A command that failed ends the waits it was armed for all the same,
  // so that one that keeps failing cannot keep a process stepping.
  const double now = failed ? std::max(monotonic_seconds(), t.armed_due) : monotonic_seconds();
  // Each entry is taken off before what it wakes runs: kernel_ext's
  // functions may start and stop timers.
  while (!t.entries.empty() && t.entries.front().due <= now) {
    const Timer e = t.entries.front();
    t.remove_at(0);
    switch (e.kind) {
      case TimerKind::kSleep:
        wake(L, e.co, 0);
        break;
      case TimerKind::kReceive:
        for (std::size_t i = 0; i < parked_.size(); ++i) {
          if (parked_[i].timer != e.id) continue;
          lua_State* co = parked_[i].co;
          parked_.erase(parked_.begin() + static_cast<std::ptrdiff_t>(i));
          lua_pushnil(L);
          lua_pushliteral(L, "timeout");
          wake(L, co, 2);
          break;
        }
        break;
      case TimerKind::kLua:
        push_ext(L);
        lua_getfield(L, -1, "complete");
        lua_replace(L, -2);
        lua_pushnumber(L, static_cast<lua_Number>(e.id));
        lua_call(L, 1, 0);
        break;
    }
  }
}

void TaskKernel::complete(lua_State* L) {
  // The timers' command (its error too: a wait ends either way), or one
  // already cancelled, whose completion was on its way: nothing waits for
  // it.
  const lua_Number tag = lua_tonumber(L, -2);
  const bool failed = !lua_isnil(L, -1);
  lua_pop(L, 2);
  if (timers_ && timers_->armed != 0 && tag == static_cast<lua_Number>(timers_->armed)) fire_timers(L, failed);
}

void TaskKernel::push_event_names(lua_State* L) {
  if (event_names_ref_ == -2) {
    lua_createtable(L, static_cast<int>(EventName::nodedown) + 1, 0);
    lua_pushvalue(L, -1);
    event_names_ref_ = pin(L);
    return;
  }
  lua_rawgeti(L, LUA_REGISTRYINDEX, event_names_ref_);
}

void TaskKernel::push_event_name(lua_State* L, int names, EventName name) {
  static const char* const text[] = {"kind",   "from", "result", "error",     "reason", "modules", "exit",
                                     "cancel", "link_down", "reload", "node", "nodeup", "nodedown"};
  static_assert(std::size(text) == static_cast<std::size_t>(EventName::nodedown) + 1, "a text for each EventName");
  const int i = static_cast<int>(name) + 1;
  lua_rawgeti(L, names, i);
  if (!lua_isnil(L, -1)) [[likely]] return;
  lua_pop(L, 1);
  lua_pushstring(L, text[i - 1]);
  lua_pushvalue(L, -1);
  lua_rawseti(L, names, i);
}

void TaskKernel::event(lua_State* L, EventName kind, std::initializer_list<EventName> fields,
                       lua_Number watch_ref) {
  const int base = lua_gettop(L) - static_cast<int>(fields.size());
  if (!trap_links_ && kind == EventName::link_down) {
    const char* from = lua_tostring(L, base + 1);
    const char* err = lua_tostring(L, base + 2);
    fail(std::string("linked process ") + (from ? from : "?") + " failed: " + (err ? err : "?"));
    lua_settop(L, base);
    return;
  }
  if (!events_opened_ && kind == EventName::cancel) {
    // The reason a cancel without one carries is "canceled" itself.
    std::string why = "canceled";
    const int t = lua_type(L, base + 2);
    if (t == LUA_TSTRING || t == LUA_TNUMBER) {
      std::size_t n = 0;
      const char* r = lua_tolstring(L, base + 2, &n);
      if (std::string_view(r, n) != "canceled") why.append(": ").append(r, n);
    } else if (t == LUA_TBOOLEAN) {
      why += lua_toboolean(L, base + 2) ? ": true" : ": false";
    } else if (t != LUA_TNIL) {
      why.append(": (a ").append(lua_typename(L, t)).append(")");
    }
    fail(std::move(why));
    lua_settop(L, base);
    return;
  }
  // Built with its names kept from one event to the next: interning
  // "exit" again (it is garbage between events) and looking up each key
  // by its C string cost every exit event more (BENCHMARKS.md's source figures).
  lua_createtable(L, 0, static_cast<int>(fields.size()) + 1);
  const int ev = lua_gettop(L);
  push_event_names(L);
  const int names = ev + 1;
  push_event_name(L, names, EventName::kind);
  push_event_name(L, names, kind);
  lua_rawset(L, ev);
  int i = base;
  for (EventName field : fields) {
    push_event_name(L, names, field);
    lua_pushvalue(L, ++i);
    lua_rawset(L, ev);
  }
  lua_settop(L, ev);
  // An exit may be for a process.watch channel, once the process made one:
  // kernel_ext knows. (A spawner that monitors its children, as Fork-Join
  // create's and supervisors do, otherwise paid a call into Lua an exit
  // for nothing.)
  if (watch_ref != 0 && watched_ && ext_loaded()) {
    push_ext(L);
    lua_getfield(L, -1, "watched");
    lua_pushnumber(L, watch_ref);
    lua_pushvalue(L, ev);
    lua_call(L, 2, 1);
    if (lua_toboolean(L, -1)) {
      lua_settop(L, base);
      return;
    }
    lua_settop(L, ev);
  }
  push_events(L);
  const int events = ev + 1;
  // What kernel_ext's deliver would do, in the two common cases, without
  // a call into Lua (a large part of an exit event's cost): with
  // nobody waiting on events() (nothing can before kernel_ext loads), the
  // event goes to the end of its buffer (the channel is unbounded); a task
  // in a plain events():receive() is handed it with ok, as the inbox's
  // plain receivers are (message). Selects and timed waits go to deliver.
  lua_rawgeti(L, events, kRecvq);
  QueueRef recvq(L, events + 1);
  if (recvq.size() == 0) {
    lua_rawgeti(L, events, kBuf);
    QueueRef buf(L, -1);
    lua_pushvalue(L, ev);
    buf.push();
  } else if (lua_State* co = take_plain_receiver(L, recvq)) {
    lua_pushvalue(L, ev);
    lua_pushboolean(L, 1);
    wake(L, co, 2);
  } else {
    if (deliver_ref_ == -2) {
      push_ext(L);
      lua_getfield(L, -1, "deliver");
      deliver_ref_ = luaL_ref(L, LUA_REGISTRYINDEX);
      lua_pop(L, 1);
    }
    lua_rawgeti(L, LUA_REGISTRYINDEX, deliver_ref_);
    lua_pushvalue(L, events);
    lua_pushvalue(L, ev);
    lua_call(L, 2, 0);
  }
  lua_settop(L, base);
}

void TaskKernel::push_events(lua_State* L) {
  if (events_ref_ == -2) {
    new_channel(L);
    lua_pushvalue(L, -1);
    events_ref_ = luaL_ref(L, LUA_REGISTRYINDEX);
    return;
  }
  lua_rawgeti(L, LUA_REGISTRYINDEX, events_ref_);
}

// Inline in both callers: out of line, run's resume cost every message a
// call more (BENCHMARKS.md's source figures).
[[gnu::always_inline]] inline int TaskKernel::resume(lua_State* co) {
  current_ = co;
  parking_ = false;
  const int n = lua_gettop(co) - (lua_status(co) == LUA_YIELD ? 0 : 1);
  const int rc = lua_resume(co, n);
  current_ = nullptr;
  return rc;
}

[[gnu::always_inline]] inline bool TaskKernel::plain_wait(lua_State* co, int rc) {
  if (rc != LUA_YIELD) return false;
  // The common case: process.receive's park yields nothing, so there is
  // nothing to clear either.
  if (parking_) return true;
  if (lua_touserdata(co, 1) != &kBlock) return false;
  lua_settop(co, 0);
  return true;
}

bool TaskKernel::resume_handed_over(lua_State* co) {
  unpark_front();  // co: raw_receiver gave the front entry
  const int rc = resume(co);
  if (!plain_wait(co, rc)) {
    current_ = co;
    unsettled_rc_ = static_cast<std::int8_t>(rc);
    return false;
  }
  return ready_.empty() && yielded_.empty() && outcome_ == kWaiting;
}

void TaskKernel::settle_unsettled(lua_State* L) {
  lua_State* co = current_;
  const int rc = unsettled_rc_;
  current_ = nullptr;
  unsettled_rc_ = -1;
  after_resume(L, co, rc);
}

int TaskKernel::request_exit(lua_State* L, bool success, int code) {
  if (current_ == nullptr || !lua_isyieldable(L))
    return luaL_error(L, "os.exit(%d) where the process cannot stop (%s)", code,
                      current_ == nullptr ? "outside a process task" : "inside a C call");
  exit_request_ = success ? 1 : 2;
  exit_code_ = static_cast<std::uint8_t>(code);
  return yield_to_others(L, 0);
}

bool TaskKernel::exited(lua_State* L, int base) {
  if (exit_request_ == 0 || outcome_ != kWaiting) return false;
  if (exit_request_ == 2) {
    fail("os.exit(" + std::to_string(exit_code_) + ")");
    return true;
  }
  lua_settop(L, base);
  lua_pushnil(L);  // its result
  outcome_ = kDone;
  return true;
}

TaskKernel::Outcome TaskKernel::run(lua_State* L) {
  const int base = lua_gettop(L);
  // (Also here: a task resumed by a hand-over, settled before this, may
  // have asked.)
  if (exited(L, base)) [[unlikely]] return outcome_;
  while (outcome_ == kWaiting && !ready_.empty()) {
    lua_State* co = ready_.pop();
    const int rc = resume(co);
    if (plain_wait(co, rc)) continue;
    after_resume(L, co, rc);
    if (exited(L, base)) [[unlikely]] return outcome_;
    if (outcome_ == kDone) return kDone;  // the result after_resume pushed
    lua_settop(L, base);
  }
  if (outcome_ != kWaiting) return outcome_;
  if (!yielded_.empty()) {
    while (!yielded_.empty()) ready_.push(yielded_.pop());
    return kContinue;
  }
  return kWaiting;
}

void TaskKernel::after_resume(lua_State* L, lua_State* co, int rc) {
  if (rc == LUA_YIELD) {
    void* sentinel = lua_touserdata(co, 1);
    if (sentinel == &kReceive) {
      // process.receive found nothing and got through its yield: now it
      // waits in the inbox.
      if (lua_gettop(co) >= 2 && !slow_inbox_ && inbox_queue_empty(L, kRecvq)) {
        // With a timeout, and nobody before it: parked as a plain receive,
        // with a timer (see check_blockable).
        const double secs = lua_tonumber(co, 2);
        const double deadline = monotonic_seconds() + secs;
        park(co, false, add_timer(deadline, TimerKind::kReceive, co), deadline);
      } else if (lua_gettop(co) >= 2) {
        push_ext(L);
        lua_getfield(L, -1, "receive_timeout");
        push_task(L, co);
        lua_pushnumber(L, lua_tonumber(co, 2));
        lua_call(L, 2, 0);
        lua_pop(L, 1);
      } else if (!slow_inbox_ && inbox_queue_empty(L, kRecvq)) {
        park(co, false);
      } else {
        push_inbox_queue(L, kRecvq);
        QueueRef recvq(L, -1);
        push_task(L, co);
        recvq.push();
        receive_one_.push_back(co);
        lua_pop(L, 1);
      }
      lua_settop(co, 0);
    } else if (sentinel == &kUpgrade) {
      restart(L, co);
    } else {
      // YIELD, or a plain coroutine.yield at the top of a task: let other
      // processes run, then resume it; with the values after YIELD, which
      // yield_to_others' primitive returns (none for time.sleep(0)).
      if (sentinel == &kYield) lua_remove(co, 1);
      else lua_settop(co, 0);
      yielded_.push(co);
    }
    return;
  }
  if (rc != 0) {
    fail(failure_text(L, co, rc));
    finish(L, co);
    return;
  }
  // Finished: the function's results.
  if (co == main_ && outcome_ == kWaiting) {
    // `return nil, err` from the entry fails the process with err.
    if (lua_gettop(co) >= 2 && lua_isnil(co, 1) && !lua_isnil(co, 2)) {
      push_error_text(co, 2);
      fail(lua_tostring(co, -1));
    } else {
      outcome_ = kDone;
      if (lua_gettop(co) >= 1) {
        lua_pushvalue(co, 1);
        lua_xmove(co, L, 1);
      } else {
        lua_pushnil(L);
      }
    }
  }
  finish(L, co);
}

void TaskKernel::restart(lua_State* L, lua_State* co) {
  // process.upgrade: drop every task, waiter and timer of the old code and
  // start fn as the new main task. The inbox, events and listeners (with
  // what they hold), links, monitors and names stay.
  ready_.clear();
  yielded_.clear();
  drop_timers();  // kernel_ext's too (E.reset forgets them below)
  parked_.clear();
  receive_one_.clear();
  for (int which : {kRecvq, kSendq}) {
    if (inbox_queue_empty(L, which)) continue;
    push_inbox_queue(L, which);
    QueueRef(L, -1).clear();
    lua_pop(L, 1);
  }
  if (ext_loaded()) {
    push_ext(L);
    lua_getfield(L, -1, "reset");
    lua_call(L, 0, 0);
    lua_pop(L, 1);
  }
  // co holds UPGRADE, fn, { n = n, args... }.
  const int fn = lua_gettop(L) + 1;
  lua_pushvalue(co, 2);
  lua_pushvalue(co, 3);
  lua_xmove(co, L, 2);
  lua_getfield(L, fn + 1, "n");
  int n = static_cast<int>(lua_tointeger(L, -1));
  lua_pop(L, 1);
  luaL_checkstack(L, n + 4, "process.upgrade arguments");
  for (int i = 1; i <= n; ++i) lua_rawgeti(L, fn + 1, i);
  lua_remove(L, fn + 1);
  lua_settop(co, 0);
  // The old tasks go with their tables (a waiting call's completion then
  // finds no task, and is dropped).
  lua_createtable(L, 0, 1);
  lua_rawseti(L, LUA_REGISTRYINDEX, tasks_ref_);
  if (calls_ref_ != -2) {
    lua_createtable(L, 0, 2);
    lua_rawseti(L, LUA_REGISTRYINDEX, calls_ref_);
  }
  start(L, n);
}

void TaskKernel::slow_inbox(lua_State* L) {
  if (slow_inbox_) return;
  inbox_to_tables(L);
  slow_inbox_ = true;
  lua_rawgeti(L, LUA_REGISTRYINDEX, inbox_ref_);
  lua_pushboolean(L, 1);
  lua_rawseti(L, -2, kSlow);
  lua_pop(L, 1);
  if (parked_.empty()) return;
  drop_receive_timers();  // the timed ones below get kernel_ext's
  // recvq = parked tasks, then what it held.
  push_inbox_queue(L, kRecvq);
  const int base = lua_gettop(L) - 1;
  QueueRef recvq(L, base + 1);
  const int n = recvq.size();
  luaL_checkstack(L, n + 4, "inbox waiters");
  for (int i = 0; i < n; ++i) recvq.shift();  // onto the stack, in order
  for (const Parked& w : parked_) {
    if (w.timer) {
      // A timed receive waits by kernel_ext's rules from now on: its
      // waiter and timer, for what is left of its time.
      push_ext(L);
      lua_getfield(L, -1, "timed_waiter");
      lua_replace(L, -2);
      push_task(L, w.co);
      lua_pushnumber(L, std::max(0.0, w.deadline - monotonic_seconds()));
      lua_call(L, 2, 1);
      recvq.push();
      continue;
    }
    push_task(L, w.co);
    recvq.push();
    receive_one_.push_back(w.co);
  }
  parked_.clear();
  for (int i = 0; i < n; ++i) {
    lua_pushvalue(L, base + 2 + i);
    recvq.push();
  }
  lua_settop(L, base);
}

namespace {
// The registry's key for the waiting form of inbox.lua's receive a process has
// (install_receive replaces it in the process table only if it is still
// there).
char kWaitingReceive;
}  // namespace

void TaskKernel::push_receive(lua_State* L) {
  installed_receive_ = wanted_receive_;
  if (wanted_receive_ == ReceiveForm::kC) {
    lua_pushcfunction(L, l_receive);
    return;
  }
  // bindings/inbox.lua's form over the C receive (one Lua frame, its own,
  // between it and the script), with the drain loop or without.
  const bool draining = wanted_receive_ == ReceiveForm::kDraining;
  load_inbox(L);
  push_receive_form(L, draining, 2);
  if (!draining) {
    lua_pushlightuserdata(L, &kWaitingReceive);
    lua_pushvalue(L, -2);
    lua_rawset(L, LUA_REGISTRYINDEX);
  }
}

void TaskKernel::install_receive(lua_State* L) {
  const ReceiveForm was = installed_receive_;
  installed_receive_ = wanted_receive_;
  const int top = lua_gettop(L);
  luaL_findtable(L, LUA_REGISTRYINDEX, "_LOADED", 1);
  lua_getfield(L, -1, "process");
  if (lua_istable(L, -1)) {
    lua_pushliteral(L, "receive");
    lua_rawget(L, -2);
    bool ours = false;
    if (was == ReceiveForm::kC) {
      ours = lua_tocfunction(L, -1) == l_receive;
    } else {
      lua_pushlightuserdata(L, &kWaitingReceive);
      lua_rawget(L, LUA_REGISTRYINDEX);
      ours = lua_rawequal(L, -1, -2);
      lua_pop(L, 1);
    }
    if (ours) {
      push_receive(L);
      lua_setfield(L, -3, "receive");
    }
  }
  lua_settop(L, top);
}

void TaskKernel::push_ext(lua_State* L) {
  if (ext_loaded()) {
    lua_rawgeti(L, LUA_REGISTRYINDEX, ext_ref_);
    return;
  }
  make_inbox_queues(L);  // kernel_ext reads them from the inbox table
  load_inbox(L);         // its inbox:receive is inbox.lua's form, its messages the constructor's
  // What loading it makes lives as long as the state: no collection while
  // it loads (a young process's heap grows several times over with it, and the cycle that
  // started was a good part of the load's work: BENCHMARKS.md's source figures). Restarted by the
  // destructor, also when the load raises (LuaJIT unwinds C++ frames).
  struct PausedCollector {
    lua_State* L;
    bool paused = gc_pressure::available() && !gc_pressure::stopped(L);
    explicit PausedCollector(lua_State* S) : L(S) {
      if (paused) lua_gc(L, LUA_GCSTOP, 0);
    }
    ~PausedCollector() {
      if (paused) lua_gc(L, LUA_GCRESTART, -1);  // the next cycle once the heap has grown by the pause
    }
  } paused_collector(L);
  host_->push_ext_chunk(L);  // chunk, H
  lua_createtable(L, 0, 14);
  static const std::pair<const char*, void*> sentinels[] = {
      {"BLOCK", &kBlock}, {"YIELD", &kYield}, {"UPGRADE", &kUpgrade}, {"RECEIVE", &kReceive}};
  for (auto& [name, p] : sentinels) {
    lua_pushlightuserdata(L, p);
    lua_setfield(L, -2, name);
  }
  static const luaL_Reg fns[] = {
      {"wake", l_wake}, {"new_task", l_new_task}, {"current", l_current},
      {"listening", l_listening}, {"slow_inbox", l_slow_inbox}, {"set_trap_links", l_set_trap_links},
      {"open_events", l_open_events},
      {"inbox_tables", l_inbox_tables}, {"timer_start", l_timer_start}, {"timer_stop", l_timer_stop}};
  for (const luaL_Reg& r : fns) {
    lua_pushcfunction(L, r.func);
    lua_setfield(L, -2, r.name);
  }
  lua_rawgeti(L, LUA_REGISTRYINDEX, coroutine_ref_);
  lua_setfield(L, -2, "coroutine");
  for (const char* name : {"getmetatable", "setmetatable"}) {  // the loader opened the base library
    lua_getfield(L, LUA_REGISTRYINDEX, name);
    lua_setfield(L, -2, name);
  }
  lua_pushstring(L, kCBoundary);
  lua_setfield(L, -2, "C_BOUNDARY");
  lua_rawgeti(L, LUA_REGISTRYINDEX, inbox_ref_);
  lua_setfield(L, -2, "inbox");
  push_events(L);
  lua_setfield(L, -2, "events");
  push_receive_form(L, false, 3);  // called from inbox:receive: errors name its caller
  lua_setfield(L, -2, "receive");
  lua_insert(L, -2);  // chunk, I, H
  lua_call(L, 2, 1);
  lua_pushvalue(L, -1);
  ext_ref_ = luaL_ref(L, LUA_REGISTRYINDEX);
}

// I.timer_start(secs) -> id: a timer of kernel_ext's, which calls
// E.complete(id) when it fires (unless stopped first).
int TaskKernel::l_timer_start(lua_State* L) {
  const double secs = luaL_checknumber(L, 1);
  lua_pushnumber(L, static_cast<lua_Number>(self(L).add_timer(monotonic_seconds() + secs, TimerKind::kLua, nullptr)));
  return 1;
}

// I.timer_stop(id)
int TaskKernel::l_timer_stop(lua_State* L) {
  self(L).stop_timer(static_cast<std::uint64_t>(luaL_checknumber(L, 1)));
  return 0;
}

// I.wake(t, ...)
int TaskKernel::l_wake(lua_State* L) {
  luaL_checktype(L, 1, LUA_TTHREAD);
  self(L).wake(L, lua_tothread(L, 1), lua_gettop(L) - 1);
  return 0;
}

// I.new_task(fn, ...) -> the task's thread
int TaskKernel::l_new_task(lua_State* L) {
  luaL_checktype(L, 1, LUA_TFUNCTION);
  self(L).new_task(L, 1, lua_gettop(L) - 1);
  return 1;
}

bool TaskKernel::can_yield_to_others(lua_State* L) const { return current_ != nullptr && lua_isyieldable(L); }

int TaskKernel::yield_to_others(lua_State* L, int nresults) {
  // YIELD first: kernel_ext's coroutine wrapper passes it up through a
  // user's coroutines and the values back down; after_resume keeps them.
  lua_pushlightuserdata(L, &kYield);
  lua_insert(L, -nresults - 1);
  return lua_yield(L, nresults + 1);
}

// I.current() -> the running task's thread, or nothing outside a task
int TaskKernel::l_current(lua_State* L) {
  TaskKernel& k = self(L);
  if (k.current_ == nullptr) return 0;
  // The running task's coroutine is alive (it runs, and the tasks table
  // holds it): pushed as the object it is, without the table's lookup
  // (a costly lookup; every blocking channel call asks).
  if (!stack_args::push_object(L, k.current_, stack_args::Object::kThread)) k.push_task(L, k.current_);
  return 1;
}

// I.listening(listeners): process.listen was called; listeners maps topics
// to channels.
int TaskKernel::l_listening(lua_State* L) {
  TaskKernel& k = self(L);
  if (k.listening_) return 0;
  luaL_checktype(L, 1, LUA_TTABLE);
  k.inbox_to_tables(L);  // listen moves the buffer's tables of its topic
  lua_pushvalue(L, 1);
  k.listeners_ref_ = luaL_ref(L, LUA_REGISTRYINDEX);
  k.listening_ = true;
  return 0;
}

// I.inbox_tables(): the inbox's buffer as message tables from now on, for
// kernel_ext's channel code (a select's receive from the inbox).
int TaskKernel::l_inbox_tables(lua_State* L) {
  self(L).inbox_to_tables(L);
  return 0;
}

// I.set_trap_links(on)
int TaskKernel::l_set_trap_links(lua_State* L) {
  self(L).trap_links_ = lua_toboolean(L, 1);
  return 0;
}

// I.open_events(): process.events() was called; from now on a cancel is
// an event it may handle (TaskKernel::event).
int TaskKernel::l_open_events(lua_State* L) {
  self(L).events_opened_ = true;
  return 0;
}

// I.slow_inbox(): see TaskKernel::slow_inbox.
int TaskKernel::l_slow_inbox(lua_State* L) {
  self(L).slow_inbox(L);
  return 0;
}

namespace {
// How many Lua frames up the script's call to the C receive is: the
// closure's upvalue when a Lua function stands between (kernel_ext's
// inbox.lua's receive form), for its errors to name the script's line.
// Read only on the paths that need it, not on every receive.
int caller_level(lua_State* L) {
  return lua_isnoneornil(L, lua_upvalueindex(1)) ? 1 : static_cast<int>(lua_tointeger(L, lua_upvalueindex(1)));
}
}  // namespace

int TaskKernel::l_receive(lua_State* L) { return receive(L, false); }
int TaskKernel::l_receive_raw(lua_State* L) { return receive(L, true); }

// process.receive([timeout]) -> the next inbox message, or nil, "timeout";
// with raw, a message handed over while it waited comes as its from, topic
// and payload (bindings/inbox.lua makes the table).
int TaskKernel::receive(lua_State* L, bool raw) {
  TaskKernel& k = self(L);
  if (k.wanted_receive_ != k.installed_receive_) k.install_receive(L);
  const int top = lua_gettop(L);
  if (k.slow_inbox_) {
    // Senders may wait on the inbox, or it may be closed: kernel_ext's rules.
    k.push_ext(L);
    lua_getfield(L, -1, "try_receive");
    lua_rawgeti(L, LUA_REGISTRYINDEX, k.inbox_ref_);
    lua_call(L, 1, 3);
    if (lua_toboolean(L, -3)) {
      lua_pop(L, 1);
      return 1;
    }
    lua_settop(L, top);
  } else if (k.inbox_queued_) {
    k.push_inbox_queue(L, kBuf);
    QueueRef buf(L, top + 1);
    if (buf.size() > 0) {
      if (!k.flat_inbox_) {
        buf.shift();
        return 1;
      }
      buf.shift_values(3);
      // inbox.lua makes the table of one with a sender itself.
      if (raw && stack_args::type(L, top + 2) != LUA_TNIL) return 3;
      k.push_message_table(L, top + 2);
      return 1;
    }
    k.inbox_queued_ = false;
    lua_settop(L, top);
  }
  bool timed = stack_args::type(L, 1) > LUA_TNIL;
  lua_Number secs = 0;
  if (timed) {
    secs = check_duration(L, 1, caller_level(L));
    if (secs <= 0) {
      lua_pushnil(L);
      lua_pushliteral(L, "timeout");
      return 2;
    }
  }
  if (k.current_ == nullptr || !lua_isyieldable(L)) {
    luaL_where(L, caller_level(L));
    lua_pushstring(L, k.current_ == nullptr ? "blocking call outside a process task" : kCBoundary);
    lua_concat(L, 2);
    return lua_error(L);
  }
  stack_args::drop_to(L, 0);  // the timeout's nil, if given
  if (L == k.current_ && !k.slow_inbox_) {
    // The task itself waits, not a coroutine inside it: the yield reaches
    // the kernel's resume for certain, so it waits from here, as a plain
    // block (no after_resume), unless others wait in the inbox's receive
    // queue, which only happens once kernel_ext has loaded (see message).
    // With a timeout, its timer finds it through its entry (fire_timers),
    // not through the tasks table: a message that ends the wait stops it
    // without a table write, so the step's hand-over may take it too.
    if (k.inbox_recvq_empty(L)) {
      if (timed) {
        const double deadline = monotonic_seconds() + secs;
        k.park(L, raw, k.add_timer(deadline, TimerKind::kReceive, L), deadline);
      } else {
        k.park(L, raw);
      }
      k.parking_ = true;
      return lua_yield(L, 0);
    }
  }
  // Else the kernel registers the waiter once the yield reached it
  // (after_resume): a user's coroutine may catch it on the way, and a
  // waiter behind others goes into the receive queue.
  lua_pushlightuserdata(L, &kReceive);
  if (!timed) return lua_yield(L, 1);
  lua_pushnumber(L, secs);
  return lua_yield(L, 2);
}
}  // namespace host::lua
