#include "selftest/alloc_counter.h"

#include <fcntl.h>
#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>

// Provided by malloc_interpose.cpp when it is linked; null otherwise.
extern "C" {
void edgevit_selftest_alloc_counting(int on) __attribute__((weak));
long edgevit_selftest_alloc_count() __attribute__((weak));
int edgevit_selftest_alloc_threads(long* tids, long* allocs, int max) __attribute__((weak));
void edgevit_selftest_map_counting(int on) __attribute__((weak));
int edgevit_selftest_live_maps(unsigned long* addr, long* bytes, int* anon, int max) __attribute__((weak));
}

namespace edgevit::selftest {
namespace {

void heap_state(int64_t* bytes, int64_t* blocks) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
  const struct mallinfo2 m = mallinfo2();
#else
  const struct mallinfo m = mallinfo();
#endif
  *bytes = static_cast<int64_t>(m.uordblks) + static_cast<int64_t>(m.hblkhd);
  *blocks = static_cast<int64_t>(m.hblks);
}

// Bytes of [addr, addr + bytes) in RAM (mincore), without allocating.
int64_t resident_bytes(unsigned long addr, long bytes) {
  static unsigned char pages[16384];
  const long page = getpagesize();
  int64_t resident = 0;
  for (long off = 0; off < bytes; off += page * static_cast<long>(sizeof pages)) {
    const long len = std::min<long>(bytes - off, page * static_cast<long>(sizeof pages));
    if (mincore(reinterpret_cast<void*>(addr + off), static_cast<size_t>(len), pages) != 0) return bytes;  // unknown: all
    for (long p = 0; p < (len + page - 1) / page; ++p) resident += (pages[p] & 1) ? page : 0;
  }
  return resident;
}

bool maps_exact() { return edgevit_selftest_map_counting != nullptr && edgevit_selftest_live_maps != nullptr; }

}  // namespace

int64_t accessible_mapped_bytes() {
  const int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char buf[8192];
  int64_t total = 0;
  uint64_t start = 0, end = 0;
  int field = 0;  // 0: start, 1: end, 2: permissions, 3: rest of the line
  bool accessible = false;
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0) {
      close(fd);
      return -1;
    }
    if (n == 0) break;
    for (ssize_t i = 0; i < n; ++i) {
      const char ch = buf[i];
      if (ch == '\n') {
        if (field >= 2 && accessible && end > start) total += static_cast<int64_t>(end - start);
        start = end = 0;
        field = 0;
        accessible = false;
      } else if (field < 2) {
        const int digit = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
        if (digit >= 0) {
          uint64_t& v = field == 0 ? start : end;
          v = v * 16 + static_cast<uint64_t>(digit);
        } else {
          ++field;  // '-' after start, ' ' after end
        }
      } else if (field == 2) {
        if (ch == 'r' || ch == 'w') accessible = true;
        if (ch == ' ') field = 3;
      }
    }
  }
  close(fd);
  return total;
}

#ifndef EDGEVIT_HAVE_CUDA
int64_t cuda_device_used_bytes() { return -1; }
#endif

int64_t MemoryUse::host_bytes() const {
  if (!exact) return mapped_growth_bytes;
  return heap_bytes + anon_resident_bytes;
}

MemoryWindow::MemoryWindow() {
  int64_t blocks = 0;
  heap_state(&heap_before_, &blocks);
  device_before_ = cuda_device_used_bytes();
  if (maps_exact()) {
    edgevit_selftest_map_counting(1);
  } else {
    mapped_before_ = accessible_mapped_bytes();
  }
}

MemoryUse MemoryWindow::finish() {
  MemoryUse u;
  int64_t heap = 0, blocks = 0;
  heap_state(&heap, &blocks);
  u.heap_bytes = heap - heap_before_;
  const int64_t device_after = cuda_device_used_bytes();
  if (device_before_ >= 0 && device_after >= 0) u.device_bytes = device_after - device_before_;
  if (maps_exact()) {
    u.exact = true;
    // Static: no allocation inside the window; the interposer records at most 4096 mappings.
    static unsigned long addr[4096];
    static long bytes[4096];
    static int anon[4096];
    const int n = edgevit_selftest_live_maps(addr, bytes, anon, 4096);
    edgevit_selftest_map_counting(0);
    u.host_known = n >= 0;
    for (int i = 0; i < n; ++i) {
      if (anon[i] == 1) {
        const int64_t resident = resident_bytes(addr[i], bytes[i]);
        u.anon_maps.push_back({bytes[i], resident});
        u.anon_resident_bytes += resident;
      } else if (anon[i] == 2) {
        u.device_file_map_bytes += bytes[i];
      } else {
        u.file_map_bytes += bytes[i];
      }
    }
    std::sort(u.anon_maps.begin(), u.anon_maps.end(), [](const MemoryUse::Mapping& a, const MemoryUse::Mapping& b) {
      return a.resident != b.resident ? a.resident > b.resident : a.bytes > b.bytes;
    });
  } else {
    const int64_t after = accessible_mapped_bytes();
    u.host_known = mapped_before_ >= 0 && after >= 0;
    u.mapped_growth_bytes = u.host_known ? after - mapped_before_ : 0;
  }
  return u;
}

bool AllocWindow::exact() { return edgevit_selftest_alloc_counting != nullptr && edgevit_selftest_alloc_count != nullptr; }

const char* AllocWindow::mechanism() {
  return exact() ? "interposed malloc (exact count)" : "mallinfo2 (net heap growth only)";
}

AllocWindow::AllocWindow() {
  if (exact()) {
    edgevit_selftest_alloc_counting(1);
  } else {
    heap_state(&arena_before_, &blocks_before_);
  }
}

std::vector<AllocThread> AllocWindow::threads() const {
  std::vector<AllocThread> out;
  if (!exact() || edgevit_selftest_alloc_threads == nullptr) return out;
  long tids[16], allocs[16];
  const int n = edgevit_selftest_alloc_threads(tids, allocs, 16);
  for (int i = 0; i < n; ++i) {
    AllocThread t;
    t.tid = tids[i];
    t.allocs = allocs[i];
    std::ifstream comm("/proc/self/task/" + std::to_string(t.tid) + "/comm");
    if (!std::getline(comm, t.name)) t.name = "(exited)";
    t.driver = t.name.rfind("cuda", 0) == 0;
    out.push_back(t);
  }
  return out;
}

int64_t AllocWindow::finish() {
  if (finished_) return 0;
  finished_ = true;
  if (exact()) {
    edgevit_selftest_alloc_counting(0);
    return edgevit_selftest_alloc_count();
  }
  int64_t bytes = 0, blocks = 0;
  heap_state(&bytes, &blocks);
  return (bytes > arena_before_ || blocks > blocks_before_) ? 1 : 0;
}

}  // namespace edgevit::selftest
