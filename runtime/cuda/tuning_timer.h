// The timing rule of the CUDA backend's start-up tuning (GEMM algorithms: runtime/cuda/gemm_tuning.cpp;
// attention rows: runtime/cuda/attention_cuda.cpp): a launch runs kTuneWarmup + kTuneRuns times between two
// events and the median decides; another choice replaces the default only when kTuneMargin faster.
#pragma once

#include <cuda_runtime_api.h>

#include <string>
#include <utility>

#include "kernels/cuda/ops.h"
#include "runtime/cuda/cuda_context.h"
#include "runtime/cuda/cuda_status.h"

namespace edgevit {

constexpr int kTuneWarmup = 2;
constexpr int kTuneRuns = 7;          // timed runs per candidate; the median decides
constexpr int kTuneRunsLong = 3;      // when one run takes over kTuneLongMs (large GEMMs on Orin)
constexpr float kTuneLongMs = 2.f;
constexpr double kTuneMargin = 0.97;  // another candidate replaces the default only when >= 3% faster

// The pass before each timed run of a GEMM candidate (cuBLASLt algorithms, the INT8 rows, the IMMA candidate):
// gpu::xor_fold_u32 over the arena's first ctx.flush_bytes (about twice the L2), folded into the word at `sink`
// (4-byte aligned: the candidate's output, which its launch overwrites), so the candidate reads its weights from
// DRAM as it does inside a forward, where the other ops' traffic has evicted them. Timed warm, the rows that
// hide DRAM latency (deep pipelines) look no better than the others. No-op when flush_bytes is 0.
inline cudaError_t l2_sweep(const CudaContext& ctx, void* sink) {
  if (ctx.flush_bytes <= 0) return cudaSuccess;
  const uint8_t* arena_base = ctx.arena.tail(static_cast<int64_t>(ctx.arena.bytes()));
  return gpu::xor_fold_u32(arena_base, ctx.flush_bytes, static_cast<uint32_t*>(sink), ctx.stream);
}

// `launch` runs kTuneWarmup + kTuneRuns times (kTuneRunsLong when a warm-up's time per launch is over
// kTuneLongMs), each between ctx.tune_events and after `before` (outside them); *median_ms is the median
// of the timed runs divided by per_run. -1 when `launch` refuses (cudaErrorNotSupported: not a candidate)
// or when the last warm-up is already 1.5x best_ms (it cannot win).
template <class Before, class Launch>
Status timed_median(const CudaContext& ctx, const std::string& where, Before before, Launch launch, int per_run,
                    double best_ms, double* median_ms) {
  *median_ms = -1.0;
  float ms[kTuneWarmup + kTuneRuns] = {};
  int runs = kTuneWarmup + kTuneRuns;
  for (int r = 0; r < runs; ++r) {
    EV_CUDA_CHECK(where, before());
    EV_CUDA_CHECK(where, cudaEventRecord(ctx.tune_events[0], ctx.stream));
    const cudaError_t le = launch();
    if (le == cudaErrorNotSupported) return Status::Ok();  // refused: not a candidate
    if (le != cudaSuccess) return cuda_error(where, "timed launch", le);
    EV_CUDA_CHECK(where, cudaEventRecord(ctx.tune_events[1], ctx.stream));
    EV_CUDA_CHECK(where, cudaEventSynchronize(ctx.tune_events[1]));
    EV_CUDA_CHECK(where, cudaEventElapsedTime(&ms[r], ctx.tune_events[0], ctx.tune_events[1]));
    ms[r] /= static_cast<float>(per_run);
    if (r == kTuneWarmup - 1) {
      if (best_ms > 0 && ms[r] > 1.5 * best_ms) return Status::Ok();
      if (ms[r] > kTuneLongMs) runs = kTuneWarmup + kTuneRunsLong;
    }
  }
  // Insertion sort of the timed runs (a handful; std::sort on this array trips GCC 12's -Warray-bounds).
  float* t = ms + kTuneWarmup;
  const int nt = runs - kTuneWarmup;
  for (int i = 1; i < nt; ++i)
    for (int j = i; j > 0 && t[j] < t[j - 1]; --j) std::swap(t[j], t[j - 1]);
  *median_ms = t[nt / 2];
  return Status::Ok();
}

}  // namespace edgevit
