#include "tests/selftest/alloc_counter.h"

#include <malloc.h>

#include <fstream>

// Provided by malloc_interpose.cpp when it is linked; null otherwise.
extern "C" {
void edgevit_selftest_alloc_counting(int on) __attribute__((weak));
long edgevit_selftest_alloc_count() __attribute__((weak));
int edgevit_selftest_alloc_threads(long* tids, long* allocs, int max) __attribute__((weak));
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

}  // namespace

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
