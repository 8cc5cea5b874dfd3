// cpu_init_threads: one place that sets OpenBLAS's and OpenMP's thread counts.
#include <cblas.h>
#include <omp.h>

#include "kernels/cpu/kernels.h"

namespace edgevit {

void cpu_init_threads(int threads) {
  const int n = threads < 1 ? 1 : threads;
  // OpenBLAS itself stays single-threaded: edgevit parallelises GEMMs over OpenMP tiles (linear.cpp), so
  // no OpenBLAS thread pool exists to spin under qemu or to allocate per call.
  openblas_set_num_threads(1);
  omp_set_num_threads(n);
}

}  // namespace edgevit
