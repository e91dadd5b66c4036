// The host program's syscall(): LuaJIT's getrandom goes to a batch.
//
// LuaJIT asks for its seed through libc's variadic syscall(SYS_getrandom,
// buf, 32, 0) (its shared library imports syscall, nothing else for it).
// The host program defines syscall itself, which the dynamic linker binds
// that import to, as it binds malloc to mimalloc's: a getrandom with no
// flags is served by take_batched_random (host/getrandom_batch.hpp: about
// 0.5 us of a spawn's 5 us on a VM); every other call goes to the kernel
// as libc's would, through the same instruction, with errno set the same
// way. Only where that instruction is written out below (x86-64, AArch64);
// elsewhere libc's syscall stands. Linked into the host program, and
// into the core tests, which check it; the libraries keep libc's.
#include <cerrno>
#include <cstdarg>
#include <cstddef>

#include <sys/syscall.h>

#include "host/getrandom_batch.hpp"

#if defined(__linux__) && (defined(__x86_64__) || defined(__aarch64__))

namespace {

// Safe in a signal handler (the runaway monitor's asks for its thread id):
// no lock, no allocation, only errno, which is per thread.
long kernel_call(long number, long a0, long a1, long a2, long a3, long a4, long a5) {
#if defined(__x86_64__)
  register long r10 __asm__("r10") = a3;
  register long r8 __asm__("r8") = a4;
  register long r9 __asm__("r9") = a5;
  long ret;
  __asm__ volatile("syscall"
                   : "=a"(ret)
                   : "a"(number), "D"(a0), "S"(a1), "d"(a2), "r"(r10), "r"(r8), "r"(r9)
                   : "rcx", "r11", "memory");
#else
  register long x8 __asm__("x8") = number;
  register long x0 __asm__("x0") = a0;
  register long x1 __asm__("x1") = a1;
  register long x2 __asm__("x2") = a2;
  register long x3 __asm__("x3") = a3;
  register long x4 __asm__("x4") = a4;
  register long x5 __asm__("x5") = a5;
  __asm__ volatile("svc 0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5) : "memory");
  long ret = x0;
#endif
  if (ret < 0 && ret > -4096) {
    errno = static_cast<int>(-ret);
    return -1;
  }
  return ret;
}

}  // namespace

extern "C" long syscall(long number, ...) noexcept {
  // Six arguments, as libc's reads them: the caller passed what the call
  // takes, and the kernel ignores the rest.
  va_list ap;
  va_start(ap, number);
  long a[6];
  for (long& x : a) x = va_arg(ap, long);
  va_end(ap);
  if (number == SYS_getrandom && a[2] == 0 &&
      host::take_batched_random(reinterpret_cast<void*>(a[0]), static_cast<std::size_t>(a[1])))
    return a[1];
  return kernel_call(number, a[0], a[1], a[2], a[3], a[4], a[5]);
}

#endif
