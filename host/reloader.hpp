// Hot reload (`host run --watch`, SPEC section 5): watches the script
// directory with inotify and, for each changed .lua file, recompiles its
// module, keeps the last good version when the new one does not compile
// (reporting that once), and sends a reload event to every process that
// loaded it. Threads: its own watcher thread; start/stop from the main one.
#pragma once

#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <thread>

namespace host::lua {
class LuaRuntime;
}

namespace host {

class Reloader {
 public:
  explicit Reloader(lua::LuaRuntime& runtime);
  ~Reloader();
  Reloader(const Reloader&) = delete;
  void stop();

 private:
  void run();
  // Reads the inotify events there are; on_change(path) for each changed
  // .lua file (new directories get watches).
  template <typename OnChange>
  void read_events(char* buf, std::size_t size, OnChange&& on_change);
  void add_watches(const std::filesystem::path& dir);
  void handle(const std::filesystem::path& file);
  std::string module_name(const std::filesystem::path& file) const;

  lua::LuaRuntime& runtime_;
  std::filesystem::path root_;
  int inotify_fd_ = -1;
  int stop_fd_ = -1;  // eventfd: wakes the watcher thread to stop
  std::map<int, std::filesystem::path> dirs_;         // watch descriptor -> directory (watcher thread only)
  std::map<std::string, std::string> reported_;       // file -> last compile error reported (watcher thread only)
  std::thread thread_;
};

}  // namespace host
