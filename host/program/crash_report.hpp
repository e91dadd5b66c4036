// Crash reports (docs/LUA_API.md, Output and logs): which failures that reached nobody the
// host logs, as Erlang's logger reports a process that crashed.
// Threads: any (pure functions of their arguments).
#pragma once

#include "host/pid.hpp"
#include "host/scheduler.hpp"

namespace host::crash_report {

// Whether a failure that no live process was told of (the scheduler's
// unwatched failure hook) is reported. Not the root's: the host reports
// it as it exits. Not a stop someone asked for (process.terminate's
// "terminated", the shutdown's "killed: shutdown"), as Erlang reports no
// process killed by an exit signal. A failure that came over links
// ("linked process <PID> failed: ...") is judged by where it came from:
// from the root, or from a stop someone asked for, it is not reported;
// otherwise it is, and it carries the first failure's error and traceback,
// which nobody else was left to report.
bool wanted(const ExitInfo& info, const Pid& root);

}  // namespace host::crash_report
