// Stopping always works, tried as a user meets it:
// the fixtures in tests/lua/fixtures/stopping.lua run through the host
// program, each under run_program's timeout, so a process that can no
// longer be stopped fails its test instead of hanging it.
#include <doctest/doctest.h>

#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "tests/cpu_hogs.hpp"
#include "tests/subprocess.hpp"

using namespace host::testing;
using namespace std::chrono_literals;

namespace {

const std::string kHost = HOST_BINARY;
const std::string kScripts = HOST_TEST_SCRIPTS;

bool contains(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

struct Timed {
  RunResult r;
  std::chrono::milliseconds took;
};

// Runs `host run tests/lua --entry fixtures.stopping:ENTRY [flags] -- ARGS`.
Timed run_fixture(const std::string& entry, std::vector<std::string> flags, std::vector<std::string> args,
                  RunOptions opts = {}) {
  std::vector<std::string> argv = {kHost, "run", kScripts, "--entry", "fixtures.stopping:" + entry};
  argv.insert(argv.end(), flags.begin(), flags.end());
  if (!args.empty()) {
    argv.push_back("--");
    argv.insert(argv.end(), args.begin(), args.end());
  }
  // Threads given up inside a state keep it on purpose; LuaJIT's tagged
  // pointers hide it from LSan.
  opts.env.push_back({"ASAN_OPTIONS", "detect_leaks=0"});
  const auto t0 = std::chrono::steady_clock::now();
  RunResult r = run_program(argv, std::move(opts));
  return {std::move(r), std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)};
}

}  // namespace

TEST_CASE("terminate ends a process stuck in a C call, a finalizer or a module's top-level code, and its name is free") {
  for (std::string workers : {"2", "1"}) {
    for (std::string kind : {"read", "execute", "finalizer", "load"}) {
      CAPTURE(workers);
      CAPTURE(kind);
      RunOptions o;
      o.quiet_stdin = true;
      auto [r, took] = run_fixture("terminate", {"--workers", workers}, {kind}, o);
      CHECK_FALSE(r.timed_out);
      CHECK_MESSAGE(r.code == 0, r.err);
      CHECK(contains(r.err, "TERMINATED " + kind));
      // Not the grace period's 5 s: the process was ended, not waited for
      // (execute's sleep holds the output pipes for its 3 s).
      CHECK(took < 4500ms);
    }
  }
}

TEST_CASE("the time limit stops a finalizer loop in a step or as the state closes, a loop of spawns, and a top-level loop that names jit or turns it on") {
  for (std::string kind : {"finalizer", "closing", "spawn_loop", "jit_at_load", "jit_on_at_load"}) {
    CAPTURE(kind);
    auto [r, took] = run_fixture("limit", {"--time-limit", "0.5", "--max-processes", "5000"}, {kind});
    CHECK_FALSE(r.timed_out);
    CHECK_MESSAGE(r.code == 0, r.err);
    CHECK(contains(r.err, "LIMITED " + kind));
    CHECK(took < 10s);
  }
}

TEST_CASE("time blocked in a system call does not count against the time limit") {
  auto [r, took] = run_fixture("blocked", {"--time-limit", "0.5"}, {"1.5"});
  CHECK_FALSE(r.timed_out);
  CHECK_MESSAGE(r.code == 0, r.err);
  CHECK(contains(r.err, "WAITED"));
  CHECK_FALSE(contains(r.err, "limit: time"));
}

TEST_CASE("the host exits when its root returns though a process is stuck in a C call") {
  RunOptions o;
  o.quiet_stdin = true;
  auto [r, took] = run_fixture("leaves_stuck_child", {}, {"read"}, o);
  CHECK_FALSE(r.timed_out);
  CHECK_MESSAGE(r.code == 0, r.err);
  CHECK(took < 8s);  // the grace period's 5 s and a little
}

TEST_CASE("a signal ends a host whose root is stuck in a C call within the grace period; a second one at once") {
  auto ready = [](const std::string&, const std::string& err) { return contains(err, "ready"); };
  for (auto [sig, code] : {std::pair{SIGINT, 130}, std::pair{SIGTERM, 143}}) {
    CAPTURE(sig);
    RunOptions o;
    o.quiet_stdin = true;
    o.signal = sig;
    o.signal_when = ready;
    auto [r, took] = run_fixture("stuck_root", {}, {}, o);
    CHECK_FALSE(r.timed_out);
    CHECK(r.code == code);
    CHECK(took < 8s);
  }
  for (auto [sig, code] : {std::pair{SIGINT, 130}, std::pair{SIGTERM, 143}}) {
    CAPTURE(sig);
    RunOptions o;
    o.quiet_stdin = true;
    o.signal = SIGINT;
    o.signal_when = ready;
    o.second_signal = sig;
    o.second_signal_when = [](const std::string&, const std::string& err) {
      return contains(err, "cancelling every process");
    };
    auto [r, took] = run_fixture("stuck_root", {}, {}, o);
    CHECK_FALSE(r.timed_out);
    CHECK(r.code == code);
    CHECK(contains(r.err, "again: exiting at once"));
    CHECK(took < 3s);
  }
}

// The race of issue 42 as a user meets it: spinning processes stopped by
// the time limit (the monitor replacing their workers' threads) while a
// signal starts shutdown at a random moment, with threads hogging the CPUs
// beside. Every run must end with the signal's status, in time.
TEST_CASE("a signal during runaway spinners, with the CPUs loaded, always ends the host in time") {
  CpuHogs hogs(2);
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
  const int runs = 4;
#else
  const int runs = 12;
#endif
  for (int run = 0; run < runs; ++run) {
    CAPTURE(run);
    const int sig = run % 2 ? SIGTERM : SIGINT;
    const auto delay = std::chrono::milliseconds(37 * run % 400);
    std::chrono::steady_clock::time_point ready_at{};
    RunOptions o;
    o.signal = sig;
    o.signal_when = [&](const std::string&, const std::string& err) {
      if (!contains(err, "ready")) return false;
      if (ready_at == std::chrono::steady_clock::time_point{}) ready_at = std::chrono::steady_clock::now();
      return std::chrono::steady_clock::now() - ready_at >= delay;
    };
    auto [r, took] = run_fixture("spinners", {"--time-limit", "0.2", "--workers", "2"}, {"3"}, o);
    CHECK_FALSE(r.timed_out);
    CHECK_MESSAGE(r.code == (sig == SIGINT ? 130 : 143), r.err);
    CHECK(took < 9s);
  }
}
