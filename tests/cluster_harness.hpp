// The cluster tests' common parts (tests/test_cluster.cpp,
// tests/test_cluster_transport.cpp): a nats-server of the test's own on a
// free port, host programs in the background, waiting for what they say.
#pragma once

#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace host::testing::cluster {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

inline const std::string kScripts = HOST_CLUSTER_SCRIPTS;

inline bool have_nats_server() { return std::string(HOST_NATS_SERVER).size() && access(HOST_NATS_SERVER, X_OK) == 0; }

// Ends the test case, saying so, where nats-server is not installed: a
// macro, since the return must leave the test case itself.
#define SKIP_WITHOUT_NATS()                                                         \
  if (!::host::testing::cluster::have_nats_server()) {                              \
    MESSAGE("skipped: nats-server is not installed (apt-get install nats-server)"); \
    return;                                                                         \
  }

// A port nobody listens on now (the kernel's pick for a bound socket).
inline int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  socklen_t n = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n);
  close(fd);
  return ntohs(a.sin_port);
}

inline bool accepts(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  close(fd);
  return ok;
}

inline std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

template <typename Pred>
bool wait_until(Pred pred, std::chrono::milliseconds limit) {
  const auto end = Clock::now() + limit;
  while (Clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return pred();
}

inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// A program in the background, its stdout and stderr in files; killed
// (SIGKILL) if still running when the test ends.
struct Child {
  pid_t pid = -1;
  std::string out, err;
  int status = -1;

  Child(const std::vector<std::string>& argv, const std::string& name) {
    char dir[] = "/tmp/host_cluster_XXXXXX";
    REQUIRE(mkdtemp(dir));
    out = std::string(dir) + "/" + name + ".out";
    err = std::string(dir) + "/" + name + ".err";
    pid = fork();
    if (pid == 0) {
      int o = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      int e = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(o, 1);
      dup2(e, 2);
      std::vector<char*> args;
      for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      execv(args[0], args.data());
      _exit(127);
    }
  }
  ~Child() {
    if (pid > 0 && status < 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
  std::string stdout_text() const { return slurp(out); }
  std::string stderr_text() const { return slurp(err); }
  // Whether it printed `part` on stdout within `limit`.
  bool says(const std::string& part, std::chrono::milliseconds limit) const {
    return wait_until([&] { return contains(stdout_text(), part); }, limit);
  }
  void kill9() {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
  }
  // The exit code, or -1 when it did not end within `limit`.
  int wait(std::chrono::milliseconds limit) {
    const auto end = Clock::now() + limit;
    while (Clock::now() < end) {
      int st;
      if (waitpid(pid, &st, WNOHANG) == pid) {
        status = st;
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      }
      std::this_thread::sleep_for(10ms);
    }
    return -1;
  }
};

// `address`: where it listens (0.0.0.0 for a node in another network
// namespace too).
struct NatsServer {
  int port = free_port();
  std::string address;
  std::unique_ptr<Child> child;
  explicit NatsServer(std::string address_ = "127.0.0.1") : address(std::move(address_)) { start(); }
  void start() {
    child = std::make_unique<Child>(std::vector<std::string>{HOST_NATS_SERVER, "-a", address, "-p", std::to_string(port)},
                                    "nats");
    REQUIRE(wait_until([&] { return accepts(port); }, 10s));
  }
  // kill -9: no goodbye to its clients.
  void kill9() { child->kill9(); }
  std::string url() const { return "nats://127.0.0.1:" + std::to_string(port); }
};

// `timeout`: --node-timeout's seconds.
inline std::vector<std::string> node_argv(const std::string& name, const std::string& url, const std::string& entry,
                                          std::vector<std::string> args = {}, const std::string& timeout = "2") {
  std::vector<std::string> v{HOST_BINARY, "run", kScripts, "--entry", entry, "--node", name, "--cluster", url,
                             "--node-timeout", timeout, "--mem-limit", "64M"};
  if (!args.empty()) {
    v.push_back("--");
    for (auto& a : args) v.push_back(a);
  }
  return v;
}

// A node started with `argv` (node_argv's, or a wrapper's around them)
// once it printed `ready`: the test case stops, showing its stderr, when it
// does not within 10 s. By pointer: a Child kills its program when it
// goes, so it is never copied.
inline std::unique_ptr<Child> start_node(const std::vector<std::string>& argv, const std::string& name,
                                         const std::string& ready) {
  auto node = std::make_unique<Child>(argv, name);
  const bool up = node->says(ready, 10s);
  INFO(name << "'s stderr: " << node->stderr_text());
  REQUIRE(up);
  return node;
}

}  // namespace host::testing::cluster
