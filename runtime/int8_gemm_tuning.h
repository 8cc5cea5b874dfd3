// What the CUDA INT8 GEMM's start-up tuning (runtime/cuda/ops_int8_cuda.cpp) decided for one GEMM at one
// captured batch size, and its tuning record (Plan::tuning; `bench --profile`, `-v`). Compiled in every build,
// without CUDA, so the record's wording and the cuBLASLt IMMA candidate's admission rule are tested on any host
// (tests/runtime/int8_gemm_tuning_test.cpp).
//
// Candidates: the gemm_i8 rows (split-K rows where their partial tiles fit the plan's INT8 split-K workspace)
// and, with GEMM tuning on, cuBLASLt IMMA (kernels/cuda/gemm_i8_lt.h): its int32 product goes to the same
// workspace after the tile counters (kCudaI8SplitCounterBytes, runtime/plan.h), so a GEMM whose M x N x 4
// bytes do not fit there is not timed and the record says so; fc2's uint8 input is offered only where cuBLASLt
// has a uint8 x int8 kernel. IMMA is pinned only when kTuneMargin faster than the fastest row; either way the
// output is the same bit for bit (exact int32 sums, one epilogue arithmetic).
#pragma once

#include <cstdint>
#include <string>

namespace edgevit {

// The cuBLASLt IMMA candidate at one size.
enum class LtImmaState {
  kNotTried,      // GEMM tuning off: only the table's first row
  kNoRoom,        // its int32 product exceeds the room after the counters in the plan's INT8 workspace
  kNoAlgorithm,   // cuBLASLt's heuristic offered no algorithm (x_u8: no uint8 x int8 kernel)
  kTimed,         // timed (lt_timed algorithms)
  kForced,        // EngineOptions::force_lt_imma: the heuristic's first algorithm, untimed
};

struct Int8GemmTiming {
  int batch = 0;
  std::string row;        // the gemm_i8 row (the table's first, or the fastest timed)
  int rows_timed = 0;     // gemm_i8 rows timed
  int split_timed = 0;    // of which split-K rows
  int split_skipped = 0;  // split-K rows not timed: their partial tiles exceed the plan's workspace
  double first_us = 0, row_us = 0;  // the table's first row, the fastest row
  LtImmaState lt = LtImmaState::kNotTried;
  bool x_u8 = false;         // the GEMM reads uint8 codes (fc2)
  int64_t lt_acc_bytes = 0;  // M x N x 4
  int lt_timed = 0;          // IMMA algorithms timed
  double lt_us = 0;          // the fastest of them (matmul + epilogue)
  std::string lt_algo;       // its configuration (gemm_lt.h's lt_describe_algo)
  bool lt_chosen = false;    // IMMA runs
};

// Bytes the IMMA candidate may use for its int32 product: the plan's INT8 workspace after the tile counters.
int64_t lt_imma_room_bytes(int64_t int8_workspace_bytes);
// Whether an M x N product fits there.
bool lt_imma_fits(int64_t m, int64_t n, int64_t int8_workspace_bytes);
// Whether IMMA's time beats the fastest row's by the tuning margin (kTuneMargin's 3%, passed in).
bool lt_imma_wins(double lt_us, double row_us, double margin);

// The record's choice: the row's name, or "lt_imma " + the algorithm.
std::string int8_gemm_choice(const Int8GemmTiming& t);
// The record's detail: what was timed, what was not and why. workspace_bytes: the plan's INT8 workspace.
std::string int8_gemm_detail(const Int8GemmTiming& t, int64_t workspace_bytes);

}  // namespace edgevit
