// The runtime's spdlog logger. Lines go to stderr, flushed line by line, and
// carry the time, the level and the PID of the process that wrote them (the
// process running on this thread, set by the worker around each step).
#pragma once

#include <memory>
#include <string>

#include <spdlog/spdlog.h>

#include "host/pid.hpp"

namespace host::log {

// The named logger "host", created on first use.
spdlog::logger& logger();
std::shared_ptr<spdlog::logger> logger_ptr();

// Sets the level by name (trace|debug|info|warn|error); false if unknown.
bool set_level(const std::string& name);

// The PID and module shown in log lines written on this thread ("-" when
// none). `module` must outlive the matching clear_current_pid().
void set_current_pid(const Pid& pid, const char* module = "");
void clear_current_pid();

}  // namespace host::log
