// Exact heap-allocation counter for edgevit-selftest (see alloc_counter.h): this object replaces the C
// allocator's entry points of the whole process with counting wrappers around glibc's own. Link it only
// into executables (never into a library others link), and not into sanitizer builds.
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>

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
// Which threads allocated inside the window (the first kMaxThreads distinct ones): the report names them,
// and allocations by the CUDA driver's own service threads are told apart from the inference's.
constexpr int kMaxThreads = 16;
std::atomic<long> g_tids[kMaxThreads];
std::atomic<long> g_tid_allocs[kMaxThreads];
std::atomic<int> g_ntids{0};
inline void note() {
  if (!g_counting.load(std::memory_order_relaxed)) return;
  g_allocs.fetch_add(1, std::memory_order_relaxed);
  const long tid = static_cast<long>(syscall(SYS_gettid));  // a system call: no allocation
  const int n = g_ntids.load(std::memory_order_acquire);
  for (int i = 0; i < n && i < kMaxThreads; ++i)
    if (g_tids[i].load(std::memory_order_relaxed) == tid) {
      g_tid_allocs[i].fetch_add(1, std::memory_order_relaxed);
      return;
    }
  const int slot = g_ntids.fetch_add(1, std::memory_order_acq_rel);
  if (slot < kMaxThreads) {
    g_tids[slot].store(tid, std::memory_order_relaxed);
    g_tid_allocs[slot].store(1, std::memory_order_relaxed);
  }
}
}  // namespace

extern "C" {

void edgevit_selftest_alloc_counting(int on) {
  if (on) {
    g_allocs.store(0);
    g_ntids.store(0);
  }
  g_counting.store(on != 0);
}
long edgevit_selftest_alloc_count() { return g_allocs.load(); }
// Up to `max` (thread id, allocations) pairs seen in the last window; returns how many were written.
int edgevit_selftest_alloc_threads(long* tids, long* allocs, int max) {
  int n = g_ntids.load();
  if (n > kMaxThreads) n = kMaxThreads;
  if (n > max) n = max;
  for (int i = 0; i < n; ++i) {
    tids[i] = g_tids[i].load();
    allocs[i] = g_tid_allocs[i].load();
  }
  return n;
}

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
