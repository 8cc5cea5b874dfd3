// cpu_init_threads: one place that sets OpenBLAS's and OpenMP's thread counts.
#include <cblas.h>
#include <omp.h>

#include "kernels/cpu/kernels.h"

#include <alloca.h>
#include <strings.h>

namespace edgevit {

void cpu_init_threads(int threads) {
  const int n = threads < 1 ? 1 : threads;
  // OpenBLAS itself stays single-threaded: edgevit parallelises GEMMs over OpenMP tiles (linear.cpp), so
  // no OpenBLAS thread pool exists to spin under qemu or to allocate per call.
  openblas_set_num_threads(1);
  omp_set_num_threads(n);
}

// OpenBLAS keeps a pool of GEMM work buffers (tens of MiB each, mmap'd on first need) and hands one to
// every concurrent caller; a pool slot is created the first time that many calls overlap. With OpenMP
// tiles calling sgemm from every thread, that first overlap could come in the middle of serving. Make
// every thread call sgemm at once, a few times, at start-up so the pool is full before infer() runs.
void cpu_prewarm_blas(int threads) {
  const int n = threads < 1 ? 1 : threads;
  for (int round = 0; round < 4; ++round) {
#pragma omp parallel num_threads(n)
    {
      constexpr int kDim = 96;
      float a[kDim * kDim], b[kDim * kDim], c[kDim * kDim];  // 108 KiB of stack: fine for OpenMP threads
      for (int i = 0; i < kDim * kDim; ++i) {
        a[i] = static_cast<float>(i % 7) * 0.25f;
        b[i] = static_cast<float>(i % 5) * 0.5f;
      }
#pragma omp barrier
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, kDim, kDim, kDim, 1.f, a, kDim, b, kDim, 0.f, c, kDim);
#pragma omp barrier
      volatile float sink = c[0];
      (void)sink;
    }
  }
}

namespace {
// noinline: the alloca'd block must lie below the caller's frame, and is given back on return.
__attribute__((noinline)) void touch_stack(size_t bytes) {
  constexpr size_t kPage = 4096;
  volatile char* block = static_cast<volatile char*>(alloca(bytes));
  for (size_t off = bytes; off >= kPage; off -= kPage) block[off - kPage] = 0;  // top down, as the stack grows
}
}  // namespace

void cpu_prefault_stack(size_t bytes, int threads) {
  if (threads <= 1) {
    touch_stack(bytes);
    return;
  }
#pragma omp parallel num_threads(threads)
  touch_stack(bytes);
}

size_t cpu_kernel_stack_bytes() {
  constexpr size_t kFrames = 64 * 1024;  // the frames between infer() and the kernels' tiles (debug builds too)
  return mha_fused_stack_bytes() + kFrames;
}

const char* cpu_blas_core() { return openblas_get_corename(); }

// OpenBLAS 0.3.21 (Debian 12) does not know some newer CPUs (seen: Sapphire Rapids under a hypervisor)
// and falls back to its SSE3 "Prescott" kernels, 4x slower than the AVX-512 ones on the same chip.
const char* cpu_blas_better_coretype() {
#if defined(__x86_64__)
  static const char* kFallbacks[] = {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Katmai",
                                     "Coppermine", "Northwood", "Banias", "Atom"};
  const char* core = openblas_get_corename();
  bool fallback = false;
  for (const char* f : kFallbacks)
    if (core != nullptr && strcasecmp(core, f) == 0) fallback = true;
  if (!fallback) return nullptr;
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512dq"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
#endif
  return nullptr;
}

}  // namespace edgevit
