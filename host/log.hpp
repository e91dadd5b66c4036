// The runtime's spdlog logger. Lines go to stderr, flushed line by line, and
// carry the time, the level and the PID of the process that wrote them (the
// process running on this thread, set by the worker around each step).
#pragma once

#include <memory>
#include <string>

#include <spdlog/spdlog.h>

#include "host/pid.hpp"

namespace host {
class Process;
}

namespace host::log {

// The named logger "host", created on first use.
spdlog::logger& logger();
std::shared_ptr<spdlog::logger> logger_ptr();

// Sets the level by name (trace|debug|info|warn|error); false if unknown.
bool set_level(const std::string& name);

// The PID, and the name of the process (Process::Name, asked only when a
// line is written), shown in log lines written on this thread ("-" when
// none). `process` must outlive the matching clear_current_pid(). The worker
// sets them around every step: asking for the name there read a cache line
// of the process that the step does not need (ThreadRing 1000, cachegrind).
// Inline, over thread_locals of constant initialization (no TLS wrapper):
// a worker's every step sets and clears them, where the out-of-line calls
// were about 20 instructions a step.
namespace detail {
inline thread_local Pid current_pid;
inline thread_local const Process* current_process = nullptr;
}  // namespace detail
inline void set_current_pid(const Pid& pid, const Process* process = nullptr) {
  detail::current_pid = pid;
  detail::current_process = process;
}
inline void clear_current_pid() { set_current_pid(Pid{}, nullptr); }
// Lines written on this thread while it lives show `pid` and `process`;
// those shown before, again once it ends. For a process's code run outside
// its steps: a spawned module's top-level code runs inside the spawn call
// (Scheduler::spawn), on the spawner's thread, and its lines are its own.
class CurrentPidScope {
 public:
  CurrentPidScope(const Pid& pid, const Process* process);
  ~CurrentPidScope();
  CurrentPidScope(const CurrentPidScope&) = delete;
  CurrentPidScope& operator=(const CurrentPidScope&) = delete;

 private:
  Pid saved_pid_;
  const Process* saved_process_;
};
// Called before a Process is destroyed: if it is this thread's current one,
// later lines show its PID only, so that no line asks a freed process for
// its name.
void forget_process(const Process* process);

}  // namespace host::log
