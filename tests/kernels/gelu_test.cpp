// gelu_f32 against gelu_ref (erf in double), including both tails and known values.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/cpu/kernels.h"
#include "tests/testutil/testutil.h"

namespace edgevit {
namespace {

TEST(Gelu, MatchesReference) {
  uint32_t seed = 20;
  for (float range : {1.f, 4.f, 10.f, 1e4f})
    for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{1000}, int64_t{197 * 768}})
      for (int threads : {1, 2}) {
        SCOPED_TRACE("range=" + std::to_string(range) + " n=" + std::to_string(n) + " threads=" +
                     std::to_string(threads));
        auto x = testutil::random_floats(static_cast<size_t>(n), seed += 10, -range, range);
        auto ref = x;
        gelu_ref(ref.data(), n, threads);
        gelu_f32(x.data(), n, threads);
        EXPECT_TRUE(testutil::all_finite(x.data(), x.size()));
        EXPECT_LE(testutil::rel_error(x.data(), ref.data(), x.size()), tol::kFp32Kernel);
      }
}

// Element-wise: exact GELU (not the tanh form) at known points, and the left tail keeps relative
// precision (1 + erf(x/sqrt2) is not formed by cancellation): each element within kFp32Kernel relative.
TEST(Gelu, KnownValuesAndTails) {
  std::vector<float> x = {0.f, 1.f, -1.f, 3.f, -3.f, -8.f, 20.f, -20.f, -1e4f, 1e4f};
  auto ref = x;
  gelu_ref(ref.data(), static_cast<int64_t>(ref.size()), 1);
  gelu_f32(x.data(), static_cast<int64_t>(x.size()), 1);
  EXPECT_NEAR(x[1], 0.841344746f, 1e-7f);   // 0.5 (1 + erf(1/sqrt2)); the tanh form gives 0.841192
  EXPECT_NEAR(x[2], -0.158655254f, 1e-7f);
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_TRUE(std::isfinite(x[i])) << i;
    const double err = std::fabs(static_cast<double>(x[i]) - ref[i]);
    EXPECT_LE(err, tol::kFp32Kernel * std::fabs(ref[i])) << "element " << i;
  }
}

}  // namespace
}  // namespace edgevit
