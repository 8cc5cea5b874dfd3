// GoogleTest main for the CUDA tests (*_test.cu, label cuda): without a usable GPU the binary prints
// "skipped: no GPU" and exits 77, which ctest (SKIP_RETURN_CODE 77) counts as skipped, never as passed.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdio>

#include "tests/testutil/cuda_main.h"

namespace edgevit::testutil {

bool cuda_device_available() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

}  // namespace edgevit::testutil

int main(int argc, char** argv) {
  if (!edgevit::testutil::cuda_device_available()) {
    std::printf("skipped: no GPU\n");
    return edgevit::testutil::kExitSkipped;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
