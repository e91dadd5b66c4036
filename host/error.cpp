// Error strings from a system call's errno (error.hpp).
#include "host/error.hpp"

#include <cerrno>
#include <cstring>

namespace host {

std::string errno_error(int err, std::string_view what) {
  switch (err) {
    case ENOENT: return make_error(ErrorKind::NotFound, what);
    case EACCES:
    case EPERM: return make_error(ErrorKind::Denied, what);
    case EEXIST: return make_error(ErrorKind::Exists, what);
    default: {
      std::string detail(what);
      detail += ": ";
      detail += std::strerror(err);
      return make_error(ErrorKind::Io, detail);
    }
  }
}

}  // namespace host
