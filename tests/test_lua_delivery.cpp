// How a Lua process's step hands the messages that arrived to its kernel
// (bindings/lua_process_delivery.cpp, deliver_events): a run of messages that nobody
// waits for goes to the inbox in one call, and a message whose bytes cannot
// be decoded is dropped (logged) without taking its neighbours with it.
#include <doctest/doctest.h>

#include <atomic>
#include <initializer_list>
#include <sstream>
#include <string>
#include <thread>

#include <lua.hpp>

#include "bindings/codec.hpp"
#include "bindings/lua_runtime.hpp"
#include "host/cluster/buffer_pool.hpp"
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
  std::string number(double v) { return numbers({v}); }
  std::string numbers(std::initializer_list<double> vs) {
    lua_settop(L, 0);
    for (double v : vs) lua_pushnumber(L, v);
    std::string out;
    REQUIRE(lua::encode_values(L, 1, static_cast<int>(vs.size()), out).empty());
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

// One worker, a Lua runtime over the test scripts, and their exits.
struct Delivery {
  Watchdog dog{"lua delivery", 60s};
  Scheduler s{{.workers = 1}};
  lua::LuaRuntime rt{s, {.dir = HOST_TEST_SCRIPTS}};
  ExitLog exits{s};
  Codec codec;

  // The workers stop, and the processes still alive close, before the
  // runtime goes (as host/program/main.cpp orders it): members go in reverse, and
  // a process closing on a worker reaches into the runtime (its names).
  // A test's last message (a "stop" to its sender) left one closing while
  // the runtime was destroyed: ThreadSanitizer saw the race.
  ~Delivery() { s.shutdown(0ms); }

  // fixtures.collector's result once it has exited: its payloads, in order.
  std::string collected(const Pid& collector) {
    REQUIRE(exits.wait(collector));
    ExitInfo info = exits.get(collector);
    REQUIRE_MESSAGE(!info.failed, info.error);
    return codec.text(info.result);
  }
};

}  // namespace

TEST_CASE("a run of queued messages reaches a Lua process whole and in order, less the one it cannot decode") {
  Delivery d;
  Scheduler& s = d.s;
  Codec& codec = d.codec;
  const int sent = 200, bad = 50;
  auto collector = d.rt.spawn("fixtures.collector", codec.number(sent - 1));
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
  CHECK(d.collected(collector.pid) == want);
}

TEST_CASE("messages one by one to a waiting Lua process: one it cannot decode is dropped, the next arrives") {
  // One message a step, from a process (a sender the host's messages lack):
  // past its first messages, the collector's step hands a number to its
  // waiting task as it is (LuaProcess::hand_over), while a string it has
  // not seen and one with bad bytes go through the step's body, which
  // drops the bad one; between them, nothing is lost or reordered.
  Delivery d;
  const int sent = 60, bad = 30, text = 40;
  auto collector = d.rt.spawn("fixtures.collector", d.codec.number(sent - 1));
  REQUIRE(collector);
  auto sender = d.rt.spawn("fixtures.idle", d.codec.numbers({}));
  REQUIRE_MESSAGE(sender, sender.error);
  std::string want;
  for (int i = 1; i <= sent; ++i) {
    std::string payload = i == bad ? std::string("\x01\x07", 2) : d.codec.number(i);
    if (i == text) {
      lua_settop(d.codec.L, 0);
      lua_pushstring(d.codec.L, "forty");
      payload.clear();
      REQUIRE(lua::encode_values(d.codec.L, 1, 1, payload).empty());
    }
    REQUIRE(d.s.send(collector.pid, "n", std::move(payload), sender.pid).empty());
    std::this_thread::sleep_for(1ms);  // mostly taken before the next comes
    if (i == bad) continue;
    if (!want.empty()) want += ',';
    want += i == text ? "forty" : std::to_string(i);
  }
  CHECK(d.collected(collector.pid) == want);
  REQUIRE(d.s.send(sender.pid, "stop", std::string(), Pid{}).empty());
}

TEST_CASE("a message with no payload bytes reaches a Lua process with a nil payload") {
  // What process.send writes for a nil payload; a native sender's empty
  // payload reads the same.
  Delivery d;
  auto collector = d.rt.spawn("fixtures.collector", d.codec.number(3));
  REQUIRE(collector);
  REQUIRE(d.s.send(collector.pid, "n", d.codec.number(1), Pid{}).empty());
  REQUIRE(d.s.send(collector.pid, "n", std::string(), Pid{}).empty());
  REQUIRE(d.s.send(collector.pid, "n", d.codec.number(3), Pid{}).empty());
  CHECK(d.collected(collector.pid) == "1,nil,3");
}

TEST_CASE("a sender far ahead of its receiver lets it run, and every message arrives in order") {
  // One worker: without the yield (config::kSendBacklogYield) the receiver
  // could not run before the sender's step ended, so no ack could come
  // before the marker the sender sends itself halfway through its flood.
  Delivery d;
  const int n = 20000;
  struct Case {
    int where;
    const char* name;
    bool yields;
  };
  for (Case c : {Case{1, "in the task", true}, Case{2, "in a coroutine.wrap'ed function", true},
                 Case{3, "in a C call's callback (string.gsub)", false}}) {
    CAPTURE(c.name);
    auto sender = d.rt.spawn("fixtures.backlog_sender", d.codec.numbers({n, static_cast<double>(c.where)}));
    REQUIRE(sender);
    std::istringstream result(d.collected(sender.pid));
    int before = -1, seen = -1;
    std::string in_order;
    result >> before >> seen >> in_order;
    CHECK(seen == n);
    CHECK(in_order == "true");
    if (c.yields) {
      // The receiver ran while the first half was still being sent.
      CHECK(before > 0);
    } else {
      CHECK(before == 0);  // no yield gets through a C call: the sends only queue
    }
  }
}

TEST_CASE("a large payload's buffer goes back to the node's kept buffers once the process has decoded it") {
  // What a cluster node's receiver does with a large message put together
  // from parts (host/cluster/buffer_pool.hpp): the payload is a kept
  // buffer, and the next large message reuses its mapped pages.
  Delivery d;
  const std::string text(300u << 10, 'q');  // over kPooledMinBytes
  lua_settop(d.codec.L, 0);
  lua_pushlstring(d.codec.L, text.data(), text.size());
  std::string bytes;
  REQUIRE(lua::encode_values(d.codec.L, 1, 1, bytes).empty());
  std::string payload = host::cluster::take_buffer(bytes, bytes.size());
  const char* memory = payload.data();
  const std::size_t kept = host::cluster::pooled_buffers();
  auto collector = d.rt.spawn("fixtures.collector", d.codec.number(1));
  REQUIRE(collector);
  REQUIRE(d.s.send(collector.pid, "big", std::move(payload), Pid{}).empty());
  CHECK(d.collected(collector.pid) == text);
  CHECK(host::cluster::pooled_buffers() == kept + 1);
  std::string again = host::cluster::take_buffer({}, bytes.size());
  CHECK(again.data() == memory);
}
