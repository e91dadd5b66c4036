// How a Lua process's step hands the messages that arrived to its kernel
// (bindings/lua_process.cpp, deliver_events): a run of messages that nobody
// waits for goes to the inbox in one call, and a message whose bytes cannot
// be decoded is dropped (logged) without taking its neighbours with it.
#include <doctest/doctest.h>

#include <atomic>
#include <string>
#include <thread>

#include <lua.hpp>

#include "bindings/codec.hpp"
#include "bindings/lua_runtime.hpp"
#include "tests/native_processes.hpp"
#include "tests/watchdog.hpp"

using namespace host;
using namespace host::testing;
using namespace std::chrono_literals;

namespace {

// The codec's bytes for one number, and the string a result's bytes hold.
struct Codec {
  lua_State* L = luaL_newstate();
  ~Codec() { lua_close(L); }
  std::string number(double v) {
    lua_settop(L, 0);
    lua_pushnumber(L, v);
    std::string out;
    REQUIRE(lua::encode_values(L, 1, 1, out).empty());
    return out;
  }
  std::string text(const std::string& bytes) {
    lua_settop(L, 0);
    std::string err;
    REQUIRE(lua::decode_values(L, bytes, &err) == 1);
    REQUIRE(lua_type(L, 1) == LUA_TSTRING);
    return lua_tostring(L, 1);
  }
};

}  // namespace

TEST_CASE("a run of queued messages reaches a Lua process whole and in order, less the one it cannot decode") {
  Watchdog dog("lua delivery", 60s);
  Scheduler s({.workers = 1});
  lua::LuaRuntime rt(s, {.dir = HOST_TEST_SCRIPTS});
  ExitLog exits(s);
  Codec codec;
  const int sent = 200, bad = 50;
  auto collector = rt.spawn("fixtures.collector", codec.number(sent - 1));
  REQUIRE(collector);
  std::this_thread::sleep_for(100ms);  // it waits in process.receive

  // Keep the only worker busy while the messages arrive, so the collector's
  // next step gets them all at once: the first for its waiting task, the
  // rest queued (one by one until its 16th message, then in runs).
  std::atomic<bool> busy{false}, release{false};
  auto blocker = s.spawn(make_fn([&](FnProcess&, std::span<Event>, StepOutput& out) {
                           busy = true;
                           while (!release) std::this_thread::yield();
                           done(out);
                         }),
                         "blocker", "");
  REQUIRE(blocker);
  while (!busy) std::this_thread::yield();
  std::string want;
  for (int i = 1; i <= sent; ++i) {
    std::string payload = i == bad ? std::string("\x01\x07", 2) : codec.number(i);  // 7: no such tag
    REQUIRE(s.send(collector.pid, "n", std::move(payload), Pid{}).empty());
    if (i == bad) continue;
    if (!want.empty()) want += ',';
    want += std::to_string(i);
  }
  release = true;
  REQUIRE(exits.wait(collector.pid));
  ExitInfo info = exits.get(collector.pid);
  REQUIRE_MESSAGE(!info.failed, info.error);
  CHECK(codec.text(info.result) == want);
}

TEST_CASE("a message with no payload bytes reaches a Lua process with a nil payload") {
  // What process.send writes for a nil payload; a native sender's empty
  // payload reads the same.
  Watchdog dog("lua delivery", 60s);
  Scheduler s({.workers = 1});
  lua::LuaRuntime rt(s, {.dir = HOST_TEST_SCRIPTS});
  ExitLog exits(s);
  Codec codec;
  auto collector = rt.spawn("fixtures.collector", codec.number(3));
  REQUIRE(collector);
  REQUIRE(s.send(collector.pid, "n", codec.number(1), Pid{}).empty());
  REQUIRE(s.send(collector.pid, "n", std::string(), Pid{}).empty());
  REQUIRE(s.send(collector.pid, "n", codec.number(3), Pid{}).empty());
  REQUIRE(exits.wait(collector.pid));
  ExitInfo info = exits.get(collector.pid);
  REQUIRE_MESSAGE(!info.failed, info.error);
  CHECK(codec.text(info.result) == "1,nil,3");
}
