// The GELU's division-free erf ratio (kernels/cpu/gemm_i8_ref.h, gemm_i8_erf_ratio_ref; the GPU epilogue runs
// the same fma sequence) against the IEEE division p / q it replaces, on every fp32 x in [0, 4] (1.08e9
// values, about a minute): 1 + ratio must equal 1 + p / q everywhere, so the GELU g = (0.5 v) (1 + p / q) is
// the same float as the division form's for every v (x = clamp(v / sqrt 2, -4, 4) covers every input; the
// ratio is odd in p and q is even in x, checked on a sample, so negative x follow). The quotients themselves
// may differ where p / q is subnormal (x below about 1e-38), where 1 + either rounds to 1.
#include <gtest/gtest.h>

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

TEST(GemmI8RefSlow, ErfRatioGivesTheDivisionsGeluOnEveryX) {
  const uint32_t end = 0x40800000u;  // 4.0f
  int64_t differ = 0;
  float first = -1.f;
  for (uint32_t b = 0; b <= end; ++b) {
    const float x = from_bits(b);
    float p = 0.f, q = 0.f;
    gemm_i8_erf_terms_ref(x, &p, &q);
    const float got = 1.f + gemm_i8_erf_ratio_ref(p, q), want = 1.f + p / q;
    if (got != want) {
      if (differ == 0) first = x;
      ++differ;
    }
    if ((b & 0xffffu) == 0) {  // the odd symmetry on a sample
      float pn = 0.f, qn = 0.f;
      gemm_i8_erf_terms_ref(-x, &pn, &qn);
      ASSERT_EQ(qn, q);
      ASSERT_EQ(gemm_i8_erf_ratio_ref(pn, qn), -gemm_i8_erf_ratio_ref(p, q)) << "x " << x;
    }
  }
  EXPECT_EQ(differ, 0) << "first at x = " << first;
}

}  // namespace
}  // namespace edgevit
