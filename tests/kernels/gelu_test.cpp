// gelu_f32 against gelu_ref (erf in double), gelu_tanh_f32 against gelu_tanh_ref (the tanh form in double),
// including both tails, non-finite inputs and known values (PyTorch's for the tanh form).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
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

TEST(GeluTanh, MatchesReference) {
  uint32_t seed = 2000;
  for (float range : {1.f, 4.f, 10.f, 1e4f})
    for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{17}, int64_t{1000}, int64_t{197 * 768}})
      for (int threads : {1, 2}) {
        SCOPED_TRACE("range=" + std::to_string(range) + " n=" + std::to_string(n) + " threads=" +
                     std::to_string(threads));
        auto x = testutil::random_floats(static_cast<size_t>(n), seed += 10, -range, range);
        auto ref = x;
        gelu_tanh_ref(ref.data(), n, threads);
        gelu_tanh_f32(x.data(), n, threads);
        EXPECT_TRUE(testutil::all_finite(x.data(), x.size()));
        EXPECT_LE(testutil::rel_error(x.data(), ref.data(), x.size()), tol::kFp32Kernel);
      }
}

// Element by element over [-20, 20] in steps of 1/64 (odd count: the vector loops' masked tails run too):
// each within kFp32Kernel of gelu_tanh_ref relative to its own magnitude, the left tail included (down to
// x ~ -10.4, where the result underflows; below, both give -0 or flushed denormals).
TEST(GeluTanh, EveryElementAcrossTheRange) {
  std::vector<float> x;
  for (int i = -20 * 64; i <= 20 * 64; ++i) x.push_back(static_cast<float>(i) / 64.f);
  auto ref = x;
  gelu_tanh_ref(ref.data(), static_cast<int64_t>(ref.size()), 1);
  gelu_tanh_f32(x.data(), static_cast<int64_t>(x.size()), 1);
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_TRUE(std::isfinite(x[i])) << i;
    const double err = std::fabs(static_cast<double>(x[i]) - ref[i]);
    if (std::fabs(ref[i]) < 1e-37) {  // underflow region: nothing left to compare but the size
      EXPECT_LE(std::fabs(x[i]), 1e-37) << "x = " << static_cast<float>(i) / 64.f - 20.f;
      continue;
    }
    EXPECT_LE(err, tol::kFp32Kernel * std::fabs(ref[i])) << "x = " << static_cast<float>(i) / 64.f - 20.f;
  }
}

// PyTorch's F.gelu(x, approximate='tanh') = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), evaluated with
// that formula in double (Python's math module; exact to ~1e-12 at these points, where 1 + tanh does not
// cancel): kernel and reference both within kFp32Kernel relative. Not the erf GELU: at x = 1 that is 0.841345.
TEST(GeluTanh, PyTorchValues) {
  const struct {
    float x;
    double torch;
  } cases[] = {{-4.f, -7.0245948192271257e-05}, {-3.f, -0.0036373920817729943}, {-1.f, -0.15880800939172324},
               {-0.5f, -0.15428599017485606},   {0.25f, 0.149675350701685},     {1.f, 0.84119199060827676},
               {2.f, 1.954597694087775},        {3.f, 2.9963626079182268}};
  for (const auto& c : cases) {
    float k = c.x, r = c.x;
    gelu_tanh_f32(&k, 1, 1);
    gelu_tanh_ref(&r, 1, 1);
    EXPECT_LE(std::fabs(k - c.torch), tol::kFp32Kernel * std::fabs(c.torch)) << "kernel, x = " << c.x;
    EXPECT_LE(std::fabs(r - c.torch), tol::kFp32Kernel * std::fabs(c.torch)) << "reference, x = " << c.x;
  }
}

// Non-finite and extreme inputs, in a 16-lane block and alone (the vector body and its masked tail), the same
// as gelu_f32 and the reference where those agree: +inf -> +inf, NaN -> NaN, -inf -> NaN (-inf * 0, as
// PyTorch), large finite x -> x, large negative x -> -0, +-0 -> +-0.
TEST(GeluTanh, NonFiniteAndHugeInputs) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float big = std::numeric_limits<float>::max();
  const std::vector<float> in = {inf, -inf, nan, -nan, big, -big, 1e4f, -1e4f, 64.f, -64.f, 0.f, -0.f};
  for (const size_t block : {size_t{1}, size_t{16}}) {
    for (const float v : in) {
      SCOPED_TRACE("x = " + std::to_string(v) + ", block " + std::to_string(block));
      std::vector<float> x(block, v), ref(block, v), erf_ref(block, v);
      gelu_tanh_f32(x.data(), static_cast<int64_t>(block), 1);
      gelu_tanh_ref(ref.data(), static_cast<int64_t>(block), 1);
      gelu_ref(erf_ref.data(), static_cast<int64_t>(block), 1);
      for (size_t i = 0; i < block; ++i) {
        if (std::isnan(v) || v == -inf) {
          EXPECT_TRUE(std::isnan(x[i]));
          EXPECT_TRUE(std::isnan(ref[i]));
          EXPECT_TRUE(std::isnan(erf_ref[i]));
        } else if (v > 0.f) {
          EXPECT_EQ(x[i], v);
          EXPECT_EQ(ref[i], v);
        } else {  // -0 for every negative input here (e^-2|u| underflows) and for -0; +0 for +0
          EXPECT_EQ(x[i], 0.f);
          EXPECT_EQ(std::signbit(x[i]), std::signbit(v));
          EXPECT_EQ(ref[i], 0.f);
        }
      }
    }
  }
}

// Threads split the array into chunks without changing any element's bits.
TEST(GeluTanh, ThreadsDoNotChangeBits) {
  auto a = testutil::random_floats(197 * 768, 77, -8.f, 8.f);
  auto b = a;
  gelu_tanh_f32(a.data(), static_cast<int64_t>(a.size()), 1);
  gelu_tanh_f32(b.data(), static_cast<int64_t>(b.size()), 2);
  EXPECT_EQ(a, b);
}

}  // namespace
}  // namespace edgevit
