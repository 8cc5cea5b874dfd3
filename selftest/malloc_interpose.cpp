// Exact heap-allocation counter for edgevit-selftest (see alloc_counter.h): this object replaces the C
// allocator's entry points of the whole process with counting wrappers around glibc's own, and mmap/munmap
// with wrappers that record the mappings made inside a mapping window (the CPU arena is one anonymous
// mapping; libxsmm, OpenBLAS and the CUDA driver map memory the same way). Link it only into executables
// (never into a library others link), and not into sanitizer builds.
#include <sys/mman.h>
#include <sys/stat.h>
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
// Mappings made while g_mapping is on and not yet unmapped (the first kMaxMaps; more are counted as lost).
constexpr int kMaxMaps = 4096;
std::atomic<bool> g_mapping{false};
std::atomic<unsigned long> g_map_addr[kMaxMaps];
std::atomic<unsigned long> g_map_len[kMaxMaps];
std::atomic<int> g_map_anon[kMaxMaps];
std::atomic<int> g_nmaps{0};
std::atomic<long> g_maps_lost{0};

void note_map(void* p, size_t len, int flags, int fd) {
  if (!g_mapping.load(std::memory_order_relaxed) || p == MAP_FAILED) return;
  const size_t page = static_cast<size_t>(getpagesize());
  len = (len + page - 1) / page * page;  // what the kernel maps
  const int slot = g_nmaps.fetch_add(1, std::memory_order_acq_rel);
  if (slot >= kMaxMaps) {
    g_maps_lost.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  g_map_addr[slot].store(reinterpret_cast<unsigned long>(p), std::memory_order_relaxed);
  // 1: anonymous; 2: a character device (the CUDA driver's pinned host memory, /dev/nvidia*); 0: a file.
  int kind = (flags & MAP_ANONYMOUS) != 0 ? 1 : 0;
  struct stat st;
  if (kind == 0 && fd >= 0 && fstat(fd, &st) == 0 && S_ISCHR(st.st_mode)) kind = 2;
  g_map_anon[slot].store(kind, std::memory_order_relaxed);
  g_map_len[slot].store(len, std::memory_order_release);
}

// An unmapping of a whole recorded mapping removes it; a partial one shortens it (its start or end).
void note_unmap(void* p, size_t len) {
  if (!g_mapping.load(std::memory_order_relaxed)) return;
  const unsigned long page = static_cast<unsigned long>(getpagesize());
  const unsigned long a = reinterpret_cast<unsigned long>(p), e = a + (len + page - 1) / page * page;
  int n = g_nmaps.load(std::memory_order_acquire);
  if (n > kMaxMaps) n = kMaxMaps;
  for (int i = 0; i < n; ++i) {
    const unsigned long ma = g_map_addr[i].load(std::memory_order_relaxed);
    const unsigned long ml = g_map_len[i].load(std::memory_order_acquire), me = ma + ml;
    if (ml == 0 || e <= ma || a >= me) continue;
    if (a <= ma && e >= me) {
      g_map_len[i].store(0, std::memory_order_release);
    } else if (a <= ma) {
      g_map_addr[i].store(e, std::memory_order_relaxed);
      g_map_len[i].store(me - e, std::memory_order_release);
    } else if (e >= me) {
      g_map_len[i].store(a - ma, std::memory_order_release);
    }  // a hole in the middle: the mapping keeps its extent (an over-count, never an under-count)
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

// Mapping window: on (resets the record) / off. Mappings made inside it stay recorded until unmapped.
void edgevit_selftest_map_counting(int on) {
  if (on) {
    g_nmaps.store(0);
    g_maps_lost.store(0);
  }
  g_mapping.store(on != 0);
}
// The recorded mappings still mapped: up to `max` (address, bytes, kind) triples, kind 1 anonymous, 2 a
// character device, 0 another file; returns how many were written, or -1 when more mappings were made than
// could be recorded.
int edgevit_selftest_live_maps(unsigned long* addr, long* bytes, int* anon, int max) {
  if (g_maps_lost.load() > 0) return -1;
  int n = g_nmaps.load();
  if (n > kMaxMaps) n = kMaxMaps;
  int out = 0;
  for (int i = 0; i < n && out < max; ++i) {
    const unsigned long len = g_map_len[i].load();
    if (len == 0) continue;
    addr[out] = g_map_addr[i].load();
    bytes[out] = static_cast<long>(len);
    anon[out] = g_map_anon[i].load();
    ++out;
  }
  return out;
}

// 64-bit Linux only (x86-64, aarch64): the offset goes to the system call as is.
void* mmap(void* addr, size_t len, int prot, int flags, int fd, off_t off) {
  const long r = syscall(SYS_mmap, addr, len, prot, flags, fd, off);  // -1 and errno on failure
  if (r == -1) return MAP_FAILED;
  void* p = reinterpret_cast<void*>(r);
  note_map(p, len, flags, fd);
  return p;
}
void* mmap64(void* addr, size_t len, int prot, int flags, int fd, off_t off) {
  return mmap(addr, len, prot, flags, fd, off);
}
int munmap(void* addr, size_t len) {
  if (syscall(SYS_munmap, addr, len) == -1) return -1;
  note_unmap(addr, len);
  return 0;
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
