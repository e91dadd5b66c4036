// The `exec` module's command handler (docs/LUA_API.md, fs and exec): programs started
// with libuv's uv_spawn (no shell), their stdin, stdout and stderr as
// pipes, on the I/O thread (host/io/io_loop.hpp). Threads: dispatch() and
// kill_owned() from any thread (they post to the loop); everything else on
// the loop thread only, so the programs' table needs no lock.
//
// A program belongs to the process that started it: when that process
// ends, however it ends, the program is killed (SIGKILL) and its pipes
// closed. A program's output is read as it comes into a per-stream buffer
// that stops reading at a high-water mark (kReadAhead), so a program that
// writes faster than its process reads waits, as a pipe's writer should;
// a receive completes once what it asked for is there (a line, n bytes,
// everything), so a task resumes once per request, not once per chunk.
// exec.run reads everything (as Go's Output): its memory is the output's.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
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
  // A program's stream buffers at most this much unread output before its
  // reads pause.
  static constexpr std::size_t kReadAhead = 1 << 20;

  ExecService(Scheduler& scheduler, IoLoop& loop);
  ~ExecService();
  ExecService(const ExecService&) = delete;

  // A command from a worker: carried out on the loop, completed with
  // Scheduler::complete_yield.
  void dispatch(CommandRequest&& req);
  // Kills owner's programs and closes their pipes (posted to the loop).
  void kill_owned(const Pid& owner);
  // The processes' memory limit: exec.run's output, and what a receive
  // waits for, may hold at most half of what the caller's limit leaves
  // (the caller's heap comes with each call); past it they answer
  // "limit: memory ..." (and exec.run's program is killed).
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

  Scheduler& scheduler_;
  IoLoop& loop_;
  std::size_t read_limit_ = SIZE_MAX;
  // The loop thread's alone.
  std::uint64_t next_id_ = 0;
  std::unordered_map<std::uint64_t, Program*> programs_;
  std::unordered_map<Pid, std::unordered_set<std::uint64_t>> owned_;
  std::atomic<std::size_t> count_{0};   // programs_.size(), read anywhere
  std::atomic<std::size_t> owners_{0};  // owned_.size(): kill_owned posts nothing while 0
  friend struct ProgramOps;
};

}  // namespace host::io
