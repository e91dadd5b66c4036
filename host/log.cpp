// The logger: a stderr sink, and a pattern flag that prints the PID of the
// process running on the writing thread.
#include "host/log.hpp"

#include <cstring>

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>

#include "host/process.hpp"

namespace host::log {
namespace {

// Set by the worker around each step (log.hpp); rendered only when a line
// is written, so the hot path pays a store, not a formatting.
using detail::current_pid;
using detail::current_process;

class PidFlag final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg&, const std::tm&, spdlog::memory_buf_t& dest) override {
    if (!current_pid.valid()) {
      dest.push_back('-');
      return;
    }
    std::string v = current_pid.to_string();
    dest.append(v.data(), v.data() + v.size());
    const char* name = current_process ? current_process->Name() : "";
    if (*name) {
      dest.push_back(' ');
      dest.append(name, name + std::strlen(name));
    }
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<PidFlag>(); }
};

std::shared_ptr<spdlog::logger> make_logger() {
  auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  auto lg = std::make_shared<spdlog::logger>("host", sink);
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  formatter->add_flag<PidFlag>('*').set_pattern("%Y-%m-%d %H:%M:%S.%e [%l] %* %v");
  lg->set_formatter(std::move(formatter));
  lg->set_level(spdlog::level::info);
  lg->flush_on(spdlog::level::trace);  // line by line: a crash loses nothing
  return lg;
}

}  // namespace

std::shared_ptr<spdlog::logger> logger_ptr() {
  static std::shared_ptr<spdlog::logger> lg = make_logger();
  return lg;
}

spdlog::logger& logger() { return *logger_ptr(); }

bool set_level(const std::string& name) {
  static const std::pair<const char*, spdlog::level::level_enum> levels[] = {
      {"trace", spdlog::level::trace}, {"debug", spdlog::level::debug}, {"info", spdlog::level::info},
      {"warn", spdlog::level::warn},   {"error", spdlog::level::err}};
  for (auto& [n, l] : levels) {
    if (name == n) {
      logger().set_level(l);
      return true;
    }
  }
  return false;
}

CurrentPidScope::CurrentPidScope(const Pid& pid, const Process* process)
    : saved_pid_(current_pid), saved_process_(current_process) {
  set_current_pid(pid, process);
}

CurrentPidScope::~CurrentPidScope() { set_current_pid(saved_pid_, saved_process_); }

void forget_process(const Process* process) {
  if (current_process == process) current_process = nullptr;
}

}  // namespace host::log
