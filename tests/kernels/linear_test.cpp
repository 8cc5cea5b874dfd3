// linear_f32 (OpenBLAS + fused epilogue) against linear_ref (double) for every epilogue and odd sizes.
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "kernels/cpu/kernels.h"
#include "tests/testutil/testutil.h"

namespace edgevit {
namespace {

const float kNaN = std::numeric_limits<float>::quiet_NaN();

void check(int m, int n, int k, Epilogue ep, bool with_bias, uint32_t seed) {
  SCOPED_TRACE("m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k) +
               " ep=" + std::to_string(static_cast<int>(ep)) + (with_bias ? " bias" : " no-bias"));
  const auto x = testutil::random_floats(static_cast<size_t>(m) * k, seed);
  const auto w = testutil::random_floats(static_cast<size_t>(n) * k, seed + 1);
  const auto b = testutil::random_floats(n, seed + 2);
  const size_t out = static_cast<size_t>(m) * n;
  // kResidualAdd reads y: start both from the same residual stream; otherwise poison y.
  std::vector<float> y = ep == Epilogue::kResidualAdd ? testutil::random_floats(out, seed + 3)
                                                      : std::vector<float>(out, kNaN);
  std::vector<float> ref = y;
  const float* bias = with_bias ? b.data() : nullptr;
  linear_ref(x.data(), w.data(), bias, ref.data(), m, n, k, ep);
  linear_f32(x.data(), w.data(), bias, y.data(), m, n, k, ep);
  ASSERT_TRUE(testutil::all_finite(ref.data(), out));
  EXPECT_TRUE(testutil::all_finite(y.data(), out));
  EXPECT_LE(testutil::rel_error(y.data(), ref.data(), out), tol::kFp32Kernel);
}

TEST(Linear, AllEpiloguesOddSizes) {
  cpu_init_threads(1);
  uint32_t seed = 10;
  const int shapes[][3] = {{1, 1, 1}, {3, 17, 5}, {17, 3, 197}, {197, 576, 192}, {197, 192, 768},
                           {197, 768, 192}, {1, 1000, 192}, {5, 7, 1}};
  for (const auto& s : shapes)
    for (Epilogue ep : {Epilogue::kNone, Epilogue::kGelu, Epilogue::kResidualAdd, Epilogue::kGeluTanh, Epilogue::kTanh})
      for (bool bias : {true, false}) check(s[0], s[1], s[2], ep, bias, seed += 10);
}

TEST(Linear, TwoThreads) {
  cpu_init_threads(2);
  uint32_t seed = 1000;
  for (Epilogue ep : {Epilogue::kNone, Epilogue::kGelu, Epilogue::kResidualAdd, Epilogue::kGeluTanh, Epilogue::kTanh})
    check(197, 768, 192, ep, true, seed += 10);
  cpu_init_threads(1);
}

// The residual epilogue really accumulates into y (a kernel that overwrote y would fail here).
TEST(Linear, ResidualAddKeepsResidual) {
  const float x[2] = {1, 2};       // (1, 2)
  const float w[4] = {1, 0, 0, 1};  // (2, 2): identity
  const float b[2] = {10, 20};
  float y[2] = {100, 200};
  linear_f32(x, w, b, y, 1, 2, 2, Epilogue::kResidualAdd);
  EXPECT_FLOAT_EQ(y[0], 111.f);
  EXPECT_FLOAT_EQ(y[1], 222.f);
}

}  // namespace
}  // namespace edgevit
