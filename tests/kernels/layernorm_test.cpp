// layernorm_f32 against layernorm_ref (double statistics): ordinary rows, rows with mean 1e4 and small
// variance (where fp32 E[x^2] - E[x]^2 fails), eps honoured, y aliasing x.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernels/cpu/kernels.h"
#include "tests/testutil/testutil.h"

namespace edgevit {
namespace {

const float kNaN = std::numeric_limits<float>::quiet_NaN();

void check(int m, int c, float mean, float spread, float eps, int threads, uint32_t seed) {
  SCOPED_TRACE("m=" + std::to_string(m) + " c=" + std::to_string(c) + " mean=" + std::to_string(mean) +
               " spread=" + std::to_string(spread) + " threads=" + std::to_string(threads));
  auto x = testutil::random_floats(static_cast<size_t>(m) * c, seed, -spread, spread);
  for (auto& v : x) v += mean;
  const auto g = testutil::random_floats(c, seed + 1, 0.5f, 1.5f);
  const auto b = testutil::random_floats(c, seed + 2);
  std::vector<float> ref(x.size(), kNaN), y(x.size(), kNaN);
  layernorm_ref(x.data(), g.data(), b.data(), ref.data(), m, c, eps, threads);
  layernorm_f32(x.data(), g.data(), b.data(), y.data(), m, c, eps, threads);
  EXPECT_TRUE(testutil::all_finite(y.data(), y.size()));
  EXPECT_LE(testutil::rel_error(y.data(), ref.data(), y.size()), tol::kFp32Kernel);
  // In place.
  auto inplace = x;
  layernorm_f32(inplace.data(), g.data(), b.data(), inplace.data(), m, c, eps, threads);
  EXPECT_LE(testutil::rel_error(inplace.data(), ref.data(), y.size()), tol::kFp32Kernel);
}

TEST(LayerNorm, MatchesReference) {
  uint32_t seed = 30;
  for (int c : {1, 3, 17, 192, 384, 768, 1000})
    for (int m : {1, 7, 197})
      for (int threads : {1, 2}) check(m, c, 0.f, 1.f, 1e-6f, threads, seed += 10);
}

TEST(LayerNorm, LargeMeanSmallVariance) {
  uint32_t seed = 300;
  for (int c : {192, 768})
    for (float mean : {1e4f, -1e4f}) check(197, c, mean, 1.f, 1e-6f, 1, seed += 10);
}

// The naive one-pass fp32 formula really does fail on these rows, so the test above has teeth.
TEST(LayerNorm, NaiveOnePassWouldFail) {
  const int c = 768;
  auto x = testutil::random_floats(c, 400, -1.f, 1.f);
  for (auto& v : x) v += 1e4f;
  float s = 0, s2 = 0;
  for (float v : x) {
    s += v;
    s2 += v * v;
  }
  const float mean = s / c;
  const float naive_var = s2 / c - mean * mean;
  double dm = 0, dv = 0;
  for (float v : x) dm += v;
  dm /= c;
  for (float v : x) dv += (v - dm) * (v - dm);
  dv /= c;
  EXPECT_GT(std::fabs(naive_var - dv) / dv, 1e-2) << "naive variance " << naive_var << " vs " << dv;
}

TEST(LayerNorm, EpsHonoured) {
  // A constant row has zero variance: the output is beta exactly... and with a row of +-a, var = a^2, so
  // y = +-a / sqrt(a^2 + eps): eps large enough to matter must show.
  const int c = 4;
  const float x[c] = {1e-3f, -1e-3f, 1e-3f, -1e-3f};
  const float g[c] = {1, 1, 1, 1}, b[c] = {0, 0, 0, 0};
  for (float eps : {1e-6f, 1e-5f, 1e-2f}) {
    float y[c], ref[c];
    layernorm_f32(x, g, b, y, 1, c, eps, 1);
    layernorm_ref(x, g, b, ref, 1, c, eps, 1);
    const double expect = 1e-3 / std::sqrt(1e-6 + static_cast<double>(eps));
    EXPECT_NEAR(y[0], expect, 1e-5 * expect) << eps;
    EXPECT_NEAR(y[1], -expect, 1e-5 * expect) << eps;
    EXPECT_NEAR(ref[0], expect, 1e-6 * expect) << eps;
  }
  const float flat[c] = {5, 5, 5, 5};
  const float beta[c] = {1, 2, 3, 4};
  float y[c];
  layernorm_f32(flat, g, beta, y, 1, c, 1e-6f, 1);
  for (int i = 0; i < c; ++i) EXPECT_EQ(y[i], beta[i]);
}

}  // namespace
}  // namespace edgevit
