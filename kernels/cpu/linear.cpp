// linear_f32: y = epilogue(x W^T + b) with OpenBLAS sgemm and one fused pass over y for the epilogue.
// kGeluTanh is kGelu's pass with cpu_math.h's gelu_tanh; kTanh (HF ViTModel's pooler) the same pass with std::tanh.
// kResidualAdd lets sgemm accumulate into the residual stream (beta = 1) and then adds the bias.
// The epilogue pass runs on OpenMP's default team (set by cpu_init_threads) when y is large.
// Measured (ViT-Ti/16 shapes, M = 197, BM_Linear, 1 thread; the only variant):
//   qkv   197x576x192  bias             0.59 ms  (~75 GFLOP/s)
//   fc1   197x768x192  bias + GELU      1.48 ms  (GEMM ~0.8 ms + fused bias/GELU pass)
//   fc2   197x192x768  residual + bias  1.05 ms
// Timings: CPU time (min of 5) on this machine (Xeon @ 2.5 GHz, AVX-512 capable, 2 cores shared with
// other builds: load average ~6 while measuring, so wall times were 2-3x these and 2-thread runs meaningless).
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "kernels/cpu/cpu_math.h"
#include "kernels/cpu/kernels.h"

namespace edgevit {

namespace {

// One tile: y[r0:r1, c0:c1] = epilogue(x[r0:r1] W[c0:c1]^T + b[c0:c1]) with single-threaded sgemm.
void linear_tile(const float* x, const float* w, const float* bias, float* y, int n, int k, int r0, int r1,
                 int c0, int c1, Epilogue ep) {
  const int m = r1 - r0, cols = c1 - c0;
  if (m <= 0 || cols <= 0) return;
  const float beta = ep == Epilogue::kResidualAdd ? 1.f : 0.f;
  float* yt = y + static_cast<int64_t>(r0) * n + c0;  // (m, cols) with row stride n
  if (k > 0) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, cols, k, 1.f, x + static_cast<int64_t>(r0) * k, k,
                w + static_cast<int64_t>(c0) * k, k, beta, yt, n);
  } else if (beta == 0.f) {
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < cols; ++j) yt[static_cast<int64_t>(i) * n + j] = 0.f;
  }
  const bool gelu =
      ep == Epilogue::kGelu || ep == Epilogue::kGeluTanh || ep == Epilogue::kQuickGelu || ep == Epilogue::kTanh;
  if (!gelu && bias == nullptr) return;
  for (int i = 0; i < m; ++i) {
    float* row = yt + static_cast<int64_t>(i) * n;  // (cols)
    if (ep == Epilogue::kGelu) {
      cpu_detail::bias_gelu(row, bias ? bias + c0 : nullptr, cols);
    } else if (ep == Epilogue::kGeluTanh) {
      cpu_detail::bias_gelu_tanh(row, bias ? bias + c0 : nullptr, cols);
    } else if (ep == Epilogue::kQuickGelu) {
      cpu_detail::bias_quick_gelu(row, bias ? bias + c0 : nullptr, cols);
    } else if (ep == Epilogue::kTanh) {  // the pooler's (B, E): one libm tanh per value
      for (int j = 0; j < cols; ++j) row[j] = std::tanh(row[j] + (bias ? bias[c0 + j] : 0.f));
    } else {
      for (int j = 0; j < cols; ++j) row[j] += bias[c0 + j];
    }
  }
}

}  // namespace

// Threading: OpenBLAS stays single-threaded (its threaded GEMM mallocs job arrays on every call, which
// would break the zero-allocation guarantee, and spins forever under qemu); this function splits the
// output into tiles over OpenMP's team instead: columns first (each thread streams its own slice of W,
// the larger operand for ViT batch-1 shapes), then rows when there are more threads than column blocks.
// Each tile runs its epilogue while its output is still in cache.
void linear_f32(const float* x,     // (M, K)
                const float* w,     // (N, K)
                const float* bias,  // (N) or nullptr
                float* y,           // (M, N)
                int m, int n, int k, Epilogue ep) {
  if (m <= 0 || n <= 0) return;
  const int threads = omp_get_max_threads();
  const double flops = 2.0 * m * n * static_cast<double>(k);
  if (threads <= 1 || flops < 2e6) {
    linear_tile(x, w, bias, y, n, k, 0, m, 0, n, ep);
    return;
  }
  constexpr int kMinCols = 64, kMinRows = 32;
  const int col_blocks = std::max(1, std::min(threads, n / kMinCols));
  const int row_blocks = std::max(1, std::min((threads + col_blocks - 1) / col_blocks, m / kMinRows));
  const int tiles = col_blocks * row_blocks;
#pragma omp parallel for schedule(static)
  for (int t = 0; t < tiles; ++t) {
    const int cb = t % col_blocks, rb = t / col_blocks;
    // Column boundaries on multiples of 16 floats (64 bytes) so tiles do not share cache lines.
    auto col = [&](int b) { return b == col_blocks ? n : std::min(n, (n * b / col_blocks + 15) / 16 * 16); };
    const int r0 = m * rb / row_blocks, r1 = m * (rb + 1) / row_blocks;
    linear_tile(x, w, bias, y, n, k, r0, r1, col(cb), col(cb + 1), ep);
  }
}

}  // namespace edgevit
