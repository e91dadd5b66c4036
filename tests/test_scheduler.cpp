// Tests of the scheduler (host/scheduler.hpp) with native processes: the
// process lifecycle, yields and their correlation, command dispatch errors,
// the relay, links and monitors, terminate, cancel, the idle job, and
// shutdown.
#include <doctest/doctest.h>

#include <algorithm>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "host/pid_table.hpp"
#include "host/scheduler.hpp"
#include "host/worker.hpp"
#include "tests/native_processes.hpp"
#include "tests/watchdog.hpp"

using namespace host;
using namespace host::testing;
using namespace std::chrono_literals;

namespace {

// A command the test completes by hand: the handler only records requests.
constexpr CommandId kHold = cmd::kFirstUser + 1;
struct Held {
  Pid pid;
  std::uint64_t tag;
  std::int64_t arg;
};
struct HoldBox {
  std::mutex mu;
  std::vector<Held> held;
  void install(Scheduler& s) {
    s.commands().add(kHold, CommandHandler{[this](CommandRequest&& r) {
                                             std::lock_guard lock(mu);
                                             held.push_back({r.pid, r.tag, r.arg});
                                           },
                                           nullptr, false, "hold"});
  }
  std::size_t size() {
    std::lock_guard lock(mu);
    return held.size();
  }
  bool wait_size(std::size_t n) {
    for (int i = 0; i < 4000 && size() < n; ++i) std::this_thread::sleep_for(1ms);
    return size() >= n;
  }
};

// Waits for messages; finishes with the payload of a "stop" message.
std::unique_ptr<Process> waiter(std::atomic<int>* closes = nullptr) {
  return make_fn(
      [](FnProcess&, std::span<Event> events, StepOutput& out) {
        for (auto& e : events)
          if (e.kind == EventKind::Message && e.topic == "stop") return done(out, e.payload);
        out.status = Status::Idle;
      },
      closes);
}

}  // namespace

TEST_CASE("a no-op process runs to Done and its result reaches the exit hook") {
  Watchdog dog("noop", 30s);
  Scheduler s({.workers = 2});
  ExitLog exits(s);
  std::atomic<int> closes{0};
  auto r = s.spawn(make_fn([](FnProcess& p, auto, StepOutput& out) { done(out, p.method() + ":" + p.input()); },
                           &closes),
                   "main", "args");
  REQUIRE(r);
  CHECK(r.pid.valid());
  REQUIRE(exits.wait(r.pid));
  CHECK_FALSE(exits.get(r.pid).failed);
  CHECK(exits.get(r.pid).result == "main:args");
  CHECK(closes.load() == 1);
  CHECK_FALSE(s.alive(r.pid));
}

TEST_CASE("a failing process and a throwing Step both end Failed with their reason") {
  Watchdog dog("failures", 30s);
  Scheduler s({.workers = 1});
  ExitLog exits(s);
  auto a = s.spawn(make_fn([](FnProcess&, auto, StepOutput& out) { fail(out, "boom"); }), "main", "");
  auto b = s.spawn(make_fn([](FnProcess&, auto, StepOutput&) { throw std::runtime_error("thrown"); }), "main", "");
  REQUIRE(exits.wait(a.pid));
  REQUIRE(exits.wait(b.pid));
  CHECK(exits.get(a.pid).failed);
  CHECK(exits.get(a.pid).error == "boom");
  CHECK(exits.get(b.pid).error.find("thrown") != std::string::npos);
}

TEST_CASE("spawn refuses a null process and returns Init's error after closing it once") {
  Scheduler s({.workers = 1});
  auto null = s.spawn(nullptr, "main", "");
  CHECK_FALSE(null);
  CHECK(null.error.rfind("invalid:", 0) == 0);
  std::atomic<int> closes{0};
  auto bad = s.spawn(std::make_unique<FnProcess>([](FnProcess&, auto, StepOutput&) {}, &closes,
                                                 "not_found: no method 'nope' in module 'm'"),
                     "nope", "");
  CHECK_FALSE(bad);
  CHECK(bad.error == "not_found: no method 'nope' in module 'm'");
  CHECK(closes.load() == 1);
  CHECK(s.live_count() == 0);
}

TEST_CASE("sleep completes no earlier than its delay") {
  Watchdog dog("sleep", 30s);
  Scheduler s({.workers = 2});
  ExitLog exits(s);
  auto t0 = std::chrono::steady_clock::now();
  auto r = s.spawn(make_fn([](FnProcess& p, std::span<Event> events, StepOutput& out) {
                     if (p.steps == 1) {
                       out.add_yield(cmd::kSleep, 7).arg = std::chrono::nanoseconds(40ms).count();
                       out.status = Status::Blocked;
                       return;
                     }
                     for (auto& e : events)
                       if (e.kind == EventKind::YieldComplete && e.tag == 7) return done(out, "slept");
                     out.status = Status::Blocked;
                   }),
                   "main", "");
  REQUIRE(exits.wait(r.pid));
  CHECK(std::chrono::steady_clock::now() - t0 >= 40ms);
  CHECK(exits.get(r.pid).result == "slept");
}

TEST_CASE("a timer readying a process on an idle scheduler wakes one worker, not two") {
  // Every worker parked, the timer thread readies the sleeper: one wake.
  // The woken worker finds it and, with nothing else queued, wakes no
  // other (which would find nothing and park again).
  Watchdog dog("timer wakes", 60s);
  Scheduler s({.workers = 4});
  ExitLog exits(s);
  constexpr int kSleeps = 200;
  auto r = s.spawn(make_fn([](FnProcess& p, std::span<Event>, StepOutput& out) {
                     if (p.steps > kSleeps) return done(out, "slept");
                     out.add_yield(cmd::kSleep, p.steps).arg = std::chrono::nanoseconds(1ms).count();
                     out.status = Status::Blocked;
                   }),
                   "main", "");
  REQUIRE(exits.wait(r.pid));
  CHECK(exits.get(r.pid).result == "slept");
  const Scheduler::Counters c = s.counters();
  CHECK(c.workers.steps == kSleeps + 1);
  // One a sleep and the spawn's (fewer where a worker was still spinning
  // when its timer fired), with room for a stray one; two a sleep when the
  // woken worker woke another without looking for more work.
  CHECK(c.wakes <= kSleeps + kSleeps / 4);
}

TEST_CASE("several outstanding yields completed out of order each reach the process with their own result") {
  Watchdog dog("multi-yield", 30s);
  Scheduler s({.workers = 2});
  HoldBox box;
  box.install(s);
  ExitLog exits(s);
  auto r = s.spawn(make_fn([](FnProcess& p, std::span<Event> events, StepOutput& out) {
                     if (p.steps == 1) {
                       for (std::uint64_t tag = 10; tag < 15; ++tag) out.add_yield(kHold, tag).arg = tag * 2;
                       out.status = Status::Blocked;
                       return;
                     }
                     for (auto& e : events) {
                       if (e.kind != EventKind::YieldComplete) continue;
                       if (e.payload != std::string("r").append(std::to_string(e.tag)))  // not "r" + ...: g++ 12 warns falsely (-Wrestrict)
                         return fail(out, "mismatch for tag " + std::to_string(e.tag));
                       p.scratch += std::to_string(e.tag) + ",";
                     }
                     if (p.scratch.size() == 15) return done(out, p.scratch);
                     out.status = Status::Blocked;
                   }),
                   "main", "");
  REQUIRE(box.wait_size(5));
  std::vector<Held> held;
  {
    std::lock_guard lock(box.mu);
    held = box.held;
  }
  for (auto& h : held) CHECK(h.arg == static_cast<std::int64_t>(h.tag * 2));
  std::thread completer([&] {
    for (std::uint64_t tag : {13, 10, 14, 11, 12}) {
      CHECK(s.complete_yield(r.pid, tag, std::string("r").append(std::to_string(tag))));
      std::this_thread::sleep_for(2ms);
    }
  });
  completer.join();
  REQUIRE(exits.wait(r.pid));
  CHECK_FALSE(exits.get(r.pid).failed);
  CHECK(exits.get(r.pid).result == "13,10,14,11,12,");
  CHECK_FALSE(s.complete_yield(r.pid, 10, "late"));  // gone: dropped, reported false
}

// A direct handler (the netpoller's wait's shape): started and cancelled
// with the context it was registered with; one yield it completes at once
// with bytes copied in (complete_yield_copy), the other it holds until the
// process cancels it.
constexpr CommandId kDirect = cmd::kFirstUser + 2;
struct DirectBox {
  std::atomic<int> started{0};
  std::atomic<std::uint64_t> cancelled_tag{0};
  std::atomic<bool> threw{false};
  std::atomic<std::int32_t> outstanding_before{-1}, outstanding_after{-1};
  static constexpr std::string_view kReady{"ready\0bytes", 11};  // whole, its NUL too
};

TEST_CASE("a direct handler gets its context, its cancel too, and a completion copied in arrives whole") {
  Watchdog dog("direct handler", 30s);
  Scheduler s({.workers = 2});
  DirectBox box;
  CommandHandler h;
  h.name = "direct";
  h.context = &box;
  h.direct = [](void* context, Scheduler& sched, ProcessSlot& slot, const Yield& y) {
    static_cast<DirectBox*>(context)->started.fetch_add(1);
    if (y.arg != 1) return;
    // A completion that throws (its payload could not be built: here a
    // length no string can hold) leaves no event queued and the count as
    // it was, so the one that follows is the only one.
    auto* box = static_cast<DirectBox*>(context);
    box->outstanding_before.store(slot.outstanding_yields.load());
    try {
      sched.complete_yield_copy(slot.pid(), y.tag, std::string_view(DirectBox::kReady.data(), std::string::npos / 2));
    } catch (const std::exception&) {
      box->threw.store(true);
    }
    box->outstanding_after.store(slot.outstanding_yields.load());
    sched.complete_yield_copy(slot.pid(), y.tag, DirectBox::kReady);
  };
  h.direct_cancel = [](void* context, Scheduler&, ProcessSlot&, std::uint64_t tag) {
    static_cast<DirectBox*>(context)->cancelled_tag.store(tag);
    return true;
  };
  s.commands().add(kDirect, std::move(h));
  ExitLog exits(s);
  auto r = s.spawn(make_fn([](FnProcess& p, std::span<Event> events, StepOutput& out) {
                     if (p.steps == 1) {
                       out.add_yield(kDirect, 7).arg = 1;  // completed at once
                       out.add_yield(kDirect, 8).arg = 0;  // held
                       out.status = Status::Blocked;
                       return;
                     }
                     for (auto& e : events) {
                       if (e.kind != EventKind::YieldComplete) continue;
                       if (e.tag != 7 || e.failed) return fail(out, "unexpected completion " + std::to_string(e.tag));
                       out.cancel_yield(kDirect, 8);
                       return done(out, e.payload);
                     }
                     out.status = Status::Blocked;
                   }),
                   "main", "");
  REQUIRE(r);
  REQUIRE(exits.wait(r.pid));
  CHECK_FALSE(exits.get(r.pid).failed);
  CHECK(exits.get(r.pid).result == DirectBox::kReady);
  CHECK(box.started.load() == 2);
  CHECK(box.cancelled_tag.load() == 8);
  CHECK(box.threw.load());
  CHECK(box.outstanding_before.load() > 0);
  CHECK(box.outstanding_after.load() == box.outstanding_before.load());
  // Dropped for a process that is gone, and said so.
  CHECK_FALSE(s.complete_yield_copy(r.pid, 8, DirectBox::kReady));
}

TEST_CASE("an unknown command and a throwing handler complete the yield with an error instead of hanging") {
  Watchdog dog("dispatch errors", 30s);
  Scheduler s({.workers = 1});
  s.commands().add(cmd::kFirstUser + 7,
                   CommandHandler{[](CommandRequest&&) { throw std::runtime_error("disk on fire"); }, nullptr, false,
                                  "thrower"});
  ExitLog exits(s);
  auto run_cmd = [&](CommandId id) {
    return s.spawn(make_fn([id](FnProcess& p, std::span<Event> events, StepOutput& out) {
                     if (p.steps == 1) {
                       out.add_yield(id, 1);
                       out.status = Status::Blocked;
                       return;
                     }
                     for (auto& e : events)
                       if (e.kind == EventKind::YieldComplete) return done(out, e.failed ? e.payload : "");
                     out.status = Status::Blocked;
                   }),
                   "main", "");
  };
  auto unknown = run_cmd(999);
  auto thrower = run_cmd(cmd::kFirstUser + 7);
  REQUIRE(exits.wait(unknown.pid));
  REQUIRE(exits.wait(thrower.pid));
  CHECK(exits.get(unknown.pid).result == "invalid: unknown command 999");
  CHECK(exits.get(thrower.pid).result == "invalid: command thrower failed: disk on fire");
}

TEST_CASE("a blocking handler runs on the blocking pool, not on a worker") {
  Watchdog dog("blocking pool", 30s);
  Scheduler s({.workers = 1});
  std::atomic<bool> on_worker{true};
  s.commands().add(cmd::kFirstUser + 8, CommandHandler{[&](CommandRequest&& r) {
                                                         on_worker = Worker::current() != nullptr;
                                                         std::this_thread::sleep_for(20ms);
                                                         r.scheduler->complete_yield(r.pid, r.tag, "read");
                                                       },
                                                       nullptr, true, "blocking-read"});
  ExitLog exits(s);
  auto slow = s.spawn(make_fn([](FnProcess& p, std::span<Event> events, StepOutput& out) {
                        if (p.steps == 1) {
                          out.add_yield(cmd::kFirstUser + 8, 1);
                          out.status = Status::Blocked;
                          return;
                        }
                        for (auto& e : events)
                          if (e.kind == EventKind::YieldComplete) return done(out, e.payload);
                        out.status = Status::Blocked;
                      }),
                      "main", "");
  // While the handler blocks, the single worker keeps running others.
  auto quick = s.spawn(make_fn([](FnProcess&, auto, StepOutput& out) { done(out); }), "main", "");
  REQUIRE(exits.wait(quick.pid));
  REQUIRE(exits.wait(slow.pid));
  CHECK(exits.get(slow.pid).result == "read");
  CHECK_FALSE(on_worker.load());
}

TEST_CASE("a stale PID never reaches the process that reuses its slot") {
  Watchdog dog("stale pid", 30s);
  Scheduler s({.workers = 1});
  ExitLog exits(s);
  auto a = s.spawn(waiter(), "main", "");
  REQUIRE(s.send(a.pid, "stop", "a-done").empty());
  REQUIRE(exits.wait(a.pid));
  // A's slot went to the worker's free-slot cache: a spawn on that worker
  // reuses it.
  SpawnResult b;
  auto spawner = s.spawn(make_fn([&](FnProcess&, auto, StepOutput& out) {
                           b = s.spawn(waiter(), "main", "");
                           done(out);
                         }),
                         "main", "");
  REQUIRE(exits.wait(spawner.pid));
  CHECK(b.pid.index == a.pid.index);  // the slot is reused...
  CHECK(b.pid.generation != a.pid.generation);  // ...under a new generation
  std::string err = s.send(a.pid, "stop", "wrong");
  CHECK(err == "not_found: no process " + a.pid.to_string());
  CHECK(s.cancel(a.pid, "x").rfind("not_found", 0) == 0);
  CHECK(s.terminate(a.pid).rfind("not_found", 0) == 0);
  CHECK(s.send(b.pid, "stop", "b-done").empty());
  REQUIRE(exits.wait(b.pid));
  CHECK(exits.get(b.pid).result == "b-done");
}

TEST_CASE("sends to finished, never-allocated and foreign PIDs return not_found") {
  Scheduler s({.workers = 1});
  ExitLog exits(s);
  auto r = s.spawn(make_fn([](FnProcess&, auto, StepOutput& out) { done(out); }), "main", "");
  REQUIRE(exits.wait(r.pid));
  CHECK(s.send(r.pid, "t", "v").rfind("not_found", 0) == 0);
  CHECK(s.send(Pid{0, 123456, 1}, "t", "v").rfind("not_found", 0) == 0);
  CHECK(s.send(Pid{0, 0xFFFFFFFFu, 1}, "t", "v").rfind("not_found", 0) == 0);
  CHECK(s.send(Pid{5, r.pid.index, r.pid.generation}, "t", "v").rfind("not_found", 0) == 0);
  CHECK(s.send(Pid{}, "t", "v").rfind("not_found", 0) == 0);
}

TEST_CASE("a process readied by a worker that stays in its step runs on another worker meanwhile") {
  // schedule() wakes no parked worker for a lone process in the deque of
  // the worker that readied it; a spinning worker steals it, or the runaway
  // monitor's handoff wakes one. Each round, a readies b and then waits in
  // its step until b has run.
  Watchdog dog("lone process steal", 120s);
  Scheduler s({.workers = 2});
  s.watch_for_runaways(30s);  // its handoff wakes a parked worker
  ExitLog exits(s);
  for (int round = 0; round < 50; ++round) {
    CAPTURE(round);
    auto ran = std::make_shared<std::atomic<bool>>(false);
    auto b = s.spawn(make_fn([ran](FnProcess&, std::span<Event> events, StepOutput& out) {
                       for (auto& e : events)
                         if (e.kind == EventKind::Message) {
                           ran->store(true);
                           return done(out, "ran");
                         }
                       out.status = Status::Idle;
                     }),
                     "b", "");
    REQUIRE(b);
    auto a = s.spawn(make_fn([ran, to = b.pid](FnProcess& p, std::span<Event>, StepOutput& out) {
                       if (!p.ctx().scheduler->send(to, "go", "", p.ctx().self).empty()) return fail(out, "send failed");
                       const auto deadline = std::chrono::steady_clock::now() + 20s;
                       while (!ran->load() && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
                       if (!ran->load()) return fail(out, "b did not run while a stayed in its step");
                       done(out, "ok");
                     }),
                     "a", "");
    REQUIRE(a);
    REQUIRE(exits.wait(a.pid));
    CHECK(exits.get(a.pid).result == "ok");
    REQUIRE(exits.wait(b.pid));
  }
}

TEST_CASE("a consumer fed by a producer that stays in its step runs on a parked worker meanwhile") {
  // The producer readies the consumer into its own worker's deque, where a
  // lone process wakes no parked worker; its further sends do
  // (config::kFeedsBeforeWake). No runaway monitor here to hand off.
  Watchdog dog("producer wakes a worker", 120s);
  Scheduler s({.workers = 2});
  ExitLog exits(s);
  for (int round = 0; round < 10; ++round) {
    CAPTURE(round);
    auto got = std::make_shared<std::atomic<int>>(0);
    auto consumer = s.spawn(make_fn([got](FnProcess&, std::span<Event> events, StepOutput& out) {
                              for (auto& e : events) {
                                if (e.kind != EventKind::Message) continue;
                                if (e.topic == "stop") return done(out);
                                got->fetch_add(1);
                              }
                              out.status = Status::Idle;
                            }),
                            "consumer", "");
    REQUIRE(consumer);
    std::this_thread::sleep_for(50ms);  // it waits for messages, and both workers park
    auto producer = s.spawn(make_fn([got, to = consumer.pid](FnProcess& p, std::span<Event>, StepOutput& out) {
                              for (int i = 0; i < 2 * static_cast<int>(config::kFeedsBeforeWake); ++i)
                                if (!p.ctx().scheduler->send(to, "n", "", p.ctx().self).empty()) return fail(out, "send");
                              const auto deadline = std::chrono::steady_clock::now() + 20s;
                              while (got->load() == 0 && std::chrono::steady_clock::now() < deadline)
                                std::this_thread::yield();
                              if (got->load() == 0) return fail(out, "the consumer did not run while the producer stayed in its step");
                              done(out, "ok");
                            }),
                            "producer", "");
    REQUIRE(producer);
    REQUIRE(exits.wait(producer.pid));
    CHECK(exits.get(producer.pid).result == "ok");
    CHECK(s.send(consumer.pid, "stop", "", Pid{}).empty());
    REQUIRE(exits.wait(consumer.pid));
  }
}

TEST_CASE("a process readied by its own sends runs again at once; one that others send to meanwhile waits for a batch") {
  // One worker and one process. Step 1 sends the process three messages
  // and yields a command that completes inline: everything that readies it
  // is its own doing and already queued, so its worker requeues it without
  // holding it for a batch (Worker::gather_batch: 0.5 us for nothing each
  // time). Step 2 has a thread send it one while it runs: a stream from
  // elsewhere, which the worker does wait on. Step 3 gets that message.
  Watchdog dog("own sends", 60s);
  Scheduler s({.workers = 1});
  constexpr CommandId kEcho = cmd::kFirstUser + 7;
  s.commands().add(kEcho, CommandHandler{[](CommandRequest&& r) { r.scheduler->complete_yield(r.pid, r.tag, "echo"); },
                                         nullptr, false, "echo"});
  ExitLog exits(s);
  std::atomic<bool> ask{false}, sent{false}, ended{false};
  Pid self;
  std::thread outside([&] {
    while (!ask.load() && !ended.load()) std::this_thread::yield();
    if (!ask.load()) return;  // the process failed before asking
    CHECK(s.send(self, "outside", "").empty());
    sent.store(true);
  });
  auto p = s.spawn(make_fn([&](FnProcess& p, std::span<Event> events, StepOutput& out) {
                     if (p.steps == 1) {
                       for (const char* t : {"a", "b", "c"})
                         if (!p.ctx().scheduler->send(p.ctx().self, t, "", p.ctx().self).empty()) return fail(out, "send");
                       out.add_yield(kEcho, 1);
                       out.status = Status::Blocked;
                       return;
                     }
                     if (p.steps == 2) {
                       std::string got;
                       for (auto& e : events) got += e.kind == EventKind::Message ? e.topic : "+" + e.payload;
                       if (got != "abc+echo") return fail(out, "step 2 got " + got);
                       if (s.counters().workers.batch_waits != 0) return fail(out, "held for a batch of its own sends");
                       self = p.ctx().self;
                       ask.store(true);
                       while (!sent.load()) std::this_thread::yield();
                       out.status = Status::Idle;
                       return;
                     }
                     if (events.size() != 1 || events[0].topic != "outside") return fail(out, "step 3 got no outside message");
                     done(out, "ok");
                   }),
                   "main", "");
  REQUIRE(p);
  const bool exited = exits.wait(p.pid);
  ended.store(true);
  outside.join();
  REQUIRE(exited);
  CHECK_MESSAGE(exits.get(p.pid).result == "ok", exits.get(p.pid).error);
  const Scheduler::Counters c = s.counters();
  CHECK(c.workers.batch_waits == 1);
  CHECK(c.workers.steps == 3);  // the counters count what ran: three steps on the one worker, nothing stolen
  CHECK(c.workers.steals == 0);
}

TEST_CASE("messages carry sender and topic and arrive in the order sent") {
  Watchdog dog("message order", 30s);
  Scheduler s({.workers = 2});
  ExitLog exits(s);
  const Pid from{0, 77, 1};
  auto r = s.spawn(make_fn([from](FnProcess& p, std::span<Event> events, StepOutput& out) {
                     for (auto& e : events) {
                       if (e.kind != EventKind::Message) continue;
                       if (e.from != from || e.topic != "n") return fail(out, "bad envelope");
                       if (e.payload != std::to_string(p.counter)) return fail(out, "out of order at " + e.payload);
                       if (++p.counter == 1000) return done(out, "ok");
                     }
                     out.status = Status::Idle;
                   }),
                   "main", "");
  for (int i = 0; i < 1000; ++i) REQUIRE(s.send(r.pid, "n", std::to_string(i), from).empty());
  REQUIRE(exits.wait(r.pid));
  CHECK(exits.get(r.pid).result == "ok");
}

TEST_CASE("a monitor gets exactly one exit event; a link delivers link_down on failure only") {
  Watchdog dog("links and monitors", 30s);
  Scheduler s({.workers = 2});
  ExitLog exits(s);
  std::mutex mu;
  std::vector<Event> seen;
  auto observer = s.spawn(make_fn([&](FnProcess&, std::span<Event> events, StepOutput& out) {
                            std::lock_guard lock(mu);
                            for (auto& e : events) {
                              if (e.kind == EventKind::Message && e.topic == "stop") return done(out);
                              seen.push_back(e);
                            }
                            out.status = Status::Idle;
                          }),
                          "main", "");
  auto ok_child = s.spawn(waiter(), "main", "", {.monitor_by = observer.pid, .monitor_ref = 5});
  auto bad_child = s.spawn(make_fn([](FnProcess&, std::span<Event> events, StepOutput& out) {
                             for (auto& e : events)
                               if (e.kind == EventKind::Message) return fail(out, "crashed");
                             out.status = Status::Idle;
                           }),
                           "main", "", {.link_to = observer.pid});
  auto ok_linked = s.spawn(waiter(), "main", "", {.link_to = observer.pid});
  CHECK(s.monitor(observer.pid, bad_child.pid, 6).empty());
  CHECK(s.send(ok_child.pid, "stop", "fine").empty());
  CHECK(s.send(ok_linked.pid, "stop", "").empty());
  CHECK(s.send(bad_child.pid, "go", "").empty());
  REQUIRE(exits.wait(ok_child.pid));
  REQUIRE(exits.wait(bad_child.pid));
  REQUIRE(exits.wait(ok_linked.pid));
  for (int i = 0; i < 2000; ++i) {
    {
      std::lock_guard lock(mu);
      if (seen.size() >= 3) break;
    }
    std::this_thread::sleep_for(1ms);
  }
  std::this_thread::sleep_for(20ms);  // any duplicate would arrive meanwhile
  CHECK(s.send(observer.pid, "stop", "").empty());
  REQUIRE(exits.wait(observer.pid));
  std::lock_guard lock(mu);
  int exit_ok = 0, exit_bad = 0, link_down = 0;
  for (auto& e : seen) {
    if (e.kind == EventKind::Exit && e.from == ok_child.pid) {
      ++exit_ok;
      CHECK(e.tag == 5);
      CHECK(e.payload == "fine");
      CHECK_FALSE(e.failed);
    } else if (e.kind == EventKind::Exit && e.from == bad_child.pid) {
      ++exit_bad;
      CHECK(e.tag == 6);
      CHECK(e.failed);
      CHECK(e.payload == "crashed");
    } else if (e.kind == EventKind::LinkDown) {
      ++link_down;
      CHECK(e.from == bad_child.pid);
      CHECK(e.failed);
      CHECK(e.payload == "crashed");
    } else {
      FAIL("unexpected event kind " << static_cast<int>(e.kind));
    }
  }
  CHECK(exit_ok == 1);
  CHECK(exit_bad == 1);
  CHECK(link_down == 1);  // the normal exit of ok_linked sent nothing
}

TEST_CASE("links refuse dead PIDs, monitors of them end at once with noproc, and a process cannot link to itself") {
  Scheduler s({.workers = 1});
  ExitLog exits(s);
  auto a = s.spawn(waiter(), "main", "");
  auto gone = s.spawn(make_fn([](FnProcess&, auto, StepOutput& out) { done(out); }), "main", "");
  REQUIRE(exits.wait(gone.pid));
  CHECK(s.link(a.pid, gone.pid).rfind("not_found", 0) == 0);
  CHECK(s.monitor(a.pid, gone.pid, 1).empty());
  CHECK(s.link(a.pid, a.pid).rfind("invalid", 0) == 0);
  auto linked = s.spawn(waiter(), "main", "", {.link_to = gone.pid});
  CHECK_FALSE(linked);
  CHECK(linked.error.rfind("not_found", 0) == 0);
  CHECK(s.send(a.pid, "stop", "").empty());
  REQUIRE(exits.wait(a.pid));
}

TEST_CASE("terminate stops an idle process without stepping it and monitors see terminated") {
  Watchdog dog("terminate", 30s);
  Scheduler s({.workers = 1});
  ExitLog exits(s);
  std::atomic<int> closes{0};
  auto victim = s.spawn(waiter(&closes), "main", "");
  std::this_thread::sleep_for(10ms);
  CHECK(s.terminate(victim.pid).empty());
  REQUIRE(exits.wait(victim.pid));
  CHECK(exits.get(victim.pid).failed);
  CHECK(exits.get(victim.pid).error == "terminated");
  CHECK(closes.load() == 1);
}

TEST_CASE("cancel delivers a cancel event with its reason") {
  Scheduler s({.workers = 1});
  ExitLog exits(s);
  auto r = s.spawn(make_fn([](FnProcess&, std::span<Event> events, StepOutput& out) {
                     for (auto& e : events)
                       if (e.kind == EventKind::Cancel) return done(out, "cancelled: " + e.payload);
                     out.status = Status::Idle;
                   }),
                   "main", "");
  CHECK(s.cancel(r.pid, "enough").empty());
  REQUIRE(exits.wait(r.pid));
  CHECK(exits.get(r.pid).result == "cancelled: enough");
}

TEST_CASE("Continue re-queues a process behind others and lets it finish") {
  Watchdog dog("continue", 30s);
  Scheduler s({.workers = 1});
  ExitLog exits(s);
  std::vector<Pid> pids;
  for (int i = 0; i < 10; ++i)
    pids.push_back(s.spawn(make_fn([](FnProcess& p, auto, StepOutput& out) {
                             if (p.steps == 500) return done(out);
                             out.status = Status::Continue;
                           }),
                           "main", "")
                       .pid);
  for (auto& p : pids) REQUIRE(exits.wait(p));
  CHECK(exits.failures() == 0);
}

TEST_CASE("idle workers run the idle job between processes, and clearing it waits for them") {
  Watchdog dog("idle job", 60s);
  Scheduler s({.workers = 2});
  ExitLog exits(s);
  std::atomic<int> budget{50}, units{0}, inside{0};
  s.set_idle_job([&] {
    if (budget.fetch_sub(1) <= 0) return false;
    inside.fetch_add(1);
    std::this_thread::sleep_for(200us);
    units.fetch_add(1);
    inside.fetch_sub(1);
    return true;
  });
  // A worker runs the job when it runs out of processes (the parked ones
  // when woken): after one process, the workers use up the job's work, and
  // no more.
  auto first = s.spawn(make_fn([](FnProcess&, auto, StepOutput& out) { done(out); }), "main", "");
  REQUIRE(first);
  REQUIRE(exits.wait(first.pid));
  for (int i = 0; i < 4000 && units.load() < 50; ++i) std::this_thread::sleep_for(1ms);
  std::this_thread::sleep_for(10ms);
  CHECK(units.load() == 50);
  // While the job always has work, processes still run: a worker looks for
  // them between units, and a message to a waiting process wakes it.
  budget = 1 << 30;
  std::vector<Pid> pids;
  for (int i = 0; i < 200; ++i) {
    pids.push_back(s.spawn(make_fn([](FnProcess& p, auto, StepOutput& out) {
                             if (p.steps == 20) return done(out);
                             out.status = Status::Continue;
                           }),
                           "main", "")
                       .pid);
  }
  auto w = s.spawn(waiter(), "main", "");
  REQUIRE(w);
  std::this_thread::sleep_for(5ms);
  REQUIRE(s.send(w.pid, "stop", "bye").empty());
  for (auto& p : pids) REQUIRE(exits.wait(p));
  REQUIRE(exits.wait(w.pid));
  CHECK(exits.get(w.pid).result == "bye");
  CHECK(exits.failures() == 0);
  // Clearing returns once no worker is inside the old job, and it never
  // runs again.
  s.set_idle_job({});
  CHECK(inside.load() == 0);
  const int after = units.load();
  std::this_thread::sleep_for(20ms);
  CHECK(units.load() == after);
  CHECK(after >= 50);
}

TEST_CASE("shutdown cancels, waits for the grace period, then closes the rest and reports pending yields") {
  Watchdog dog("shutdown", 30s);
  std::atomic<int> closes{0};
  auto s = std::make_unique<Scheduler>(SchedulerOptions{.workers = 2});
  HoldBox box;
  box.install(*s);
  // Exits on cancel.
  s->spawn(make_fn(
               [](FnProcess&, std::span<Event> events, StepOutput& out) {
                 for (auto& e : events)
                   if (e.kind == EventKind::Cancel) return done(out);
                 out.status = Status::Idle;
               },
               &closes),
           "main", "");
  // Blocked on a command that never completes, ignores cancel.
  s->spawn(make_fn(
               [](FnProcess& p, auto, StepOutput& out) {
                 if (p.steps == 1) out.add_yield(kHold, 1);
                 out.status = Status::Blocked;
               },
               &closes),
           "main", "");
  // Idle, ignores cancel.
  s->spawn(waiter(&closes), "main", "");
  // Sleeping for an hour.
  s->spawn(make_fn(
               [](FnProcess& p, auto, StepOutput& out) {
                 if (p.steps == 1) out.add_yield(cmd::kSleep, 1).arg = std::chrono::nanoseconds(1h).count();
                 out.status = Status::Blocked;
               },
               &closes),
           "main", "");
  REQUIRE(box.wait_size(1));
  std::this_thread::sleep_for(20ms);
  auto t0 = std::chrono::steady_clock::now();
  ShutdownReport report = s->shutdown(1s);  // generous: the polite one must exit within it even on a loaded machine
  CHECK(std::chrono::steady_clock::now() - t0 >= 1s);
  CHECK(report.exited_in_grace == 1);
  CHECK(report.force_closed == 3);
  CHECK(report.yields_never_completed == 2);
  CHECK(report.timers_dropped == 1);
  CHECK(closes.load() == 4);
  CHECK(s->live_count() == 0);
  CHECK_FALSE(s->spawn(waiter(), "main", ""));  // refused after shutdown
  s.reset();
}

TEST_CASE("shutdown closes at once the processes that wait for an event nothing can send") {
  Watchdog dog("shutdown early", 30s);
  std::atomic<int> closes{0};
  auto s = std::make_unique<Scheduler>(SchedulerOptions{.workers = 2});
  // Three that wait for a "stop" nobody will send, ignoring their cancel.
  for (int i = 0; i < 3; ++i) REQUIRE(s->spawn(waiter(&closes), "main", ""));
  // One that started a long sleep and cancelled it when a message came: its
  // dropped timer must not count as a yield still to complete.
  std::atomic<int> started{0}, cancelled{0};
  auto sleeper = s->spawn(make_fn(
                              [&started, &cancelled](FnProcess& p, std::span<Event> events, StepOutput& out) {
                                if (p.steps == 1) {
                                  out.add_yield(cmd::kSleep, 1).arg = std::chrono::nanoseconds(1h).count();
                                  started.store(1);
                                }
                                for (auto& e : events)
                                  if (e.kind == EventKind::Message) {
                                    out.cancel_yield(cmd::kSleep, 1);
                                    cancelled.store(1);
                                  }
                                out.status = cancelled.load() ? Status::Idle : Status::Blocked;
                              },
                              &closes),
                          "main", "");
  REQUIRE(sleeper);
  for (int i = 0; i < 4000 && !started.load(); ++i) std::this_thread::sleep_for(1ms);
  REQUIRE(s->send(sleeper.pid, "wake", "").empty());  // after the step that slept: the cancel comes in a later one
  for (int i = 0; i < 4000 && !cancelled.load(); ++i) std::this_thread::sleep_for(1ms);
  REQUIRE(cancelled.load() == 1);
  // And one asleep for an hour, which nothing can wake before the deadline.
  REQUIRE(s->spawn(make_fn(
                       [](FnProcess& p, auto, StepOutput& out) {
                         if (p.steps == 1) out.add_yield(cmd::kSleep, 1).arg = std::chrono::nanoseconds(1h).count();
                         out.status = Status::Blocked;
                       },
                       &closes),
                   "main", ""));
  std::this_thread::sleep_for(20ms);
  auto t0 = std::chrono::steady_clock::now();
  ShutdownReport report = s->shutdown(20s);
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);  // not the 20 s grace (milliseconds when quiet)
  CHECK(report.none_could_run);
  CHECK(report.exited_in_grace == 0);
  CHECK(report.force_closed == 5);
  CHECK(report.yields_never_completed == 1);  // the hour's sleep, not the cancelled one
  CHECK(report.timers_dropped == 1);
  CHECK(closes.load() == 5);
  s.reset();
}

TEST_CASE("shutdown keeps waiting while a sleeping process can still wake a waiting one") {
  Watchdog dog("shutdown wait", 30s);
  auto s = std::make_unique<Scheduler>(SchedulerOptions{.workers = 2});
  ExitLog exits(*s);
  auto w = s->spawn(waiter(), "main", "");
  REQUIRE(w);
  // Ignores its cancel; 300 ms after it starts it tells the waiter to stop.
  const Pid to = w.pid;
  auto waker = s->spawn(make_fn([to](FnProcess& p, std::span<Event> events, StepOutput& out) {
                          if (p.steps == 1) out.add_yield(cmd::kSleep, 1).arg = std::chrono::nanoseconds(300ms).count();
                          for (auto& e : events)
                            if (e.kind == EventKind::YieldComplete) {
                              if (!p.ctx().scheduler->send(to, "stop", "woken", p.ctx().self).empty())
                                return fail(out, "send failed");
                              return done(out);
                            }
                          out.status = Status::Blocked;
                        }),
                        "main", "");
  REQUIRE(waker);
  ShutdownReport report = s->shutdown(20s);
  CHECK_FALSE(report.none_could_run);
  CHECK(report.exited_in_grace == 2);
  CHECK(report.force_closed == 0);
  REQUIRE(exits.wait(w.pid));
  CHECK(exits.get(w.pid).result == "woken");
  s.reset();
}

TEST_CASE("shutdown with nothing running returns at once") {
  Scheduler s({.workers = 2});
  auto t0 = std::chrono::steady_clock::now();
  auto report = s.shutdown(5s);
  CHECK(std::chrono::steady_clock::now() - t0 < 1s);
  CHECK(report.force_closed == 0);
  CHECK(s.shutdown(5s).force_closed == 0);  // a second shutdown is harmless
}
