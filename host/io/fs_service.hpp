// The `fs` module's command handler (docs/LUA_API.md, fs and exec): whole-file calls,
// directories, and open files, carried out on the scheduler's blocking
// pool so a slow disk never holds a worker. Threads: handle() runs on pool
// threads; close_owned() on the thread that finished a process.
//
// Each call arrives as a waiting call (bindings/fs.lua): its arguments
// are the operation's name and its values, its results the call's
// returns. An open file is a number to Lua, valid only in the process
// that opened it; the file belongs to that process and is closed when it
// ends, however it ends. A call on it in progress then keeps it open until
// that call returns (the table holds one reference, each call another).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "host/io/call_values.hpp"
#include "host/commands.hpp"
#include "host/pid.hpp"

namespace host::io {

class FsService {
 public:
  FsService() = default;
  ~FsService();
  FsService(const FsService&) = delete;

  // Carries out one fs call; returns its results (codec bytes) or throws
  // CallError with the call's error string.
  std::string handle(const Pid& caller, const std::vector<CallValue>& args);
  // Closes every file `owner` still has open.
  void close_owned(const Pid& owner);
  // What one read may hold (the processes' memory limit), and whether a
  // reader is still alive; set once, before the first call.
  void set_read_limit(std::size_t bytes) { read_limit_ = bytes; }
  void set_alive(std::function<bool(const Pid&)> alive) { alive_ = std::move(alive); }
  struct ReadBudget;
  // Open files, all processes together (a test's leak check).
  std::size_t open_files() const { return count_.load(std::memory_order_relaxed); }

 private:
  struct File;
  ReadBudget budget_for(const Pid& caller, const std::vector<CallValue>& args, std::size_t i) const;
  std::shared_ptr<File> find(const Pid& caller, double id);
  std::string open(const Pid& caller, const std::vector<CallValue>& args);
  std::string close(const Pid& caller, double id);

  mutable std::mutex mu_;
  std::uint64_t next_id_ = 0;                                     // guarded by mu_
  std::unordered_map<std::uint64_t, std::shared_ptr<File>> files_;  // guarded by mu_
  std::unordered_map<Pid, std::unordered_set<std::uint64_t>> owned_;  // guarded by mu_
  std::size_t read_limit_ = SIZE_MAX;
  std::function<bool(const Pid&)> alive_;
  std::atomic<std::size_t> count_{0};  // files_.size(), read without the lock
};

}  // namespace host::io
