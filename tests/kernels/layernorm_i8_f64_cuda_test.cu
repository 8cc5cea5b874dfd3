// gpu::layernorm_i8_f32_f64 (kernels/cuda/layernorm_i8_f64.h) against the CPU INT8 path's arithmetic
// (layernorm_ref, then quantize_rows_i8_ref), per tensor and per token, at odd row counts and the ViT widths,
// on rows with offsets up to 1e3 (the residual stream's range) and an all-constant row; outputs poisoned
// (int8 -128, NaN scales) before each launch.
// Rule: equal codes and equal scales, every element. The float64 sums differ from the reference's only in
// order (~1e-16 relative), which changes y's rounding to fp32 only within that of a rounding boundary.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "base/tolerances.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/quantize_i8_ref.h"
#include "kernels/cuda/layernorm_i8_f64.h"
#include "tests/testutil/cuda_main.h"

namespace edgevit {
namespace {

template <class T>
struct Dev {
  T* p = nullptr;
  explicit Dev(size_t n) { cudaMalloc(&p, (n ? n : 1) * sizeof(T)); }
  ~Dev() { cudaFree(p); }
};

template <class T>
void up(Dev<T>& d, const std::vector<T>& h) {
  ASSERT_EQ(cudaMemcpy(d.p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
}

void check(int m, int c, bool per_token, uint32_t seed) {
  SCOPED_TRACE(::testing::Message() << "M " << m << " C " << c << (per_token ? " per-token" : " per-tensor"));
  std::mt19937 rng(seed);
  std::normal_distribution<float> n01(0.f, 1.f);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> x(static_cast<size_t>(m) * c), gamma(c), beta(c);
  for (int r = 0; r < m; ++r) {
    const float offset = r % 5 == 0 ? 1e3f * u(rng) : u(rng);  // a residual row's mean, up to 1e3
    const float spread = r % 7 == 3 ? 0.f : 1.f + 20.f * std::fabs(u(rng));  // r % 7 == 3: a constant row
    for (int i = 0; i < c; ++i) x[static_cast<size_t>(r) * c + i] = offset + spread * n01(rng);
  }
  for (int i = 0; i < c; ++i) {
    gamma[i] = 1.f + 0.5f * u(rng);
    beta[i] = 0.2f * u(rng);
  }
  std::vector<float> y(x.size()), want_s(m);
  std::vector<int8_t> want_q(x.size());
  layernorm_ref(x.data(), gamma.data(), beta.data(), y.data(), m, c, 1e-6f, 1);
  const float scale = 0.031f;
  quantize_rows_i8_ref(y.data(), m, c, per_token ? 0.f : scale, want_q.data(), want_s.data());

  Dev<float> dx(x.size()), dg(c), db(c), ds(m), dscale(1);
  Dev<int8_t> dq(x.size());
  up(dx, x);
  up(dg, gamma);
  up(db, beta);
  up(dscale, std::vector<float>{scale});
  ASSERT_EQ(cudaMemset(dq.p, 0x80, x.size()), cudaSuccess);
  ASSERT_EQ(cudaMemset(ds.p, 0xff, m * sizeof(float)), cudaSuccess);
  ASSERT_EQ(gpu::layernorm_i8_f32_f64(dx.p, dg.p, db.p, per_token ? nullptr : dscale.p, dq.p, ds.p, m, c, 1e-6f,
                                      nullptr),
            cudaSuccess);
  std::vector<int8_t> q(x.size());
  std::vector<float> s(m);
  ASSERT_EQ(cudaMemcpy(q.data(), dq.p, q.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(s.data(), ds.p, s.size() * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  int64_t bad_q = 0, bad_s = 0;
  for (size_t i = 0; i < q.size(); ++i) bad_q += q[i] != want_q[i];
  for (int r = 0; r < m; ++r) bad_s += !(s[r] == want_s[r]);
  EXPECT_EQ(bad_q, 0) << "codes differ from layernorm_ref + quantize_rows_i8_ref";
  EXPECT_EQ(bad_s, 0) << "row scales differ";
}

TEST(LayerNormI8F64Cuda, EqualsTheCpuInt8PathCodeForCode) {
  uint32_t seed = 100;
  for (int m : {1, 17, 197, 1000})
    for (int c : {3, 64, 192, 768, 1000})
      for (bool per_token : {false, true}) check(m, c, per_token, seed++);
}

// gpu::layernorm_f32_f64 (the INT8 twin row cuda.layernorm_f64) against layernorm_ref, out of place and in
// place: equal bits except tol::kTwinF64DifferingFraction of the elements, each within one fp32 ulp.
TEST(LayerNormI8F64Cuda, Fp32OutputEqualsLayerNormRef) {
  uint32_t seed = 500;
  for (int m : {1, 197, 1000})
    for (int c : {3, 192, 768})
      for (bool in_place : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "M " << m << " C " << c << (in_place ? " in place" : ""));
        std::mt19937 rng(seed++);
        std::normal_distribution<float> n01(0.f, 1.f);
        std::vector<float> x(static_cast<size_t>(m) * c), gamma(c), beta(c);
        for (int r = 0; r < m; ++r)
          for (int i = 0; i < c; ++i) x[static_cast<size_t>(r) * c + i] = (r % 5 == 0 ? 300.f : 0.f) + 4.f * n01(rng);
        for (int i = 0; i < c; ++i) {
          gamma[i] = 1.f + 0.3f * n01(rng);
          beta[i] = 0.2f * n01(rng);
        }
        std::vector<float> want(x.size());
        layernorm_ref(x.data(), gamma.data(), beta.data(), want.data(), m, c, 1e-6f, 1);
        Dev<float> dx(x.size()), dg(c), db(c), dy(x.size());
        up(dx, x);
        up(dg, gamma);
        up(db, beta);
        ASSERT_EQ(cudaMemset(dy.p, 0xff, x.size() * sizeof(float)), cudaSuccess);  // NaN
        float* y = in_place ? dx.p : dy.p;
        ASSERT_EQ(gpu::layernorm_f32_f64(dx.p, dg.p, db.p, y, m, c, 1e-6f, nullptr), cudaSuccess);
        std::vector<float> got(x.size());
        ASSERT_EQ(cudaMemcpy(got.data(), y, got.size() * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
        int64_t differ = 0, far = 0;
        for (size_t i = 0; i < got.size(); ++i) {
          if (std::memcmp(&got[i], &want[i], sizeof(float)) == 0) continue;
          ++differ;
          far += !(std::isfinite(got[i]) && std::fabs(got[i] - want[i]) <=
                                                std::fabs(std::nextafter(want[i], 2.f * want[i] + 1.f) - want[i]));
        }
        EXPECT_EQ(far, 0) << "elements more than one ulp from layernorm_ref";
        EXPECT_LE(static_cast<double>(differ), tol::kTwinF64DifferingFraction * static_cast<double>(got.size()));
      }
  EXPECT_EQ(gpu::layernorm_f32_f64(nullptr, nullptr, nullptr, nullptr, 1, 8, 1e-6f, nullptr), cudaErrorInvalidValue);
}

// gpu::qk_norm_f32_f64 (the INT8 twin row cuda.qk_norm_f64) against qk_norm_ref, in place on a packed qkv: the
// same rule; v left as it was, bit for bit.
TEST(LayerNormI8F64Cuda, QkNormEqualsQkNormRef) {
  for (const int heads : {1, 3, 12})
    for (const int d : {7, 64}) {
      SCOPED_TRACE(::testing::Message() << "H " << heads << " D " << d);
      const int rows = 2 * 197;
      std::mt19937 rng(static_cast<uint32_t>(heads * 100 + d));
      std::normal_distribution<float> n01(0.f, 1.f);
      std::vector<float> qkv(static_cast<size_t>(rows) * 3 * heads * d), g(4 * static_cast<size_t>(d));
      for (float& v : qkv) v = 3.f * n01(rng) + 0.5f;
      for (float& v : g) v = 1.f + 0.3f * n01(rng);
      std::vector<float> want = qkv;
      qk_norm_ref(want.data(), g.data(), g.data() + d, g.data() + 2 * d, g.data() + 3 * d, rows, heads, d, 1e-6f, 1);
      Dev<float> dqkv(qkv.size()), dg(g.size());
      up(dqkv, qkv);
      up(dg, g);
      ASSERT_EQ(gpu::qk_norm_f32_f64(dqkv.p, dg.p, dg.p + d, dg.p + 2 * d, dg.p + 3 * d, rows, heads, d, 1e-6f, nullptr),
                cudaSuccess);
      std::vector<float> got(qkv.size());
      ASSERT_EQ(cudaMemcpy(got.data(), dqkv.p, got.size() * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
      int64_t differ = 0, far = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        if (std::memcmp(&got[i], &want[i], sizeof(float)) == 0) continue;
        ++differ;
        far += !(std::isfinite(got[i]) && std::fabs(got[i] - want[i]) <=
                                              std::fabs(std::nextafter(want[i], 2.f * want[i] + 1.f) - want[i]));
      }
      EXPECT_EQ(far, 0) << "elements more than one ulp from qk_norm_ref";
      EXPECT_LE(static_cast<double>(differ), tol::kTwinF64DifferingFraction * static_cast<double>(got.size()));
    }
  EXPECT_EQ(gpu::qk_norm_f32_f64(nullptr, nullptr, nullptr, nullptr, nullptr, 1, 1, 8, 1e-6f, nullptr),
            cudaErrorInvalidValue);
}

TEST(LayerNormI8F64Cuda, RefusesBadArguments) {
  Dev<float> f(64);
  Dev<int8_t> q(64);
  EXPECT_EQ(gpu::layernorm_i8_f32_f64(nullptr, f.p, f.p, nullptr, q.p, f.p, 1, 64, 1e-6f, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(gpu::layernorm_i8_f32_f64(f.p, f.p, f.p, nullptr, q.p, f.p, 1, 0, 1e-6f, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(gpu::layernorm_i8_f32_f64(f.p, f.p, f.p, nullptr, q.p, f.p, 0, 64, 1e-6f, nullptr), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

}  // namespace
}  // namespace edgevit
