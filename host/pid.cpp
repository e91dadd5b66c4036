// PID rendering and parsing.
#include "host/pid.hpp"

#include <charconv>

namespace host {

std::size_t Pid::format(char (&buf)[kMaxText]) const {
  // kMaxText holds the longest text, so to_chars never runs out of room;
  // it is told to stop one byte short all the same, which lets the compiler
  // see that the separator after each number stays in the buffer.
  char* p = buf;
  char* const last = buf + kMaxText - 1;
  auto put = [&](std::uint32_t v, char after) {
    p = std::to_chars(p, last, v).ptr;
    *p++ = after;
  };
  *p++ = '<';
  put(node, '.');
  put(index, '.');
  put(generation, '>');
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
    if (*p == '0' && next - p > 1) return std::nullopt;  // strictly as written: no leading zeros ("<0.0.01>")
    p = next;
    if (i < 2) {
      if (p == end || *p != '.') return std::nullopt;
      ++p;
    }
  }
  if (p != end) return std::nullopt;
  // Generation 0 is well formed but names no process (Erlang's PIDs end in
  // 0, and a user may write one): a send to it is not_found, like a send
  // to a dead process, not a malformed PID.
  return Pid{parts[0], parts[1], parts[2]};
}

}  // namespace host
