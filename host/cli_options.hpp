// The command line of the host program (SPEC section 1), parsed into
// options or one clear error line.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace host::cli {

struct RunOptions {
  std::string dir;
  std::string entry = "main:main";
  unsigned workers = 0;  // 0: one per core
  bool watch = false;
  std::string log_level = "info";
  std::size_t mem_limit = 256u << 20;
  double time_limit = 10.0;
  std::size_t max_processes = 1000000;
  unsigned io_threads = 1;  // the I/O threads the sockets spread over
  std::vector<std::string> args;
};

struct Parsed {
  enum class Action { Run, Help, Version, UsageError } action = Action::UsageError;
  RunOptions run;
  std::string error;  // one line, for UsageError
};

Parsed parse(int argc, const char* const* argv);

// "64M" -> 67108864. Accepts K, M, G (powers of 1024), optional "B"/"iB".
std::optional<std::size_t> parse_size(const std::string& text);

extern const char* const kUsage;

}  // namespace host::cli
