// Kernel randomness for small requests, from a per-thread batch.
//
// Why: each process's math.random starts from its own seed
// (bindings/lua_process_env.cpp, seed_random). A system call per process would
// cost a noticeable part of a spawn (BENCHMARKS.md's ledger); one
// getrandom of 4 KB per thread serves 512 seeds.
#pragma once

#include <cstddef>

namespace host {

// Copies n bytes of kernel randomness into out, from this thread's batch,
// refilled with one getrandom call when it runs short; the bytes handed out
// are wiped from the batch. False (out untouched) when n is above 256
// bytes (getrandom's own size for a request that never comes back short)
// or the kernel gives too little: the caller then asks the kernel itself.
// A child process made by fork never reuses its parent's batch.
bool take_batched_random(void* out, std::size_t n);

}  // namespace host
