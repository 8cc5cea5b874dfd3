// count_nonfinite_f32 / first_nonfinite_f32 against count_nonfinite_ref (std::isfinite), over every class
// of float: zeros, subnormals, the largest finite values, both infinities, quiet and signalling NaNs with
// payloads, at every position of a vector-width tail.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cpu/kernels.h"

namespace edgevit {
namespace {

float from_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}

TEST(Finite, EveryClassOfFloatAtEveryTailPosition) {
  const float special[] = {0.f, -0.f, std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::max(),
                           -std::numeric_limits<float>::max(), std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                           std::numeric_limits<float>::signaling_NaN(), from_bits(0xffc00001u), from_bits(0x7f800001u),
                           from_bits(0x7f7fffffu)};
  for (int n : {1, 7, 16, 33}) {
    for (int pos = 0; pos < n; ++pos) {
      for (float s : special) {
        std::vector<float> x(static_cast<size_t>(n), 1.5f);
        x[static_cast<size_t>(pos)] = s;
        const int64_t want = count_nonfinite_ref(x.data(), n);
        ASSERT_EQ(count_nonfinite_f32(x.data(), n), want) << "n " << n << " pos " << pos << " value " << s;
        ASSERT_EQ(first_nonfinite_f32(x.data(), n), want ? pos : -1);
      }
    }
  }
}

TEST(Finite, CountsEveryOne) {
  std::vector<float> x(1000, 2.f);
  for (size_t i = 0; i < x.size(); i += 7) x[i] = std::numeric_limits<float>::infinity();
  EXPECT_EQ(count_nonfinite_f32(x.data(), 1000), count_nonfinite_ref(x.data(), 1000));
  EXPECT_EQ(count_nonfinite_ref(x.data(), 1000), 143);
  EXPECT_EQ(first_nonfinite_f32(x.data(), 1000), 0);
  EXPECT_EQ(count_nonfinite_f32(x.data(), 0), 0);
  EXPECT_EQ(first_nonfinite_f32(x.data(), 0), -1);
}

}  // namespace
}  // namespace edgevit
