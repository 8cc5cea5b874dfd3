// layernorm_f32: per-row statistics in fp32, numerically safe for large-magnitude rows.
// The row is shifted by its first element before any sum (x - x0 is exact by Sterbenz when x and x0
// are within a factor 2, i.e. exactly when cancellation would otherwise bite), then mean and variance
// are taken two-pass on the shifted values. A row with mean 1e4 and unit variance therefore loses
// nothing, where the one-pass E[x^2] - E[x]^2 in fp32 loses every digit (1e8 - 1e8).
// Partial sums are kept in kLanes independent accumulators so the loops vectorise without
// -ffast-math. Measured (ViT-Ti/16: M = 197, C = 192, BM_LayerNorm, 1 thread): 0.033 ms (the only variant).
// Compiled for the baseline ISA, AVX2+FMA and AVX-512, picked at run time: in-model on the 2-core AMD EPYC
// (Zen 4), 1 thread, 0.073 ms per ViT-Ti LayerNorm with the baseline (SSE2) clone only, 0.011 ms now.
// Timings: CPU time (min of 5) on this machine (Xeon @ 2.5 GHz, AVX-512 capable, 2 cores shared with
// other builds: load average ~6 while measuring, so wall times were 2-3x these and 2-thread runs meaningless).
#include <omp.h>

#include <cmath>
#include <cstdint>

#include "kernels/cpu/cpu_math.h"
#include "kernels/cpu/kernels.h"

namespace edgevit {
namespace {

constexpr int kLanes = 16;
// Below this many elements one thread does it all. ViT-Ti's (197 x 192 = 37824) ran serially under the
// former 65536 and took 2x its 1-thread time at 2 threads (half its input sits in the other core's cache).
constexpr int64_t kParallelMinElements = 16384;

inline float sum_lanes(const float (&acc)[kLanes]) {
  float s = 0.f;
  for (int l = 0; l < kLanes; ++l) s += acc[l];
  return s;
}

EV_ALWAYS_INLINE void layernorm_row(const float* x, const float* gamma, const float* beta, float* y, int c,
                                    float eps) {
  const float x0 = x[0];
  const int body = c / kLanes * kLanes;

  float acc[kLanes] = {};
  for (int i = 0; i < body; i += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += x[i + l] - x0;
  float sum = sum_lanes(acc);
  for (int i = body; i < c; ++i) sum += x[i] - x0;
  const float mean_d = sum / static_cast<float>(c);  // mean of (x - x0)

  float acc2[kLanes] = {};
  for (int i = 0; i < body; i += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      const float d = (x[i + l] - x0) - mean_d;
      acc2[l] += d * d;
    }
  float ss = sum_lanes(acc2);
  for (int i = body; i < c; ++i) {
    const float d = (x[i] - x0) - mean_d;
    ss += d * d;
  }
  const float rstd = 1.f / std::sqrt(ss / static_cast<float>(c) + eps);

  for (int i = 0; i < c; ++i) y[i] = ((x[i] - x0) - mean_d) * rstd * gamma[i] + beta[i];
}

// Rows [i0, i1) of (M, C), compiled for the baseline ISA, AVX2+FMA and AVX-512.
EV_ALWAYS_INLINE void layernorm_rows_body(const float* x, const float* gamma, const float* beta, float* y, int i0,
                                          int i1, int c, float eps) {
  for (int i = i0; i < i1; ++i) {
    const int64_t off = static_cast<int64_t>(i) * c;
    layernorm_row(x + off, gamma, beta, y + off, c, eps);
  }
}
EV_TARGET_AVX512 void layernorm_rows_avx512(const float* x, const float* gamma, const float* beta, float* y, int i0,
                                            int i1, int c, float eps) {
  layernorm_rows_body(x, gamma, beta, y, i0, i1, c, eps);
}
EV_TARGET_AVX2 void layernorm_rows_avx2(const float* x, const float* gamma, const float* beta, float* y, int i0,
                                        int i1, int c, float eps) {
  layernorm_rows_body(x, gamma, beta, y, i0, i1, c, eps);
}
void layernorm_rows_base(const float* x, const float* gamma, const float* beta, float* y, int i0, int i1, int c,
                         float eps) {
  layernorm_rows_body(x, gamma, beta, y, i0, i1, c, eps);
}
void layernorm_rows(const float* x, const float* gamma, const float* beta, float* y, int i0, int i1, int c,
                    float eps) {
  if (cpu_detail::use_avx512()) {
    layernorm_rows_avx512(x, gamma, beta, y, i0, i1, c, eps);
  } else if (cpu_detail::use_avx2()) {
    layernorm_rows_avx2(x, gamma, beta, y, i0, i1, c, eps);
  } else {
    layernorm_rows_base(x, gamma, beta, y, i0, i1, c, eps);
  }
}

}  // namespace

void layernorm_f32(const float* x,      // (M, C)
                   const float* gamma,  // (C)
                   const float* beta,   // (C)
                   float* y,            // (M, C), may alias x
                   int m, int c, float eps, int threads) {
  if (c <= 0) return;
  const bool parallel = threads > 1 && static_cast<int64_t>(m) * c >= kParallelMinElements;
  // No OpenMP region at all when serial: libgomp allocates a fresh team for every serialised (if false /
  // one-thread) region, which infer() must not do.
  if (!parallel) {
    layernorm_rows(x, gamma, beta, y, 0, m, c, eps);
    return;
  }
  // Contiguous row ranges (rows are independent: the split does not change any bit).
#pragma omp parallel num_threads(threads)
  {
    const int n = omp_get_num_threads(), i = omp_get_thread_num();
    const int i0 = static_cast<int>(static_cast<int64_t>(m) * i / n);
    const int i1 = static_cast<int>(static_cast<int64_t>(m) * (i + 1) / n);
    if (i0 < i1) layernorm_rows(x, gamma, beta, y, i0, i1, c, eps);
  }
}

}  // namespace edgevit
