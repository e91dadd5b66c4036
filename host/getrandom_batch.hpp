// Kernel randomness for small requests, from a per-thread batch.
//
// Why: LuaJIT seeds every new state's PRNG (its string hashes and its
// allocator's randomisation) with a getrandom system call of 32 bytes. On
// this project's VMs a system call costs about 0.5 us, a tenth of a whole
// spawn (Fib, Fork-Join create). The bytes are the same kernel randomness
// either way; taking them from one getrandom of 4 KB per thread makes it
// one call per 128 states. host/getrandom_override.cpp routes LuaJIT's
// call here.
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
