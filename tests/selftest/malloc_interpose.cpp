// Exact heap-allocation counter for edgevit-selftest (see alloc_counter.h): this object replaces the C
// allocator's entry points of the whole process with counting wrappers around glibc's own. Link it only
// into executables (never into a library others link), and not into sanitizer builds.
#include <cerrno>
#include <cstddef>
#include <atomic>

extern "C" {
void* __libc_malloc(size_t);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void* __libc_memalign(size_t, size_t);
void __libc_free(void*);
}

namespace {
std::atomic<bool> g_counting{false};
std::atomic<long> g_allocs{0};
inline void note() {
  if (g_counting.load(std::memory_order_relaxed)) g_allocs.fetch_add(1, std::memory_order_relaxed);
}
}  // namespace

extern "C" {

void edgevit_selftest_alloc_counting(int on) {
  if (on) g_allocs.store(0);
  g_counting.store(on != 0);
}
long edgevit_selftest_alloc_count() { return g_allocs.load(); }

void* malloc(size_t n) {
  note();
  return __libc_malloc(n);
}
void* calloc(size_t a, size_t b) {
  note();
  return __libc_calloc(a, b);
}
void* realloc(void* p, size_t n) {
  note();
  return __libc_realloc(p, n);
}
void* memalign(size_t align, size_t n) {
  note();
  return __libc_memalign(align, n);
}
void* aligned_alloc(size_t align, size_t n) {
  note();
  return __libc_memalign(align, n);
}
int posix_memalign(void** out, size_t align, size_t n) {
  note();
  void* p = __libc_memalign(align, n);
  if (p == nullptr) return ENOMEM;
  *out = p;
  return 0;
}
void free(void* p) { __libc_free(p); }

}  // extern "C"
