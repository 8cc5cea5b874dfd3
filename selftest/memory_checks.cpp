// The memory.* checks of one engine: the arena as one allocation within the plan's bytes
// (memory.arena_single_allocation), and repeated inferences that allocate nothing, map nothing and give
// bit-identical outputs (memory.zero_allocations, memory.no_new_mappings, memory.bit_identical).
#include "selftest/memory_checks.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "selftest/checks.h"

namespace edgevit::selftest {
namespace {

// Sum of the sizes of this process's mappings (/proc/self/maps), read without allocating so that the read
// itself does not move the heap. -1 when unreadable.
int64_t mapped_bytes() {
  const int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char buf[8192];
  int64_t total = 0;
  uint64_t start = 0, end = 0;
  int field = 0;  // 0: start, 1: end, 2: rest of the line
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
        if (field == 2 && end > start) total += static_cast<int64_t>(end - start);
        start = end = 0;
        field = 0;
      } else if (field < 2) {
        const int digit = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
        if (digit >= 0) {
          uint64_t& v = field == 0 ? start : end;
          v = v * 16 + static_cast<uint64_t>(digit);
        } else {
          ++field;  // '-' after start, ' ' after end
        }
      }
    }
  }
  close(fd);
  return total;
}

std::string mib(int64_t bytes) { return fmt_g(static_cast<double>(bytes) / (1 << 20)) + " MiB"; }

// The bytes of the plan's memory lines (Plan::memory, held after load) that the self-test's window can see
// grow: on CUDA the context's device memory exists before the window opens (the kernel checks and
// cuda_device_used_bytes() create it), so that line is left out. Its host line stays: cuBLASLt's handle and
// the kernel images create() loads grow the heap inside the window (+304 MB for the digits model on an
// H200, of the 265 MiB + graphs the plan counts), while the bound is only an upper one.
struct PlannedBytes {
  int64_t host = 0;
  int64_t device = 0;
};
PlannedBytes planned_in_window(const Plan& p) {
  PlannedBytes b{p.host_total_bytes, p.device_total_bytes};
  if (p.device.kind == DeviceKind::kCuda) b.device -= p.context_bytes;
  return b;
}

// The arena as one allocation: device memory that grew by at least the arena on CUDA; on the host (exact
// mode) one anonymous mapping of the plan's arena bytes. `text` says what was seen.
bool arena_allocated(const Plan& p, const MemoryUse& u, std::string* text) {
  const int64_t page = sysconf(_SC_PAGESIZE) > 0 ? sysconf(_SC_PAGESIZE) : 4096;
  const int64_t arena_mapping = (p.arena_bytes + page - 1) / page * page;
  if (p.device.kind == DeviceKind::kCuda) {
    *text = "device +" + std::to_string(u.device_bytes) + " bytes (arena " + std::to_string(p.arena_bytes) + ")";
    return u.device_bytes >= p.arena_bytes;
  }
  if (u.exact) {
    const auto n = std::count_if(u.anon_maps.begin(), u.anon_maps.end(),
                                 [&](const MemoryUse::Mapping& m) { return m.bytes == arena_mapping; });
    *text = std::to_string(n) + " anonymous mapping(s) of the arena's " + std::to_string(arena_mapping) + " bytes";
    return n == 1;
  }
  *text = "arena not identifiable without the interposer";
  return true;
}

// One comparison per memory that the budget sees separately.
struct Side {
  const char* name;
  int64_t observed, planned;
};
std::vector<Side> budget_sides(const Plan& p, const MemoryUse& u) {
  const PlannedBytes plan_b = planned_in_window(p);
  std::vector<Side> sides;
  if (p.device.kind != DeviceKind::kCuda) {
    sides.push_back({"host", u.host_bytes(), plan_b.host});
  } else if (p.device.unified_memory) {
    sides.push_back({"host + device", u.host_bytes() + u.device_bytes, plan_b.host + plan_b.device});
  } else {
    sides.push_back({"host", u.host_bytes(), plan_b.host});
    sides.push_back({"device", u.device_bytes, plan_b.device});
  }
  return sides;
}

// What was counted, and how: heap growth, the anonymous mappings (most resident first), the mappings not
// counted, device memory.
std::string arena_detail(const MemoryUse& u, const std::string& how) {
  std::string maps_text;
  for (size_t i = 0; i < u.anon_maps.size() && i < 8; ++i)
    maps_text += (i ? ", " : "") + std::to_string(u.anon_maps[i].resident) + "/" + std::to_string(u.anon_maps[i].bytes);
  if (u.anon_maps.size() > 8) maps_text += ", ...";
  std::string detail = how + "; heap " + (u.heap_bytes >= 0 ? "+" : "") + std::to_string(u.heap_bytes) + " bytes";
  if (u.exact) {
    detail += ", " + std::to_string(u.anon_maps.size()) + " anonymous mappings resident " +
              std::to_string(u.anon_resident_bytes) + " bytes [resident/mapped, most resident first: " + maps_text +
              "]";
    if (u.file_map_bytes > 0)
      detail += ", file mappings still mapped " + std::to_string(u.file_map_bytes) + " bytes (not counted)";
    if (u.device_file_map_bytes > 0)
      detail += ", device-file mappings (pinned driver memory) " + std::to_string(u.device_file_map_bytes) +
                " bytes (not counted)";
  } else {
    detail += ", readable/writable mappings grew " + std::to_string(u.mapped_growth_bytes) + " bytes";
  }
  if (u.device_bytes >= 0) detail += ", CUDA device memory used +" + std::to_string(u.device_bytes) + " bytes";
  detail += "; counted by " +
            std::string(u.exact ? "interposed mmap/munmap + mallinfo2" : "/proc/self/maps + mallinfo2");
  return detail;
}

// memory.zero_allocations: the window's count, less the allocations on the CUDA driver's own threads.
CheckResult zero_allocations_check(const AllocWindow& window, int64_t allocs, bool ok, const std::string& runs_text,
                                   const std::string& model, const Stopwatch& w) {
  // The CUDA driver's own service threads (named cuda-*) run beside the process and allocate on their own
  // schedule (seen: 1 allocation in some runs of 200 inferences on an H100); they are named in the detail,
  // not counted. Every other thread counts: the caller, OpenMP / OpenBLAS workers, the runtime's.
  std::string threads_text, driver_text;
  for (const AllocThread& t : window.threads()) {
    std::string& text = t.driver ? driver_text : threads_text;
    text += (text.empty() ? "" : ", ") + t.name + " (tid " + std::to_string(t.tid) + "): " + std::to_string(t.allocs);
    if (t.driver) allocs -= t.allocs;
  }
  CheckResult a;
  a.name = "memory.zero_allocations";
  a.model = model;
  a.outcome = ok && allocs == 0 ? Outcome::kPass : Outcome::kFail;
  a.measured = ok ? (AllocWindow::exact() ? std::to_string(allocs) + " heap allocations"
                                          : std::string(allocs ? "heap grew" : "heap did not grow"))
                  : "infer failed";
  a.bound = AllocWindow::exact() ? "0" : "no growth";
  a.detail = runs_text + ", counted by " + AllocWindow::mechanism();
  if (!threads_text.empty()) a.detail += "; by thread: " + threads_text;
  if (!driver_text.empty()) a.detail += "; not counted, on the CUDA driver's own threads: " + driver_text;
  a.seconds = w.seconds();
  return a;
}

// memory.no_new_mappings: the process's mapped bytes before and after the runs.
CheckResult no_new_mappings_check(int64_t maps_before, int64_t maps_after, const std::string& runs_text,
                                  const std::string& model) {
  CheckResult m;
  m.name = "memory.no_new_mappings";
  m.model = model;
#if defined(EDGEVIT_SANITIZER_BUILD)
  constexpr bool kAsan = true;  // ASan's allocator maps its own memory as it goes: the check means nothing
#else
  constexpr bool kAsan = false;
#endif
  if (kAsan) {
    m.outcome = Outcome::kSkip;
    m.detail = "skipped: AddressSanitizer build (its allocator maps memory itself)";
  } else if (maps_before < 0 || maps_after < 0) {
    m.detail = "skipped: /proc/self/maps not readable";
  } else {
    m.outcome = maps_after == maps_before ? Outcome::kPass : Outcome::kFail;
    m.measured = "mapped bytes " + std::to_string(maps_before) + " -> " + std::to_string(maps_after);
    m.bound = "unchanged";
    m.detail = runs_text;
  }
  return m;
}

}  // namespace

// The arena is one allocation: one anonymous mapping of the plan's arena bytes on the host (exact mode),
// device memory that grew by at least the arena on CUDA. Host bytes (heap growth + resident mappings) are at
// most the plan's host lines plus unplanned_bytes_bound(), device bytes at most its device lines plus the
// bound; a unified-memory board (Jetson) holds both in one memory, so there their sum is held to the sum.
CheckResult arena_check(const Engine& e, const MemoryUse& u, const std::string& how, const std::string& model) {
  const Plan& p = e.plan();
  const bool cuda = p.device.kind == DeviceKind::kCuda;
  CheckResult c;
  c.name = "memory.arena_single_allocation";
  c.model = model;
#if defined(EDGEVIT_SANITIZER_BUILD)
  // ASan's allocator owns malloc and maps its own memory as it goes: neither the interposer nor the mapping
  // growth can tell the engine's bytes from the sanitizer's.
  c.detail = "skipped: AddressSanitizer build (its allocator maps memory itself)";
  return c;
#endif
  if (!u.host_known) {
    c.outcome = Outcome::kFail;
    c.measured = "the engine's allocations could not be counted";
    c.bound = "counted";
    c.detail = u.exact ? "more mappings than the interposer records" : "/proc/self/maps not readable";
    return c;
  }
  if (cuda && u.device_bytes < 0) {
    c.outcome = Outcome::kFail;
    c.measured = "CUDA device memory could not be read (cudaMemGetInfo)";
    c.bound = "read";
    return c;
  }
  std::string arena_text;
  const bool arena_ok = arena_allocated(p, u, &arena_text);
  bool within = true;
  std::string measured, bound;
  for (const Side& sd : budget_sides(p, u)) {
    const int64_t slack = unplanned_bytes_bound(sd.planned);
    within = within && sd.observed <= sd.planned + slack;
    measured += (measured.empty() ? "" : "; ") + std::to_string(sd.observed) + " bytes " + sd.name + " (" +
                mib(sd.observed) + ")";
    bound += (bound.empty() ? "" : "; ") + std::string(sd.name) + " <= plan " + std::to_string(sd.planned) + " + " +
             std::to_string(slack) + " (" + mib(sd.planned + slack) + ")";
  }
  c.outcome = arena_ok && within ? Outcome::kPass : Outcome::kFail;
  c.measured = measured + "; " + arena_text;
  c.bound = "arena as one allocation; " + bound;
  c.detail = arena_detail(u, how);
  return c;
}

void memory_checks(Engine& e, const float* input, int n, int runs, const std::string& model,
                   std::vector<CheckResult>* out) {
  Stopwatch w;
  // Thread pools, OpenBLAS's per-thread GEMM buffers (mapped the first time a thread calls sgemm) and
  // first-touch pages all exist before counting starts.
  Status warm = Status::Ok();
  for (int i = 0; i < 3 && warm.ok(); ++i) warm = e.infer(input, n);
  const size_t out_n = static_cast<size_t>(n) * e.output_dim();
  std::vector<float> first(out_n), row(out_n);
  std::copy(e.logits(), e.logits() + out_n, first.begin());
  bool ok = warm.ok();
  int differ = 0;
  const int64_t maps_before = mapped_bytes();
  AllocWindow window;
  for (int i = 0; i < runs && ok; ++i) {
    ok = e.infer(input, n).ok();
    differ += std::memcmp(first.data(), e.logits(), out_n * sizeof(float)) != 0;
  }
  const int64_t allocs = window.finish();
  const int64_t maps_after = mapped_bytes();
  const std::string runs_text = std::to_string(runs) + " inferences of batch " + std::to_string(n);
  out->push_back(zero_allocations_check(window, allocs, ok, runs_text, model, w));
  out->push_back(no_new_mappings_check(maps_before, maps_after, runs_text, model));
  CheckResult b;
  b.name = "memory.bit_identical";
  b.model = model;
  b.outcome = ok && differ == 0 ? Outcome::kPass : Outcome::kFail;
  b.measured = std::to_string(differ) + " of " + std::to_string(runs) + " runs differ from the first";
  b.bound = "0";
  b.detail = runs_text + ", logits compared with memcmp";
  out->push_back(b);
}

}  // namespace edgevit::selftest
