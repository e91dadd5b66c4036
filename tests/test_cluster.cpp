// The cluster end to end (SPEC section 12): a nats-server of the test's
// own on a free loopback port and two host programs, nodes "a" and "b",
// running tests/cluster/. Skipped, saying so, where nats-server is not
// installed.
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
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/subprocess.hpp"

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

const std::string kScripts = HOST_CLUSTER_SCRIPTS;

bool have_nats_server() { return std::string(HOST_NATS_SERVER).size() && access(HOST_NATS_SERVER, X_OK) == 0; }

// A port nobody listens on now (the kernel's pick for a bound socket).
int free_port() {
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

bool accepts(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  close(fd);
  return ok;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

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

template <typename Pred>
bool wait_until(Pred pred, std::chrono::milliseconds limit) {
  const auto end = Clock::now() + limit;
  while (Clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return pred();
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

struct NatsServer {
  int port = free_port();
  Child child{{HOST_NATS_SERVER, "-a", "127.0.0.1", "-p", std::to_string(port)}, "nats"};
  NatsServer() { REQUIRE(wait_until([&] { return accepts(port); }, 10s)); }
  std::string url() const { return "nats://127.0.0.1:" + std::to_string(port); }
};

std::vector<std::string> node_argv(const std::string& name, const std::string& url, const std::string& entry,
                                   std::vector<std::string> args = {}) {
  std::vector<std::string> v{HOST_BINARY, "run", kScripts, "--entry", entry, "--node", name, "--cluster", url,
                             "--node-timeout", "2", "--mem-limit", "64M"};
  if (!args.empty()) {
    v.push_back("--");
    for (auto& a : args) v.push_back(a);
  }
  return v;
}

}  // namespace

TEST_CASE("two nodes send both ways in order; a monitor and a link of a killed node's process fire noconnection once, "
          "in time; "
          "the restarted node's old PID is not_found") {
  if (!have_nats_server()) {
    MESSAGE("skipped: nats-server is not installed (apt-get install nats-server)");
    return;
  }
  NatsServer nats;
  auto a = std::make_unique<Child>(node_argv("a", nats.url(), "serve"), "a");
  REQUIRE(wait_until([&] { return contains(a->stdout_text(), "serving"); }, 10s));
  Child b(node_argv("b", nats.url(), "client", {"2000"}), "b");
  const bool monitoring = wait_until([&] { return contains(b.stdout_text(), "monitoring"); }, 30s);
  INFO("b's stdout: " << b.stdout_text());
  INFO("b's stderr: " << b.stderr_text());
  INFO("a's stderr: " << a->stderr_text());
  REQUIRE(monitoring);
  CHECK(contains(b.stdout_text(), "order ok 2000"));
  CHECK(contains(b.stdout_text(), "big ok 3145744"));
  CHECK(contains(b.stdout_text(), "pid text ok"));
  CHECK(contains(b.stdout_text(), "spawn_on ok"));
  CHECK(contains(b.stdout_text(), "remote terminate ok"));
  // kill -9: no bye; b must notice the silence (--node-timeout 2).
  const auto killed = Clock::now();
  a->kill9();
  REQUIRE(wait_until([&] { return contains(b.stdout_text(), "noconnection"); }, 10s));
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - killed);
  MESSAGE("noconnection " << took.count() << " ms after kill -9 (node timeout 2000 ms)");
  CHECK(took <= 3000ms);
  REQUIRE(wait_until([&] { return contains(b.stdout_text(), "nodedown a"); }, 5s));
  REQUIRE(wait_until([&] { return contains(b.stdout_text(), "link_down noconnection"); }, 5s));
  // A new run of node a, under the same name.
  a = std::make_unique<Child>(node_argv("a", nats.url(), "serve"), "a2");
  const int code = b.wait(30s);
  INFO("b's stdout: " << b.stdout_text());
  CHECK(code == 0);
  CHECK(contains(b.stdout_text(), "nodeup a"));
  CHECK(contains(b.stdout_text(), "old pid not_found"));
  CHECK(contains(b.stdout_text(), "done"));
  // The new run was told to stop and ends by itself.
  CHECK(a->wait(10s) == 0);
}

TEST_CASE("{ name, node } across nodes: monitor (noproc, noconnection), server.call and cast, a call in flight when "
          "the node is killed; pg groups synced at nodeup, joins seen within 1 s, a down node's members gone") {
  if (!have_nats_server()) {
    MESSAGE("skipped: nats-server is not installed (apt-get install nats-server)");
    return;
  }
  NatsServer nats;
  Child a(node_argv("a", nats.url(), "hub"), "a");
  REQUIRE(wait_until([&] { return contains(a.stdout_text(), "hub ready"); }, 10s));
  Child b(node_argv("b", nats.url(), "named_client"), "b");
  const bool ready = wait_until([&] { return contains(b.stdout_text(), "ready for kill"); }, 30s);
  INFO("b's stdout: " << b.stdout_text());
  INFO("b's stderr: " << b.stderr_text());
  INFO("a's stderr: " << a.stderr_text());
  REQUIRE(ready);
  CHECK(contains(b.stdout_text(), "monitor noproc ok"));
  CHECK(contains(b.stdout_text(), "local monitor by name ok"));
  CHECK(contains(b.stdout_text(), "server.call ok"));
  CHECK(contains(b.stdout_text(), "pg sync ok"));
  CHECK(contains(b.stdout_text(), "pg send ok"));
  CHECK(contains(b.stdout_text(), "pg join seen in"));
  const auto killed = Clock::now();
  a.kill9();
  REQUIRE(wait_until([&] { return contains(b.stdout_text(), "call noconnection exit: noconnection"); }, 10s));
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - killed);
  MESSAGE("the call in flight failed " << took.count()
                                       << " ms after kill -9 (node timeout 2000 ms, call timeout 30 s)");
  CHECK(took <= 3000ms);
  CHECK(b.wait(15s) == 0);
  CHECK(contains(b.stdout_text(), "monitor by name noconnection"));
  CHECK(contains(b.stdout_text(), "pg nodedown ok"));
  CHECK(contains(b.stdout_text(), "done"));
}

TEST_CASE("a node whose name is live in the cluster refuses to start, naming it") {
  if (!have_nats_server()) {
    MESSAGE("skipped: nats-server is not installed (apt-get install nats-server)");
    return;
  }
  NatsServer nats;
  Child a(node_argv("a", nats.url(), "serve"), "a");
  REQUIRE(wait_until([&] { return contains(a.stdout_text(), "serving"); }, 10s));
  auto r = host::testing::run_program(node_argv("a", nats.url(), "serve"), {.timeout = 20000ms});
  CHECK(r.code == 2);
  CHECK(contains(r.err, "node name 'a' is already live"));
}

TEST_CASE("--node alone is a usage error; --cluster with no server to reach fails to start") {
  auto r = host::testing::run_program({HOST_BINARY, "run", kScripts, "--entry", "serve", "--node", "a"});
  CHECK(r.code == 2);
  CHECK(contains(r.err, "--node needs --cluster"));
  r = host::testing::run_program(
      {HOST_BINARY, "run", kScripts, "--entry", "serve", "--node", "a", "--cluster", "nats://127.0.0.1:" + std::to_string(free_port())},
      {.timeout = 20000ms});
  CHECK(r.code == 1);
  CHECK(contains(r.err, "cannot connect to the cluster"));
}
