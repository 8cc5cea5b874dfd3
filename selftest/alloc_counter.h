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

// What the process holds after a stretch of work (an engine's create() and first infer()) that it did not
// hold before: memory.arena_single_allocation compares it with the plan.
//   heap: net growth of malloc's heap (mallinfo2: bytes in use plus malloc's own mmap'd chunks)
//   mappings (exact mode: the interposer's mmap/munmap): every mmap made inside the window and not unmapped
//     by its end, anonymous (the CPU arena, OpenBLAS's buffers, libxsmm's code and registry, the CUDA
//     driver's pinned buffers: counted by their resident bytes) or of a file (reported, not counted)
//   fallback (no interposer): net growth of the process's readable or writable mappings (/proc/self/maps)
//   device: net growth of the CUDA device's used memory (cudaMemGetInfo), -1 without CUDA or a GPU
struct MemoryUse {
  bool exact = false;                // mappings seen one by one (the interposer is linked)
  bool host_known = true;            // false: fallback and /proc/self/maps unreadable, or the record overflowed
  int64_t heap_bytes = 0;            // may be < 0: memory freed that was allocated before the window
  struct Mapping {
    int64_t bytes = 0;
    int64_t resident = 0;            // bytes in RAM (mincore): a reserve never touched costs nothing
  };
  std::vector<Mapping> anon_maps;    // exact: the anonymous mappings still mapped, most resident first
  int64_t anon_resident_bytes = 0;   // exact: their resident bytes (OpenBLAS maps 128 MiB per thread, uses few)
  int64_t file_map_bytes = 0;        // exact: file mappings still mapped (a checkpoint's page cache)
  int64_t device_file_map_bytes = 0; // exact: character-device mappings (the CUDA driver's pinned host
                                     // memory, cudaHostAlloc): reported, not yet counted (not measured on a GPU)
  int64_t mapped_growth_bytes = 0;   // fallback: growth of readable/writable mappings (heap included)
  int64_t device_bytes = -1;
  int64_t host_bytes() const;        // exact: heap + resident anonymous mappings; fallback: mapped growth
};

class MemoryWindow {
 public:
  MemoryWindow();  // starts recording
  MemoryUse finish();  // stops recording

 private:
  int64_t heap_before_ = 0;
  int64_t mapped_before_ = 0;
  int64_t device_before_ = -1;
};

// Bytes of readable or writable mappings of this process (/proc/self/maps; PROT_NONE reservations such as
// malloc's per-thread arena reserves are left out), read without allocating. -1 when unreadable.
int64_t accessible_mapped_bytes();
// Used bytes of the current CUDA device (total - free of cudaMemGetInfo); -1 without CUDA or a GPU
// (cuda_checks.cpp on CUDA builds).
int64_t cuda_device_used_bytes();

}  // namespace edgevit::selftest
