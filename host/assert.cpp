// HOST_ASSERT's failure: written with write(2) (no allocation, no lock:
// the process may be in any state), then abort.
#include "host/assert.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace host {

void assert_failed(const char* cond, const char* what, const char* file, int line) {
  char buf[1024];
  const int n = std::snprintf(buf, sizeof buf, "host: internal check failed: %s (%s) at %s:%d\n", what, cond, file, line);
  if (n > 0) (void)!::write(2, buf, static_cast<std::size_t>(n) < sizeof buf ? static_cast<std::size_t>(n) : sizeof buf - 1);
  std::abort();
}

}  // namespace host
