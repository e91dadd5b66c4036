// The waiting-call protocol (docs/ARCHITECTURE.md, "A call that waits"):
// a Lua task starts a command through require("host.call"), a native
// handler completes it later from another thread, and the task resumes
// with the results or the error; terminate ends a process mid-wait and
// the late completion is dropped. And the fs and exec services' ownership:
// a process's files are closed and its programs killed when it ends.
#include <doctest/doctest.h>

#include <dirent.h>
#include <signal.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <lua.hpp>

#include "host/io/call_values.hpp"
#include "bindings/codec.hpp"
#include "bindings/lua_runtime.hpp"
#include "tests/native_processes.hpp"
#include "tests/watchdog.hpp"

using namespace host;
using namespace host::testing;
using namespace std::chrono_literals;

namespace {

// The test-only command: completes after req.arg milliseconds from a
// thread of its own, with values ("values"), an error ("error"), its
// arguments back ("echo"), or never ("never": kept for the test).
struct TestCommand {
  std::mutex mu;
  std::vector<std::thread> threads;  // guarded by mu
  std::vector<std::pair<Pid, std::uint64_t>> never;  // guarded by mu
  ~TestCommand() { join(); }
  void join() {
    std::vector<std::thread> ts;
    {
      std::lock_guard lock(mu);
      ts.swap(threads);
    }
    for (auto& t : ts) t.join();
  }
  void install(Scheduler& s) {
    CommandHandler h;
    h.name = "test";
    h.run = [this](CommandRequest&& req) {
      std::vector<io::CallValue> args;
      REQUIRE(io::read_call_values(req.bytes, args, nullptr));
      const std::string mode = args.empty() ? "" : args[0].string;
      std::lock_guard lock(mu);
      if (mode == "never") {
        never.emplace_back(req.pid, req.tag);
        return;
      }
      threads.emplace_back([req = std::move(req), args = std::move(args), mode] {
        std::this_thread::sleep_for(std::chrono::milliseconds(req.arg));
        if (mode == "error") {
          req.scheduler->complete_yield(req.pid, req.tag, {}, "io: the test's failure");
          return;
        }
        io::CallResultWriter w;
        if (mode == "values") {
          w.number(42).table(2, 0).string("a").string("b").string("x");
        } else {
          for (std::size_t i = 1; i < args.size(); ++i) {
            if (args[i].is_number()) w.number(args[i].number);
            else w.string(args[i].string);
          }
        }
        req.scheduler->complete_yield(req.pid, req.tag, w.finish());
      });
    };
    s.commands().add(io::io_cmd::kFirstEmbedder, std::move(h));
  }
};

std::string text_of(const std::string& bytes) {
  lua_State* L = luaL_newstate();
  std::string err, out;
  if (lua::decode_values(L, bytes, &err) == 1 && lua_type(L, 1) == LUA_TSTRING) out = lua_tostring(L, 1);
  else if (lua::decode_values(L, bytes, &err) == 1 && lua_type(L, 1) == LUA_TNUMBER) out = std::to_string(lua_tointeger(L, 1));
  lua_close(L);
  return out;
}

struct Calls {
  Watchdog dog{"waiting calls", 180s};
  Scheduler s{{.workers = 2}};
  lua::LuaRuntime rt{s, {.dir = HOST_TEST_SCRIPTS}};
  ExitLog exits{s};
  TestCommand command;
  Calls() { command.install(s); }
  ~Calls() {
    s.shutdown(0ms);
    command.join();
  }

  std::string args(std::initializer_list<const char*> strings, std::initializer_list<double> numbers = {}) {
    lua_State* L = luaL_newstate();
    for (const char* v : strings) lua_pushstring(L, v);
    for (double v : numbers) lua_pushnumber(L, v);
    std::string out;
    REQUIRE(lua::encode_values(L, 1, lua_gettop(L), out).empty());
    lua_close(L);
    return out;
  }
  // Runs fixtures.waiting_call:method to its end; its result as text.
  std::string run(const char* method, std::string encoded = std::string(1, '\0')) {
    auto p = rt.spawn(std::string("fixtures.waiting_call:") + method, std::move(encoded));
    REQUIRE_MESSAGE(p, p.error);
    REQUIRE(exits.wait(p.pid));
    ExitInfo info = exits.get(p.pid);
    REQUIRE_MESSAGE(!info.failed, info.error);
    return text_of(info.result);
  }
};

std::size_t open_fds() {
  std::size_t n = 0;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (::readdir(d)) ++n;
    ::closedir(d);
  }
  return n;
}

bool os_process_gone(int pid, std::chrono::milliseconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
    std::this_thread::sleep_for(5ms);
  }
  return false;
}

}  // namespace

TEST_CASE("a waiting call's results, completed later from another thread, become the task's returns") {
  Calls c;
  CHECK(c.run("one", c.args({"values"}, {30})) == "42|a,b|x");
}

TEST_CASE("a waiting call that fails returns nil and the error") {
  Calls c;
  CHECK(c.run("one", c.args({"error"}, {10})) == "nil|io: the test's failure|nil");
}

TEST_CASE("many tasks of one process wait in calls at once and each gets its own results") {
  Calls c;
  CHECK(c.run("many", c.args({}, {40})) == "40");
}

TEST_CASE("a waiting call inside a user's coroutine suspends the task and returns to that coroutine") {
  Calls c;
  CHECK(c.run("in_coroutine") == "inner,after");
}

TEST_CASE("arguments that cannot cross are refused, and an unknown command fails only the call") {
  Calls c;
  const std::string bad = c.run("bad_argument");
  CHECK(bad.rfind("false|", 0) == 0);
  CHECK(bad.find("invalid: cannot send function") != std::string::npos);
  CHECK(c.run("unknown") == "nil|invalid: unknown command 200");
}

TEST_CASE("terminate ends a process waiting in a call, and the completion that comes later is dropped") {
  Calls c;
  auto p = c.rt.spawn("fixtures.waiting_call:forever", std::string(1, '\0'));
  REQUIRE(p);
  for (int i = 0; i < 2000; ++i) {
    {
      std::lock_guard lock(c.command.mu);
      if (!c.command.never.empty()) break;
    }
    std::this_thread::sleep_for(1ms);
  }
  std::pair<Pid, std::uint64_t> waiting;
  {
    std::lock_guard lock(c.command.mu);
    REQUIRE(c.command.never.size() == 1);
    waiting = c.command.never[0];
  }
  CHECK(c.s.terminate(p.pid).empty());
  REQUIRE(c.exits.wait(p.pid));
  CHECK(c.exits.get(p.pid).failed);
  CHECK(c.exits.get(p.pid).error.find("terminated") != std::string::npos);
  CHECK(!c.s.complete_yield(waiting.first, waiting.second, "\x01\x00"));
}

TEST_CASE("a process's open files are closed when it ends, also when it is terminated mid-wait") {
  Calls c;
  auto done = c.rt.spawn("fixtures.io_owner:open_and_return", std::string(1, '\0'));
  REQUIRE(done);
  REQUIRE(c.exits.wait(done.pid));
  CHECK_MESSAGE(!c.exits.get(done.pid).failed, c.exits.get(done.pid).error);
  CHECK(c.rt.io().fs.open_files() == 0);

  auto stuck = c.rt.spawn("fixtures.io_owner:open_and_wait", std::string(1, '\0'));
  REQUIRE(stuck);
  for (int i = 0; i < 2000 && c.rt.io().fs.open_files() < 3; ++i) std::this_thread::sleep_for(1ms);
  CHECK(c.rt.io().fs.open_files() == 3);
  c.s.terminate(stuck.pid);
  REQUIRE(c.exits.wait(stuck.pid));
  CHECK(c.rt.io().fs.open_files() == 0);
}

TEST_CASE("a process's running programs are killed when it ends, however it ends") {
  Calls c;
  for (const char* how : {"start_and_return", "start_and_fail", "start_and_wait"}) {
    CAPTURE(how);
    auto p = c.rt.spawn(std::string("fixtures.io_owner:") + how, std::string(1, '\0'));
    REQUIRE(p);
    if (std::string(how) == "start_and_wait") {
      for (int i = 0; i < 2000 && c.rt.io().exec.programs() < 2; ++i) std::this_thread::sleep_for(1ms);
      REQUIRE(c.rt.io().exec.programs() == 2);
      CHECK(c.rt.io().netpoll.open_count() == 6);  // their pipes, on the process's side
      c.s.terminate(p.pid);
    }
    REQUIRE(c.exits.wait(p.pid));
    CHECK(c.rt.io().netpoll.open_count() == 0);  // the pipes closed before the exit was told
    ExitInfo info = c.exits.get(p.pid);
    // Its result, or the error's first line: the sleeps' OS pids.
    std::string pids = info.failed ? info.error.substr(info.error.find("pids ") + 5) : text_of(info.result);
    if (std::string(how) == "start_and_wait") {
      for (int i = 0; i < 2000 && c.rt.io().exec.programs() > 0; ++i) std::this_thread::sleep_for(1ms);
      CHECK(c.rt.io().exec.programs() == 0);
      continue;
    }
    const auto comma = pids.find(',');
    REQUIRE(comma != std::string::npos);
    CHECK(os_process_gone(std::stoi(pids.substr(0, comma)), 5s));
    CHECK(os_process_gone(std::stoi(pids.substr(comma + 1)), 5s));
    for (int i = 0; i < 2000 && c.rt.io().exec.programs() > 0; ++i) std::this_thread::sleep_for(1ms);
    CHECK(c.rt.io().exec.programs() == 0);
  }
}

// Under a sanitizer, a fifth as many: the same paths, in CI's time.
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
constexpr int kChurn = 2000;
#else
constexpr int kChurn = 10000;
#endif

TEST_CASE("a send to a program that has ended answers closed, SIGPIPE not ignored (as an embedder's may not)") {
  Calls c;
  struct sigaction old {};
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigaction(SIGPIPE, &dfl, &old);
  auto p = c.rt.spawn("fixtures.exec_reader:send_to_gone", std::string(1, '\0'));
  REQUIRE(p);
  REQUIRE(c.exits.wait(p.pid));
  ExitInfo info = c.exits.get(p.pid);
  sigaction(SIGPIPE, &old, nullptr);
  REQUIRE_MESSAGE(!info.failed, info.error);
  CHECK(text_of(info.result) == "nil,closed");
}

TEST_CASE("10,000 connections made and closed leave the descriptor count where it started") {
  Calls c;
  // The I/O thread and its loop exist before the count (its own descriptors).
  auto warm = c.rt.spawn("fixtures.socket_owner:churn", c.args({}, {100, 100}));
  REQUIRE(warm);
  REQUIRE(c.exits.wait(warm.pid, 60s));
  const std::size_t before = open_fds();
  auto p = c.rt.spawn("fixtures.socket_owner:churn", c.args({}, {kChurn, 100}));
  REQUIRE(p);
  REQUIRE(c.exits.wait(p.pid, 120s));
  ExitInfo info = c.exits.get(p.pid);
  REQUIRE_MESSAGE(!info.failed, info.error);
  CHECK(text_of(info.result) == std::to_string(kChurn));
  for (int i = 0; i < 200 && (c.rt.io().open_sockets() != 0 || open_fds() > before); ++i)
    std::this_thread::sleep_for(10ms);
  CHECK(c.rt.io().open_sockets() == 0);
  CHECK(open_fds() == before);
}

TEST_CASE("a send whose wait the kernel refuses to watch fails with why, saying how much it sent") {
  Calls c;
  auto p = c.rt.spawn("fixtures.socket_owner:send_until_refused", std::string(1, '\0'));
  REQUIRE(p);
  for (int i = 0; i < 2000 && c.rt.io().open_sockets() < 3; ++i) std::this_thread::sleep_for(1ms);
  REQUIRE(c.rt.io().open_sockets() == 3);
  // As the kernel's epoll limits would (ENOSPC: max_user_watches).
  c.rt.io().netpoll.refuse_registrations_for_test(ENOSPC);
  REQUIRE(c.s.send(p.pid, "go", std::string(), Pid{}).empty());
  REQUIRE(c.exits.wait(p.pid));
  const ExitInfo info = c.exits.get(p.pid);
  c.rt.io().netpoll.refuse_registrations_for_test(0);
  REQUIRE_MESSAGE(!info.failed, info.error);
  const std::string r = text_of(info.result);
  // nil, the refusal in "kind: detail" form, and the bytes the kernel took
  // before the send had to wait (some, never all 32 MB).
  CHECK_MESSAGE(r.rfind("nil|limit: ", 0) == 0, r);
  const std::size_t bar = r.rfind('|');
  REQUIRE(bar != std::string::npos);
  const double sent = std::atof(r.c_str() + bar + 1);
  CHECK_MESSAGE(sent > 0, r);
  CHECK(sent < 32.0 * 1024 * 1024);
}

TEST_CASE("terminate ends a process waiting in a socket receive, and its sockets close") {
  Calls c;
  auto p = c.rt.spawn("fixtures.socket_owner:receive_forever", std::string(1, '\0'));
  REQUIRE(p);
  for (int i = 0; i < 2000 && c.rt.io().open_sockets() < 3; ++i) std::this_thread::sleep_for(1ms);
  REQUIRE(c.rt.io().open_sockets() == 3);
  CHECK(c.s.terminate(p.pid).empty());
  REQUIRE(c.exits.wait(p.pid));
  CHECK(c.exits.get(p.pid).error.find("terminated") != std::string::npos);
  CHECK(c.rt.io().open_sockets() == 0);  // closed before the exit was told
}
