// The command line of the host program (docs/LUA_API.md, The command line), parsed into
// options or one clear error line.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace host::cli {

struct RunOptions {
  std::string dir;
  std::string entry = "main:main";
  unsigned workers = 0;  // 0: one per core
  bool watch = false;
  std::string log_level = "info";
  std::string log_format = "text";
  std::size_t mem_limit = 256u << 20;
  double time_limit = 10.0;
  std::size_t max_processes = 1000000;
  unsigned io_threads = 1;  // the I/O threads UDP sockets and name lookups spread over
  std::string inspect;      // --inspect's address; empty: no inspector
  std::string node;         // --node: this host's name in the cluster; empty: no cluster
  std::string cluster;      // --cluster: the NATS server's nats://HOST:PORT
  double node_timeout = 5.0;  // --node-timeout: a node silent this long is down
  std::vector<std::string> args;
  bool operator==(const RunOptions&) const = default;
};

struct Parsed {
  enum class Action { Run, Help, Version, UsageError } action = Action::UsageError;
  RunOptions run;
  std::string error;  // one line, for UsageError
};

Parsed parse(int argc, const char* const* argv);

// "64M" -> 67108864. Accepts K, M, G (powers of 1024), optional "B"/"iB".
std::optional<std::size_t> parse_size(const std::string& text);

// A flag of `host run`: the one table the parser reads a flag's name from
// and --help its meaning and default from, so that no flag parses without
// its help (a name not in it is an unknown option).
struct Flag {
  std::string_view name;      // "--workers"
  std::string_view value;     // its value's placeholder ("N"); empty for a switch
  std::string_view fallback;  // the default, as --help shows it
  std::string_view meaning;
  // Sets the option from the value (empty when none was given); returns
  // the usage error's line, empty when the value is good.
  std::string (*apply)(RunOptions& options, const std::string& value);
};
std::span<const Flag> flags();

// The usage lines, ending in a newline (printed after a usage error).
extern const char* const kUsage;
// --help's text: the usage, what the program does, and every flag with its
// meaning and default.
std::string help();

}  // namespace host::cli
