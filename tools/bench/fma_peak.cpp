// fma_peak: fp32 FMA throughput of this machine's cores (AVX-512: 12 independent zmm FMA chains per thread), the
// ceiling the CPU GEMMs are measured against (docs/kernels-cpu-gemm.md). Built by hand: g++ -O2 -fopenmp.
// usage: fma_peak [threads...]   (default 1 2); prints GFLOP/s per thread and in total, best of 5 runs.
#include <immintrin.h>
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

__attribute__((target("avx512f"))) static float run(long iters) {
  __m512 a[12];
  const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
  for (int i = 0; i < 12; ++i) a[i] = _mm512_set1_ps(1.f + i);
  for (long it = 0; it < iters; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) a[i] = _mm512_fmadd_ps(a[i], m, c);
  }
  __m512 s = a[0];
  for (int i = 1; i < 12; ++i) s = _mm512_add_ps(s, a[i]);
  return _mm512_reduce_add_ps(s);
}

int main(int argc, char** argv) {
  std::vector<int> ts;
  for (int i = 1; i < argc; ++i) ts.push_back(std::atoi(argv[i]));
  if (ts.empty()) ts = {1, 2};
  const long iters = 100000000;  // 12 x 16 x 2 x 1e8 = 38.4 GFLOP per thread
  for (int t : ts) {
    double best = 0;
    for (int r = 0; r < 5; ++r) {
      float sink = 0;
      const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(t) reduction(+ : sink)
      sink += run(iters);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const double gf = 12.0 * 16 * 2 * iters * t / s / 1e9;
      if (gf > best) best = gf;
      if (sink == 42.f) std::printf(" ");
    }
    std::printf("threads %d: %.1f GFLOP/s total, %.1f per thread\n", t, best, best / t);
  }
  return 0;
}
