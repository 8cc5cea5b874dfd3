// gelu_f32: exact (erf) GELU in place.
// Variants (ViT-Ti/16 MLP activation, 197 x 768 = 151k elements, this machine, 1 thread, BM_Gelu):
//   std::erf (glibc erff, scalar)                          5.9 ms
//   cpu_math.h gelu_erf, baseline SSE2 clone               1.7 ms
//   cpu_math.h gelu_erf, AVX2+FMA clone (kept)             0.44 ms
// Timings: CPU time (min of 5) on this machine (Xeon @ 2.5 GHz, AVX-512 capable, 2 cores shared with
// other builds: load average ~6 while measuring, so wall times were 2-3x these and 2-thread runs meaningless).
#include <cstdint>

#include "kernels/cpu/cpu_math.h"
#include "kernels/cpu/kernels.h"

namespace edgevit {

void gelu_f32(float* x, int64_t n, int threads) {  // x (n)
  constexpr int64_t kMinPerThread = 16384;
  const bool parallel = threads > 1 && n >= 2 * kMinPerThread;
  const int team = parallel ? threads : 1;
  const int64_t chunk = (n + team - 1) / team;
  if (!parallel) {  // no OpenMP region: libgomp allocates a team for every serialised region
    cpu_detail::bias_gelu(x, nullptr, n);
    return;
  }
#pragma omp parallel for num_threads(team) schedule(static)
  for (int c = 0; c < team; ++c) {
    const int64_t i0 = c * chunk;
    const int64_t i1 = i0 + chunk < n ? i0 + chunk : n;
    if (i0 < i1) cpu_detail::bias_gelu(x + i0, nullptr, i1 - i0);
  }
}

}  // namespace edgevit
