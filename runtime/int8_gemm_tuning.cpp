// The INT8 GEMM tuning records and the IMMA candidate's admission (runtime/int8_gemm_tuning.h).
#include "runtime/int8_gemm_tuning.h"

#include <algorithm>
#include <cstdio>

#include "runtime/plan.h"

namespace edgevit {

namespace {

std::string us(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f us", v);
  return b;
}

std::string lt_part(const Int8GemmTiming& t, int64_t workspace_bytes) {
  switch (t.lt) {
    case LtImmaState::kNotTried: return "";
    case LtImmaState::kNoRoom:
      return "; cuBLASLt IMMA not timed: its " + std::to_string(t.lt_acc_bytes) + "-byte int32 output exceeds the " +
             std::to_string(lt_imma_room_bytes(workspace_bytes)) + " bytes after the counters in the plan's " +
             std::to_string(workspace_bytes) + "-byte INT8 workspace";
    case LtImmaState::kNoAlgorithm:
      return t.x_u8 ? "; cuBLASLt IMMA not a candidate: no uint8 x int8 algorithm for this input (fc2's GELU codes)"
                    : "; cuBLASLt IMMA not a candidate: its heuristic offered no algorithm";
    case LtImmaState::kTimed:
      return "; cuBLASLt IMMA: " + std::to_string(t.lt_timed) + " algorithms timed, best " + us(t.lt_us) +
             (t.lt_chosen ? " (chosen)" : " (slower)");
    case LtImmaState::kForced: return "; cuBLASLt IMMA forced (force_lt_imma), untimed";
  }
  return "";
}

}  // namespace

int64_t lt_imma_room_bytes(int64_t int8_workspace_bytes) {
  return std::max<int64_t>(0, int8_workspace_bytes - kCudaI8SplitCounterBytes);
}

bool lt_imma_fits(int64_t m, int64_t n, int64_t int8_workspace_bytes) {
  return m > 0 && n > 0 && m * n * 4 <= lt_imma_room_bytes(int8_workspace_bytes);
}

bool lt_imma_wins(double lt_us, double row_us, double margin) {
  return lt_us > 0 && (row_us <= 0 || lt_us < row_us * margin);
}

std::string int8_gemm_choice(const Int8GemmTiming& t) {
  return t.lt_chosen ? "lt_imma " + t.lt_algo : t.row;
}

std::string int8_gemm_detail(const Int8GemmTiming& t, int64_t workspace_bytes) {
  std::string d = "the table's first row without split-K, untimed";
  if (t.rows_timed > 0) {
    d = std::to_string(t.rows_timed) + " rows timed (" + std::to_string(t.split_timed) + " split-K), first " +
        us(t.first_us) + ", fastest row " + us(t.row_us);
    if (t.split_skipped > 0)
      d += "; " + std::to_string(t.split_skipped) + " split-K rows not timed (partial tiles over the plan's " +
           std::to_string(workspace_bytes) + "-byte workspace)";
  }
  return d + lt_part(t, workspace_bytes);
}

}  // namespace edgevit
