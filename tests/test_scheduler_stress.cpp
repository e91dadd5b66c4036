// Stress tests of the scheduler: lost wakeups, exactly-once ordered
// delivery, and spawn/exit churn with monitors. Each runs under a watchdog
// that fails the test instead of letting it hang, and all run under TSan.
#include <doctest/doctest.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include <unistd.h>

#include "host/config.hpp"
#include "host/pid_table.hpp"
#include "host/scheduler.hpp"
#include "tests/cpu_hogs.hpp"
#include "tests/native_processes.hpp"
#include "tests/watchdog.hpp"

using namespace host;
using namespace host::testing;
using namespace std::chrono_literals;

namespace {

constexpr CommandId kExternal = cmd::kFirstUser + 20;

// Requests handed to external threads, which complete them.
class ExternalWork {
 public:
  void push(Pid pid, std::uint64_t tag) {
    {
      std::lock_guard lock(mu_);
      q_.push_back({pid, tag});
    }
    cv_.notify_one();
  }
  bool pop(std::pair<Pid, std::uint64_t>& out) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return !q_.empty() || stop_; });
    if (q_.empty()) return false;
    out = q_.front();
    q_.pop_front();
    return true;
  }
  void stop() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<Pid, std::uint64_t>> q_;
  bool stop_ = false;
};

// Yields `yields` external commands one after another, ignoring messages;
// fails on any completion it did not ask for.
std::unique_ptr<Process> yielder(std::uint64_t yields) {
  return make_fn([yields](FnProcess& p, std::span<Event> events, StepOutput& out) {
    for (auto& e : events) {
      if (e.kind != EventKind::YieldComplete) continue;
      if (e.tag != p.counter + 1) return fail(out, "unexpected tag " + std::to_string(e.tag));
      if (e.failed || e.payload != "done") return fail(out, "tag " + std::to_string(e.tag) + " came with " + e.payload);
      ++p.counter;
    }
    if (p.counter == yields) return done(out);
    if (p.steps == 1 || !events.empty()) {
      // Waiting on tag counter+1 unless it is already outstanding.
      if (p.scratch != std::to_string(p.counter + 1)) {
        p.scratch = std::to_string(p.counter + 1);
        out.add_yield(kExternal, p.counter + 1);
      }
    }
    out.status = Status::Blocked;
  });
}

// direct: the command is a direct handler (the netpoller's shape: its
// context, the work queue), and the threads complete with bytes copied in
// (complete_yield_copy), as the netpoller does; else a handler through a
// request, completed with a string moved in. half_at_once: the direct
// handler completes every other yield itself, inside the dispatch (as the
// netpoller does with a ready mark), while the threads race the rest.
void run_lost_wakeup(unsigned workers, int processes, std::uint64_t yields, int external_threads, bool direct = false,
                     bool half_at_once = false) {
  Scheduler s({.workers = workers});
  ExternalWork work;
  if (direct) {
    CommandHandler h;
    h.name = "external";
    h.context = &work;
    h.direct = [](void* w, Scheduler&, ProcessSlot& slot, const Yield& y) {
      static_cast<ExternalWork*>(w)->push(slot.pid(), y.tag);
    };
    if (half_at_once)
      h.direct = [](void* w, Scheduler& sched, ProcessSlot& slot, const Yield& y) {
        if (y.tag % 2 == 0) sched.complete_yield_copy(slot.pid(), y.tag, "done");
        else static_cast<ExternalWork*>(w)->push(slot.pid(), y.tag);
      };
    s.commands().add(kExternal, std::move(h));
  } else {
    s.commands().add(kExternal, CommandHandler{[&](CommandRequest&& r) { work.push(r.pid, r.tag); }, nullptr, false,
                                               "external"});
  }
  ExitLog exits(s);
  std::vector<Pid> pids;
  pids.reserve(processes);
  std::mutex pids_mu;
  std::atomic<bool> sending{true};
  std::vector<std::thread> threads;
  for (int t = 0; t < external_threads; ++t) {
    threads.emplace_back([&] {
      std::pair<Pid, std::uint64_t> job;
      while (work.pop(job)) {
        if (direct) s.complete_yield_copy(job.first, job.second, "done");
        else s.complete_yield(job.first, job.second, "done");
      }
    });
  }
  // A sender that races messages against the completions, to wake Blocked
  // processes at the worst moments.
  threads.emplace_back([&] {
    std::mt19937 rng(1);
    while (sending.load()) {
      Pid target;
      {
        std::lock_guard lock(pids_mu);
        if (pids.empty()) continue;
        target = pids[rng() % pids.size()];
      }
      s.send(target, "noise", "x");  // not_found once it finished: fine
    }
  });
  for (int i = 0; i < processes; ++i) {
    auto r = s.spawn(yielder(yields), "main", "");
    REQUIRE(r);
    std::lock_guard lock(pids_mu);
    pids.push_back(r.pid);
  }
  bool all = exits.wait_count(static_cast<std::size_t>(processes), 240s);
  sending = false;
  work.stop();
  for (auto& t : threads) t.join();
  CHECK_MESSAGE(all, "only " << exits.count() << " of " << processes << " processes completed");
  CHECK_MESSAGE(exits.failures() == 0, exits.first_failure());
  // Exit hooks run before the live count drops, so wait for it.
  CHECK(s.wait_all_exited(std::chrono::steady_clock::now() + 10s));
}

}  // namespace

TEST_CASE("no wakeup is lost: 100k processes x 10 yields completed by external threads while messages race") {
  Watchdog dog("lost-wakeup stress", std::chrono::seconds(280));
  for (unsigned workers : {1u, 2u, 4u}) {
    CAPTURE(workers);
    run_lost_wakeup(workers, scaled(100000) / (workers == 1 ? 1 : 4), 10, 4);
  }
}

TEST_CASE("no wakeup is lost: yields through a direct handler, completed with bytes copied in by external threads") {
  Watchdog dog("lost-wakeup stress, direct", std::chrono::seconds(280));
  for (unsigned workers : {1u, 2u, 4u}) {
    CAPTURE(workers);
    run_lost_wakeup(workers, scaled(20000) / (workers == 1 ? 1 : 2), 10, 4, /*direct=*/true);
  }
}

TEST_CASE("no wakeup is lost: a direct handler completes half its yields at once while threads complete the rest") {
  Watchdog dog("lost-wakeup stress, half at once", std::chrono::seconds(280));
  for (unsigned workers : {1u, 2u, 4u}) {
    CAPTURE(workers);
    run_lost_wakeup(workers, scaled(20000) / (workers == 1 ? 1 : 2), 10, 4, /*direct=*/true, /*half_at_once=*/true);
  }
}

TEST_CASE("messages from each sender arrive exactly once and in order, from threads and from processes") {
  Watchdog dog("ordering stress", std::chrono::seconds(120));
  for (unsigned workers : {1u, 2u, 3u}) {
    CAPTURE(workers);
    Scheduler s({.workers = workers});
    ExitLog exits(s);
    const int senders = 8;
    const std::uint64_t per = static_cast<std::uint64_t>(scaled(20000));
    // Receiver: per-sender next expected sequence number.
    auto receiver = s.spawn(make_fn([=](FnProcess& p, std::span<Event> events, StepOutput& out) {
                              if (p.scratch.empty()) p.scratch.assign(static_cast<std::size_t>(senders) * 8, '\0');
                              auto* next = reinterpret_cast<std::uint64_t*>(p.scratch.data());
                              for (auto& e : events) {
                                if (e.kind != EventKind::Message) continue;
                                int who = std::stoi(e.topic);
                                std::uint64_t seq = std::stoull(e.payload);
                                if (seq != next[who])
                                  return fail(out, "sender " + e.topic + ": got " + e.payload + ", expected " +
                                                       std::to_string(next[who]));
                                ++next[who];
                                if (++p.counter == per * senders) return done(out, "all");
                              }
                              out.status = Status::Idle;
                            }),
                            "main", "");
    REQUIRE(receiver);
    // Half the senders are threads, half are processes on the workers.
    std::vector<std::thread> threads;
    for (int t = 0; t < senders / 2; ++t)
      threads.emplace_back([&, t] {
        for (std::uint64_t i = 0; i < per; ++i) REQUIRE(s.send(receiver.pid, std::to_string(t), std::to_string(i)).empty());
      });
    for (int t = senders / 2; t < senders; ++t) {
      s.spawn(make_fn([&s, t, per, to = receiver.pid](FnProcess& p, auto, StepOutput& out) {
                // Sends in bursts, yielding between them so other processes interleave.
                for (int k = 0; k < 100 && p.counter < per; ++k, ++p.counter)
                  if (!s.send(to, std::to_string(t), std::to_string(p.counter), p.ctx().self).empty())
                    return fail(out, "send failed");
                if (p.counter == per) return done(out);
                out.status = Status::Continue;
              }),
              "main", "");
    }
    for (auto& th : threads) th.join();
    REQUIRE(exits.wait(receiver.pid, 100s));
    CHECK_MESSAGE(!exits.get(receiver.pid).failed, exits.get(receiver.pid).error);
  }
}

TEST_CASE("a stream's consumer that waits to gather a batch gets every message once and in order, and a pair still answers") {
  // Two workers and a stream from a thread: the consumer's steps end with
  // more already queued, so its worker, with nothing else to run, waits
  // for a batch (Worker::gather_batch) before it re-runs it. The producer
  // pauses now and then, so that some waits end on the quiet rule and some
  // on the batch's size. Then a ping-pong pair, whose steps a gather must
  // not hold: a lost requeue would hang either part (the watchdog).
  Watchdog dog("gather stress", std::chrono::seconds(120));
  Scheduler s({.workers = 2});
  ExitLog exits(s);
  const std::uint64_t per = static_cast<std::uint64_t>(scaled(200000));
  auto consumer = s.spawn(make_fn([per](FnProcess& p, std::span<Event> events, StepOutput& out) {
                            for (auto& e : events) {
                              if (e.kind != EventKind::Message) continue;
                              if (std::stoull(e.payload) != p.counter)
                                return fail(out, "got " + e.payload + ", expected " + std::to_string(p.counter));
                              if (++p.counter == per) return done(out, "all");
                            }
                            out.status = Status::Idle;
                          }),
                          "consumer", "");
  REQUIRE(consumer);
  std::thread producer([&] {
    for (std::uint64_t i = 0; i < per; ++i) {
      REQUIRE(s.send(consumer.pid, "n", std::to_string(i)).empty());
      if (i % 5000 == 0) std::this_thread::sleep_for(50us);
    }
  });
  producer.join();
  REQUIRE(exits.wait(consumer.pid, 100s));
  CHECK_MESSAGE(exits.get(consumer.pid).result == "all", exits.get(consumer.pid).error);

  const std::uint64_t rounds = static_cast<std::uint64_t>(scaled(20000));
  auto pong = s.spawn(make_fn([](FnProcess& p, std::span<Event> events, StepOutput& out) {
                        for (auto& e : events) {
                          if (e.kind != EventKind::Message) continue;
                          if (e.topic == "stop") return done(out);
                          if (!p.ctx().scheduler->send(e.from, "pong", std::string(e.payload), p.ctx().self).empty())
                            return fail(out, "pong's send");
                        }
                        out.status = Status::Idle;
                      }),
                      "pong", "");
  REQUIRE(pong);
  auto ping = s.spawn(make_fn([rounds, to = pong.pid](FnProcess& p, std::span<Event> events, StepOutput& out) {
                        auto send_next = [&] {
                          return p.ctx().scheduler->send(to, "ping", std::to_string(p.counter), p.ctx().self).empty();
                        };
                        if (p.steps == 1 && !send_next()) return fail(out, "ping's send");
                        for (auto& e : events) {
                          if (e.kind != EventKind::Message) continue;
                          if (e.payload != std::to_string(p.counter)) return fail(out, "pong out of step: " + e.payload);
                          if (++p.counter == rounds) {
                            p.ctx().scheduler->send(to, "stop", "", p.ctx().self);
                            return done(out, "all");
                          }
                          if (!send_next()) return fail(out, "ping's send");
                        }
                        out.status = Status::Idle;
                      }),
                      "ping", "");
  REQUIRE(ping);
  REQUIRE(exits.wait(ping.pid, 100s));
  CHECK_MESSAGE(exits.get(ping.pid).result == "all", exits.get(ping.pid).error);
  REQUIRE(exits.wait(pong.pid, 100s));
}

TEST_CASE("spawn and exit churn: every child's exit reaches its monitoring parent exactly once") {
  Watchdog dog("spawn churn", std::chrono::seconds(120));
  Scheduler s({.workers = 2});
  ExitLog exits(s);
  const std::uint64_t children = static_cast<std::uint64_t>(scaled(50000));
  auto parent = s.spawn(make_fn([&s, children](FnProcess& p, std::span<Event> events, StepOutput& out) {
                          if (p.steps == 1) {
                            for (std::uint64_t i = 0; i < children; ++i) {
                              auto r = s.spawn(make_fn([](FnProcess& c, auto, StepOutput& o) { done(o, c.input()); }),
                                               "main", std::to_string(i),
                                               {.monitor_by = p.ctx().self, .monitor_ref = i + 1});
                              if (!r) return fail(out, r.error);
                            }
                          }
                          for (auto& e : events) {
                            if (e.kind != EventKind::Exit) return fail(out, "unexpected event");
                            if (e.payload != std::to_string(e.tag - 1)) return fail(out, "wrong result");
                            if (p.scratch.size() < children) p.scratch.resize(children, '\0');
                            if (p.scratch[e.tag - 1]++) return fail(out, "duplicate exit for " + std::to_string(e.tag));
                            ++p.counter;
                          }
                          if (p.counter == children) return done(out, "all");
                          out.status = Status::Idle;
                        }),
                        "main", "");
  REQUIRE(exits.wait(parent.pid, 100s));
  CHECK_MESSAGE(!exits.get(parent.pid).failed, exits.get(parent.pid).error);
  CHECK(exits.count() == children + 1);
}

// A link of a monitor chain: waits for the exit of the process it monitors,
// ignoring its cancel, then ends; its Close takes a while, as a big Lua
// state's does. A process's slot stops being alive before its Close and its
// monitors hear of the exit only after it, so for that while the process is
// nowhere to be seen and its monitor still waits.
class ChainLink final : public Process {
 public:
  std::string Init(const ProcessContext&, const std::string&, std::string) override { return {}; }
  void Step(std::span<Event> events, StepOutput& out) override {
    for (auto& e : events)
      if (e.kind == EventKind::Exit) return done(out, "unwound");
    out.status = Status::Idle;
  }
  void Close() override { std::this_thread::sleep_for(std::chrono::milliseconds(2)); }
  const char* Name() const override { return "link"; }
};

// Shutdown's early end (Scheduler::nothing_can_run) must never mistake a
// chain that is still unwinding for one that cannot run: every process here
// ignores its cancel and waits only for the exit of the next, and the last
// sleeps a few milliseconds first, so the exits ripple down the chain while
// shutdown polls. Ending early would close the rest and lose their exits.
TEST_CASE("shutdown waits out a chain of monitors that unwinds during its polls") {
  Watchdog dog("shutdown chain", std::chrono::seconds(300));
  const int length = scaled(60);
  for (int round = 0; round < scaled(6); ++round) {
    CAPTURE(round);
    auto s = std::make_unique<Scheduler>(SchedulerOptions{.workers = 2});
    ExitLog exits(*s);
    Pid prev;
    std::vector<Pid> chain;
    for (int i = 0; i + 1 < length; ++i) {
      auto r = s->spawn(std::make_unique<ChainLink>(), "main", "", {.monitor_by = prev, .monitor_ref = 1});
      REQUIRE(r);
      chain.push_back(r.pid);
      prev = r.pid;
    }
    const auto nap = std::chrono::milliseconds(1 + round % 8);
    auto last = s->spawn(make_fn([nap](FnProcess& p, std::span<Event> events, StepOutput& out) {
                           if (p.steps == 1) out.add_yield(cmd::kSleep, 1).arg = std::chrono::nanoseconds(nap).count();
                           for (auto& e : events)
                             if (e.kind == EventKind::YieldComplete) return done(out, "slept");
                           out.status = Status::Blocked;
                         }),
                         "main", "", {.monitor_by = prev, .monitor_ref = 1});
    REQUIRE(last);
    ShutdownReport report = s->shutdown(60s);
    CHECK_FALSE(report.none_could_run);
    CHECK(report.force_closed == 0);
    CHECK(report.exited_in_grace == static_cast<std::size_t>(length));
    int unwound = 0;
    for (const Pid& pid : chain) unwound += exits.wait(pid, 1s) && exits.get(pid).result == "unwound";
    REQUIRE(unwound == length - 1);
    s.reset();
  }
}

// The runaway monitor gives a stuck worker a new thread
// (Worker::replace_thread) while shutdown waits for the workers
// (Worker::join_until): the two agree under the worker's thread lock. Each
// round, processes blocked in a system call (a read of a pipe nobody writes
// to) are terminated, so the monitor gives their threads up, while spinning
// processes keep the other workers busy and threads beside them hog the
// CPUs; shutdown starts at a random moment of that, with a short grace.
// Shutdown must always return within its bound (never a join without a
// deadline) and agree with the monitor on every thread (TSan checks the
// handshake). A scheduler with threads still inside steps is kept, never
// destroyed, as the host program exits instead (ShutdownReport).
TEST_CASE("shutdown and the runaway monitor's thread replacement agree when they race") {
  Watchdog dog("shutdown race", std::chrono::seconds(240));
  int quiet[2];
  REQUIRE(pipe(quiet) == 0);  // never written to nor closed: reads block for good
  std::optional<CpuHogs> hogs(std::in_place, 2);
  std::mt19937 rng(42);
  std::vector<std::unique_ptr<Scheduler>> kept;
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
  const int rounds = 100;
  const auto slack = 6000ms;  // a sanitizer's slower threads, on a loaded machine
#else
  const int rounds = 200;
  const auto slack = 1500ms;
#endif
  int gave_up = 0;
  for (int round = 0; round < rounds; ++round) {
    CAPTURE(round);
    auto s = std::make_unique<Scheduler>(SchedulerOptions{.workers = 2});
    s->watch_for_runaways(20ms);
    std::atomic<int> blocked_in{0};
    std::vector<Pid> blocked;
    for (int i = 0; i < 2; ++i) {
      auto r = s->spawn(make_fn([&blocked_in, fd = quiet[0]](FnProcess&, std::span<Event>, StepOutput& out) {
                          blocked_in.fetch_add(1);
                          char c;
                          (void)!read(fd, &c, 1);
                          done(out, "read");
                        }),
                        "main", "");
      REQUIRE(r);
      blocked.push_back(r.pid);
    }
    for (int i = 0; i < 2; ++i) {
      auto r = s->spawn(make_fn([](FnProcess&, std::span<Event>, StepOutput& out) {
                          const auto until = std::chrono::steady_clock::now() + 50us;
                          while (std::chrono::steady_clock::now() < until) {
                          }
                          out.status = Status::Continue;
                        }),
                        "main", "");
      REQUIRE(r);
    }
    const auto started_by = std::chrono::steady_clock::now() + 5s;
    while (blocked_in.load() < 2 && std::chrono::steady_clock::now() < started_by) std::this_thread::sleep_for(100us);
    REQUIRE(blocked_in.load() == 2);
    for (const Pid& pid : blocked) s->terminate(pid);
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 30000));
    const auto grace = std::chrono::milliseconds(rng() % 20);
    const auto t0 = std::chrono::steady_clock::now();
    ShutdownReport report = s->shutdown(grace);
    const auto took = std::chrono::steady_clock::now() - t0;
    // The grace, the joins' allowance, and the monitor's stop (a tick and
    // a signal's answer) at most, with room for a loaded machine.
    CHECK(took < grace + config::kJoinAllowance + slack);
    if (report.threads_given_up > 0) {
      ++gave_up;
      kept.push_back(std::move(s));
    }
  }
  hogs.reset();
  MESSAGE(gave_up << " of " << rounds << " rounds left threads inside steps");
  for (auto& s : kept) (void)s.release();  // their threads still block in the read
}
