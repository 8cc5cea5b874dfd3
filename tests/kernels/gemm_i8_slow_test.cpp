// The INT8 epilogue's table GELU (kernels/cpu/gemm_i8_ref.h, gemm_i8_gelu_ref; the GPU epilogue runs the same
// steps) against the exact erf GELU in float64 on every float32 v with |v| <= 12 (2.2e9 values, about 30 s on
// one core): within 1e-6 absolute everywhere, the bound docs/kernels-gemm-i8.md states.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/gemm_i8_ref.h"

namespace edgevit {
namespace {

float from_bits(uint32_t b) {
  float f = 0.f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}

TEST(GemmI8RefSlow, TableGeluWithin1e6OfTheExactGeluOnEveryFloat) {
  const uint32_t end = 0x41400000u;  // 12.0f
  double worst = 0.0;
  float at = 0.f;
  for (uint32_t sign : {0u, 0x80000000u}) {
    for (uint32_t b = 0; b <= end; ++b) {
      const float v = from_bits(b | sign);
      const double x = v, exact = 0.5 * x * std::erfc(-x / std::sqrt(2.0));
      const double err = std::fabs(static_cast<double>(gemm_i8_gelu_ref(v)) - exact);
      if (err > worst) {
        worst = err;
        at = v;
      }
    }
  }
  EXPECT_LE(worst, 1e-6) << "at v = " << at;
}

}  // namespace
}  // namespace edgevit
