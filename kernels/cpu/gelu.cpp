// gelu_f32: exact (erf) GELU in place; gelu_tanh_f32: the tanh approximation in place (cpu_math.h gelu_tanh,
// the same dispatch: AVX-512 intrinsics, AVX2+FMA clone, baseline clone).
// Variants (ViT-Ti/16 MLP activation, 197 x 768 = 151k elements, this machine, 1 thread, BM_Gelu):
//   std::erf (glibc erff, scalar)                          5.9 ms
//   cpu_math.h gelu_erf, baseline SSE2 clone               1.7 ms
//   cpu_math.h gelu_erf, AVX2+FMA clone (kept)             0.44 ms
//   gelu_tanh_f32 (2|u| in double, the rest fp32), a later run under other load, the erf clones of the same
//   run in brackets: baseline SSE2 clone 0.40 ms (0.48), AVX2+FMA 0.14 ms (0.13), AVX-512 intrinsics 0.11 ms (0.08)
// Timings: CPU time (min of 5) on this machine (Xeon @ 2.5 GHz, AVX-512 capable, 2 cores shared with
// other builds: load average ~6 while measuring, so wall times were 2-3x these and 2-thread runs meaningless).
#include <cstdint>

#include "kernels/cpu/cpu_math.h"
#include "kernels/cpu/kernels.h"

namespace edgevit {

namespace {

// x (n) <- act(x, nullptr, n), split into one contiguous chunk per thread when n is large.
template <void (*Act)(float*, const float*, int64_t)>
void elementwise(float* x, int64_t n, int threads) {  // x (n)
  constexpr int64_t kMinPerThread = 16384;
  const bool parallel = threads > 1 && n >= 2 * kMinPerThread;
  const int team = parallel ? threads : 1;
  const int64_t chunk = (n + team - 1) / team;
  if (!parallel) {  // no OpenMP region: libgomp allocates a team for every serialised region
    Act(x, nullptr, n);
    return;
  }
#pragma omp parallel for num_threads(team) schedule(static)
  for (int c = 0; c < team; ++c) {
    const int64_t i0 = c * chunk;
    const int64_t i1 = i0 + chunk < n ? i0 + chunk : n;
    if (i0 < i1) Act(x + i0, nullptr, i1 - i0);
  }
}

}  // namespace

void gelu_f32(float* x, int64_t n, int threads) { elementwise<cpu_detail::bias_gelu>(x, n, threads); }

void gelu_tanh_f32(float* x, int64_t n, int threads) { elementwise<cpu_detail::bias_gelu_tanh>(x, n, threads); }
void quick_gelu_f32(float* x, int64_t n, int threads) { elementwise<cpu_detail::bias_quick_gelu>(x, n, threads); }

}  // namespace edgevit
