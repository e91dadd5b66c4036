// The host program: `host run DIR` runs the script directory's root process
// on the scheduler and exits with its outcome (docs/LUA_API.md, The command line).
#include <signal.h>
#include <csignal>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <optional>
#include <thread>

#include "bindings/codec.hpp"
#include "bindings/lua_runtime.hpp"
#include "host/program/cli_options.hpp"
#include "host/config.hpp"
#include "host/program/crash_report.hpp"
#include "host/log.hpp"
#include "host/program/reloader.hpp"
#include "host/scheduler.hpp"
#ifdef HOST_CLUSTER
#include "host/cluster/nats_loader.hpp"
#include "host/cluster/nats_node.hpp"
#endif

#include <lua.hpp>

#ifndef HOST_VERSION
#define HOST_VERSION "0.0.0"
#endif
#ifndef HOST_SOURCE_STDLIB
#define HOST_SOURCE_STDLIB ""
#endif

namespace fs = std::filesystem;
using namespace host;

namespace {

int usage_error(const std::string& msg) {
  std::fprintf(stderr, "host: %s\n%s", msg.c_str(), cli::kUsage);
  return 2;
}

// stdlib/: $HOST_STDLIB, else beside the binary's folder (build/host ->
// stdlib/), else where the sources were.
fs::path find_stdlib() {
  if (const char* env = std::getenv("HOST_STDLIB"); env && *env) return env;
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    for (fs::path p : {exe.parent_path().parent_path() / "stdlib", exe.parent_path().parent_path() / "share/host/stdlib"})
      if (fs::is_directory(p, ec)) return p;
  }
  if (fs::is_directory(HOST_SOURCE_STDLIB, ec)) return HOST_SOURCE_STDLIB;
  return {};
}

struct RootWatch {
  std::mutex mu;
  std::condition_variable cv;
  Pid root;
  // Set once root is (under mu): from then on the exit hook reads root
  // without the lock and passes every other process's exit by, so that
  // exits on different workers do not queue on mu.
  std::atomic<bool> root_known{false};
  std::optional<ExitInfo> exit;
};

int run(const cli::RunOptions& o) {
  std::error_code ec;
  if (!fs::is_directory(o.dir, ec)) return usage_error("'" + o.dir + "' is not a directory");
  lua::LuaOptions lo;
  lo.dir = fs::absolute(o.dir);
  lo.stdlib = find_stdlib();
  lo.mem_limit = o.mem_limit;
  lo.time_limit = o.time_limit;
  lo.max_processes = o.max_processes;
  lo.io_threads = o.io_threads;
  lo.track_module_uses = o.watch;
  auto [module, method] = lua::split_entry(o.entry);
  {
    lua::ModuleCache probe({lo.dir});
    if (!lua::valid_module_name(module) || probe.locate(module).empty())
      return usage_error("no module '" + module + "' in " + o.dir + " (expected " +
                         (lo.dir / (module + ".lua")).string() + ")");
  }
  log::set_level(o.log_level);
  log::set_format(o.log_format);

  // Signals are taken by sigtimedwait below, never by a handler: block them
  // before any thread starts so every thread inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  // A write to a closed pipe or socket (io.write to a finished program's
  // pipe, a blocking socket library's send) must fail with EPIPE, not end
  // the host, as in servers generally (nginx, Go's runtime).
  std::signal(SIGPIPE, SIG_IGN);

  // The cluster: connected (and the name checked) before the scheduler
  // exists, as its PIDs carry this run's node id.
#ifdef HOST_CLUSTER
  std::unique_ptr<cluster::NatsNode> node;
  if (!o.cluster.empty()) {
    cluster::NodeOptions no;
    no.name = o.node;
    no.url = o.cluster;
    no.timeout = std::chrono::milliseconds(static_cast<long long>(o.node_timeout * 1000));
    // libnats is opened only now (nats_loader.hpp): a host without it
    // installed runs everything but --cluster, and says what is missing.
    if (std::string missing = cluster::load_nats(); !missing.empty()) {
      std::fprintf(stderr, "host: %s\n", missing.c_str());
      return 1;
    }
    std::string err;
    bool name_taken = false;
    node = cluster::NatsNode::connect(no, err, name_taken);
    if (!node) {
      if (name_taken) return usage_error(err);
      std::fprintf(stderr, "host: %s\n", err.c_str());
      return 1;
    }
  }
  const std::uint32_t node_id = node ? node->id() : 0;
#else
  if (!o.cluster.empty())
    return usage_error("--cluster: this host was built without the cluster (libnats-dev was not found)");
  const std::uint32_t node_id = 0;
#endif

  Scheduler scheduler({.workers = o.workers, .node = node_id});
  lua::LuaRuntime runtime(scheduler, lo);
#ifdef HOST_CLUSTER
  // Leaves the cluster before the runtime and the scheduler go away: no
  // frame is delivered into them after this.
  struct LeaveCluster {
    cluster::NatsNode* node;
    ~LeaveCluster() {
      if (node) node->stop();
    }
  } leave{node.get()};
  if (node) {
    node->start(
        scheduler, [&runtime](std::string_view name) { return runtime.names().lookup(std::string(name)); },
        [&runtime](const std::string& entry, std::string args) { return runtime.spawn(entry, std::move(args)); },
        nullptr, nullptr);
    scheduler.set_remote(node.get());
    // pg's keeper runs from the start in a cluster: it bridges the nodes'
    // groups (stdlib/pg.lua), so a node's joins reach the others whether
    // or not this node's processes ever call pg.
    if (SpawnResult pg = runtime.spawn("pg:run", lua::encode_strings({})); !pg) {
      log::logger().error("cluster: cannot start pg's process: {}", pg.error);
    } else if (std::string err = runtime.names().register_name("$pg", pg.pid); !err.empty()) {
      log::logger().error("cluster: cannot register pg's process: {}", err);
    }
  }
#endif
  RootWatch watch;
  // A process that fails with nobody to tell is reported (docs/LUA_API.md, Output and logs),
  // but for the root, whose failure the host reports as it exits.
  scheduler.set_unwatched_failure_hook([&watch](const ExitInfo& info) {
    Pid root;
    {
      std::lock_guard lock(watch.mu);
      root = watch.root;
    }
    if (crash_report::wanted(info, root)) log::crash_report(info.pid, info.entry, info.error);
  });
  scheduler.add_exit_hook([&watch](const ExitInfo& info) {
    if (watch.root_known.load(std::memory_order_acquire) && !(info.pid == watch.root)) return;
    std::lock_guard lock(watch.mu);
    if (info.pid == watch.root) {
      watch.exit = info;
      watch.cv.notify_all();
    }
  });

  scheduler.watch_for_runaways(std::chrono::milliseconds(static_cast<long long>(o.time_limit * 1000)),
                               reinterpret_cast<const void*>(&lua_pcall));
  std::optional<Reloader> reloader;
  if (o.watch) reloader.emplace(runtime);

  if (!o.inspect.empty()) {
    scheduler.track_parents();  // the inspector's tree shows who spawned whom
    // The inspector (stdlib/host/inspector.lua): a server of the host's
    // own, owned by no process, so that it lives as long as the host.
    // Bound before the root spawns: an address it cannot have is a usage
    // error, and the script must not have run (written files, say) first.
    const std::size_t colon = o.inspect.rfind(':');
    std::string host = o.inspect.substr(0, colon);
    if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
    try {
      const std::string at = runtime.io().http.serve_internal(host, std::stoi(o.inspect.substr(colon + 1)),
                                                              "host.inspector:serve_connection", "host.inspector:handle");
      log::logger().info("inspector at http://{}/ (metrics at /metrics)", at);
    } catch (const io::CallError& e) {
      if (reloader) reloader->stop();
      scheduler.shutdown(std::chrono::milliseconds(0));
      return usage_error("--inspect " + o.inspect + ": " + e.text);
    }
  }
  SpawnResult root;
  {
    std::lock_guard lock(watch.mu);  // the hook cannot see the root exit before we know its PID
    root = runtime.spawn(o.entry, lua::encode_strings(o.args));
    watch.root = root.pid;
    watch.root_known.store(true, std::memory_order_release);
  }
  if (!root) {
    if (o.log_format == "json")  // one JSON object a line, this one too
      log::logger().error("cannot start {}: {}", o.entry, root.error);
    else
      std::fprintf(stderr, "host: cannot start %s: %s\n", o.entry.c_str(), root.error.c_str());
    scheduler.shutdown(std::chrono::milliseconds(0));
    return 1;
  }

  int signal_code = 0;
  for (;;) {
    {
      std::unique_lock lock(watch.mu);
      if (watch.cv.wait_for(lock, std::chrono::milliseconds(20), [&] { return watch.exit.has_value(); })) break;
    }
    timespec zero{0, 0};
    int sig = sigtimedwait(&signals, nullptr, &zero);
    if (sig == SIGINT || sig == SIGTERM) {
      signal_code = sig == SIGINT ? 130 : 143;
      log::logger().info("received {}, cancelling every process", sig == SIGINT ? "SIGINT" : "SIGTERM");
      break;
    }
  }
  if (reloader) reloader->stop();
  auto exit_code = [&] {
    if (signal_code) return signal_code;
    std::lock_guard lock(watch.mu);
    if (watch.exit && watch.exit->failed) {
      // In JSON every line is an object, the root's failure too (its
      // traceback a field, not more lines).
      if (o.log_format == "json")
        log::crash_report(watch.root, watch.exit->entry, watch.exit->error, "root process failed");
      else
        std::fprintf(stderr, "host: root process %s failed: %s\n", watch.root.to_string().c_str(),
                     watch.exit->error.c_str());
      return 1;
    }
    return 0;
  };
  // Shutdown runs on its own thread: the grace period bounds the whole
  // host, so this one exits when it ends (or at a second signal) whatever
  // shutdown is still waiting for (a process stuck in a C call, a state
  // whose finalizers do not end, a blocking job).
  struct Done {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    ShutdownReport report;
  };
  auto done = std::make_shared<Done>();  // shared: the thread may outlive this frame when given up
  std::thread stopper([&scheduler, done] {
    ShutdownReport r = scheduler.shutdown(config::kDefaultShutdownGrace);
    std::lock_guard lock(done->mu);
    done->report = r;
    done->done = true;
    done->cv.notify_all();
  });
  const auto hard_deadline =
      std::chrono::steady_clock::now() + config::kDefaultShutdownGrace + config::kShutdownOverrun;
  auto exit_now = [&](int code) {
    std::fflush(stdout);
    log::logger().flush();
    std::fflush(stderr);
    _exit(code);
  };
  for (;;) {
    {
      std::unique_lock lock(done->mu);
      if (done->cv.wait_for(lock, std::chrono::milliseconds(20), [&] { return done->done; })) break;
    }
    timespec zero{0, 0};
    int sig = sigtimedwait(&signals, nullptr, &zero);
    if (sig == SIGINT || sig == SIGTERM) {
      log::logger().warn("received {} again: exiting at once", sig == SIGINT ? "SIGINT" : "SIGTERM");
      exit_now(sig == SIGINT ? 130 : 143);
    }
    if (std::chrono::steady_clock::now() >= hard_deadline) {
      log::logger().error("shutdown did not end within the grace period: exiting, its threads abandoned");
      exit_now(exit_code());
    }
  }
  stopper.join();
  const ShutdownReport report = done->report;
  if (report.force_closed && report.none_could_run)
    log::logger().info("shutdown: closed {} process(es) waiting for messages or events that nothing could send in time",
                       report.force_closed);
  else if (report.force_closed)
    log::logger().warn("shutdown: {} process(es) did not exit within the grace period and were closed",
                       report.force_closed);
  // Threads still inside processes' states: the scheduler and the runtime
  // must not be destroyed under them.
  if (report.threads_given_up) exit_now(exit_code());
  return exit_code();
}

}  // namespace

int main(int argc, char** argv) {
  cli::Parsed p = cli::parse(argc, argv);
  switch (p.action) {
    case cli::Parsed::Action::Help:
      std::fputs(cli::help().c_str(), stdout);
      return 0;
    case cli::Parsed::Action::Version:
      std::printf("host %s (%s)\n", HOST_VERSION, LUAJIT_VERSION);
      return 0;
    case cli::Parsed::Action::UsageError:
      return usage_error(p.error);
    case cli::Parsed::Action::Run:
      break;
  }
  try {
    return run(p.run);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "host: %s\n", e.what());
    return 1;
  }
}
