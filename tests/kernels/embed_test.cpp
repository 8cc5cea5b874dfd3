// Patch embedding helpers and pooling against their references: im2col_patches, assemble_tokens (both
// no_embed_class modes, with and without cls / reg tokens), pool (token and average with a prefix).
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "kernels/cpu/kernels.h"
#include "tests/testutil/testutil.h"

namespace edgevit {
namespace {

const float kNaN = std::numeric_limits<float>::quiet_NaN();

TEST(Im2col, MatchesReference) {
  uint32_t seed = 50;
  // {batch, chans, img_h, img_w, patch}: square and non-square (wider and taller) inputs
  const int cases[][5] = {{1, 3, 224, 224, 16}, {2, 3, 32, 32, 8}, {1, 1, 4, 4, 2}, {3, 2, 30, 30, 10},
                          {1, 3, 224, 224, 14}, {2, 3, 48, 32, 8}, {1, 2, 16, 64, 16}, {2, 1, 6, 10, 2}};
  for (const auto& c : cases) {
    const int b = c[0], ch = c[1], h = c[2], w = c[3], p = c[4];
    SCOPED_TRACE("b=" + std::to_string(b) + " c=" + std::to_string(ch) + " img=" + std::to_string(h) + "x" +
                 std::to_string(w) + " p=" + std::to_string(p));
    const auto x = testutil::random_floats(static_cast<size_t>(b) * ch * h * w, seed += 10);
    const size_t n = static_cast<size_t>(b) * (h / p) * (w / p) * ch * p * p;
    std::vector<float> ref(n, kNaN), out(n, kNaN);
    im2col_patches_ref(x.data(), ref.data(), b, ch, h, w, p);
    im2col_patches_f32(x.data(), out.data(), b, ch, h, w, p);
    ASSERT_TRUE(testutil::all_finite(ref.data(), n));
    ASSERT_TRUE(testutil::all_finite(out.data(), n));
    EXPECT_EQ(testutil::max_abs_error(out.data(), ref.data(), n), 0.0);
  }
}

// The reference against the definition on a 1x1x4x4 image with 2x2 patches.
TEST(Im2col, ReferenceByHand) {
  float img[16];
  for (int i = 0; i < 16; ++i) img[i] = static_cast<float>(i);  // img[y][x] = 4y + x
  float cols[16];
  im2col_patches_ref(img, cols, 1, 1, 4, 4, 2);
  const float expect[16] = {0, 1, 4, 5, 2, 3, 6, 7, 8, 9, 12, 13, 10, 11, 14, 15};
  for (int i = 0; i < 16; ++i) EXPECT_EQ(cols[i], expect[i]) << i;
}

// Non-square: a 1x1x2x6 image (2 rows, 6 columns) with 2x2 patches is a 1x3 grid, left to right.
TEST(Im2col, ReferenceByHandNonSquare) {
  float img[12];
  for (int i = 0; i < 12; ++i) img[i] = static_cast<float>(i);  // img[y][x] = 6y + x
  float cols[12];
  im2col_patches_ref(img, cols, 1, 1, 2, 6, 2);
  const float expect[12] = {0, 1, 6, 7, 2, 3, 8, 9, 4, 5, 10, 11};
  for (int i = 0; i < 12; ++i) EXPECT_EQ(cols[i], expect[i]) << i;
  // and its transpose (6 rows, 2 columns): a 3x1 grid, top to bottom
  im2col_patches_ref(img, cols, 1, 1, 6, 2, 2);
  const float expect_tall[12] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  for (int i = 0; i < 12; ++i) EXPECT_EQ(cols[i], expect_tall[i]) << i;
}

TEST(AssembleTokens, AllModes) {
  uint32_t seed = 60;
  const int e = 24, patches = 9;
  for (int batch : {1, 3})
    for (bool with_cls : {true, false})
      for (int reg : {0, 4})
        for (bool no_embed_class : {false, true}) {
          SCOPED_TRACE("batch=" + std::to_string(batch) + " cls=" + std::to_string(with_cls) + " reg=" +
                       std::to_string(reg) + " no_embed_class=" + std::to_string(no_embed_class));
          const int prefix = (with_cls ? 1 : 0) + reg;
          const int tokens = prefix + patches;
          const auto pt = testutil::random_floats(static_cast<size_t>(batch) * patches * e, seed += 10);
          const auto cls = testutil::random_floats(e, seed + 1);
          const auto regs = testutil::random_floats(static_cast<size_t>(reg > 0 ? reg : 1) * e, seed + 2);
          const auto pos = testutil::random_floats(static_cast<size_t>(no_embed_class ? patches : tokens) * e,
                                                   seed + 3);
          const size_t n = static_cast<size_t>(batch) * tokens * e;
          std::vector<float> ref(n, kNaN), out(n, kNaN);
          const float* cls_p = with_cls ? cls.data() : nullptr;
          const float* reg_p = reg > 0 ? regs.data() : nullptr;
          assemble_tokens_ref(pt.data(), cls_p, reg_p, reg, pos.data(), no_embed_class, ref.data(), batch,
                              patches, e);
          assemble_tokens_f32(pt.data(), cls_p, reg_p, reg, pos.data(), no_embed_class, out.data(), batch,
                              patches, e);
          ASSERT_TRUE(testutil::all_finite(ref.data(), n));
          ASSERT_TRUE(testutil::all_finite(out.data(), n));
          EXPECT_LE(testutil::rel_error(out.data(), ref.data(), n), tol::kFp32Kernel);
          // Spot-check the layout against the definition (timm _pos_embed).
          if (with_cls) {
            EXPECT_FLOAT_EQ(out[0], cls[0] + (no_embed_class ? 0.f : pos[0]));
          }
          const size_t first_patch = static_cast<size_t>(prefix) * e;
          EXPECT_FLOAT_EQ(out[first_patch], pt[0] + pos[no_embed_class ? 0 : first_patch]);
        }
}

TEST(Pool, TokenAndAverage) {
  uint32_t seed = 70;
  for (int batch : {1, 2})
    for (int tokens : {1, 197, 201})
      for (int prefix : {0, 1, 5}) {
        if (prefix >= tokens) continue;
        for (bool avg : {false, true}) {
          SCOPED_TRACE("batch=" + std::to_string(batch) + " tokens=" + std::to_string(tokens) + " prefix=" +
                       std::to_string(prefix) + " avg=" + std::to_string(avg));
          const int e = 192;
          const auto x = testutil::random_floats(static_cast<size_t>(batch) * tokens * e, seed += 10);
          const size_t n = static_cast<size_t>(batch) * e;
          std::vector<float> ref(n, kNaN), out(n, kNaN);
          pool_ref(x.data(), ref.data(), batch, tokens, e, avg, prefix);
          pool_f32(x.data(), out.data(), batch, tokens, e, avg, prefix);
          ASSERT_TRUE(testutil::all_finite(out.data(), n));
          EXPECT_LE(testutil::rel_error(out.data(), ref.data(), n), tol::kFp32Kernel);
          if (!avg) {
            EXPECT_EQ(out[0], x[0]);
          }
        }
      }
}

TEST(Pool, ReferenceByHand) {
  const float x[6] = {1, 2, 3, 4, 5, 6};  // (1, 3, 2)
  float out[2];
  pool_ref(x, out, 1, 3, 2, true, 1);
  EXPECT_FLOAT_EQ(out[0], 4.f);
  EXPECT_FLOAT_EQ(out[1], 5.f);
  pool_ref(x, out, 1, 3, 2, false, 1);
  EXPECT_FLOAT_EQ(out[0], 1.f);
}

}  // namespace
}  // namespace edgevit
