// CUDA and cuBLASLt return codes as Status values for the CUDA backend (runtime/cuda/), each naming where
// it happened and the call that failed.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <string>

#include "base/status.h"

namespace edgevit {

// kDevice: "cuda backend: <where>: <call>: cudaErrorX: <text>".
Status cuda_error(const std::string& where, const char* call, cudaError_t e);
// kDevice: "cuda backend: <where>: <call>: CUBLAS_STATUS_X (n)".
Status cublas_error(const std::string& where, const char* call, cublasStatus_t s);

}  // namespace edgevit

// Return the error from the enclosing function. `where` is evaluated only on failure, so building it costs
// nothing on the paths that must not allocate (the forward).
#define EV_CUDA_CHECK(where, call)                                                 \
  do {                                                                             \
    const cudaError_t ev_e_ = (call);                                              \
    if (ev_e_ != cudaSuccess) return ::edgevit::cuda_error((where), #call, ev_e_); \
  } while (0)
#define EV_CUBLAS_CHECK(where, call)                                                         \
  do {                                                                                       \
    const cublasStatus_t ev_s_ = (call);                                                     \
    if (ev_s_ != CUBLAS_STATUS_SUCCESS) return ::edgevit::cublas_error((where), #call, ev_s_); \
  } while (0)
