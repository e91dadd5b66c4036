// Parsing of `host run DIR [options] [-- ARGS...]`.
#include "host/program/cli_options.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>

namespace host::cli {

namespace {

std::string entry_flag(RunOptions& o, const std::string& v) {
  if (v.empty() || v.front() == ':' || v.back() == ':') return "--entry needs MODULE[:METHOD]";
  o.entry = v.find(':') == std::string::npos ? v + ":main" : v;
  return {};
}

std::string workers_flag(RunOptions& o, const std::string& v) {
  char* end = nullptr;
  const long n = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end || n < 1 || n > 1024) return "--workers needs a number from 1 to 1024";
  o.workers = static_cast<unsigned>(n);
  return {};
}

std::string watch_flag(RunOptions& o, const std::string&) {
  o.watch = true;
  return {};
}

std::string log_level_flag(RunOptions& o, const std::string& v) {
  for (const char* level : {"trace", "debug", "info", "warn", "error", "critical"}) {
    if (v == level) {
      o.log_level = v;
      return {};
    }
  }
  return "--log-level needs one of trace, debug, info, warn, error, critical";
}

std::string log_format_flag(RunOptions& o, const std::string& v) {
  if (v != "text" && v != "json") return "--log-format needs text or json";
  o.log_format = v;
  return {};
}

std::string mem_limit_flag(RunOptions& o, const std::string& v) {
  const auto n = parse_size(v);
  if (!n) return "--mem-limit needs a size like 65536, 512K, 64M or 1G";
  o.mem_limit = *n;
  return {};
}

std::string time_limit_flag(RunOptions& o, const std::string& v) {
  char* end = nullptr;
  const double s = std::strtod(v.c_str(), &end);
  // At most 1e9 s (about 31 years): the monitor counts in nanoseconds,
  // and past about 9.2e9 s their count overflowed (every process was
  // stopped at once).
  if (v.empty() || *end || !(s > 0) || !std::isfinite(s) || s > 1e9)
    return "--time-limit needs a positive number of seconds (at most 1e9)";
  o.time_limit = s;
  return {};
}

std::string max_processes_flag(RunOptions& o, const std::string& v) {
  char* end = nullptr;
  const long long n = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end || n < 1) return "--max-processes needs a positive number";
  o.max_processes = static_cast<std::size_t>(n);
  return {};
}

std::string io_threads_flag(RunOptions& o, const std::string& v) {
  char* end = nullptr;
  const long long n = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end || n < 1 || n > 64) return "--io-threads needs a number from 1 to 64";
  o.io_threads = static_cast<unsigned>(n);
  return {};
}

// "IP:PORT" or "[IPv6]:PORT"; "off" for none.
std::string inspect_flag(RunOptions& o, const std::string& v) {
  if (v == "off") {
    o.inspect.clear();
    return {};
  }
  const std::size_t colon = v.rfind(':');
  const std::string port = colon == std::string::npos ? "" : v.substr(colon + 1);
  char* end = nullptr;
  const long n = std::strtol(port.c_str(), &end, 10);
  if (colon == std::string::npos || colon == 0 || port.empty() || *end || n < 0 || n > 65535)
    return "--inspect needs an address like 127.0.0.1:9090";
  o.inspect = v;
  return {};
}

// A name of the cluster (a NATS subject token, and in logs): letters,
// digits, '_' and '-'; "off" for none (as --inspect's).
std::string node_flag(RunOptions& o, const std::string& v) {
  if (v == "off") {
    o.node.clear();
    return {};
  }
  const bool good = !v.empty() && v.size() <= 64 && std::all_of(v.begin(), v.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  });
  if (!good) return "--node needs a name of 1 to 64 letters, digits, '_' or '-'";
  o.node = v;
  return {};
}

// nats://HOST:PORT (the one scheme NATS's client takes without TLS).
std::string cluster_flag(RunOptions& o, const std::string& v) {
  if (v == "off") {
    o.cluster.clear();
    return {};
  }
  const std::string scheme = "nats://";
  const std::string rest = v.rfind(scheme, 0) == 0 ? v.substr(scheme.size()) : "";
  const std::size_t colon = rest.rfind(':');
  const std::string port = colon == std::string::npos ? "" : rest.substr(colon + 1);
  char* end = nullptr;
  const long n = std::strtol(port.c_str(), &end, 10);
  if (rest.empty() || colon == 0 || colon == std::string::npos || port.empty() || *end || n < 1 || n > 65535)
    return "--cluster needs a NATS server's address like nats://127.0.0.1:4222";
  o.cluster = v;
  return {};
}

std::string node_timeout_flag(RunOptions& o, const std::string& v) {
  char* end = nullptr;
  const double s = std::strtod(v.c_str(), &end);
  // At least two heartbeats (500 ms apart) fit in it, so one lost
  // heartbeat never takes a node down.
  if (v.empty() || *end || !std::isfinite(s) || s < 1 || s > 1e6)
    return "--node-timeout needs a number of seconds from 1 to 1e6";
  o.node_timeout = s;
  return {};
}

// The defaults shown here are RunOptions' (tests/test_host_cli.cpp parses
// each one that is a value and compares).
constexpr Flag kFlags[] = {
    {"--entry", "MODULE[:METHOD]", "main:main", "the root process: METHOD (main if none) of DIR/MODULE.lua", entry_flag},
    {"--workers", "N", "one per core", "scheduler threads, 1 to 1024", workers_flag},
    {"--watch", "", "off", "hot reload: new spawns run changed modules", watch_flag},
    {"--log-level", "LEVEL", "info", "the least level logged: trace, debug, info, warn, error, critical", log_level_flag},
    {"--log-format", "FORMAT", "text", "text, or json: one JSON object a line", log_format_flag},
    {"--mem-limit", "BYTES", "256M", "each process's Lua heap at most; K, M, G suffixes", mem_limit_flag},
    {"--time-limit", "SECONDS", "10", "Lua run without yielding before a process stops; at most 1e9", time_limit_flag},
    {"--max-processes", "N", "1000000", "live processes at most", max_processes_flag},
    {"--io-threads", "N", "1", "I/O threads serving UDP sockets and name lookups, 1 to 64", io_threads_flag},
    {"--inspect", "ADDRESS", "off",
     "serve a live page of the processes at http://ADDRESS/ and Prometheus metrics at /metrics "
     "(e.g. 127.0.0.1:9090; anyone who reaches it can stop processes: keep it on loopback)",
     inspect_flag},
    {"--node", "NAME", "off", "this host's name in the cluster (needs --cluster)", node_flag},
    {"--cluster", "URL", "off", "join the cluster of the NATS server at URL (nats://HOST:PORT; needs --node)",
     cluster_flag},
    {"--node-timeout", "SECONDS", "5", "a node of the cluster silent this long is down", node_timeout_flag},
};

// "usage: host run DIR [--entry MODULE[:METHOD]] ..." from the table,
// wrapped under its first bracket.
std::string make_usage() {
  const std::string head = "usage: host run DIR";
  const std::string indent(head.size() + 1, ' ');
  std::string out = head, line = head;
  auto add = [&](const std::string& item) {
    if (line.size() + 1 + item.size() > 90) {
      out += "\n" + indent.substr(1);
      line = indent.substr(1);
    }
    out += " " + item;
    line += " " + item;
  };
  for (const Flag& f : kFlags)
    add("[" + std::string(f.name) + (f.value.empty() ? "" : " " + std::string(f.value)) + "]");
  add("[-- ARGS...]");
  return out + "\n       host --help | --version\n";
}

const std::string& usage_text() {
  static const std::string text = make_usage();
  return text;
}

}  // namespace

const char* const kUsage = usage_text().c_str();

std::span<const Flag> flags() { return kFlags; }

std::string help() {
  std::string out = usage_text();
  out +=
      "\n"
      "Runs the Lua script directory DIR: its root process calls METHOD of module MODULE\n"
      "(DIR/MODULE.lua) with ARGS as strings, and the host exits when it ends: 0 if it returned,\n"
      "1 if it failed, 2 on bad usage, 130 or 143 on SIGINT or SIGTERM.\n"
      "\n"
      "flags:\n";
  std::size_t width = std::string_view("--help, -h").size();
  for (const Flag& f : kFlags) width = std::max(width, f.name.size() + (f.value.empty() ? 0 : 1 + f.value.size()));
  auto row = [&](std::string left, std::string_view meaning, std::string_view fallback) {
    left.resize(width, ' ');
    out += "  " + left + "  " + std::string(meaning);
    if (!fallback.empty()) out += " (default: " + std::string(fallback) + ")";
    out += "\n";
  };
  for (const Flag& f : kFlags)
    row(std::string(f.name) + (f.value.empty() ? "" : " " + std::string(f.value)), f.meaning, f.fallback);
  row("--help, -h", "print this help and exit", "");
  row("--version", "print the version and exit", "");
  out +=
      "\n"
      "Output: print and log.* write log entries to stderr (print at info), as do the host's\n"
      "own messages and crash reports; io.write writes to stdout as in plain LuaJIT.\n";
  return out;
}

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
    if (a == "--") {
      for (++i; i < argc; ++i) o.args.emplace_back(argv[i]);
      break;
    } else if (a == "--help" || a == "-h") {
      p.action = Parsed::Action::Help;
      return p;
    } else if (a.rfind("--", 0) == 0) {
      const std::size_t eq = a.find('=');
      const std::string name = a.substr(0, eq);
      const Flag* flag = nullptr;
      for (const Flag& f : kFlags)
        if (f.name == name) flag = &f;
      if (!flag) return usage_error("unknown option '" + a + "'");
      std::string value;
      if (flag->value.empty()) {
        if (eq != std::string::npos) return usage_error(name + " takes no value");
      } else if (eq != std::string::npos) {
        value = a.substr(eq + 1);
      } else if (i + 1 < argc) {
        value = argv[++i];
      }
      if (std::string err = flag->apply(o, value); !err.empty()) return usage_error(std::move(err));
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
  if (!o.node.empty() && o.cluster.empty()) return usage_error("--node needs --cluster nats://HOST:PORT");
  if (o.node.empty() && !o.cluster.empty()) return usage_error("--cluster needs --node NAME");
  p.action = Parsed::Action::Run;
  return p;
}

}  // namespace host::cli
