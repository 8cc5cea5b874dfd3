// The INT8 attention's CPU side: round_to_fp16, the per-row quantiser, mha_i8_ref against float64 attention
// where the int8 arithmetic is exact, the scale-max offset's semantics, and mha_i8_supports' reasons (what the
// planner prints when it falls back to the fp16 fused kernel). The CUDA kernel is checked against
// mha_i8_ref in mha_i8_cuda_test.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "base/tolerances.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/mha_i8_ref.h"
#include "kernels/cuda/mha_i8_variants.h"

namespace edgevit {
namespace {

TEST(RoundToFp16, MatchesBinary16) {
  EXPECT_EQ(round_to_fp16(1.f), 1.f);
  EXPECT_EQ(round_to_fp16(65504.f), 65504.f);
  EXPECT_EQ(round_to_fp16(65519.f), 65504.f);
  EXPECT_TRUE(std::isinf(round_to_fp16(65520.f)));
  EXPECT_EQ(round_to_fp16(1.f + std::ldexp(1.f, -11)), 1.f);                                      // tie: to even
  EXPECT_EQ(round_to_fp16(1.f + 3 * std::ldexp(1.f, -11)), 1.f + std::ldexp(1.f, -9));            // tie: to even
  EXPECT_EQ(round_to_fp16(1.f + std::ldexp(1.f, -11) + std::ldexp(1.f, -20)), 1.f + std::ldexp(1.f, -10));
  EXPECT_EQ(round_to_fp16(std::ldexp(1.f, -24)), std::ldexp(1.f, -24));                           // smallest subnormal
  EXPECT_EQ(round_to_fp16(std::ldexp(1.f, -25)), 0.f);                                            // tie: to even (0)
  EXPECT_EQ(round_to_fp16(std::ldexp(3.f, -25)), std::ldexp(1.f, -23));
  EXPECT_EQ(round_to_fp16(-3.14159f), -3.140625f);
}

TEST(QuantizeI8Row, SymmetricAmaxOver127) {
  const float x[4] = {2.54f, -1.27f, 0.01f, -0.03f};
  int8_t q[4];
  const float s = quantize_i8_row(x, 4, q);
  EXPECT_FLOAT_EQ(s, 0.02f);
  EXPECT_EQ(q[0], 127);
  EXPECT_EQ(q[1], -64);  // -63.5 rounds away from zero
  EXPECT_EQ(q[2], 1);    // 0.5 rounds away from zero
  EXPECT_EQ(q[3], -2);
  const float zeros[3] = {0.f, 0.f, 0.f};
  EXPECT_EQ(quantize_i8_row(zeros, 3, q), 0.f);
  EXPECT_EQ(q[0], 0);
}

// Small integers as int8 with unit scales: the logits are exact, so mha_i8_ref differs from float64 attention
// only by its fp16 rounding of p.
TEST(MhaI8Ref, MatchesFloat64AttentionOnExactInputs) {
  AttnParams p;
  p.batch = 2; p.heads = 3; p.seq_q = 11; p.seq_kv = 37; p.head_dim = 32; p.scale = 0.125f;
  p.q = p.o = AttnStrides{11 * 3 * 32, 3 * 32, 32};
  p.k = p.v = AttnStrides{37 * 3 * 32, 3 * 32, 32};
  std::mt19937 gen(7);
  std::uniform_int_distribution<int> ints(-6, 6);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<int8_t> q8(2 * 11 * 3 * 32), k8(2 * 37 * 3 * 32);
  std::vector<float> qf(q8.size()), kf(k8.size()), v(k8.size());
  for (size_t i = 0; i < q8.size(); ++i) qf[i] = q8[i] = static_cast<int8_t>(ints(gen));
  for (size_t i = 0; i < k8.size(); ++i) kf[i] = k8[i] = static_cast<int8_t>(ints(gen));
  for (float& e : v) e = normal(gen);
  const float one = 1.f;
  AttnI8Scales sc;
  sc.q = sc.k = &one;
  std::vector<float> out(q8.size()), ref(q8.size());
  mha_i8_ref(p, q8.data(), k8.data(), v.data(), sc, MhaI8Softmax::kRowMax, out.data());
  mha_ref(p, qf.data(), kf.data(), v.data(), ref.data(), 1);
  double num = 0, den = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    num += (out[i] - ref[i]) * (out[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  EXPECT_LE(std::sqrt(num / den), tol::kInt8AttnVsRef);
  // Scale-max: the fixed offset 127^2 * scale = 2016 sits far above these logits (|x| <= 36 * 32 / 8 = 144):
  // every p = 2^(x - offset) underflows fp16 and the rows are zeros.
  mha_i8_ref(p, q8.data(), k8.data(), v.data(), sc, MhaI8Softmax::kScaleMax, out.data());
  for (float e : out) ASSERT_EQ(e, 0.f);
  // With scales that put the offset just above the largest logit, scale-max equals row max within rounding.
  const float sq = 1.f / 127.f, sk = 1.f / 127.f;  // offset: 0.125 log2 e natural-log units above 0
  AttnI8Scales small;
  small.q = &sq;
  small.k = &sk;
  std::vector<float> rowmax(q8.size());
  mha_i8_ref(p, q8.data(), k8.data(), v.data(), small, MhaI8Softmax::kRowMax, rowmax.data());
  mha_i8_ref(p, q8.data(), k8.data(), v.data(), small, MhaI8Softmax::kScaleMax, out.data());
  num = den = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    num += (out[i] - rowmax[i]) * (out[i] - rowmax[i]);
    den += rowmax[i] * rowmax[i];
  }
  EXPECT_LE(std::sqrt(num / den), tol::kInt8AttnVsRef);
}

TEST(MhaI8Supports, ChoosesARowOrSaysWhyNot) {
  const MhaI8Support orin = mha_i8_supports({87, 166912, 64, MhaI8Softmax::kRowMax, true});
  ASSERT_TRUE(orin.ok) << orin.reason;
  EXPECT_EQ(orin.variant->head_dim, 64);
  EXPECT_NE(orin.reason.find(orin.variant->name), std::string::npos);
  for (int d : {32, 128}) {
    const MhaI8Support s = mha_i8_supports({87, 166912, d, MhaI8Softmax::kScaleMax, false});
    ASSERT_TRUE(s.ok) << s.reason;
    EXPECT_EQ(s.variant->softmax, MhaI8Softmax::kScaleMax);
  }
  const MhaI8Support d80 = mha_i8_supports({87, 166912, 80, MhaI8Softmax::kRowMax, false});
  EXPECT_FALSE(d80.ok);
  EXPECT_NE(d80.reason.find("no row for head_dim 80"), std::string::npos) << d80.reason;
  const MhaI8Support turing = mha_i8_supports({75, 65536, 64, MhaI8Softmax::kRowMax, false});
  EXPECT_FALSE(turing.ok);
  EXPECT_NE(turing.reason.find("sm 75 < 80"), std::string::npos) << turing.reason;
  const MhaI8Support per_key = mha_i8_supports({87, 166912, 64, MhaI8Softmax::kScaleMax, true});
  EXPECT_FALSE(per_key.ok);
  EXPECT_NE(per_key.reason.find("per-key K scales"), std::string::npos) << per_key.reason;
  // Without the shared-memory opt-in (48 KB), a row that fits is still found or the reason names the size.
  const MhaI8Support small = mha_i8_supports({87, 0, 128, MhaI8Softmax::kRowMax, false});
  if (small.ok) {
    EXPECT_LE(small.variant->smem_bytes, 48 * 1024);
  } else {
    EXPECT_NE(small.reason.find("shared memory"), std::string::npos) << small.reason;
  }
  for (const MhaI8Variant& v : kMhaI8Variants)
    EXPECT_LE(v.smem_bytes, 163 * 1024) << v.name << " exceeds SM87's per-block shared memory";
}

// The int8-output rows (mha_i8_fused_i8out, the runtime's INT8 attention): the row-max rows with per-key K scales;
// a request for the scale-max softmax or one K scale per (batch, head) says why not, and so does a head dim
// without a row.
TEST(MhaI8Supports, Int8OutputRowsAreTheRowMaxRowsWithPerKeyScales) {
  for (int d : {32, 64, 128}) {
    MhaI8Request r{87, 166912, d, MhaI8Softmax::kRowMax, true};
    r.int8_output = true;
    const MhaI8Support s = mha_i8_supports(r);
    ASSERT_TRUE(s.ok) << s.reason;
    EXPECT_TRUE(mha_i8_row_has_i8out(*s.variant)) << s.variant->name;
    EXPECT_EQ(s.variant->head_dim, d);
    EXPECT_NE(s.reason.find("int8 output"), std::string::npos) << s.reason;
  }
  MhaI8Request smax{87, 166912, 64, MhaI8Softmax::kScaleMax, true};
  smax.int8_output = true;
  EXPECT_FALSE(mha_i8_supports(smax).ok);
  MhaI8Request shared_k{87, 166912, 64, MhaI8Softmax::kRowMax, false};
  shared_k.int8_output = true;
  const MhaI8Support sk = mha_i8_supports(shared_k);
  EXPECT_FALSE(sk.ok);
  EXPECT_NE(sk.reason.find("per-key K scales only"), std::string::npos) << sk.reason;
  MhaI8Request d80{87, 166912, 80, MhaI8Softmax::kRowMax, true};
  d80.int8_output = true;
  EXPECT_NE(mha_i8_supports(d80).reason.find("no row for head_dim 80"), std::string::npos);
  for (const MhaI8Variant& v : kMhaI8Variants)
    EXPECT_EQ(mha_i8_row_has_i8out(v), v.softmax == MhaI8Softmax::kRowMax) << v.name;
}

}  // namespace
}  // namespace edgevit
