// The inotify loop: collect changed .lua files for a short quiet period
// (editors write in several steps), then reload each once.
#include "host/program/reloader.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <climits>
#include <cstring>

#include "bindings/codec.hpp"
#include "bindings/lua_runtime.hpp"
#include "bindings/module_cache.hpp"
#include "host/log.hpp"

namespace host {

namespace fs = std::filesystem;

namespace {
constexpr std::uint32_t kFileEvents = IN_CLOSE_WRITE | IN_MOVED_TO | IN_DELETE | IN_MOVED_FROM | IN_CREATE;
// A file's changes settle for kQuietMs before it is reloaded, each file on
// its own clock (another file rewritten all the time delays no one else);
// one that keeps changing is reloaded kMaxWaitMs after its first change
// anyway (a change is to be picked up within a second).
constexpr auto kQuiet = std::chrono::milliseconds(50);
constexpr auto kMaxWait = std::chrono::milliseconds(500);
// How long past the time limit a check may take before it is stopped and
// the new version refused (its top-level code waits on something).
constexpr double kCheckSlackSeconds = 2.0;
}  // namespace

Reloader::Reloader(lua::LuaRuntime& runtime) : runtime_(runtime), root_(runtime.options().dir) {
  runtime.scheduler().add_exit_hook([wait = check_](const ExitInfo& info) {
    if (!wait->armed.load(std::memory_order_acquire)) return;  // every exit passes here
    std::lock_guard lock(wait->mu);
    if (info.pid == wait->pid) {
      wait->exit = info;
      wait->cv.notify_all();
    }
  });
  inotify_fd_ = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  stop_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (inotify_fd_ < 0 || stop_fd_ < 0) {
    log::logger().error("--watch: cannot start inotify: {}", std::strerror(errno));
    return;
  }
  add_watches(root_);
  thread_ = std::thread([this] { run(); });
  log::logger().info("watching {} for changes", root_.string());
}

Reloader::~Reloader() { stop(); }

void Reloader::stop() {
  {
    std::lock_guard lock(check_->mu);
    check_->stopping = true;
  }
  check_->cv.notify_all();
  if (thread_.joinable()) {
    std::uint64_t one = 1;
    (void)!write(stop_fd_, &one, sizeof one);
    thread_.join();
  }
  if (inotify_fd_ >= 0) close(inotify_fd_);
  if (stop_fd_ >= 0) close(stop_fd_);
  inotify_fd_ = stop_fd_ = -1;
}

void Reloader::add_watches(const fs::path& dir) {
  int wd = inotify_add_watch(inotify_fd_, dir.c_str(), kFileEvents | IN_ONLYDIR);
  if (wd < 0) {
    log::logger().warn("--watch: cannot watch {}: {}", dir.string(), std::strerror(errno));
    return;
  }
  dirs_[wd] = dir;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (entry.is_directory(ec) && entry.path().filename().string()[0] != '.') add_watches(entry.path());
}

std::string Reloader::module_name(const fs::path& file) const {
  fs::path rel = file.lexically_relative(root_);
  std::string name;
  for (const auto& part : rel.parent_path()) {
    if (!name.empty()) name += '.';
    name += part.string();
  }
  std::string stem = rel.stem().string();
  if (stem != "init" || name.empty()) {
    if (!name.empty()) name += '.';
    name += stem;
  }
  return name;
}

void Reloader::handle(const fs::path& file) {
  std::string name = module_name(file);
  if (!lua::valid_module_name(name)) return;
  auto& modules = runtime_.modules();
  std::error_code ec;
  if (!fs::exists(file, ec)) {
    // Running processes keep the code they loaded; new spawns get not_found.
    modules.forget(name);
    reported_.erase(file.string());
    log::logger().warn("module '{}' was deleted ({}); running processes keep their copy", name, file.string());
    return;
  }
  std::string err;
  auto mod = modules.compile_latest(name, &err);
  if (mod) {
    std::optional<std::string> verdict = check_load(*mod);
    if (!verdict) return;  // the host is stopping: nothing to install or report
    err = std::move(*verdict);
  }
  if (!err.empty()) {
    report(file, name, err, mod != nullptr);
    return;
  }
  modules.install(std::move(mod));
  reported_.erase(file.string());
  std::vector<Pid> users = runtime_.users_of(name);
  log::logger().info("reloaded module '{}' ({} process(es) use it)", name, users.size());
  for (const Pid& pid : users) {
    Event ev;
    ev.kind = EventKind::Reload;
    ev.payload = name;
    (void)runtime_.scheduler().deliver(pid, std::move(ev));  // gone meanwhile: fine
  }
}

void Reloader::report(const fs::path& file, const std::string& name, const std::string& error, bool compiles) {
  std::string msg = error.rfind("invalid: ", 0) == 0 ? error.substr(9) : error;
  if (reported_[file.string()] == msg) return;
  reported_[file.string()] = msg;
  // A module nothing loaded yet has no good version to fall back on: said
  // as it is, not as if one stayed.
  if (!runtime_.modules().has(name))
    log::logger().error("reload: {} (module '{}' {}; no earlier version was loaded)", msg, name,
                        compiles ? "does not load" : "does not compile");
  else
    log::logger().error("reload: {} (the last good version of '{}' stays in use)", msg, name);
}

std::optional<std::string> Reloader::check_load(const lua::Module& mod) {
  const std::string args[] = {mod.name, mod.bytecode};
  SpawnResult r;
  {
    std::lock_guard lock(check_->mu);  // the hook cannot see the exit before the PID is known
    if (check_->stopping) return std::nullopt;
    check_->exit.reset();
    check_->armed.store(true, std::memory_order_release);
    r = runtime_.spawn(std::string(kReloadCheckModule), lua::encode_strings(args));
    check_->pid = r ? r.pid : Pid{};
  }
  if (!r) {  // (the process limit, or shutting down): the new version goes unchecked
    check_->armed.store(false, std::memory_order_release);
    log::logger().warn("reload: cannot check how '{}' loads ({}); using the new version", mod.name, r.error);
    return std::string();
  }
  const auto bound = std::chrono::duration<double>(runtime_.options().time_limit + kCheckSlackSeconds);
  std::unique_lock lock(check_->mu);
  const bool ended = check_->cv.wait_for(lock, bound, [&] { return check_->exit.has_value() || check_->stopping; });
  std::optional<ExitInfo> exit = std::move(check_->exit);
  const bool stopping = check_->stopping;
  check_->pid = Pid{};
  check_->armed.store(false, std::memory_order_release);
  lock.unlock();
  if (!exit) {
    runtime_.scheduler().terminate(r.pid);
    if (stopping || ended) return std::nullopt;
    return "module '" + mod.name + "' did not finish loading within " +
           std::to_string(static_cast<long long>(bound.count())) + " s";
  }
  if (exit->failed) return "module '" + mod.name + "' failed to load: " + exit->error.substr(0, exit->error.find('\n'));
  return lua::decode_first_string(exit->result).value_or(std::string());
}

void Reloader::run() {
  using Clock = std::chrono::steady_clock;
  alignas(inotify_event) char buf[64 * (sizeof(inotify_event) + NAME_MAX + 1)];
  struct Pending {
    Clock::time_point first, last;  // its first change not yet reloaded, and its latest
  };
  std::map<fs::path, Pending> changed;
  // When a pending file is due: quiet since its last change, or waited long enough.
  auto due_at = [](const Pending& p) { return std::min(p.last + kQuiet, p.first + kMaxWait); };
  for (;;) {
    int timeout = -1;
    if (!changed.empty()) {
      auto next = Clock::time_point::max();
      for (const auto& [f, p] : changed) next = std::min(next, due_at(p));
      const auto ms = std::chrono::ceil<std::chrono::milliseconds>(next - Clock::now()).count();
      timeout = static_cast<int>(std::max<long long>(0, ms));
    }
    pollfd fds[2] = {{inotify_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
    int n = poll(fds, 2, timeout);
    if (n < 0 && errno != EINTR) return;
    if (fds[1].revents & POLLIN) return;
    if (n > 0 && (fds[0].revents & POLLIN)) read_events(buf, sizeof buf, [&](const fs::path& path) {
      const auto now = Clock::now();
      auto [it, fresh] = changed.try_emplace(path, Pending{now, now});
      if (!fresh) it->second.last = now;
    });
    const auto now = Clock::now();
    for (auto it = changed.begin(); it != changed.end();) {
      if (due_at(it->second) > now) {
        ++it;
        continue;
      }
      handle(it->first);
      it = changed.erase(it);
    }
  }
}

template <typename OnChange>
void Reloader::read_events(char* buf, std::size_t size, OnChange&& on_change) {
  ssize_t len;
  while ((len = read(inotify_fd_, buf, size)) > 0) {
    for (char* p = buf; p < buf + len;) {
      auto* ev = reinterpret_cast<inotify_event*>(p);
      p += sizeof(inotify_event) + ev->len;
      auto dir = dirs_.find(ev->wd);
      if (dir == dirs_.end() || ev->len == 0) continue;
      fs::path path = dir->second / ev->name;
      if ((ev->mask & IN_ISDIR) && (ev->mask & (IN_CREATE | IN_MOVED_TO))) {
        add_watches(path);
        continue;
      }
      if (path.extension() == ".lua" && path.filename().string()[0] != '.') on_change(path);
    }
  }
}

}  // namespace host
