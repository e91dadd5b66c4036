// Hot reload (`host run --watch`; docs/LUA_API.md, Hot reload): watches the script
// directory with inotify and, for each changed .lua file, recompiles its
// module and runs the new top-level code once in a process of its own
// (check_load); keeps the last good version when the new one does not
// compile or raises as it loads (reporting that once), and sends a reload
// event to every process that loaded it. Threads: its own watcher thread;
// start/stop from the main one. Made before the first spawn (it adds a
// scheduler exit hook).
#pragma once

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>

#include "host/pid.hpp"
#include "host/scheduler.hpp"

namespace host::lua {
class LuaRuntime;
struct Module;
}

namespace host {

// The module of the process that checks a changed module's load
// (stdlib/host/reload_check.lua): the reloader reports its failures itself.
inline constexpr std::string_view kReloadCheckModule = "host.reload_check";

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
  // Runs mod's top-level code in a process of its own (stdlib's
  // host/reload_check.lua); "" when it loaded, else its error; nullopt
  // when stop() ended the wait.
  std::optional<std::string> check_load(const lua::Module& mod);
  // Reports a module's failed reload once per distinct error.
  // compiles: it compiled, and its top-level code failed (the check).
  void report(const std::filesystem::path& file, const std::string& name, const std::string& error, bool compiles);

  // The check process's end, told by a scheduler exit hook (which may run
  // after this object is gone: it owns its share).
  struct CheckWait {
    std::atomic<bool> armed{false};  // a check runs: only then does the hook lock mu
    std::mutex mu;
    std::condition_variable cv;
    Pid pid;
    std::optional<ExitInfo> exit;
    bool stopping = false;  // stop() ends a check's wait
  };
  std::shared_ptr<CheckWait> check_ = std::make_shared<CheckWait>();
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
