// libnats, the NATS C client, opened at the start of a --cluster run
// rather than linked: a host run without --cluster never maps it or its
// dependencies, so the dynamic linker's work for them (libssl's and
// libprotobuf-c's relocations among it) no longer costs every start
// (BENCHMARKS.md, "libnats loaded only for --cluster").
// Threads: load_nats is called by the main thread before any node exists;
// after it the functions it resolved are read-only.
#pragma once

#include <string>

namespace host::cluster {

// Opens libnats (its soname at build time, or HOST_NATS_LIBRARY's path)
// and resolves every libnats function nats_node.cpp calls. Returns "" on
// success, or the error: the library that could not be opened, or the
// function it lacks, and the package to install. Call it before
// NatsNode::connect: until it has succeeded the node's libnats calls have
// no target. Safe to call again; the first call's answer stands.
std::string load_nats();

}  // namespace host::cluster
