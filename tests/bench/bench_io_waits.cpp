// The waits a process's C continuations take (bindings/io_waits.hpp) as
// an HTTP acceptor holds them: one watch per hibernated connection. Each
// event is what one connection's wake and hibernation do to them: its
// watch's completion taken by tag, the socket's waits forgotten by owner
// as it leaves its object (it has none), a new watch added. Not a test;
// its figure is the instructions per event, at two numbers of connections
// (BENCHMARKS.md, "The acceptor's waits"):
//   valgrind --tool=callgrind --toggle-collect='run_events*' build/bench_io_waits 1000
//   valgrind --tool=callgrind --toggle-collect='run_events*' build/bench_io_waits 20000
// (the Ir callgrind reports, over the events it prints).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "bindings/io_waits.hpp"

using host::lua::IoWaits;

namespace {

void no_continuation(lua_State*, lua_State*, void*, std::uint64_t, bool, std::string_view) {}

struct Connection {
  std::uint64_t watch;  // its watch's tag
  char socket;          // the socket's object: an owner with no waits
};

// Outside the measured function, so that callgrind counts the events only.
std::uint64_t g_next_tag = 1;

[[gnu::noinline]] std::uint64_t run_events(IoWaits& waits, std::vector<Connection>& conns, int events) {
  std::uint64_t seed = 88172645463325252ull, done = 0;
  for (int i = 0; i < events; ++i) {
    seed ^= seed << 13;
    seed ^= seed >> 7;
    seed ^= seed << 17;
    Connection& c = conns[seed % conns.size()];
    IoWaits::Wait w;
    done += waits.take(c.watch, &w);
    waits.forget(&c.socket);
    c.watch = g_next_tag++;
    waits.add(c.watch, IoWaits::Wait{&c, no_continuation, 0, false, true});
  }
  return done;
}

}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 1000;
  const int events = argc > 2 ? std::atoi(argv[2]) : 10000;
  if (n <= 0 || events <= 0) {
    std::fprintf(stderr, "usage: bench_io_waits [CONNECTIONS [EVENTS]]\n");
    return 2;
  }
  IoWaits waits;
  std::vector<Connection> conns(static_cast<std::size_t>(n));
  for (Connection& c : conns) {
    c.watch = g_next_tag++;
    waits.add(c.watch, IoWaits::Wait{&c, no_continuation, 0, false, true});
  }
  const std::uint64_t done = run_events(waits, conns, events);
  std::printf("%d connections, %d events, %llu watches completed, %zu held\n", n, events,
              static_cast<unsigned long long>(done), waits.size());
  return done == static_cast<std::uint64_t>(events) && waits.size() == conns.size() ? 0 : 1;
}
