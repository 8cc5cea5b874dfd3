#include "runtime/host_info.h"

#include "kernels/cpu/kernels.h"

namespace edgevit {

const char* host_gemm_library() { return cpu_gemm_library(); }
const char* host_blas_core() { return cpu_blas_core(); }
const char* host_blas_better_coretype() { return cpu_blas_better_coretype(); }
void set_host_threads(int threads) { cpu_init_threads(threads); }

}  // namespace edgevit
