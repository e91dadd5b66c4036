// A program's pipes on the worker (exec_pipes.hpp). Each call tries its
// read or write at once (a receive the buffer answers makes no system
// call); only one that would block waits: io_wait with the netpoller's
// tag, and the step that hears the pipe is ready tries again (resume)
// before the task sees anything.
//
// While a task waits for the program (Program:wait, bindings/exec.lua),
// its stdout and stderr are read ahead into their buffers, each up to
// kAheadBound: a program whose output nobody receives yet would otherwise
// fill the kernel's pipe (64 KB) and never end, and the wait with it. The
// reading is a watch (io_watch: a wait no task blocks on) for the pipe's
// readability, armed again after each read until the bound is reached, the
// pipe ends, or no task waits any more; a receive on the pipe takes its
// place while it runs (both would wait on the same readiness).
#include "bindings/exec_pipes.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>

#include <lua.hpp>

#include "bindings/host_finalizers.hpp"
#include "bindings/lua_process.hpp"
#include "bindings/registry_table.hpp"
#include "host/io/io_services.hpp"
#include "host/io/pipe_stream.hpp"

namespace host::lua {
namespace {

using Io = io::ByteStream::Io;

// What a pipe's buffer takes in while its program is waited for (less
// where the process's memory limit leaves less: half of what it leaves,
// as a receive may hold). Past it the program waits on its full pipe.
constexpr std::size_t kAheadBound = 1024 * 1024;

// One pipe object's state (on the heap: a wait names it as its owner).
struct PipeState {
  std::unique_ptr<io::PipeStream> pipe;
  const char* name;  // "stdin", "stdout", "stderr"
  // The call that waits, if any: a receive (kind 'l', 'n' with n, 'a' and
  // what came so far) or a send (the data, held by data_ref, and how much
  // went).
  enum Op : std::uint8_t { kNone, kReceive, kSend } op = kNone;
  std::uint64_t tag = 0;
  char kind = 'l';
  std::size_t n = 0;
  std::string got;
  int data_ref = LUA_NOREF;
  const char* data = nullptr;
  std::size_t len = 0, done = 0;
  // Tasks in Program:wait, and the readability watch that reads ahead for
  // them (0: none armed).
  int waiters = 0;
  std::uint64_t ahead_tag = 0;

  bool writes() const { return name[3] == 'i'; }  // "stdin"
  bool usable() const { return pipe && !pipe->closed(); }
};

// The userdata. st is null once its finalizer ran: a __gc of the user's
// that runs after it (or lua_close's, after the process's end ran the
// host's) may still call a method, which then answers closed.
struct PipeRef {
  PipeState* st;
  HostFinalizer fin;
};

char kMetatableKey;

void read_ahead(lua_State* L, PipeState* st);

void release(lua_State* L, PipeState* st) {
  if (st->data_ref != LUA_NOREF) luaL_unref(L, LUA_REGISTRYINDEX, st->data_ref);
  st->data_ref = LUA_NOREF;
  st->op = PipeState::kNone;
  st->tag = 0;
  st->got.clear();
  st->data = nullptr;
  st->len = st->done = 0;
  read_ahead(L, st);  // where a task still waits for the program
}

PipeState* check(lua_State* L, const char* method, int idx = 1) {
  if (auto* r = static_cast<PipeRef*>(to_userdata(L, idx, &kMetatableKey))) return r->st;  // null once finalized
  luaL_error(L, "bad argument #%d to '%s' (program pipe expected, got %s)", idx, method, luaL_typename(L, idx));
  return nullptr;
}

// ---- the attempts: push the results and return their count, or -1
// where the call must wait for the pipe.

int attempt_receive(lua_State* L, PipeState* st) {
  if (!st->usable()) {
    lua_pushnil(L);
    lua_pushliteral(L, "closed");
    lua_pushlstring(L, st->got.data(), st->got.size());
    return 3;
  }
  io::ByteStream& s = st->pipe->stream();
  // What is buffered for one receive stays under half of what the process
  // may still hold: the result must fit too.
  const std::size_t room = memory_room(L) / 2;
  std::string& out = st->got;
  std::string_view got;  // a count's: where the stream holds it
  Io r;
  switch (st->kind) {
    case 'l': r = s.line(out, room); break;
    case 'n': r = s.exactly(&got, st->n, room); break;
    default: r = s.all(out, room); break;
  }
  if (r == Io::kAgain) return -1;
  if (r == Io::kDone) {
    if (st->kind == 'n') {
      const io::TakenGuard done(s);
      if (out.empty()) {
        lua_pushlstring(L, got.data(), got.size());
        return 1;
      }
      out.append(got);
    }
    lua_pushlstring(L, out.data(), out.size());
    return 1;
  }
  lua_pushnil(L);
  lua_pushstring(L, s.error().c_str());
  // Past the limit, what came is dropped (it could not be held).
  std::string partial = s.take_partial(st->kind, st->n);
  if (s.error().rfind("limit:", 0) != 0) out += partial;
  lua_pushlstring(L, out.data(), out.size());
  return 3;
}

int attempt_send(lua_State* L, PipeState* st) {
  if (!st->usable()) {
    lua_pushnil(L);
    lua_pushliteral(L, "closed");
    lua_pushnumber(L, static_cast<double>(st->done));
    return 3;
  }
  io::ByteStream& s = st->pipe->stream();
  const Io r = s.write(std::string_view(st->data, st->len), &st->done);
  if (r == Io::kAgain) return -1;
  if (r == Io::kDone) {
    lua_pushnumber(L, static_cast<double>(st->len));
    return 1;
  }
  lua_pushnil(L);
  lua_pushstring(L, s.error().c_str());
  lua_pushnumber(L, static_cast<double>(st->done));
  return 3;
}

int attempt(lua_State* L, PipeState* st) {
  return st->op == PipeState::kSend ? attempt_send(L, st) : attempt_receive(L, st);
}

void resume(lua_State* L, lua_State* co, void* owner, std::uint64_t tag, bool failed, std::string_view payload);

IoWaitCall poll_call(PipeState* st) {
  io::PipeStream& p = *st->pipe;
  IoWaitCall c{io::io_cmd::kPollWait, p.poller().tag_for(p.slot(), st->op == PipeState::kSend ? io::NetPoller::kWrite : io::NetPoller::kRead)};
  st->tag = c.tag;
  return c;
}

// A call that must wait where the running code cannot block (a __gc, a
// sort's comparator) raises as io_wait would, leaving the pipe free for
// the next call rather than busy for ever.
void check_may_wait(lua_State* L, PipeState* st) {
  if (blockable(L)) return;
  release(L, st);
  check_blockable(L);
}

// Runs the call st->op (already filled in): its results, or it waits.
int run(lua_State* L, PipeState* st) {
  const int n = attempt(L, st);
  if (n >= 0) {
    release(L, st);
    return n;
  }
  check_may_wait(L, st);
  return io_wait(L, poll_call(st), st, resume);
}

// The pipe is ready (or was closed): the call tries again.
void resume(lua_State* L, lua_State* co, void* owner, std::uint64_t tag, bool failed, std::string_view payload) {
  auto* st = static_cast<PipeState*>(owner);
  if (st->tag != tag) {  // not this pipe's call any more
    lua_pushnil(L);
    lua_pushliteral(L, "closed");
    return io_resume(L, co, 2);
  }
  st->tag = 0;
  if (failed) {  // the poller could not watch it: as a failed call, with what was done
    lua_pushnil(L);
    lua_pushlstring(L, payload.data(), payload.size());
    if (st->op == PipeState::kSend) lua_pushnumber(L, static_cast<double>(st->done));
    else lua_pushlstring(L, st->got.data(), st->got.size());
    release(L, st);
    return io_resume(L, co, 3);
  }
  const int n = attempt(L, st);
  if (n >= 0) {
    release(L, st);
    return io_resume(L, co, n);
  }
  io_rewait(L, co, poll_call(st), st, resume);
}

// ---- reading ahead while the program is waited for.

void ahead_fired(lua_State* L, lua_State* co, void* owner, std::uint64_t tag, bool failed, std::string_view payload);

// Reads what the program wrote, up to the bound, and watches for more
// where the pipe has nothing now. Nothing where no task waits, a receive
// reads the pipe itself, or the pipe is closed; a full buffer or an ended
// pipe stops it (no error: a receive finds what is buffered, and why the
// stream ended).
void read_ahead(lua_State* L, PipeState* st) {
  if (st->waiters <= 0 || st->ahead_tag != 0 || st->op != PipeState::kNone || !st->usable()) return;
  io::ByteStream& s = st->pipe->stream();
  const std::size_t bound = std::min(kAheadBound, memory_room(L) / 2);
  for (;;) {
    const Io r = s.read_ahead(bound);
    if (r == Io::kEnd || s.buffered() >= bound) return;
    if (r == Io::kAgain) break;
  }
  io::PipeStream& p = *st->pipe;
  IoWaitCall call{io::io_cmd::kPollWait, p.poller().tag_for(p.slot(), io::NetPoller::kRead)};
  st->ahead_tag = call.tag;
  io_watch(L, std::move(call), st, ahead_fired);
}

void stop_ahead(lua_State* L, PipeState* st) {
  if (st->ahead_tag == 0) return;
  io_unwatch(L, st->ahead_tag);
  st->ahead_tag = 0;
}

void ahead_fired(lua_State* L, lua_State*, void* owner, std::uint64_t tag, bool failed, std::string_view) {
  auto* st = static_cast<PipeState*>(owner);
  if (st->ahead_tag != tag) return;  // unwatched meanwhile
  st->ahead_tag = 0;
  if (!failed) read_ahead(L, st);  // failed: the poller could not watch it; a receive finds out
}

int busy(lua_State* L, const char* what, bool count) {
  lua_pushnil(L);
  lua_pushfstring(L, "busy: another task %s this pipe", what);
  if (count) lua_pushnumber(L, 0);
  else lua_pushliteral(L, "");
  return 3;
}

// A finalized pipe's answer (see PipeRef).
int closed_answer(lua_State* L) {
  lua_pushnil(L);
  lua_pushliteral(L, "closed");
  return 2;
}

// receive([pattern]): LuaSocket's "*l" (the default), "*a", or a count.
int m_receive(lua_State* L) {
  PipeState* st = check(L, "receive");
  if (!st) return closed_answer(L);
  if (st->writes()) luaL_error(L, "cannot receive from a program's stdin");
  char kind = 'l';
  std::size_t n = 0;
  if (lua_type(L, 2) == LUA_TNUMBER) {
    const double v = lua_tonumber(L, 2);
    if (!(v >= 0) || v != std::floor(v)) luaL_error(L, "bad argument #1 to 'receive' (invalid byte count)");
    kind = 'n';
    n = static_cast<std::size_t>(std::min(v, 1e15));
  } else if (!lua_isnoneornil(L, 2)) {
    const char* p = lua_type(L, 2) == LUA_TSTRING ? lua_tostring(L, 2) : "";
    if (!std::strcmp(p, "*l") || !std::strcmp(p, "l")) kind = 'l';
    else if (!std::strcmp(p, "*a") || !std::strcmp(p, "a")) kind = 'a';
    else luaL_error(L, "bad argument #1 to 'receive' (invalid pattern)");
  }
  if (st->op == PipeState::kReceive) return busy(L, "receives on", false);
  stop_ahead(L, st);  // the receive reads, and waits on the same readiness
  st->op = PipeState::kReceive;
  st->kind = kind;
  st->n = n;
  return run(L, st);
}

// send(data): the number of bytes once the pipe took them all; nil,
// "closed", what went where the program closed its stdin.
int m_send(lua_State* L) {
  PipeState* st = check(L, "send");
  if (!st) return closed_answer(L);
  if (!st->writes()) luaL_error(L, "cannot send to a program's %s", st->name);
  if (lua_type(L, 2) != LUA_TSTRING && lua_type(L, 2) != LUA_TNUMBER)
    luaL_error(L, "bad argument #1 to 'send' (string expected, got %s)", luaL_typename(L, 2));
  lua_settop(L, 2);
  std::size_t len;
  const char* data = lua_tolstring(L, 2, &len);  // a number becomes its string here
  if (st->op == PipeState::kSend) return busy(L, "sends on", true);
  st->op = PipeState::kSend;
  st->data = data;
  st->len = len;
  st->done = 0;
  const int n = attempt(L, st);
  if (n >= 0) {
    release(L, st);
    return n;
  }
  // It waits: the data stays where it is, held for the wait.
  check_may_wait(L, st);
  lua_pushvalue(L, 2);
  st->data_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  return io_wait(L, poll_call(st), st, resume);
}

// close(): true. A task waiting on the pipe answers closed; the program
// reads end of file (stdin), or is told its reader left (EPIPE, SIGPIPE).
int m_close(lua_State* L) {
  PipeState* st = check(L, "close");
  if (st) stop_ahead(L, st);  // a watch made this step would arm the slot the close frees
  if (st && st->pipe) st->pipe->close();
  lua_pushboolean(L, 1);
  return 1;
}

int m_tostring(lua_State* L) {
  PipeState* st = check(L, "tostring");
  if (st) lua_pushfstring(L, "program %s", st->name);
  else lua_pushliteral(L, "program pipe (closed)");
  return 1;
}

void finalize(lua_State* L, void* object) {
  auto* r = static_cast<PipeRef*>(object);
  PipeState* st = r->st;
  r->st = nullptr;
  if (!st) return;
  io_forget(L, st);
  if (st->data_ref != LUA_NOREF) luaL_unref(L, LUA_REGISTRYINDEX, st->data_ref);
  delete st;  // closes the pipe where it is still open
}

int m_gc(lua_State* L) {
  auto* r = static_cast<PipeRef*>(lua_touserdata(L, 1));
  if (r) run_finalizer(L, &r->fin);
  return 0;
}

// The metatable (push_registry_table's make), made at the process's first program.
void make_metatable(lua_State* L) {
  lua_createtable(L, 0, 4);
  lua_createtable(L, 0, 3);
  lua_pushcfunction(L, m_receive);
  lua_setfield(L, -2, "receive");
  lua_pushcfunction(L, m_send);
  lua_setfield(L, -2, "send");
  lua_pushcfunction(L, m_close);
  lua_setfield(L, -2, "close");
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, m_tostring);
  lua_setfield(L, -2, "__tostring");
  lua_pushcfunction(L, m_gc);
  lua_setfield(L, -2, "__gc");
  lua_pushliteral(L, "program pipe");
  lua_setfield(L, -2, "__metatable");
}

// A new pipe object, its end not yet given (closed until then). Made
// before the descriptors, as it may raise (out of memory): an end made
// first would have no owner.
PipeRef* push_pipe(lua_State* L, const char* name) {
  auto* r = static_cast<PipeRef*>(new_userdata_with(L, sizeof(PipeRef), &kMetatableKey, make_metatable));
  r->st = nullptr;
  r->fin = HostFinalizer{};
  r->st = new PipeState{};
  r->st->name = name;
  track_finalizer(L, &r->fin, finalize, r);  // its __gc closes it
  return r;
}

// pipes(delta, stdout, stderr): a task starts (1) or ends (-1) its wait
// for the program; the pipes read ahead while any task waits.
int wait_ahead(lua_State* L) {
  const int delta = static_cast<int>(lua_tointeger(L, 1));
  PipeState* both[2] = {check(L, "wait (p.stdout, p.stderr)", 2), check(L, "wait (p.stdout, p.stderr)", 3)};
  for (PipeState* st : both) {
    if (!st) continue;  // finalized (closed)
    st->waiters += delta;
    if (st->waiters > 0) read_ahead(L, st);
    else stop_ahead(L, st);
  }
  return 0;
}

int fail_errno(lua_State* L, int err) {
  lua_pushnil(L);
  lua_pushfstring(L, "io: pipes for a program: %s", std::strerror(err));
  return 2;
}

}  // namespace

int exec_pipes(lua_State* L) {
  if (lua_type(L, 1) == LUA_TNUMBER) return wait_ahead(L);
  // The start that takes the program's ends is a waiting call: where it
  // would raise, it does so here, before any descriptor exists.
  check_blockable(L);
  PipeRef* ends[3] = {push_pipe(L, "stdin"), push_pipe(L, "stdout"), push_pipe(L, "stderr")};
  // [0]: the program's stdin (it reads fds[0]); [1], [2]: its stdout and
  // stderr (it writes fds[1]).
  int fds[3][2];
  for (int i = 0; i < 3; ++i) {
    if (const int err = io::make_program_pipe(fds[i], i == 0); err != 0) {
      for (int j = 0; j < i; ++j) {
        ::close(fds[j][0]);
        ::close(fds[j][1]);
      }
      return fail_errno(L, err);
    }
  }
  const std::array<int, 3> child{fds[0][0], fds[1][1], fds[2][1]};
  const int parent[3] = {fds[0][1], fds[1][0], fds[2][0]};
  for (int i = 0; i < 3; ++i) ends[i]->st->pipe = std::make_unique<io::PipeStream>(io_services(L).netpoll, parent[i]);
  const double token = static_cast<double>(io_services(L).exec.hand_over(self_pid(L), child));
  lua_pushnumber(L, token);
  lua_insert(L, -4);  // token, stdin, stdout, stderr
  for (PipeRef* r : ends) {
    if (!r->st->pipe->registered()) {
      io_services(L).exec.drop_handed(self_pid(L), static_cast<std::uint64_t>(token));
      return fail_errno(L, r->st->pipe->open_error());  // the objects close their ends when collected
    }
  }
  return 4;
}

}  // namespace host::lua
