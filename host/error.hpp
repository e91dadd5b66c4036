// The one table of error kinds shared by C++ and Lua. An error string always
// starts with its kind ("not_found: no process <0.7.1>"), so Lua code can
// match on the prefix and C++ code can build one with make_error().
#pragma once

#include <string>
#include <string_view>

namespace host {

enum class ErrorKind { NotFound, Timeout, Invalid, Exists, Canceled, Limit };

constexpr std::string_view error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::NotFound: return "not_found";
    case ErrorKind::Timeout: return "timeout";
    case ErrorKind::Invalid: return "invalid";
    case ErrorKind::Exists: return "exists";
    case ErrorKind::Canceled: return "canceled";
    case ErrorKind::Limit: return "limit";
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

}  // namespace host
