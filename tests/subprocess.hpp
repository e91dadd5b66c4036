// Runs the host program as a user would: a child process with arguments,
// its stdout and stderr captured, an optional signal after a delay, and a
// hard timeout that fails the test instead of hanging it.
#pragma once

#include <signal.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace host::testing {

struct RunResult {
  int code = -1;  // exit status, or 128+signal
  bool timed_out = false;
  std::string out, err;
};

struct RunOptions {
  std::chrono::milliseconds timeout{30000};
  int signal = 0;  // sent once `signal_when` returns true (checked as output arrives) ...
  std::function<bool(const std::string& out, const std::string& err)> signal_when;
  int second_signal = 0;  // ... and this one after it, once `second_signal_when` returns true
  std::function<bool(const std::string& out, const std::string& err)> second_signal_when;
  // The child's stdin: a pipe nobody writes to, open until the child ends
  // (else it inherits this program's).
  bool quiet_stdin = false;
  // ... and called on each poll, e.g. to edit files while it runs.
  std::function<void(const std::string& out, const std::string& err)> on_output;
  std::vector<std::pair<std::string, std::string>> env;  // set in the child only
};

inline RunResult run_program(const std::vector<std::string>& argv, RunOptions opts = {}) {
  int out_pipe[2], err_pipe[2], in_pipe[2] = {-1, -1};
  if (pipe(out_pipe) != 0 || pipe(err_pipe) != 0) std::abort();
  if (opts.quiet_stdin && pipe(in_pipe) != 0) std::abort();
  pid_t pid = fork();
  if (pid == 0) {
    if (opts.quiet_stdin) {
      dup2(in_pipe[0], 0);
      close(in_pipe[0]);
      close(in_pipe[1]);
    }
    dup2(out_pipe[1], 1);
    dup2(err_pipe[1], 2);
    close(out_pipe[0]);
    close(err_pipe[0]);
    for (const auto& [k, v] : opts.env) setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  close(out_pipe[1]);
  close(err_pipe[1]);
  if (opts.quiet_stdin) close(in_pipe[0]);
  RunResult r;
  auto deadline = std::chrono::steady_clock::now() + opts.timeout;
  bool signalled = false;
  int open_fds = 2;
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  while (open_fds > 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      r.timed_out = true;
      kill(pid, SIGKILL);
      break;
    }
    poll(fds, 2, 20);
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP))) continue;
      char buf[4096];
      ssize_t n = read(fds[i].fd, buf, sizeof buf);
      if (n <= 0) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      } else {
        (i == 0 ? r.out : r.err).append(buf, static_cast<std::size_t>(n));
      }
    }
    if (opts.on_output) opts.on_output(r.out, r.err);
    if (opts.signal && !signalled && opts.signal_when && opts.signal_when(r.out, r.err)) {
      kill(pid, opts.signal);
      signalled = true;
    } else if (signalled && opts.second_signal && opts.second_signal_when && opts.second_signal_when(r.out, r.err)) {
      kill(pid, opts.second_signal);
      opts.second_signal = 0;
    }
  }
  for (auto& f : fds)
    if (f.fd >= 0) close(f.fd);
  int status = 0;
  waitpid(pid, &status, 0);
  if (opts.quiet_stdin) close(in_pipe[1]);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

// A scratch script directory, removed afterwards.
class ScriptDir {
 public:
  ScriptDir() {
    char tmpl[] = "/tmp/host-test-XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~ScriptDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  void write(const std::string& rel, const std::string& text) const {
    auto p = path_ / rel;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << text;
  }
  // Writes to a temporary name, then renames over the file (as many editors do).
  void write_by_rename(const std::string& rel, const std::string& text) const {
    write(rel + ".tmp~", text);
    std::filesystem::rename(path_ / (rel + ".tmp~"), path_ / rel);
  }
  std::string str() const { return path_.string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace host::testing
