// Parsing of `host run DIR [options] [-- ARGS...]`.
#include "host/cli_options.hpp"

#include <cctype>
#include <cmath>
#include <cstdlib>

namespace host::cli {

const char* const kUsage =
    "usage: host run DIR [--entry MODULE[:METHOD]] [--workers N] [--watch]\n"
    "                    [--log-level trace|debug|info|warn|error] [--mem-limit BYTES]\n"
    "                    [--time-limit SECONDS] [--max-processes N] [--io-threads N]\n"
    "                    [-- ARGS...]\n"
    "       host --help | --version\n";

std::optional<std::size_t> parse_size(const std::string& text) {
  if (text.empty() || !std::isdigit(static_cast<unsigned char>(text[0]))) return std::nullopt;
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  std::string suffix(end);
  for (auto& c : suffix) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  double mult = 1;
  if (suffix == "" || suffix == "B") mult = 1;
  else if (suffix == "K" || suffix == "KB" || suffix == "KIB") mult = 1024.0;
  else if (suffix == "M" || suffix == "MB" || suffix == "MIB") mult = 1024.0 * 1024;
  else if (suffix == "G" || suffix == "GB" || suffix == "GIB") mult = 1024.0 * 1024 * 1024;
  else return std::nullopt;
  double bytes = v * mult;
  if (!std::isfinite(bytes) || bytes < 1 || bytes > 1e15) return std::nullopt;
  return static_cast<std::size_t>(bytes);
}

Parsed parse(int argc, const char* const* argv) {
  Parsed p;
  auto usage_error = [&](std::string msg) {
    p.action = Parsed::Action::UsageError;
    p.error = std::move(msg);
    return p;
  };
  if (argc < 2) return usage_error("missing command");
  std::string cmd = argv[1];
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    p.action = Parsed::Action::Help;
    return p;
  }
  if (cmd == "--version") {
    p.action = Parsed::Action::Version;
    return p;
  }
  if (cmd != "run") return usage_error("unknown command '" + cmd + "'");
  RunOptions& o = p.run;
  bool have_dir = false;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char* flag) -> std::optional<std::string> {
      std::string f = flag;
      if (a.rfind(f + "=", 0) == 0) return a.substr(f.size() + 1);
      if (i + 1 >= argc) return std::nullopt;
      return std::string(argv[++i]);
    };
    auto is = [&](const char* flag) { return a == flag || a.rfind(std::string(flag) + "=", 0) == 0; };
    if (a == "--") {
      for (++i; i < argc; ++i) o.args.emplace_back(argv[i]);
      break;
    } else if (a == "--help" || a == "-h") {
      p.action = Parsed::Action::Help;
      return p;
    } else if (is("--entry")) {
      auto v = value("--entry");
      if (!v || v->empty() || v->front() == ':' || v->back() == ':') return usage_error("--entry needs MODULE[:METHOD]");
      o.entry = v->find(':') == std::string::npos ? *v + ":main" : *v;
    } else if (is("--workers")) {
      auto v = value("--workers");
      char* end = nullptr;
      long n = v ? std::strtol(v->c_str(), &end, 10) : 0;
      if (!v || v->empty() || *end || n < 1 || n > 1024) return usage_error("--workers needs a number from 1 to 1024");
      o.workers = static_cast<unsigned>(n);
    } else if (a == "--watch") {
      o.watch = true;
    } else if (is("--log-level")) {
      auto v = value("--log-level");
      if (!v || (*v != "trace" && *v != "debug" && *v != "info" && *v != "warn" && *v != "error"))
        return usage_error("--log-level needs one of trace, debug, info, warn, error");
      o.log_level = *v;
    } else if (is("--mem-limit")) {
      auto v = value("--mem-limit");
      auto n = v ? parse_size(*v) : std::nullopt;
      if (!n) return usage_error("--mem-limit needs a size like 65536, 512K, 64M or 1G");
      o.mem_limit = *n;
    } else if (is("--time-limit")) {
      auto v = value("--time-limit");
      char* end = nullptr;
      double s = v ? std::strtod(v->c_str(), &end) : 0;
      // At most 1e9 s (about 31 years): the monitor counts in nanoseconds,
      // and past about 9.2e9 s their count overflowed (every process was
      // stopped at once).
      if (!v || v->empty() || *end || !(s > 0) || !std::isfinite(s) || s > 1e9)
        return usage_error("--time-limit needs a positive number of seconds (at most 1e9)");
      o.time_limit = s;
    } else if (is("--max-processes")) {
      auto v = value("--max-processes");
      char* end = nullptr;
      long long n = v ? std::strtoll(v->c_str(), &end, 10) : 0;
      if (!v || v->empty() || *end || n < 1) return usage_error("--max-processes needs a positive number");
      o.max_processes = static_cast<std::size_t>(n);
    } else if (is("--io-threads")) {
      auto v = value("--io-threads");
      char* end = nullptr;
      long long n = v ? std::strtoll(v->c_str(), &end, 10) : 0;
      if (!v || v->empty() || *end || n < 1 || n > 64) return usage_error("--io-threads needs a number from 1 to 64");
      o.io_threads = static_cast<unsigned>(n);
    } else if (!a.empty() && a[0] == '-') {
      return usage_error("unknown option '" + a + "'");
    } else if (!have_dir) {
      o.dir = a;
      have_dir = true;
    } else {
      return usage_error("unexpected argument '" + a + "' (script arguments go after --)");
    }
  }
  if (!have_dir) return usage_error("missing DIR: the script directory to run");
  p.action = Parsed::Action::Run;
  return p;
}

}  // namespace host::cli
