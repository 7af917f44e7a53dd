/* Loaded beside GCC's libtsan into the Python that `scripts/sanitizer.sh thread` runs the
   package's tests in. rustc's instrumentation (LLVM) calls __tsan_memcpy, __tsan_memmove
   and __tsan_memset for copies the compiler emits; GCC 12's runtime predates those entry
   points, and the extension would not load. Each forwards to the libc function of the
   same name, which libtsan intercepts and checks as it checks any other copy. */
#include <string.h>

void *__tsan_memcpy(void *dst, const void *src, size_t n) { return memcpy(dst, src, n); }
void *__tsan_memmove(void *dst, const void *src, size_t n) { return memmove(dst, src, n); }
void *__tsan_memset(void *dst, int c, size_t n) { return memset(dst, c, n); }
