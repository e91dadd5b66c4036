// The cluster end to end (SPEC section 12): a nats-server of the test's
// own on a free loopback port and two host programs, nodes "a" and "b",
// running tests/cluster/. Skipped, saying so, where nats-server is not
// installed.
#include <doctest/doctest.h>

#include "tests/cluster_harness.hpp"
#include "tests/subprocess.hpp"

using namespace host::testing::cluster;

TEST_CASE("two nodes send both ways in order; a monitor and a link of a killed node's process fire noconnection once, "
          "in time; "
          "the restarted node's old PID is not_found") {
  SKIP_WITHOUT_NATS();
  NatsServer nats;
  auto a = start_node(node_argv("a", nats.url(), "serve"), "a", "serving");
  Child b(node_argv("b", nats.url(), "client", {"2000"}), "b");
  const bool monitoring = b.says("monitoring", 30s);
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
  REQUIRE(b.says("noconnection", 10s));
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - killed);
  MESSAGE("noconnection " << took.count() << " ms after kill -9 (node timeout 2000 ms)");
  CHECK(took <= 3000ms);
  REQUIRE(b.says("nodedown a", 5s));
  REQUIRE(b.says("link_down noconnection", 5s));
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
  SKIP_WITHOUT_NATS();
  NatsServer nats;
  auto a = start_node(node_argv("a", nats.url(), "hub"), "a", "hub ready");
  Child b(node_argv("b", nats.url(), "named_client"), "b");
  const bool ready = b.says("ready for kill", 30s);
  INFO("b's stdout: " << b.stdout_text());
  INFO("b's stderr: " << b.stderr_text());
  INFO("a's stderr: " << a->stderr_text());
  REQUIRE(ready);
  CHECK(contains(b.stdout_text(), "monitor noproc ok"));
  CHECK(contains(b.stdout_text(), "local monitor by name ok"));
  CHECK(contains(b.stdout_text(), "server.call ok"));
  CHECK(contains(b.stdout_text(), "pg sync ok"));
  CHECK(contains(b.stdout_text(), "pg send ok"));
  CHECK(contains(b.stdout_text(), "pg join seen in"));
  const auto killed = Clock::now();
  a->kill9();
  REQUIRE(b.says("call noconnection exit: noconnection", 10s));
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
  SKIP_WITHOUT_NATS();
  NatsServer nats;
  auto a = start_node(node_argv("a", nats.url(), "serve"), "a", "serving");
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

TEST_CASE("--cluster without libnats, or with a library lacking a function it calls, fails to start naming it") {
  // HOST_NATS_LIBRARY stands in for a machine without libnats: the host
  // opens libnats only for --cluster (host/cluster/nats_loader.cpp), before
  // connecting, so no nats-server is needed.
  const std::vector<std::string> argv = {HOST_BINARY, "run", kScripts, "--entry", "serve", "--node", "a",
                                         "--cluster", "nats://127.0.0.1:" + std::to_string(free_port())};
  auto r = host::testing::run_program(argv, {.timeout = 20000ms, .env = {{"HOST_NATS_LIBRARY", "/nonexistent/libnats.so"}}});
  CHECK(r.code == 1);
  CHECK(contains(r.err, "cannot load libnats (HOST_NATS_LIBRARY=/nonexistent/libnats.so)"));
  CHECK(contains(r.err, "libnats-dev"));
  // The C library opens, but holds none of libnats's functions.
  r = host::testing::run_program(argv, {.timeout = 20000ms, .env = {{"HOST_NATS_LIBRARY", "libc.so.6"}}});
  CHECK(r.code == 1);
  CHECK(contains(r.err, "has no function natsConnection_Close"));
  CHECK(contains(r.err, "libnats-dev"));
}
