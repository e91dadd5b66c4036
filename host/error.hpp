// The one table of error kinds shared by C++ and Lua. An error string always
// starts with its kind ("not_found: no process <0.7.1>"), so Lua code can
// match on the prefix and C++ code can build one with make_error().
#pragma once

#include <string>
#include <string_view>

namespace host {

// Denied and Io are the file and program calls' (docs/LUA_API.md, fs and exec): a
// permission refused, and any other failure of the system call.
enum class ErrorKind { NotFound, Timeout, Invalid, Exists, Canceled, Limit, Denied, Io };

constexpr std::string_view error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::NotFound: return "not_found";
    case ErrorKind::Timeout: return "timeout";
    case ErrorKind::Invalid: return "invalid";
    case ErrorKind::Exists: return "exists";
    case ErrorKind::Canceled: return "canceled";
    case ErrorKind::Limit: return "limit";
    case ErrorKind::Denied: return "denied";
    case ErrorKind::Io: return "io";
  }
  return "invalid";
}

// "kind" alone when detail is empty, else "kind: detail".
inline std::string make_error(ErrorKind kind, std::string_view detail = {}) {
  std::string out(error_kind_name(kind));
  if (!detail.empty()) {
    out += ": ";
    out += detail;
  }
  return out;
}

// The error of a failed system call on `what` (a path, a program), by
// errno: not_found, denied, exists, or io with the system's words.
std::string errno_error(int err, std::string_view what);

}  // namespace host
