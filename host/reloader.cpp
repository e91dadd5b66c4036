// The inotify loop: collect changed .lua files for a short quiet period
// (editors write in several steps), then reload each once.
#include "host/reloader.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstring>

#include "bindings/lua_runtime.hpp"
#include "host/log.hpp"

namespace host {

namespace fs = std::filesystem;

namespace {
constexpr std::uint32_t kFileEvents = IN_CLOSE_WRITE | IN_MOVED_TO | IN_DELETE | IN_MOVED_FROM | IN_CREATE;
constexpr int kQuietMs = 50;  // changes settle for this long before a reload
}  // namespace

Reloader::Reloader(lua::LuaRuntime& runtime) : runtime_(runtime), root_(runtime.options().dir) {
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
  std::string err = modules.refresh(name);
  if (!err.empty()) {
    std::string msg = err.rfind("invalid: ", 0) == 0 ? err.substr(9) : err;
    if (reported_[file.string()] != msg) {
      reported_[file.string()] = msg;
      log::logger().error("reload: {} (the last good version of '{}' stays in use)", msg, name);
    }
    return;
  }
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

void Reloader::run() {
  alignas(inotify_event) char buf[64 * (sizeof(inotify_event) + NAME_MAX + 1)];
  std::set<fs::path> changed;
  for (;;) {
    pollfd fds[2] = {{inotify_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
    int n = poll(fds, 2, changed.empty() ? -1 : kQuietMs);
    if (n < 0 && errno != EINTR) return;
    if (fds[1].revents & POLLIN) return;
    if (n == 0) {  // quiet: reload what changed
      for (const auto& f : changed) handle(f);
      changed.clear();
      continue;
    }
    if (!(fds[0].revents & POLLIN)) continue;
    ssize_t len;
    while ((len = read(inotify_fd_, buf, sizeof buf)) > 0) {
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
        if (path.extension() == ".lua" && path.filename().string()[0] != '.') changed.insert(path);
      }
    }
  }
}

}  // namespace host
