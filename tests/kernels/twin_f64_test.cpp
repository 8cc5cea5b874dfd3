// The INT8 twin kernels (kernels/cpu/twin_f64.cpp): mha_f64 and linear_f64 equal their float64 references
// mha_ref and linear_ref bit for bit, on every team size (1 to 4 threads), over packed timm qkv (full blocks and
// the class-token tail), a cross-attention layout with a key mask (a fully masked image included), every linear
// epilogue (the residual add in place) and odd shapes. Bit equality is the contract: the CPU INT8 path's fp32
// values must not depend on its thread count (docs/int8.md "fp32 mode").
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/kernels.h"

namespace edgevit {
namespace {

std::vector<float> randn(size_t n, uint32_t seed, float sd = 1.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, sd);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Elements whose bits differ (NaN never equals: a poisoned output left unwritten counts).
int64_t bits_differ(const std::vector<float>& a, const std::vector<float>& b) {
  int64_t n = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) n += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  return n;
}

void check_packed(int batch, int seq, int heads, int dim, int seq_q, uint32_t seed) {
  SCOPED_TRACE(::testing::Message() << "B" << batch << " S" << seq << " H" << heads << " D" << dim << " Sq" << seq_q);
  const AttnParams p = attn_params_packed_qkv(batch, seq, heads, dim, 1.f / std::sqrt(static_cast<float>(dim)), seq_q);
  const std::vector<float> qkv = randn(static_cast<size_t>(batch) * seq * 3 * heads * dim, seed, 2.f);
  const size_t out = static_cast<size_t>(batch) * seq_q * heads * dim;
  std::vector<float> want(out, std::nanf("")), got;
  const float* q = qkv.data();
  mha_ref(p, q, q + packed_k_offset(heads, dim), q + packed_v_offset(heads, dim), want.data(), 1);
  for (int threads = 1; threads <= 4; ++threads) {
    got.assign(out, std::nanf(""));
    mha_f64(p, q, q + packed_k_offset(heads, dim), q + packed_v_offset(heads, dim), got.data(), threads);
    EXPECT_EQ(bits_differ(got, want), 0) << threads << " threads";
  }
}

TEST(TwinF64, MhaEqualsMhaRefBitForBit) {
  check_packed(2, 197, 3, 64, 197, 1);  // ViT-Ti/16's shapes, two images
  check_packed(3, 26, 2, 32, 26, 2);
  check_packed(2, 37, 2, 160, 1, 3);    // the class-token tail, a head_dim above the fused CPU kernel's limit
  check_packed(1, 5, 1, 7, 5, 4);       // odd everything
}

TEST(TwinF64, MhaHonoursTheKeyMaskAndSeparateLayouts) {
  const int b = 3, h = 2, sq = 4, skv = 9, d = 24;
  AttnParams p;
  p.batch = b; p.heads = h; p.seq_q = sq; p.seq_kv = skv; p.head_dim = d; p.scale = 0.2f;
  p.q = AttnStrides{int64_t{h} * sq * d, d, int64_t{sq} * d};  // (B, H, Sq, D)
  p.k = p.v = AttnStrides{int64_t{h} * skv * d, d, int64_t{skv} * d};
  p.o = AttnStrides{int64_t{sq} * h * d, int64_t{h} * d, d};  // (B, Sq, H, D)
  std::vector<uint8_t> mask(static_cast<size_t>(b) * skv, 1);
  mask[3] = mask[7] = 0;
  for (int j = 0; j < skv; ++j) mask[static_cast<size_t>(skv) + j] = 0;  // image 1: every key masked -> zeros
  p.key_mask = mask.data();
  const size_t kv = static_cast<size_t>(b) * h * skv * d;
  const std::vector<float> q = randn(static_cast<size_t>(b) * h * sq * d, 5), k = randn(kv, 6), v = randn(kv, 7);
  const size_t out = static_cast<size_t>(b) * sq * h * d;
  std::vector<float> want(out, std::nanf("")), got;
  mha_ref(p, q.data(), k.data(), v.data(), want.data(), 1);
  for (int threads = 1; threads <= 4; ++threads) {
    got.assign(out, std::nanf(""));
    mha_f64(p, q.data(), k.data(), v.data(), got.data(), threads);
    EXPECT_EQ(bits_differ(got, want), 0) << threads << " threads";
  }
  for (size_t i = static_cast<size_t>(sq) * h * d; i < 2u * sq * h * d; ++i) EXPECT_EQ(got[i], 0.f);
}

TEST(TwinF64, LinearEqualsLinearRefBitForBitWithEveryEpilogue) {
  const int m = 37, n = 48, k = 75;
  const std::vector<float> x = randn(static_cast<size_t>(m) * k, 8), w = randn(static_cast<size_t>(n) * k, 9, 0.1f),
                           bias = randn(n, 10), residual = randn(static_cast<size_t>(m) * n, 11, 30.f);
  for (Epilogue ep : {Epilogue::kNone, Epilogue::kGelu, Epilogue::kResidualAdd, Epilogue::kGeluTanh,
                      Epilogue::kQuickGelu, Epilogue::kTanh})
    for (const float* b : {bias.data(), static_cast<const float*>(nullptr)}) {
      SCOPED_TRACE(::testing::Message() << "epilogue " << static_cast<int>(ep) << (b ? " bias" : " no bias"));
      const bool acc = ep == Epilogue::kResidualAdd;
      std::vector<float> want = acc ? residual : std::vector<float>(residual.size(), std::nanf(""));
      linear_ref(x.data(), w.data(), b, want.data(), m, n, k, ep);
      for (int threads = 1; threads <= 4; ++threads) {
        std::vector<float> got = acc ? residual : std::vector<float>(residual.size(), std::nanf(""));
        linear_f64(x.data(), w.data(), b, got.data(), m, n, k, ep, threads);
        EXPECT_EQ(bits_differ(got, want), 0) << threads << " threads";
      }
    }
}

TEST(TwinF64, EmptyShapesWriteNothing) {
  std::vector<float> y(4, 1.f);
  linear_f64(nullptr, nullptr, nullptr, y.data(), 0, 2, 2, Epilogue::kNone, 3);
  AttnParams p = attn_params_packed_qkv(0, 4, 1, 2, 1.f);
  mha_f64(p, nullptr, nullptr, nullptr, y.data(), 3);
  for (float v : y) EXPECT_EQ(v, 1.f);
}

}  // namespace
}  // namespace edgevit
