// PID rendering and parsing.
#include "host/pid.hpp"

#include <charconv>

namespace host {

std::size_t Pid::format(char (&buf)[kMaxText]) const {
  char* p = buf;
  char* end = buf + kMaxText;
  *p++ = '<';
  p = std::to_chars(p, end, node).ptr;
  *p++ = '.';
  p = std::to_chars(p, end, index).ptr;
  *p++ = '.';
  p = std::to_chars(p, end, generation).ptr;
  *p++ = '>';
  return static_cast<std::size_t>(p - buf);
}

std::string Pid::to_string() const {
  char buf[kMaxText];
  return std::string(buf, format(buf));
}

std::optional<Pid> Pid::parse(std::string_view text) {
  if (text.size() < 7 || text.front() != '<' || text.back() != '>') return std::nullopt;
  const char* p = text.data() + 1;
  const char* end = text.data() + text.size() - 1;
  std::uint32_t parts[3];
  for (int i = 0; i < 3; ++i) {
    auto [next, ec] = std::from_chars(p, end, parts[i]);
    if (ec != std::errc{} || next == p) return std::nullopt;
    p = next;
    if (i < 2) {
      if (p == end || *p != '.') return std::nullopt;
      ++p;
    }
  }
  if (p != end) return std::nullopt;
  Pid pid{parts[0], parts[1], parts[2]};
  if (!pid.valid()) return std::nullopt;
  return pid;
}

}  // namespace host
