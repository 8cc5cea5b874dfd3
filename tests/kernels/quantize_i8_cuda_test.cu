// The GPU INT8 producers (kernels/cuda/quantize_i8.h) against the CPU path's arithmetic (layernorm_ref, then
// quantize_rows_i8_ref; kernels/cpu/quantize_i8_ref.h), fp16 and fp32 input, per tensor and per token, at odd
// row counts, the ViT widths and the widths that pick each kernel (register-resident chunks 1..8, the generic
// fallback past 2048, off multiples of 8 or off 16-byte alignment), outputs poisoned (int8 -128, NaN scales)
// before each launch.
// Rules: the row quantizer is exact (same fp32 value, same division and rounding): equal codes and
// scales. LayerNorm -> int8: fp32 statistics in another order (and rsqrtf), and codes rounded from y * (1 / s)
// instead of y / s, may move a value at a rounding tie by one step, so codes differ by at most 1, on at most 1%
// of the elements, and the dequantized output is within base/tolerances.h's kInt8Kernel normwise of the
// reference's; per-token scales within 1e-5; a row with a NaN or an Inf gives zeros.
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <cstdint>
#include <random>
#include <type_traits>
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

// The input as the kernel reads it: fp16 (rounded) or fp32, and the float values the reference sees.
template <class In>
struct Input {
  std::vector<In> dev;
  std::vector<float> ref;
};
template <class In>
Input<In> as_input(const std::vector<float>& v) {
  Input<In> r;
  if constexpr (std::is_same_v<In, __half>) {
    r.dev = halves(v);
    r.ref = floats(r.dev);
  } else {
    r.dev = v;
    r.ref = v;
  }
  return r;
}

cudaError_t quantize_rows(const __half* x, const float* scale, int8_t* q, float* s, int m, int k) {
  return gpu::quantize_rows_i8_f16(x, scale, q, s, m, k, nullptr);
}
cudaError_t quantize_rows(const float* x, const float* scale, int8_t* q, float* s, int m, int k) {
  return gpu::quantize_rows_i8_f32(x, scale, q, s, m, k, nullptr);
}
cudaError_t layernorm(const __half* x, const __half* g, const __half* b, const float* scale, int8_t* q, float* s,
                      int m, int c) {
  return gpu::layernorm_i8_f16(x, g, b, scale, q, s, m, c, 1e-6f, nullptr);
}
cudaError_t layernorm(const float* x, const float* g, const float* b, const float* scale, int8_t* q, float* s, int m,
                      int c) {
  return gpu::layernorm_i8_f32(x, g, b, scale, q, s, m, c, 1e-6f, nullptr);
}

// Widths: the register-resident kernel's chunk counts per lane (64: 1 ... 2048: 8, 1280 rounds 5 up to 6) and
// the generic fallback (3072 > 2048; 100 and 1004 not multiples of 8). `shift`: the rows start one element
// past a 16-byte boundary (x, and q one byte off), which also takes the fallback.
template <class In>
void check_rows(std::mt19937& rng, int m, int k, int shift) {
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> xf(static_cast<size_t>(m) * k);
  for (size_t i = 0; i < xf.size(); ++i) xf[i] = nd(rng) * (1.f + (i / k) % 7);  // rows of different range
  const Input<In> in = as_input<In>(xf);
  Dev<In> dx(in.dev.size() + shift);
  Dev<int8_t> dq(in.dev.size() + shift);
  Dev<float> ds(m), dscale(1);
  cudaMemcpy(dx.p + shift, in.dev.data(), in.dev.size() * sizeof(In), cudaMemcpyHostToDevice);
  const float scale = 0.031f;
  cudaMemcpy(dscale.p, &scale, sizeof scale, cudaMemcpyHostToDevice);
  for (bool per_token : {false, true}) {
    SCOPED_TRACE(testing::Message() << "m " << m << " k " << k << " shift " << shift
                                    << (per_token ? " per token" : " per tensor"));
    poison(dq, ds, in.dev.size() + shift, m);
    EV_ASSERT_CUDA(quantize_rows(dx.p + shift, per_token ? nullptr : dscale.p, dq.p + shift, ds.p, m, k));
    EV_ASSERT_CUDA(cudaDeviceSynchronize());
    Fetched got = download(dq, ds, in.dev.size() + shift, m);
    got.q.erase(got.q.begin(), got.q.begin() + shift);
    std::vector<int8_t> q(in.dev.size());
    std::vector<float> s(m);
    quantize_rows_i8_ref(in.ref.data(), m, k, per_token ? 0.f : scale, q.data(), s.data());
    EXPECT_EQ(got.q, q);
    EXPECT_EQ(got.s, s);
  }
}

template <class In>
void check_layernorm(std::mt19937& rng, int m, int c, int shift) {
  std::normal_distribution<float> nd(0.f, 1.f);
  std::uniform_real_distribution<float> u(-0.2f, 0.2f);
  std::vector<float> xf(static_cast<size_t>(m) * c), gf(c), bf(c);
  for (size_t i = 0; i < xf.size(); ++i) xf[i] = 3.f * nd(rng) + 0.5f;
  for (int i = 0; i < c; ++i) {
    gf[i] = 1.f + u(rng) + (i % 17 == 0 ? 4.f : 0.f);  // a few outlier channels, as after a real LayerNorm
    bf[i] = u(rng);
  }
  const Input<In> x = as_input<In>(xf), g = as_input<In>(gf), b = as_input<In>(bf);
  Dev<In> dx(x.dev.size() + shift), dg(c), db(c);
  Dev<int8_t> dq(x.dev.size() + shift);
  Dev<float> ds(m), dscale(1);
  cudaMemcpy(dx.p + shift, x.dev.data(), x.dev.size() * sizeof(In), cudaMemcpyHostToDevice);
  cudaMemcpy(dg.p, g.dev.data(), c * sizeof(In), cudaMemcpyHostToDevice);
  cudaMemcpy(db.p, b.dev.data(), c * sizeof(In), cudaMemcpyHostToDevice);
  const float scale = 0.05f;
  cudaMemcpy(dscale.p, &scale, sizeof scale, cudaMemcpyHostToDevice);
  std::vector<float> y(x.dev.size());
  layernorm_ref(x.ref.data(), g.ref.data(), b.ref.data(), y.data(), m, c, 1e-6f, 1);
  for (bool per_token : {false, true}) {
    SCOPED_TRACE(testing::Message() << "m " << m << " c " << c << " shift " << shift
                                    << (per_token ? " per token" : " per tensor"));
    poison(dq, ds, x.dev.size() + shift, m);
    EV_ASSERT_CUDA(layernorm(dx.p + shift, dg.p, db.p, per_token ? nullptr : dscale.p, dq.p + shift, ds.p, m, c));
    EV_ASSERT_CUDA(cudaDeviceSynchronize());
    Fetched got = download(dq, ds, x.dev.size() + shift, m);
    got.q.erase(got.q.begin(), got.q.begin() + shift);
    std::vector<int8_t> q(x.dev.size());
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

const int kRowCounts[] = {1, 17, 197, 2100};  // 2100: four rows per block

TEST(QuantizeI8Cuda, RowsOfFp16AreQuantizedExactlyAsTheReference) {
  std::mt19937 rng(7);
  for (int m : kRowCounts)
    for (int k : {64, 100, 768, 1280, 2048, 3072}) check_rows<__half>(rng, m, k, 0);
  check_rows<__half>(rng, 197, 768, 1);
}

TEST(QuantizeI8Cuda, RowsOfFp32AreQuantizedExactlyAsTheReference) {
  std::mt19937 rng(8);
  for (int m : kRowCounts)
    for (int k : {64, 100, 768, 1280, 2048, 3072}) check_rows<float>(rng, m, k, 0);
  check_rows<float>(rng, 197, 768, 1);
}

// The row kernel multiplies by 1 / s and divides only next to a rounding tie (kernels/cuda/quantize_i8.cu,
// Quantizer): values at and up to 3 ulps either side of every half-integer multiple of the scale in
// [-130.5, 130.5] (saturation included), per tensor and per token; two rows of subnormals. Codes and scales
// equal to the reference's.
TEST(QuantizeI8Cuda, RowsNextToRoundingTiesAreQuantizedExactlyAsTheReference) {
  const int k = 768;
  std::vector<float> x;
  for (float scale : {0.031f, 0.0123f, 1.7f})
    for (int half = -261; half <= 261; half += 2) {
      const float tie = 0.5f * static_cast<float>(half) * scale;
      float up = tie, down = tie;
      x.push_back(tie);
      for (int d = 0; d < 3; ++d) {
        up = std::nextafter(up, INFINITY);
        down = std::nextafter(down, -INFINITY);
        x.push_back(up);
        x.push_back(down);
      }
    }
  x.resize((x.size() + k - 1) / k * k, 0.f);
  const int tie_rows = static_cast<int>(x.size() / k);
  // Subnormal rows, per token: a scale that underflows to 0, and one (7.9e-43) whose reciprocal overflows.
  for (int r = 0; r < 2; ++r)
    for (int i = 0; i < k; ++i) x.push_back(r == 0 ? (i % 3 - 1) * 1e-44f : (i % 5) * 2.5e-41f);
  const int m = static_cast<int>(x.size() / k);
  Dev<float> dx(x.size()), ds(m), dscale(1);
  Dev<int8_t> dq(x.size());
  cudaMemcpy(dx.p, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice);
  for (float scale : {0.031f, 0.0123f, 1.7f, 0.f}) {
    SCOPED_TRACE(testing::Message() << "scale " << scale << (scale > 0 ? " per tensor" : " per token"));
    cudaMemcpy(dscale.p, &scale, sizeof scale, cudaMemcpyHostToDevice);
    poison(dq, ds, x.size(), m);
    EV_ASSERT_CUDA(gpu::quantize_rows_i8_f32(dx.p, scale > 0 ? dscale.p : nullptr, dq.p, ds.p, m, k, nullptr));
    EV_ASSERT_CUDA(cudaDeviceSynchronize());
    const Fetched got = download(dq, ds, x.size(), m);
    std::vector<int8_t> q(x.size());
    std::vector<float> s(m);
    quantize_rows_i8_ref(x.data(), m, k, scale, q.data(), s.data());
    EXPECT_EQ(got.q, q);
    EXPECT_EQ(got.s, s);
    if (scale == 0.031f) {  // the tie rows do hold ties: some codes land on each side of a half-integer
      int odd = 0;
      for (int i = 0; i < tie_rows * k; ++i) odd += q[static_cast<size_t>(i)] % 2 != 0;
      EXPECT_GT(odd, 100);
    }
  }
}

TEST(QuantizeI8Cuda, LayerNormToInt8MatchesTheReferenceWithinOneStepAtTies) {
  std::mt19937 rng(11);
  for (int m : kRowCounts)
    for (int c : {64, 384, 768, 1004, 1024, 1280, 2048, 3072}) check_layernorm<__half>(rng, m, c, 0);
  check_layernorm<__half>(rng, 197, 768, 1);
}

TEST(QuantizeI8Cuda, LayerNormOfFp32ToInt8MatchesTheReferenceWithinOneStepAtTies) {
  std::mt19937 rng(12);
  for (int m : kRowCounts)
    for (int c : {64, 384, 768, 1004, 1024, 1280, 2048, 3072}) check_layernorm<float>(rng, m, c, 0);
  check_layernorm<float>(rng, 197, 768, 1);
}

// A row with a NaN or an Inf takes the exact rule (its statistics are not finite): codes 0, as the reference
// quantizes NaN; the finite rows around it keep their codes. Both row kernels (1 and 197 rows), per token.
TEST(QuantizeI8Cuda, LayerNormOfANonFiniteRowGivesZeroCodes) {
  constexpr int c = 768;
  for (int m : {3, 197}) {
    std::vector<float> xf(static_cast<size_t>(m) * c), ones(c, 1.f), zeros(c, 0.f);
    for (size_t i = 0; i < xf.size(); ++i) xf[i] = static_cast<float>(i % 13) - 6.f;
    xf[1 * c + 5] = std::numeric_limits<float>::quiet_NaN();
    xf[2 * c + 7] = std::numeric_limits<float>::infinity();
    const std::vector<__half> x = halves(xf), g = halves(ones), b = halves(zeros);
    Dev<__half> dx(x.size()), dg(c), db(c);
    Dev<int8_t> dq(x.size());
    Dev<float> ds(m);
    cudaMemcpy(dx.p, x.data(), x.size() * sizeof(__half), cudaMemcpyHostToDevice);
    cudaMemcpy(dg.p, g.data(), c * sizeof(__half), cudaMemcpyHostToDevice);
    cudaMemcpy(db.p, b.data(), c * sizeof(__half), cudaMemcpyHostToDevice);
    poison(dq, ds, x.size(), m);
    EV_ASSERT_CUDA(layernorm(dx.p, dg.p, db.p, nullptr, dq.p, ds.p, m, c));
    EV_ASSERT_CUDA(cudaDeviceSynchronize());
    const Fetched got = download(dq, ds, x.size(), m);
    for (int r = 0; r < m; ++r) {
      int nonzero = 0;
      for (int i = 0; i < c; ++i) nonzero += got.q[static_cast<size_t>(r) * c + i] != 0;
      if (r == 1 || r == 2) {
        EXPECT_EQ(nonzero, 0) << "row " << r << " of " << m;
      } else {
        EXPECT_GT(nonzero, c / 2) << "row " << r << " of " << m;
      }
    }
  }
}

}  // namespace
}  // namespace edgevit
