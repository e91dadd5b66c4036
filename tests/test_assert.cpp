// HOST_ASSERT (host/assert.hpp): in a debug build a failed check names the
// invariant and where, on stderr, and aborts; in a release build it is
// nothing (its condition is not even evaluated).
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <string>

#include "host/assert.hpp"

TEST_CASE("HOST_ASSERT: a failed check aborts with its text in a debug build, and costs nothing in a release build") {
  int evaluated = 0;
  HOST_ASSERT(++evaluated > 0, "holds");
#ifdef NDEBUG
  CHECK(evaluated == 0);
#else
  CHECK(evaluated == 1);
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    dup2(fds[1], 2);
    HOST_ASSERT(evaluated == 2, "the example invariant");
    _exit(0);
  }
  close(fds[1]);
  std::string text;
  char buf[256];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) text.append(buf, static_cast<std::size_t>(n));
  close(fds[0]);
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGABRT);
  CHECK(text.find("internal check failed: the example invariant (evaluated == 2) at ") != std::string::npos);
  CHECK(text.find("test_assert.cpp:") != std::string::npos);
#endif
}
