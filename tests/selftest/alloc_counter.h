// Heap-allocation counting for the memory.zero_allocations check.
//
// Exact: when malloc_interpose.cpp is linked into the executable (edgevit-selftest and selftest_test link
// it), every malloc, calloc, realloc, posix_memalign, aligned_alloc and memalign of the process (OpenBLAS,
// libgomp and libstdc++ included) is counted between begin and end.
// Fallback (a program that does not link the interposer, e.g. a daemon, or a sanitizer build whose runtime
// owns malloc): mallinfo2 deltas, which see net growth of the heap (allocated bytes, mmap'd chunks) but
// miss an allocation freed inside the window. The report names the mechanism used.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace edgevit::selftest {

// A thread that allocated inside the window (exact mode only).
struct AllocThread {
  long tid = 0;
  std::string name;     // /proc/self/task/TID/comm, or "(exited)"
  int64_t allocs = 0;
  bool driver = false;  // a CUDA driver service thread ("cuda-EvtHandlr", ...): not the inference's work
};

class AllocWindow {
 public:
  AllocWindow();   // starts counting
  // Allocations seen (exact), or 1 when the heap grew and 0 when it did not (fallback). Stops counting.
  int64_t finish();
  // Exact mode, after finish(): the threads that allocated in the window (the first 16), by id.
  std::vector<AllocThread> threads() const;
  static bool exact();             // the interposer is linked
  static const char* mechanism();  // "interposed malloc (exact count)" / "mallinfo2 (net heap growth only)"

 private:
  int64_t arena_before_ = 0;  // fallback: uordblks + hblkhd
  int64_t blocks_before_ = 0; // fallback: hblks
  bool finished_ = false;
};

}  // namespace edgevit::selftest
