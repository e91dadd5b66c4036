// The logger: a stderr sink, and its two formats. The text format is a
// pattern whose PID flag prints the process running on the writing thread
// and whose message flag escapes the message onto one line; the JSON format
// is a formatter of its own. Both read an entry's fields and crash-report
// identity from a thread_local set around the call (write, crash_report):
// the sink is synchronous, so the formatting runs on the calling thread,
// inside that call.
#include "host/log.hpp"

#include <time.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <string>

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>

#include "host/process.hpp"

namespace host::log {
namespace {

// Set by the worker around each step (log.hpp); rendered only when a line
// is written, so the hot path pays a store, not a formatting.
using detail::current_pid;
using detail::current_process;

// What an entry carries besides spdlog's message: its fields, and for a
// crash report the PID and module it is written in the name of (not the
// thread's current process: a process is reported after it is gone, on
// whichever thread finished it) and its traceback.
struct Extras {
  std::span<const Field> fields;
  bool own_identity = false;
  Pid pid;
  std::string_view module;
  std::string_view error;      // a failure's error without its traceback (JSON's error field)
  std::string_view traceback;  // "stack traceback:\n..." or empty
};
thread_local const Extras* current_extras = nullptr;

class ExtrasScope {
 public:
  explicit ExtrasScope(const Extras* e) : saved_(current_extras) { current_extras = e; }
  ~ExtrasScope() { current_extras = saved_; }
  ExtrasScope(const ExtrasScope&) = delete;
  ExtrasScope& operator=(const ExtrasScope&) = delete;

 private:
  const Extras* saved_;
};

// The PID and module an entry shows: the crash report's own, else the
// current process's (pid invalid: a line of the host's own).
struct Identity {
  Pid pid;
  const char* module = "";
  std::size_t module_len = 0;
};
Identity identity() {
  Identity id;
  if (current_extras && current_extras->own_identity) {
    id.pid = current_extras->pid;
    id.module = current_extras->module.data();
    id.module_len = current_extras->module.size();
    return id;
  }
  id.pid = current_pid;
  if (id.pid.valid() && current_process) {
    id.module = current_process->Name();
    id.module_len = std::strlen(id.module);
  }
  return id;
}

void append(spdlog::memory_buf_t& dest, std::string_view s) { dest.append(s.data(), s.data() + s.size()); }

// The length of the UTF-8 sequence at s[i] when it is well formed (no
// overlong form, no surrogate, at most U+10FFFF), else 0; its code point in cp.
std::size_t utf8_sequence(std::string_view s, std::size_t i, std::uint32_t& cp) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = b(0);
  std::size_t n;
  if (c >= 0xc2 && c <= 0xdf) n = 2, cp = c & 0x1f;
  else if (c >= 0xe0 && c <= 0xef) n = 3, cp = c & 0x0f;
  else if (c >= 0xf0 && c <= 0xf4) n = 4, cp = c & 0x07;
  else return 0;
  if (i + n > s.size()) return 0;
  for (std::size_t k = 1; k < n; ++k) {
    if ((b(k) & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (b(k) & 0x3f);
  }
  if ((n == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)))
    return 0;
  return n;
}

// The text format's field value (or key): as it is when it reads as one
// word, else quoted, with its quotes and what escape_text escapes escaped.
void append_text_word(std::string_view text, bool raw, std::string& out) {
  if (raw) {  // a JSON value: a number, a boolean, an array or object without spaces
    escape_text(text, out);
    return;
  }
  bool plain = !text.empty();
  for (unsigned char c : text)
    if (c <= ' ' || c == '=' || c == '"' || c == '\\' || c == 0x7f || c >= 0x80) plain = false;
  if (plain) {
    out.append(text);
    return;
  }
  out += '"';
  std::size_t start = 0;
  for (std::size_t i = 0; i <= text.size(); ++i) {
    if (i == text.size() || text[i] == '"') {
      escape_text(text.substr(start, i - start), out);
      if (i < text.size()) out += "\\\"";
      start = i + 1;
    }
  }
  out += '"';
}

class PidFlag final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg&, const std::tm&, spdlog::memory_buf_t& dest) override {
    const Identity id = identity();
    if (!id.pid.valid()) {
      dest.push_back('-');
      return;
    }
    char buf[Pid::kMaxText];
    dest.append(buf, buf + id.pid.format(buf));
    if (id.module_len) {
      dest.push_back(' ');
      dest.append(id.module, id.module + id.module_len);
    }
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<PidFlag>(); }
};

// The message on one line, then a failure's traceback and the fields.
class MessageFlag final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
    std::string line;
    escape_text(std::string_view(msg.payload.data(), msg.payload.size()), line);
    if (const Extras* e = current_extras) {
      if (!e->traceback.empty()) {
        line += "\\n";
        escape_text(e->traceback, line);
      }
      for (const Field& f : e->fields) {
        line += ' ';
        append_text_word(f.key, false, line);
        line += '=';
        append_text_word(f.value, !f.is_string, line);
      }
    }
    append(dest, line);
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<MessageFlag>(); }
};

// One JSON object a line: time (UTC, milliseconds), level, pid, module
// (null for the host's own entries), message, then the fields.
class JsonFormatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    std::string line = "{\"time\":\"";
    const auto since = msg.time.time_since_epoch();
    const auto secs = std::chrono::duration_cast<std::chrono::seconds>(since);
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(since - secs).count();
    const std::time_t t = static_cast<std::time_t>(secs.count());
    std::tm tm{};
    gmtime_r(&t, &tm);
    char stamp[40];
    const std::size_t n = std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &tm);
    std::snprintf(stamp + n, sizeof stamp - n, ".%03dZ", static_cast<int>(ms));
    line += stamp;
    line += "\",\"level\":";
    const auto level = spdlog::level::to_string_view(msg.level);
    append_json_string(std::string_view(level.data(), level.size()), line);
    const Identity id = identity();
    line += ",\"pid\":";
    if (id.pid.valid()) append_json_string(id.pid.to_string(), line);
    else line += "null";
    line += ",\"module\":";
    if (id.module_len) append_json_string(std::string_view(id.module, id.module_len), line);
    else line += "null";
    line += ",\"message\":";
    append_json_string(std::string_view(msg.payload.data(), msg.payload.size()), line);
    if (const Extras* e = current_extras) {
      if (!e->error.empty()) {
        line += ",\"error\":";
        append_json_string(e->error, line);
      }
      if (!e->traceback.empty()) {
        line += ",\"traceback\":";
        append_json_string(e->traceback, line);
      }
      for (const Field& f : e->fields) {
        line += ',';
        append_json_string(f.key, line);
        line += ':';
        if (f.is_string) append_json_string(f.value, line);
        else line += f.value;
      }
    }
    line += "}\n";
    append(dest, line);
  }
  std::unique_ptr<spdlog::formatter> clone() const override { return std::make_unique<JsonFormatter>(); }
};

std::unique_ptr<spdlog::formatter> text_formatter() {
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  formatter->add_flag<PidFlag>('*').add_flag<MessageFlag>('&').set_pattern("%Y-%m-%d %H:%M:%S.%e [%l] %* %&");
  return formatter;
}

std::shared_ptr<spdlog::logger> make_logger() {
  auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  auto lg = std::make_shared<spdlog::logger>("host", sink);
  lg->set_formatter(text_formatter());
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
      {"warn", spdlog::level::warn},   {"error", spdlog::level::err},   {"critical", spdlog::level::critical}};
  for (auto& [n, l] : levels) {
    if (name == n) {
      logger().set_level(l);
      return true;
    }
  }
  return false;
}

bool set_format(const std::string& name) {
  if (name == "text") logger().set_formatter(text_formatter());
  else if (name == "json") logger().set_formatter(std::make_unique<JsonFormatter>());
  else return false;
  return true;
}

void write(spdlog::level::level_enum level, std::string_view message, std::span<const Field> fields) {
  if (!logger().should_log(level)) return;
  Extras extras;
  extras.fields = fields;
  const ExtrasScope scope(fields.empty() ? nullptr : &extras);
  logger().log(level, "{}", message);
}

void crash_report(const Pid& pid, std::string_view entry, std::string_view error, std::string_view headline) {
  if (!logger().should_log(spdlog::level::err)) return;
  Extras extras;
  extras.own_identity = true;
  extras.pid = pid;
  extras.module = entry;
  // A Lua error's text is its message, then LuaJIT's traceback.
  static constexpr std::string_view kTraceback = "\nstack traceback:\n";
  const std::size_t at = error.find(kTraceback);
  extras.error = error.substr(0, at);
  if (at != std::string_view::npos) extras.traceback = error.substr(at + 1);
  const ExtrasScope scope(&extras);
  logger().log(spdlog::level::err, "{}: {}", headline, extras.error);
}

void escape_text(std::string_view text, std::string& out) {
  static const char hex[] = "0123456789abcdef";
  for (std::size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else if (c >= 0x80) {
      // C1 controls and the Unicode line and paragraph separators: some
      // terminals and viewers break lines there too. Other text passes,
      // bytes that are not UTF-8 included (they break no line).
      std::uint32_t cp = 0;
      const std::size_t n = utf8_sequence(text, i, cp);
      if (n && ((cp >= 0x80 && cp <= 0x9f) || cp == 0x2028 || cp == 0x2029)) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(cp));
        out += buf;
        i += n;
        continue;
      }
      out += static_cast<char>(c);
    } else {
      out += static_cast<char>(c);
    }
    ++i;
  }
}

void append_json_string(std::string_view text, std::string& out) {
  static const char hex[] = "0123456789abcdef";
  out += '"';
  for (std::size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        default:
          if (c < 0x20 || c == 0x7f) {
            out += "\\u00";
            out += hex[c >> 4];
            out += hex[c & 15];
          } else {
            out += static_cast<char>(c);
          }
      }
      ++i;
      continue;
    }
    std::uint32_t cp = 0;
    const std::size_t n = utf8_sequence(text, i, cp);
    if (n == 0) {
      out += "\\ufffd";
      ++i;
    } else {
      out.append(text.data() + i, n);
      i += n;
    }
  }
  out += '"';
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
