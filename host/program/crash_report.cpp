// Which failures that reached nobody are reported (crash_report.hpp).
#include "host/program/crash_report.hpp"

#include "host/program/reloader.hpp"

#include <string_view>

namespace host::crash_report {

bool wanted(const ExitInfo& info, const Pid& root) {
  if (!info.failed || info.pid == root) return false;
  if (std::string_view(info.entry).starts_with(kReloadCheckModule)) return false;  // the reloader reports it
  // bindings/task_kernel.cpp's words for a failure that came over a link.
  static constexpr std::string_view kLinked = "linked process ";
  static constexpr std::string_view kFailed = " failed: ";
  std::string_view error = info.error;
  while (error.starts_with(kLinked)) {
    const std::size_t end = error.find(kFailed, kLinked.size());
    if (end == std::string_view::npos) break;
    const auto from = Pid::parse(error.substr(kLinked.size(), end - kLinked.size()));
    if (from && *from == root) return false;
    error.remove_prefix(end + kFailed.size());
  }
  const std::string_view first_line = error.substr(0, error.find('\n'));
  // A cancel that ended a process which never opened its events is how
  // such a process stops, as a shutdown is, not a crash.
  if (first_line == "canceled" || first_line.starts_with("canceled: ")) return false;
  return first_line != "terminated" && first_line != "killed: shutdown";
}

}  // namespace host::crash_report
