// The `exec` module's command handler (docs/LUA_API.md, fs and exec): programs started
// with libuv's uv_spawn (no shell), their exit, waits and kills, on the
// I/O thread (host/io/io_loop.hpp). Threads: dispatch(), kill_owned(),
// hand_over() and drop_handed() from any thread (the first two post to
// the loop; the handed pipes have a lock of their own); everything else
// on the loop thread only, so the programs' table needs no lock.
//
// A program belongs to the process that started it: when that process
// ends, however it ends, the program is killed (SIGKILL). exec.start's
// pipes are not here: the process made them (bindings/exec_pipes.cpp)
// and reads and writes its ends on its worker; the program's ends come
// here by hand_over's token, and the spawn gives them to the program and
// closes them. exec.run reads everything here (as Go's Output), through
// pipes of its own: its memory is the output's.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "host/io/call_values.hpp"
#include "host/commands.hpp"
#include "host/io/io_loop.hpp"
#include "host/pid.hpp"

namespace host {
class Scheduler;
}

namespace host::io {

class ExecService {
 public:
  ExecService(Scheduler& scheduler, IoLoop& loop);
  ~ExecService();
  ExecService(const ExecService&) = delete;

  // A command from a worker: carried out on the loop, completed with
  // Scheduler::complete_yield.
  void dispatch(CommandRequest&& req);
  // Kills owner's programs (posted to the loop), and closes the program
  // ends it handed over that no start took.
  void kill_owned(const Pid& owner);
  // A program's ends of its stdin, stdout and stderr pipes, from the
  // process that will start it: the token its "start" call names (that
  // call takes and closes them; only owner's call may).
  std::uint64_t hand_over(const Pid& owner, std::array<int, 3> fds);
  // Closes what token holds, where no start took it.
  void drop_handed(const Pid& owner, std::uint64_t token);
  // The processes' memory limit: exec.run's output may hold at most half
  // of what the caller's limit leaves (the caller's heap comes with each
  // call); past it the call answers "limit: memory ..." and the program
  // is killed.
  void set_read_limit(std::size_t bytes) { read_limit_ = bytes; }
  // Programs with a record, all processes together (a test's leak check).
  std::size_t programs() const { return count_.load(std::memory_order_relaxed); }

  struct Program;

 private:
  void run_op(uv_loop_t* loop, const Pid& caller, std::uint64_t tag, std::vector<CallValue> args);
  void start(uv_loop_t* loop, const Pid& caller, std::uint64_t tag, const std::vector<CallValue>& args, bool collect);
  Program* find(const Pid& caller, double id);
  // Half of what read_limit_ leaves a caller whose heap holds heap bytes.
  std::size_t room(const CallValue& heap) const;
  void forget(Program* p);
  void stop_all();
  // The handed pipes of token, taken (false: none of caller's).
  bool take_handed(const Pid& caller, std::uint64_t token, std::array<int, 3>& fds);

  Scheduler& scheduler_;
  IoLoop& loop_;
  std::size_t read_limit_ = SIZE_MAX;
  // The loop thread's alone.
  std::uint64_t next_id_ = 0;
  std::unordered_map<std::uint64_t, Program*> programs_;
  std::unordered_map<Pid, std::unordered_set<std::uint64_t>> owned_;
  std::atomic<std::size_t> count_{0};   // programs_.size(), read anywhere
  std::atomic<std::size_t> owners_{0};  // owned_.size(): kill_owned posts nothing while 0
  struct Handed {
    Pid owner;
    std::array<int, 3> fds;
  };
  std::mutex handed_mu_;
  std::uint64_t next_token_ = 0;                       // guarded by handed_mu_
  std::unordered_map<std::uint64_t, Handed> handed_;  // guarded by handed_mu_
  std::atomic<std::size_t> handed_count_{0};          // handed_.size(): kill_owned looks only when not 0
  friend struct ProgramOps;
};

}  // namespace host::io
