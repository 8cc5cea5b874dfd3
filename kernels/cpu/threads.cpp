// cpu_init_threads: one place that sets OpenBLAS's and OpenMP's thread counts.
#include <cblas.h>
#include <omp.h>

#include "kernels/cpu/kernels.h"

namespace edgevit {

void cpu_init_threads(int threads) {
  const int n = threads < 1 ? 1 : threads;
  openblas_set_num_threads(n);
  omp_set_num_threads(n);
}

}  // namespace edgevit
