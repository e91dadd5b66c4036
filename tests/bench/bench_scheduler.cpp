// Scheduler micro-benchmarks: prints a table of per-operation figures, each
// the median of several runs. Not a test: run it on demand
//   build/bench_scheduler [--quick]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "host/deque.hpp"
#include "host/global_queue.hpp"
#include "host/scheduler.hpp"

using namespace host;
using Clock = std::chrono::steady_clock;

namespace {

int g_runs = 5;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Runs body() (which returns the number of operations it did) g_runs times
// and returns the median nanoseconds per operation.
double per_op_ns(const std::function<std::uint64_t()>& body) {
  std::vector<double> samples;
  for (int r = 0; r < g_runs; ++r) {
    auto t0 = Clock::now();
    std::uint64_t ops = body();
    double ns = std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
    samples.push_back(ns / static_cast<double>(ops));
  }
  return median(samples);
}

void row(const char* name, double value, const char* unit, const char* target = "") {
  std::printf("| %-52s | %10.1f %-6s | %-12s |\n", name, value, unit, target);
  std::fflush(stdout);
}

// A process driven by a function, for the benchmarks.
class BenchProcess final : public Process {
 public:
  using Fn = std::function<void(BenchProcess&, std::span<Event>, StepOutput&)>;
  explicit BenchProcess(Fn* fn) : fn_(fn) {}
  std::string Init(const ProcessContext& ctx, const std::string&, std::string) override {
    self = ctx.self;
    return {};
  }
  void Step(std::span<Event> events, StepOutput& out) override { (*fn_)(*this, events, out); }
  void Close() override {}
  Pid self;
  std::uint64_t n = 0;

 private:
  Fn* fn_;
};

// Blocks (never spins: the main thread must not take a core from the
// workers) until every process of the scheduler has exited.
void wait_idle(Scheduler& s) { s.wait_all_exited(Clock::now() + std::chrono::minutes(5)); }

}  // namespace

int main(int argc, char** argv) {
  bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  if (quick) g_runs = 1;
  const std::uint64_t scale = quick ? 10 : 1;
  unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  std::printf("host scheduler benchmarks: %u hardware threads, median of %d runs\n\n", cores, g_runs);
  std::printf("| %-52s | %17s | %-12s |\n", "operation", "figure", "target");
  std::printf("|%s|%s|%s|\n", std::string(54, '-').c_str(), std::string(19, '-').c_str(), std::string(14, '-').c_str());

  {
    WorkDeque<std::uint64_t> d;
    const std::uint64_t n = 2000000 / scale;
    row("deque push+pop (owner)", per_op_ns([&] {
          for (std::uint64_t i = 0; i < n; ++i) {
            d.push(i);
            (void)d.pop();
          }
          return n;
        }),
        "ns");
  }
  {
    WorkDeque<std::uint64_t> a, b;
    const std::uint64_t n = 200000 / scale;
    const std::uint64_t batch = 64;
    row("deque steal-half of 64 items (per item moved)", per_op_ns([&] {
          std::uint64_t moved = 0;
          for (std::uint64_t i = 0; i < n / batch; ++i) {
            for (std::uint64_t k = 0; k < batch; ++k) a.push(k);
            while (a.size_approx() > 0) moved += static_cast<std::uint64_t>(a.steal_half_into(b));
            while (b.pop()) {
            }
          }
          return moved;
        }),
        "ns");
  }
  {
    GlobalQueue<std::uint64_t> q;
    const std::uint64_t n = 2000000 / scale;
    row("global queue push+pop", per_op_ns([&] {
          for (std::uint64_t i = 0; i < n; ++i) {
            q.push(i);
            (void)q.pop();
          }
          return n;
        }),
        "ns");
  }

  // Process-level figures, on all cores.
  {
    Scheduler s;
    BenchProcess::Fn noop = [](BenchProcess&, std::span<Event>, StepOutput& out) { out.status = Status::Done; };
    const std::uint64_t n = 200000 / scale;
    row("no-op process submit -> Done, from a thread", per_op_ns([&] {
          for (std::uint64_t i = 0; i < n; ++i) s.spawn(std::make_unique<BenchProcess>(&noop), "main", {});
          wait_idle(s);
          return n;
        }),
        "ns", "<= 150 ns");
    // The common case: processes spawn processes, on the workers.
    BenchProcess::Fn root = [&](BenchProcess& p, std::span<Event>, StepOutput& out) {
      for (int i = 0; i < 256 && p.n < n; ++i, ++p.n) s.spawn(std::make_unique<BenchProcess>(&noop), "main", {});
      out.status = p.n < n ? Status::Continue : Status::Done;
    };
    row("no-op process submit -> Done, from a process", per_op_ns([&] {
          s.spawn(std::make_unique<BenchProcess>(&root), "main", {});
          wait_idle(s);
          return n;
        }),
        "ns", "<= 150 ns");
  }
  {
    // Yield round trip: the sleep(0)-like command completes inline, so this is
    // step -> dispatch -> complete -> re-queue -> step.
    Scheduler s({.workers = 1});
    constexpr CommandId kEcho = cmd::kFirstUser;
    s.commands().add(kEcho, CommandHandler{[](CommandRequest&& r) { r.scheduler->complete_yield(r.pid, r.tag, {}); },
                                           nullptr, false, "echo"});
    const std::uint64_t n = 2000000 / scale;
    BenchProcess::Fn yielder = [n](BenchProcess& p, std::span<Event>, StepOutput& out) {
      if (p.n++ == n) {
        out.status = Status::Done;
        return;
      }
      out.add_yield(kEcho, p.n);
      out.status = Status::Blocked;
    };
    row("yield -> complete -> resume round trip (1 worker)", per_op_ns([&] {
          s.spawn(std::make_unique<BenchProcess>(&yielder), "main", {});
          wait_idle(s);
          return n;
        }),
        "ns", "<= 200 ns");
  }
  {
    // Send to an Idle process until it runs: a ping-pong pair on one worker;
    // each message wakes the idle peer. Per message.
    Scheduler s({.workers = 1});
    const std::uint64_t n = 1000000 / scale;
    Scheduler* sp = &s;
    BenchProcess::Fn pong = [sp](BenchProcess& p, std::span<Event> events, StepOutput& out) {
      for (auto& e : events) {
        if (e.kind != EventKind::Message) continue;
        if (e.topic == "stop") {
          out.status = Status::Done;
          return;
        }
        sp->send(e.from, "pong", {}, p.self);
      }
      out.status = Status::Idle;
    };
    BenchProcess::Fn ping = [sp, n](BenchProcess& p, std::span<Event> events, StepOutput& out) {
      out.status = Status::Idle;
      for (auto& e : events) {
        if (e.kind == EventKind::Message && e.topic == "peer") {
          sp->send(*Pid::parse(e.payload), "ping", {}, p.self);
        } else if (e.kind == EventKind::Message && e.topic == "pong") {
          if (++p.n == n) {
            sp->send(e.from, "stop", {}, p.self);
            out.status = Status::Done;
            return;
          }
          sp->send(e.from, "ping", {}, p.self);
        }
      }
    };
    row("send to an Idle process until it runs (per message)", per_op_ns([&] {
          auto b = s.spawn(std::make_unique<BenchProcess>(&pong), "main", {});
          auto a = s.spawn(std::make_unique<BenchProcess>(&ping), "main", {});
          s.send(a.pid, "peer", b.pid.to_string());
          wait_idle(s);
          return 2 * n;
        }),
        "ns", "<= 300 ns");
  }
  {
    // Throughput: N workers, 100k processes x 10 yields each.
    const std::uint64_t procs = 100000 / scale, yields = 10;
    constexpr CommandId kEcho = cmd::kFirstUser;
    BenchProcess::Fn yielder = [](BenchProcess& p, std::span<Event>, StepOutput& out) {
      if (p.n++ == yields) {
        out.status = Status::Done;
        return;
      }
      out.add_yield(kEcho, p.n);
      out.status = Status::Blocked;
    };
    double one = 0;
    // 1, 2, 4, ... workers and then every core: a 16-core machine gets five
    // rows instead of sixteen.
    std::vector<unsigned> counts;
    for (unsigned w = 1; w < cores; w *= 2) counts.push_back(w);
    counts.push_back(cores);
    for (unsigned w : counts) {
      Scheduler s({.workers = w});
      s.commands().add(kEcho, CommandHandler{[](CommandRequest&& r) { r.scheduler->complete_yield(r.pid, r.tag, {}); },
                                             nullptr, false, "echo"});
      // A root process spawns the rest, so spawning runs on the workers too.
      BenchProcess::Fn root = [&](BenchProcess&, std::span<Event>, StepOutput& out) {
        for (std::uint64_t i = 0; i < procs; ++i) s.spawn(std::make_unique<BenchProcess>(&yielder), "main", {});
        out.status = Status::Done;
      };
      double ns = per_op_ns([&] {
        s.spawn(std::make_unique<BenchProcess>(&root), "main", {});
        wait_idle(s);
        return procs * yields;
      });
      if (w == 1) one = ns;
      char name[96];
      std::snprintf(name, sizeof name, "100k x 10 yields, %u worker(s): per yield", w);
      row(name, ns, "ns");
      std::snprintf(name, sizeof name, "  speedup over 1 worker");
      row(name, one / ns, "x", w == 2 ? ">= 1.7x" : "");
    }
  }
  return 0;
}
