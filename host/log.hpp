// The runtime's spdlog logger. Lines go to stderr, flushed line by line, and
// carry the time, the level and the PID of the process that wrote them (the
// process running on this thread, set by the worker around each step).
// Every entry is one line (docs/LUA_API.md, Output and logs): in the text format a message's
// newlines and other control characters are escaped, so no logged string can
// start a line of its own; the JSON format writes one object a line.
// Threads: any; the format and level are set once, before processes run.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>

#include <spdlog/spdlog.h>

#include "host/pid.hpp"

namespace host {
class Process;
}

namespace host::log {

// The named logger "host", created on first use.
spdlog::logger& logger();
std::shared_ptr<spdlog::logger> logger_ptr();

// Sets the level by name (trace|debug|info|warn|error|critical); false if
// unknown.
bool set_level(const std::string& name);

// Sets the format by name: "text" (the default: time, [level], PID and
// module, message, then fields as key=value) or "json" (one object a line:
// time, level, pid, module, message, then the fields); false if unknown.
bool set_format(const std::string& name);

// A field of an entry (log.info("text", { user = id })). `value` is the
// value's text when `is_string`, else a JSON value written as it is
// (a number, true, false, an array or an object).
struct Field {
  std::string key;
  std::string value;
  bool is_string = true;
};

// Writes one entry at `level` from the current process (set_current_pid)
// with `fields` after its message.
void write(spdlog::level::level_enum level, std::string_view message, std::span<const Field> fields);

// The crash report of process `pid` whose entry is `entry` ("" when it has
// none), failed with `error` (its message, then, for a Lua error,
// "\nstack traceback:\n..."): an error-level entry in that process's name,
// whatever thread writes it. Its message is "process crashed: " and the
// error with traceback; in JSON the error and the traceback are also fields
// of their own (error, traceback). `headline` replaces "process crashed"
// (the root's failure, written as an entry under --log-format json).
void crash_report(const Pid& pid, std::string_view entry, std::string_view error,
                  std::string_view headline = "process crashed");

// `text` as a JSON string, quotes included, onto `out`; bytes that are not
// UTF-8 become U+FFFD (a JSON text is UTF-8; a Lua string may hold any bytes).
void append_json_string(std::string_view text, std::string& out);

// The text format's escaping of `text` onto `out`: backslash, newline,
// carriage return, tab and other control characters become \\, \n, \r,
// \t, \xHH (and C1 controls, U+2028, U+2029 \uHHHH), so the text stays
// on one line, no terminal control reaches the reader, and the escaping
// can be undone.
void escape_text(std::string_view text, std::string& out);

// The PID, and the name of the process (Process::Name, asked only when a
// line is written), shown in log lines written on this thread ("-" when
// none). `process` must outlive the matching clear_current_pid(). The worker
// sets them around every step: asking for the name there read a cache line
// of the process that the step does not need (ThreadRing 1000, cachegrind).
// Inline, over thread_locals of constant initialization (no TLS wrapper):
// a worker's every step sets and clears them, where the out-of-line calls
// were paid on every step (BENCHMARKS.md's source figures).
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
