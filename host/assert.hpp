// HOST_ASSERT(cond, what): a check of an invariant the code relies on, in
// debug builds (the sanitizer builds in CI are debug builds); nothing in
// release builds, where the hot paths that carry these cannot afford a
// branch each. A failed check names the invariant and where it was, then
// aborts: a broken invariant here is memory about to be misread, and a
// core dump with the stack is worth more than running on.
#pragma once

#ifdef NDEBUG
#define HOST_ASSERT(cond, what) ((void)0)
#else
#define HOST_ASSERT(cond, what) \
  ((cond) ? (void)0 : ::host::assert_failed(#cond, what, __FILE__, __LINE__))
#endif

namespace host {

[[noreturn, gnu::cold]] void assert_failed(const char* cond, const char* what, const char* file, int line);

}  // namespace host
