// The W8A8 GEMM's CPU reference (kernels/cpu/gemm_i8_ref.h) against a naive triple loop in int64 and
// float64: the int32 accumulation exactly (including the extremes, 127 x 127 and -128 x -128 over K = 3072);
// each epilogue within fp32 rounding of the float64 value (a few fp32 operations, each rounded once:
// 1e-6 relative, plus 1e-6 absolute near 0); INT8 rounding to nearest even and
// saturation to [-127, 127] (fc1's unsigned output: [0, 255]) by hand-picked values; uint8 x int8
// accumulation; the GELU shift folded into the bias cancelling against the float64 product.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <algorithm>
#include <random>
#include <vector>

#include "kernels/cpu/gemm_i8_ref.h"
#include "kernels/cpu/quantize_i8_ref.h"

namespace edgevit {
namespace {

constexpr double kRel = 1e-6;  // a handful of fp32 roundings (2^-24 each) against float64
constexpr double kAbs = 1e-6;  // slack for values near 0 (bias cancelling the product), before / out_scale

std::vector<int8_t> random_i8(size_t n, std::mt19937* rng) {
  std::uniform_int_distribution<int> q(-127, 127);
  std::vector<int8_t> v(n);
  for (auto& x : v) x = static_cast<int8_t>(q(*rng));
  return v;
}

TEST(GemmI8Ref, AccumulationEqualsInt64TripleLoop) {
  std::mt19937 rng(1);
  for (int64_t m : {1, 5, 17})
    for (int64_t n : {8, 24})
      for (int64_t k : {32, 96, 3072}) {
        const auto x = random_i8(m * k, &rng), w = random_i8(n * k, &rng);
        std::vector<int32_t> acc(m * n);
        gemm_i8_accumulate_ref(m, n, k, x.data(), w.data(), acc.data());
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            int64_t s = 0;
            for (int64_t p = 0; p < k; ++p) s += int64_t{x[i * k + p]} * int64_t{w[j * k + p]};
            ASSERT_EQ(acc[i * n + j], s) << "m " << i << " n " << j << " K " << k;
          }
      }
}

TEST(GemmI8Ref, AccumulationExtremes) {
  const int64_t k = 3072;
  for (int8_t v : {int8_t{127}, int8_t{-128}, int8_t{-127}}) {
    const std::vector<int8_t> x(k, v), w(k, v);
    int32_t acc = 0;
    gemm_i8_accumulate_ref(1, 1, k, x.data(), w.data(), &acc);
    EXPECT_EQ(acc, int64_t{v} * v * k);
  }
  const std::vector<int8_t> x(k, 127), w(k, -128);
  int32_t acc = 0;
  gemm_i8_accumulate_ref(1, 1, k, x.data(), w.data(), &acc);
  EXPECT_EQ(acc, int64_t{127} * -128 * k);
}

double gelu64(double v) { return 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))); }

TEST(GemmI8Ref, EpiloguesMatchFloat64) {
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> u(0.f, 1.f);
  const int64_t m = 9, n = 16, k = 768;
  const auto x = random_i8(m * k, &rng), w = random_i8(n * k, &rng);
  std::vector<float> sx(m), sw(n), bias(n), residual(m * n);
  for (auto& v : sx) v = 0.002f + 0.03f * u(rng);
  for (auto& v : sw) v = 0.0005f + 0.004f * u(rng);
  for (auto& v : bias) v = 2.f * u(rng) - 1.f;
  for (auto& v : residual) v = 8.f * u(rng) - 4.f;
  std::vector<int32_t> acc(m * n);
  std::vector<float> y(m * n);
  std::vector<int8_t> q(m * n);
  for (int ei = 0; ei < kGemmI8EpilogueCount; ++ei)
    for (bool per_token : {false, true}) {
      const auto e = static_cast<GemmI8Epilogue>(ei);
      if (gemm_i8_epilogue_is_qk_head(e)) continue;  // QkHeadEpilogue below
      const GemmI8RefArgs a{m, n, k, x.data(), w.data(), sx.data(), per_token, sw.data(), bias.data(), e, 0.05f};
      gemm_i8_ref(a, acc.data(), residual.data(), y.data(), q.data());
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          int64_t s = 0;
          for (int64_t p = 0; p < k; ++p) s += int64_t{x[i * k + p]} * int64_t{w[j * k + p]};
          double v = static_cast<double>(s) * sx[per_token ? i : 0] * sw[j] + bias[j];
          if (gemm_i8_epilogue_has_gelu(e)) v = gelu64(v);
          if (gemm_i8_epilogue_has_residual(e)) v += residual[i * n + j];
          if (gemm_i8_epilogue_is_u8(e)) v += kGemmI8GeluShift;
          if (gemm_i8_epilogue_is_i8(e)) v /= 0.05;
          const int64_t o = i * n + j;
          ASSERT_NEAR(y[o], v, kRel * std::fabs(v) + kAbs / (gemm_i8_epilogue_is_i8(e) ? 0.05 : 1.0)) << gemm_i8_epilogue_name(e) << " " << i << "," << j;
          if (gemm_i8_epilogue_is_i8(e)) {
            const bool u8 = gemm_i8_epilogue_is_u8(e);
            const double r = std::max(u8 ? 0.0 : -127.0, std::min(u8 ? 255.0 : 127.0, std::nearbyint(v)));
            const double got = u8 ? static_cast<double>(static_cast<uint8_t>(q[o])) : static_cast<double>(q[o]);
            ASSERT_LE(std::fabs(got - r), std::fabs(v - std::floor(v) - 0.5) < 1e-4 ? 1.0 : 0.0);
          }
        }
    }
}

// kQkHeadI8 (qkv for the INT8 attention): y_f32 holds every column's dequantized value (float64 within fp32
// rounding); each Q/K head's codes are rne(v * (127 / amax)) of its own values with scale amax / 127, so the
// largest |v| of a head is +-127 and no code leaves [-127, 127]; a head whose values are all 0 gets scale 0 and
// codes 0; the V columns are not quantized. Heads of 32 and 64 columns, per-tensor and per-token sx.
TEST(GemmI8Ref, QkHeadEpilogueQuantizesEachHeadWithItsAmax) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(0.f, 1.f);
  for (int64_t d : {32, 64})
    for (bool per_token : {false, true}) {
      const int64_t m = 7, e = 2 * d, n = 3 * e, k = 256, qk = 2 * e, heads = qk / d;
      const auto x = random_i8(m * k, &rng), w = random_i8(n * k, &rng);
      std::vector<float> sx(m), sw(n), bias(n);
      for (auto& v : sx) v = 0.002f + 0.03f * u(rng);
      for (auto& v : sw) v = 0.0005f + 0.004f * u(rng);
      for (auto& v : bias) v = 2.f * u(rng) - 1.f;
      for (int64_t j = d; j < 2 * d; ++j) sw[j] = bias[j] = 0.f;  // head 1 (Q's second head): all zero
      std::vector<int32_t> acc(m * n);
      std::vector<float> y(m * n), scales(m * heads, -1.f);
      std::vector<int8_t> q(m * qk, 99);
      GemmI8RefArgs a{m, n, k, x.data(), w.data(), sx.data(), per_token, sw.data(), bias.data(),
                      GemmI8Epilogue::kQkHeadI8};
      a.qk_cols = qk;
      a.head_dim = d;
      a.y_qk_scales = scales.data();
      gemm_i8_ref(a, acc.data(), nullptr, y.data(), q.data());
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          int64_t s = 0;
          for (int64_t p = 0; p < k; ++p) s += int64_t{x[i * k + p]} * int64_t{w[j * k + p]};
          const double v = static_cast<double>(s) * sx[per_token ? i : 0] * sw[j] + bias[j];
          ASSERT_NEAR(y[i * n + j], v, kRel * std::fabs(v) + kAbs) << "d " << d << " " << i << "," << j;
        }
        for (int64_t h = 0; h < heads; ++h) {
          const float* v = y.data() + i * n + h * d;
          float amax = 0.f;
          for (int64_t c = 0; c < d; ++c) amax = std::max(amax, std::fabs(v[c]));
          ASSERT_EQ(scales[i * heads + h], amax / 127.f) << "d " << d << " row " << i << " head " << h;
          int top = 0;
          for (int64_t c = 0; c < d; ++c) {
            const int8_t got = q[i * qk + h * d + c];
            const int8_t want = amax > 0.f ? gemm_i8_quantize_ref(v[c] * (127.f / amax)) : 0;
            ASSERT_EQ(got, want) << "d " << d << " row " << i << " head " << h << " col " << c;
            ASSERT_LE(std::abs(int{got}), 127);
            top = std::max(top, std::abs(int{got}));
          }
          EXPECT_EQ(top, h == 1 ? 0 : 127) << "the head's largest |v| takes the largest code";
        }
      }
    }
}

// The table GELU (gemm_i8_ref.h) against the exact erf GELU in float64 over |v| <= 12 (every float32 there:
// gemm_i8_slow_test): within 1e-6 absolute; NaN stays NaN, +Inf is +Inf, large negative inputs give a tiny
// negative (v Phi(-5.5), the last row's value).
TEST(GemmI8Ref, TableGeluWithinBoundOfExactErfGelu) {
  constexpr double kGeluAbs = 1e-6;  // the cubics' fit error (<= 3e-7 in Phi) times |v|, plus the roundings
  double worst = 0.0;
  for (int i = -1200000; i <= 1200000; ++i) {
    const float v = static_cast<float>(i) * 1e-5f;
    const double err = std::fabs(gemm_i8_gelu_ref(v) - gelu64(v));
    worst = std::max(worst, err);
    ASSERT_LE(err, kGeluAbs) << "v " << v;
  }
  EXPECT_GT(worst, 1e-7);  // the bound is near the error, not loose by orders of magnitude
  EXPECT_TRUE(std::isnan(gemm_i8_gelu_ref(NAN)));
  EXPECT_EQ(gemm_i8_gelu_ref(INFINITY), INFINITY);
  EXPECT_LE(gemm_i8_gelu_ref(-30.f), 0.f);
  EXPECT_GT(gemm_i8_gelu_ref(-30.f), -1e-6f);
  EXPECT_EQ(gemm_i8_gelu_ref(0.f), 0.f);
}

TEST(GemmI8Ref, QuantizeRoundsToNearestEvenAndSaturates) {
  EXPECT_EQ(gemm_i8_quantize_ref(0.5f), 0);
  EXPECT_EQ(gemm_i8_quantize_ref(1.5f), 2);
  EXPECT_EQ(gemm_i8_quantize_ref(2.5f), 2);
  EXPECT_EQ(gemm_i8_quantize_ref(-2.5f), -2);
  EXPECT_EQ(gemm_i8_quantize_ref(-0.49f), 0);
  EXPECT_EQ(gemm_i8_quantize_ref(126.5f), 126);
  EXPECT_EQ(gemm_i8_quantize_ref(127.49f), 127);
  EXPECT_EQ(gemm_i8_quantize_ref(200.f), 127);
  EXPECT_EQ(gemm_i8_quantize_ref(-127.5f), -127);
  EXPECT_EQ(gemm_i8_quantize_ref(-1e30f), -127);
  EXPECT_EQ(gemm_i8_quantize_ref(INFINITY), 127);
  EXPECT_EQ(gemm_i8_quantize_ref(NAN), 0);
}

TEST(GemmI8Ref, QuantizeU8RoundsToNearestEvenAndSaturatesAtZeroAnd255) {
  EXPECT_EQ(gemm_i8_quantize_u8_ref(0.5f), 0);
  EXPECT_EQ(gemm_i8_quantize_u8_ref(1.5f), 2);
  EXPECT_EQ(gemm_i8_quantize_u8_ref(2.5f), 2);
  EXPECT_EQ(gemm_i8_quantize_u8_ref(-0.49f), 0);
  EXPECT_EQ(gemm_i8_quantize_u8_ref(-3.f), 0);
  EXPECT_EQ(gemm_i8_quantize_u8_ref(127.6f), 128);
  EXPECT_EQ(gemm_i8_quantize_u8_ref(254.5f), 254);
  EXPECT_EQ(gemm_i8_quantize_u8_ref(255.49f), 255);
  EXPECT_EQ(gemm_i8_quantize_u8_ref(1e30f), 255);
  EXPECT_EQ(gemm_i8_quantize_u8_ref(-INFINITY), 0);
  EXPECT_EQ(gemm_i8_quantize_u8_ref(NAN), 0);
}

// The shift lies just above GELU's minimum (-0.16997 exact, the table's fp32 GELU within 1e-6 of it): u > 0.
TEST(GemmI8Ref, ShiftedGeluIsPositiveEverywhere) {
  float lowest = 1.f;
  for (int i = -400000; i <= 100000; ++i) lowest = std::min(lowest, gemm_i8_gelu_ref(static_cast<float>(i) * 1e-5f));
  EXPECT_LT(lowest, -0.1699f);
  EXPECT_GT(lowest + kGemmI8GeluShift, 0.f);
  EXPECT_LT(lowest + kGemmI8GeluShift, 1e-4f);  // and by little: no code wasted below
}

TEST(GemmI8Ref, U8AccumulationEqualsInt64TripleLoopAndExtremes) {
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> u(0, 255);
  for (int64_t k : {32, 3072}) {
    const int64_t m = 5, n = 16;
    std::vector<uint8_t> x(m * k);
    for (auto& v : x) v = static_cast<uint8_t>(u(rng));
    const auto w = random_i8(n * k, &rng);
    std::vector<int32_t> acc(m * n);
    gemm_u8i8_accumulate_ref(m, n, k, x.data(), w.data(), acc.data());
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        int64_t s = 0;
        for (int64_t p = 0; p < k; ++p) s += int64_t{x[i * k + p]} * int64_t{w[j * k + p]};
        ASSERT_EQ(acc[i * n + j], s) << i << "," << j << " K " << k;
      }
  }
  const int64_t k = 65536;  // the documented limit: 255 * 128 * 2^16 = 2^31 - 2^23 fits int32
  const std::vector<uint8_t> x(k, 255);
  for (int8_t v : {int8_t{127}, int8_t{-128}}) {
    const std::vector<int8_t> w(k, v);
    int32_t acc = 0;
    gemm_u8i8_accumulate_ref(1, 1, k, x.data(), w.data(), &acc);
    EXPECT_EQ(acc, int64_t{255} * v * k);
  }
}

// The shift folded into the bias (gemm_i8_fold_shift_into_bias) cancels exactly: a GEMM on the uint8 codes of
// u = x + shift with the folded bias gives sum_k (q sx - shift) wq sw + bias, the product of the unshifted
// dequantized input, within fp32 rounding of the float64 value, per tensor and per token.
TEST(GemmI8Ref, FoldedShiftGivesTheUnshiftedInputsProduct) {
  std::mt19937 rng(4);
  std::uniform_int_distribution<int> code(0, 255);
  std::uniform_real_distribution<float> u(0.f, 1.f);
  const int64_t m = 7, n = 24, k = 3072;
  std::vector<uint8_t> x(m * k);
  for (auto& v : x) v = static_cast<uint8_t>(code(rng));
  const auto w = random_i8(n * k, &rng);
  std::vector<float> sx(m), sw(n), bias(n), folded(n);
  for (auto& v : sx) v = 0.002f + 0.01f * u(rng);
  for (auto& v : sw) v = 0.0005f + 0.004f * u(rng);
  for (auto& v : bias) v = 2.f * u(rng) - 1.f;
  gemm_i8_fold_shift_into_bias(n, k, w.data(), sw.data(), bias.data(), kGemmI8GeluShift, folded.data());
  std::vector<int32_t> acc(m * n);
  std::vector<float> y(m * n);
  for (bool per_token : {false, true}) {
    GemmI8RefArgs a{m, n, k, reinterpret_cast<const int8_t*>(x.data()), w.data(), sx.data(), per_token, sw.data(),
                    folded.data(), GemmI8Epilogue::kF32, 1.f};
    a.x_u8 = true;
    gemm_i8_ref(a, acc.data(), nullptr, y.data(), nullptr);
    double worst = 0;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        const double s = sx[per_token ? i : 0];
        double want = bias[j], mag = std::fabs(bias[j]);
        for (int64_t p = 0; p < k; ++p) {
          const double t = (x[i * k + p] * s - static_cast<double>(kGemmI8GeluShift)) * w[j * k + p] * sw[j];
          want += t;
          mag += std::fabs(x[i * k + p] * s * w[j * k + p] * sw[j]);
        }
        // fp32 rounding of the largest terms (float(acc), the scale product, the fma): a few 2^-24 of the
        // magnitude of the shifted product and of the folded bias
        const double err = std::fabs(y[i * n + j] - want);
        worst = std::max(worst, err / mag);
        ASSERT_LE(err, 4.0 * kRel * (mag + std::fabs(folded[j]))) << i << "," << j;
      }
    EXPECT_GT(worst, 0.0);
  }
}

// Unsigned rows (quantize_i8_ref.h): per token the row's max / 255 maps to code 255, a row of zeros gets
// scale 1; per tensor the given scale; negative values saturate at 0; ties round to even.
TEST(QuantizeRowsU8, PerTokenAndPerTensor) {
  const std::vector<float> u = {0.17f, 2.55f, 1.275f, 0.f, -0.5f, 0.01f,  // row 0: max 2.55 -> s = 0.01
                                0.f,   0.f,   0.f,    0.f, 0.f,   0.f};   // row 1: all zero
  std::vector<uint8_t> q(u.size());
  std::vector<float> s(2);
  quantize_rows_u8_ref(u.data(), 2, 6, 0.f, q.data(), s.data());
  EXPECT_EQ(s[0], 2.55f / 255.f);
  EXPECT_EQ(s[1], 1.f);
  EXPECT_EQ(q[1], 255);
  EXPECT_EQ(q[0], gemm_i8_quantize_u8_ref(0.17f / s[0]));
  EXPECT_EQ(q[2], gemm_i8_quantize_u8_ref(1.275f / s[0]));
  EXPECT_EQ(q[3], 0);
  EXPECT_EQ(q[4], 0);  // below the range: saturates at 0
  for (int c = 6; c < 12; ++c) EXPECT_EQ(q[c], 0);
  quantize_rows_u8_ref(u.data(), 1, 6, 0.005f, q.data(), s.data());  // per tensor: 2.55 / 0.005 = 510 -> 255
  EXPECT_EQ(s[0], 0.005f);
  EXPECT_EQ(q[1], 255);
  EXPECT_EQ(q[0], 34);
  EXPECT_EQ(q[5], 2);
}

TEST(GemmI8Ref, DequantIsOneFmaOfTheScaleProduct) {
  // float(acc) rounds to nearest even above 2^24; the scale product is rounded once before the FMA.
  EXPECT_EQ(gemm_i8_dequant_ref(16777217, 1.f, 1.f, 0.f), 16777216.f);
  const float sx = 0.1f, sw = 0.3f;
  EXPECT_EQ(gemm_i8_dequant_ref(12345, sx, sw, 0.25f), std::fma(12345.f, sx * sw, 0.25f));
}

}  // namespace
}  // namespace edgevit
