// The GPU INT8 producers (kernels/cuda/quantize_i8.h) against the CPU path's arithmetic (layernorm_ref, then
// quantize_rows_i8_ref; kernels/cpu/quantize_i8_ref.h), per tensor and per token, at odd row counts and the
// ViT widths (C = 64, 384, 768; K = 3072), outputs poisoned (int8 -128, NaN scales) before each launch.
// Rules: the quantizer of fp16 rows is exact (same fp32 value, same division and rounding): equal codes and
// scales. LayerNorm -> int8: fp32 statistics in another order (and rsqrtf) may move a value at a rounding tie
// by one step, so codes differ by at most 1, on at most 1% of the elements, and the dequantized output is
// within base/tolerances.h's kInt8Kernel normwise of the reference's; per-token scales within 1e-5.
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "base/tolerances.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/quantize_i8_ref.h"
#include "kernels/cuda/quantize_i8.h"
#include "tests/testutil/cuda_main.h"

namespace edgevit {
namespace {

template <class T>
struct Dev {
  T* p = nullptr;
  explicit Dev(size_t n) { cudaMalloc(&p, (n ? n : 1) * sizeof(T)); }
  ~Dev() { cudaFree(p); }
};

std::vector<__half> halves(const std::vector<float>& v) {
  std::vector<__half> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = __float2half(v[i]);
  return h;
}
std::vector<float> floats(const std::vector<__half>& h) {
  std::vector<float> v(h.size());
  for (size_t i = 0; i < h.size(); ++i) v[i] = __half2float(h[i]);
  return v;
}

struct Fetched {
  std::vector<int8_t> q;
  std::vector<float> s;
};

Fetched download(const Dev<int8_t>& q, const Dev<float>& s, size_t n, size_t m) {
  Fetched r{std::vector<int8_t>(n), std::vector<float>(m)};
  cudaMemcpy(r.q.data(), q.p, n, cudaMemcpyDeviceToHost);
  cudaMemcpy(r.s.data(), s.p, m * sizeof(float), cudaMemcpyDeviceToHost);
  return r;
}

void poison(Dev<int8_t>& q, Dev<float>& s, size_t n, size_t m) {
  cudaMemset(q.p, 0x80, n);
  cudaMemset(s.p, 0xff, m * sizeof(float));
}

TEST(QuantizeI8Cuda, RowsOfFp16AreQuantizedExactlyAsTheReference) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (int m : {1, 17, 197, 1000})
    for (int k : {64, 768, 3072}) {
      std::vector<float> xf(static_cast<size_t>(m) * k);
      for (size_t i = 0; i < xf.size(); ++i) xf[i] = nd(rng) * (1.f + (i / k) % 7);  // rows of different range
      const std::vector<__half> xh = halves(xf);
      const std::vector<float> x = floats(xh);
      Dev<__half> dx(xh.size());
      Dev<int8_t> dq(xh.size());
      Dev<float> ds(m), dscale(1);
      cudaMemcpy(dx.p, xh.data(), xh.size() * sizeof(__half), cudaMemcpyHostToDevice);
      const float scale = 0.031f;
      cudaMemcpy(dscale.p, &scale, sizeof scale, cudaMemcpyHostToDevice);
      for (bool per_token : {false, true}) {
        SCOPED_TRACE(testing::Message() << "m " << m << " k " << k << (per_token ? " per token" : " per tensor"));
        poison(dq, ds, xh.size(), m);
        EV_ASSERT_CUDA(gpu::quantize_rows_i8_f16(dx.p, per_token ? nullptr : dscale.p, dq.p, ds.p, m, k, nullptr));
        EV_ASSERT_CUDA(cudaDeviceSynchronize());
        const Fetched got = download(dq, ds, xh.size(), m);
        std::vector<int8_t> q(xh.size());
        std::vector<float> s(m);
        quantize_rows_i8_ref(x.data(), m, k, per_token ? 0.f : scale, q.data(), s.data());
        EXPECT_EQ(got.q, q);
        EXPECT_EQ(got.s, s);
      }
    }
}

TEST(QuantizeI8Cuda, LayerNormToInt8MatchesTheReferenceWithinOneStepAtTies) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::uniform_real_distribution<float> u(-0.2f, 0.2f);
  for (int m : {1, 17, 197, 1000})
    for (int c : {64, 384, 768}) {
      std::vector<float> xf(static_cast<size_t>(m) * c), gf(c), bf(c);
      for (size_t i = 0; i < xf.size(); ++i) xf[i] = 3.f * nd(rng) + 0.5f;
      for (int i = 0; i < c; ++i) {
        gf[i] = 1.f + u(rng) + (i % 17 == 0 ? 4.f : 0.f);  // a few outlier channels, as after a real LayerNorm
        bf[i] = u(rng);
      }
      const std::vector<__half> xh = halves(xf), gh = halves(gf), bh = halves(bf);
      const std::vector<float> x = floats(xh), g = floats(gh), b = floats(bh);
      Dev<__half> dx(xh.size()), dg(c), db(c);
      Dev<int8_t> dq(xh.size());
      Dev<float> ds(m), dscale(1);
      cudaMemcpy(dx.p, xh.data(), xh.size() * sizeof(__half), cudaMemcpyHostToDevice);
      cudaMemcpy(dg.p, gh.data(), c * sizeof(__half), cudaMemcpyHostToDevice);
      cudaMemcpy(db.p, bh.data(), c * sizeof(__half), cudaMemcpyHostToDevice);
      const float scale = 0.05f;
      cudaMemcpy(dscale.p, &scale, sizeof scale, cudaMemcpyHostToDevice);
      std::vector<float> y(xh.size());
      layernorm_ref(x.data(), g.data(), b.data(), y.data(), m, c, 1e-6f, 1);
      for (bool per_token : {false, true}) {
        SCOPED_TRACE(testing::Message() << "m " << m << " c " << c << (per_token ? " per token" : " per tensor"));
        poison(dq, ds, xh.size(), m);
        EV_ASSERT_CUDA(gpu::layernorm_i8_f16(dx.p, dg.p, db.p, per_token ? nullptr : dscale.p, dq.p, ds.p, m, c, 1e-6f,
                                             nullptr));
        EV_ASSERT_CUDA(cudaDeviceSynchronize());
        const Fetched got = download(dq, ds, xh.size(), m);
        std::vector<int8_t> q(xh.size());
        std::vector<float> s(m);
        quantize_rows_i8_ref(y.data(), m, c, per_token ? 0.f : scale, q.data(), s.data());
        size_t off_by_one = 0;
        double num = 0, den = 0;
        for (size_t i = 0; i < q.size(); ++i) {
          const int d = std::abs(int(got.q[i]) - int(q[i]));
          ASSERT_LE(d, 1) << "element " << i;
          off_by_one += d == 1;
          const double a = double(got.q[i]) * got.s[i / c], r = double(q[i]) * s[i / c];
          num += (a - r) * (a - r);
          den += r * r;
        }
        EXPECT_LE(off_by_one, q.size() / 100 + 1);
        EXPECT_LE(std::sqrt(num / den), tol::kInt8Kernel);
        for (int r = 0; r < m; ++r) EXPECT_NEAR(got.s[r], s[r], 1e-5 * s[r]) << "row " << r;
      }
    }
}

}  // namespace
}  // namespace edgevit
