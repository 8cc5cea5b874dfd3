#include "runtime/cuda/cuda_status.h"

#include "kernels/cuda/gemm_lt.h"

namespace edgevit {

Status cuda_error(const std::string& where, const char* call, cudaError_t e) {
  return device_error("cuda backend: " + where + ": " + call + ": " + cudaGetErrorName(e) + ": " +
                      cudaGetErrorString(e));
}

Status cublas_error(const std::string& where, const char* call, cublasStatus_t s) {
  return device_error("cuda backend: " + where + ": " + call + ": " + gpu::lt_status_name(s) + " (" +
                      std::to_string(static_cast<int>(s)) + ")");
}

}  // namespace edgevit
