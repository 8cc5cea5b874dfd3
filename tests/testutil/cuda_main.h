// Shared by the CUDA tests: the skip convention of tests/testutil/cuda_main.cpp and a check macro.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

namespace edgevit::testutil {

// ctest's SKIP_RETURN_CODE for tests that need hardware the machine lacks.
constexpr int kExitSkipped = 77;

// True when the CUDA runtime reports at least one device.
bool cuda_device_available();

}  // namespace edgevit::testutil

// Asserts that a CUDA runtime call succeeded, naming the call and the error.
#define EV_ASSERT_CUDA(expr)                                                              \
  do {                                                                                    \
    const cudaError_t ev_cuda_err_ = (expr);                                              \
    ASSERT_EQ(ev_cuda_err_, cudaSuccess) << #expr << ": " << cudaGetErrorString(ev_cuda_err_); \
  } while (0)
