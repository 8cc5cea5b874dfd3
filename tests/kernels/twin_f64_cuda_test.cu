// The CUDA INT8 twin kernels (kernels/cuda/twin_f64.h) against their float64 references: gpu::mha_f64 against
// mha_ref (packed timm qkv at the ViT-S/B shapes, the class-token tail, head_dim 160, odd sizes, a separate layout
// with a key mask and a fully masked image), gpu::linear_f64 against linear_ref (every epilogue, the residual
// add in place, no bias, the ViT-B patch embedding's shape). Outputs poisoned (NaN) before each launch.
// Rule (tol::kTwinF64DifferingFraction): the fp32 bits equal the reference's except for at most that fraction
// of the elements, each within one fp32 ulp.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "base/tolerances.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cuda/twin_f64.h"
#include "tests/testutil/cuda_main.h"

namespace edgevit {
namespace {

template <class T>
struct Dev {
  T* p = nullptr;
  explicit Dev(const std::vector<T>& h) {
    cudaMalloc(&p, (h.empty() ? 1 : h.size()) * sizeof(T));
    if (!h.empty()) cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice);
  }
  ~Dev() { cudaFree(p); }
  std::vector<T> get(size_t n) const {
    std::vector<T> h(n);
    cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost);
    return h;
  }
};

std::vector<float> randn(size_t n, uint32_t seed, float sd = 1.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, sd);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Checks the rule; prints how many elements differ (expected: almost always none).
void expect_twin(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  int64_t differ = 0, far = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(float)) == 0) continue;
    ++differ;
    int32_t a = 0, b = 0;
    std::memcpy(&a, &got[i], 4);
    std::memcpy(&b, &want[i], 4);
    const bool one_ulp = std::isfinite(got[i]) && (a ^ b) >= 0 && (a - b == 1 || b - a == 1);
    far += !one_ulp;
  }
  std::printf("%-44s %zu elements, %lld differ from the reference\n", what, got.size(), static_cast<long long>(differ));
  EXPECT_EQ(far, 0) << what << ": elements more than one ulp from the reference (or NaN)";
  EXPECT_LE(static_cast<double>(differ), tol::kTwinF64DifferingFraction * static_cast<double>(got.size())) << what;
}

void check_packed(int batch, int seq, int heads, int dim, int seq_q, uint32_t seed) {
  SCOPED_TRACE(::testing::Message() << "B" << batch << " S" << seq << " H" << heads << " D" << dim << " Sq" << seq_q);
  const AttnParams p = attn_params_packed_qkv(batch, seq, heads, dim, 1.f / std::sqrt(static_cast<float>(dim)), seq_q);
  const std::vector<float> qkv = randn(static_cast<size_t>(batch) * seq * 3 * heads * dim, seed, 2.f);
  const size_t out = static_cast<size_t>(batch) * seq_q * heads * dim;
  std::vector<float> want(out);
  const float* q = qkv.data();
  mha_ref(p, q, q + packed_k_offset(heads, dim), q + packed_v_offset(heads, dim), want.data(), 1);
  Dev<float> dq(qkv), dout(std::vector<float>(out, std::nanf("")));
  EV_ASSERT_CUDA(gpu::mha_f64(p, dq.p, dq.p + packed_k_offset(heads, dim), dq.p + packed_v_offset(heads, dim), dout.p,
                              nullptr));
  EV_ASSERT_CUDA(cudaDeviceSynchronize());
  expect_twin(dout.get(out), want, "mha_f64 packed");
}

TEST(TwinF64Cuda, MhaF64EqualsMhaRef) {
  check_packed(2, 197, 12, 64, 197, 1);  // ViT-B/16
  check_packed(2, 197, 6, 64, 197, 2);   // ViT-S/16
  check_packed(3, 197, 12, 64, 1, 3);    // the class-token tail
  check_packed(2, 37, 2, 160, 37, 4);
  check_packed(1, 5, 1, 7, 5, 5);
}

TEST(TwinF64Cuda, MhaF64HonoursTheKeyMaskAndSeparateLayouts) {
  const int b = 3, h = 2, sq = 4, skv = 300, d = 24;
  AttnParams p;
  p.batch = b; p.heads = h; p.seq_q = sq; p.seq_kv = skv; p.head_dim = d; p.scale = 0.2f;
  p.q = AttnStrides{int64_t{h} * sq * d, d, int64_t{sq} * d};  // (B, H, Sq, D)
  p.k = p.v = AttnStrides{int64_t{h} * skv * d, d, int64_t{skv} * d};
  p.o = AttnStrides{int64_t{sq} * h * d, int64_t{h} * d, d};  // (B, Sq, H, D)
  std::vector<uint8_t> mask(static_cast<size_t>(b) * skv, 1);
  for (int j = 0; j < skv; j += 7) mask[static_cast<size_t>(j)] = 0;
  for (int j = 0; j < skv; ++j) mask[static_cast<size_t>(skv) + j] = 0;  // image 1: every key masked -> zeros
  const size_t kv = static_cast<size_t>(b) * h * skv * d;
  const std::vector<float> q = randn(static_cast<size_t>(b) * h * sq * d, 6), k = randn(kv, 7), v = randn(kv, 8);
  const size_t out = static_cast<size_t>(b) * sq * h * d;
  std::vector<float> want(out);
  p.key_mask = mask.data();
  mha_ref(p, q.data(), k.data(), v.data(), want.data(), 1);
  Dev<float> dq(q), dk(k), dv(v), dout(std::vector<float>(out, std::nanf("")));
  Dev<uint8_t> dmask(mask);
  p.key_mask = dmask.p;
  EV_ASSERT_CUDA(gpu::mha_f64(p, dq.p, dk.p, dv.p, dout.p, nullptr));
  EV_ASSERT_CUDA(cudaDeviceSynchronize());
  expect_twin(dout.get(out), want, "mha_f64 masked, separate layouts");
}

void check_linear(int m, int n, int k, Epilogue ep, bool bias, uint32_t seed) {
  SCOPED_TRACE(::testing::Message() << m << "x" << n << "x" << k << " epilogue " << static_cast<int>(ep)
                                    << (bias ? " bias" : " no bias"));
  const std::vector<float> x = randn(static_cast<size_t>(m) * k, seed);
  const std::vector<float> w = randn(static_cast<size_t>(n) * k, seed + 1, 0.05f), b = randn(n, seed + 2);
  const bool acc = ep == Epilogue::kResidualAdd;
  const std::vector<float> y0 = acc ? randn(static_cast<size_t>(m) * n, seed + 3, 30.f)
                                    : std::vector<float>(static_cast<size_t>(m) * n, std::nanf(""));
  std::vector<float> want = y0;
  linear_ref(x.data(), w.data(), bias ? b.data() : nullptr, want.data(), m, n, k, ep);
  Dev<float> dx(x), dw(w), db(b), dy(y0);
  EV_ASSERT_CUDA(gpu::linear_f64(dx.p, dw.p, bias ? db.p : nullptr, dy.p, m, n, k, ep, nullptr));
  EV_ASSERT_CUDA(cudaDeviceSynchronize());
  expect_twin(dy.get(want.size()), want, "linear_f64");
}

TEST(TwinF64Cuda, LinearF64EqualsLinearRefWithEveryEpilogue) {
  uint32_t seed = 10;
  for (Epilogue ep : {Epilogue::kNone, Epilogue::kGelu, Epilogue::kResidualAdd, Epilogue::kGeluTanh,
                      Epilogue::kQuickGelu, Epilogue::kTanh})
    for (bool bias : {true, false}) check_linear(37, 48, 75, ep, bias, seed += 4);
  check_linear(197, 768, 768, Epilogue::kNone, true, 99);  // ViT-B/16's patch embedding, one image
  check_linear(2, 1000, 768, Epilogue::kNone, true, 98);   // its head
}

TEST(TwinF64Cuda, RefusesBadArguments) {
  Dev<float> f(std::vector<float>(64, 0.f));
  AttnParams p = attn_params_packed_qkv(1, 4, 1, 8, 0.5f);
  EXPECT_EQ(gpu::mha_f64(p, nullptr, f.p, f.p, f.p, nullptr), cudaErrorInvalidValue);
  AttnParams big = attn_params_packed_qkv(1, gpu::kMhaF64MaxSmemDoubles, 1, 8, 0.5f);
  EXPECT_EQ(gpu::mha_f64(big, f.p, f.p, f.p, f.p, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(gpu::linear_f64(f.p, f.p, nullptr, f.p, -1, 2, 2, Epilogue::kNone, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(gpu::linear_f64(nullptr, f.p, nullptr, f.p, 2, 2, 2, Epilogue::kNone, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(gpu::linear_f64(f.p, f.p, nullptr, f.p, 0, 2, 2, Epilogue::kNone, nullptr), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

}  // namespace
}  // namespace edgevit
