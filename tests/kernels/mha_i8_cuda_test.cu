// The INT8 fused attention (kernels/cuda/mha_i8.h) through the launcher the runtime will call, against
//   1. mha_i8_ref (kernels/cpu/mha_i8_ref.h) on the same int8 Q/K, scales and fp16 V: normwise within
//      tol::kInt8AttnVsRef, finite, nothing written outside the output rows (outputs poisoned with fp16 NaN);
//   2. fp32 attention (mha_ref, float64) on the unquantised inputs: the kernel's error may exceed the
//      reference's own quantisation error by at most tol::kInt8AttnVsRef (the kernel adds no error of its own
//      beyond its arithmetic bound). Both errors are printed, per case and row, for docs/kernels-mha-i8.md.
// Every row of the case's head dim and softmax runs. Shapes: B1/B8/B64 x H12 x S197 D64, S577, S1025, S1370,
// S50, S257, D32, D128, Sq = 1 (the class-token tail over a packed int8 QK buffer), odd Sq != Skv, key masks
// with a fully masked batch element; scales per (token, head) (per-key K), per token for Q with one K scale
// per tensor, and per tensor; the first query of batch 0 is all zeros (scale 0: uniform attention).
// Scale-max (use_int8_scale_max) rows: the same checks on the rows that do not overflow fp16 (the overflowing
// rows must be non-finite in both and are counted), and the documented overflow and underflow cases.
// The int8-output kernels (mha_i8_fused_i8out, the runtime's INT8 attention): codes against the reference's
// output quantized, within one step at ties (MhaI8Int8Output).
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "base/tolerances.h"
#include "kernels/attn_params.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/mha_i8_ref.h"
#include "kernels/cuda/mha_i8.h"
#include "tests/testutil/cuda_main.h"

namespace edgevit {
namespace {

enum class Layout { kSeparate, kPackedQK };                // see DeviceCase
enum class Scales { kTokenHead, kTokenQTensorK, kTensor };  // granularity of sq / sk
enum class Mask { kNone, kWithFullyMaskedBatch };

struct Case {
  int batch, heads, seq_q, seq_kv, head_dim;
  Layout layout;
  Scales scales;
  Mask mask;
  MhaI8Softmax softmax;
  float spread;  // Q's standard deviation (K's is 1): logits of standard deviation ~ spread
};

std::string case_name(const Case& c) {
  std::ostringstream s;
  s << "B" << c.batch << "_H" << c.heads << "_Sq" << c.seq_q << "_Skv" << c.seq_kv << "_D" << c.head_dim
    << (c.layout == Layout::kSeparate ? "_separate" : "_packed")
    << (c.scales == Scales::kTokenHead ? "_tokenhead" : c.scales == Scales::kTokenQTensorK ? "_tokenq" : "_tensor")
    << (c.mask == Mask::kNone ? "" : "_masked") << (c.softmax == MhaI8Softmax::kScaleMax ? "_smax" : "")
    << "_spread" << static_cast<int>(c.spread);
  return s.str();
}

double rel_error(const std::vector<float>& out, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (!std::isfinite(out[i])) return INFINITY;
    const double d = static_cast<double>(out[i]) - ref[i];
    num += d * d;
    den += static_cast<double>(ref[i]) * ref[i];
  }
  if (den == 0) return num == 0 ? 0 : INFINITY;
  return std::sqrt(num / den);
}

// Dense (B, S, H, D) strides for element counts of one token row.
AttnStrides dense(int seq, int heads, int dim) {
  return AttnStrides{static_cast<int64_t>(seq) * heads * dim, static_cast<int64_t>(heads) * dim, dim};
}

// The host side of a case: float inputs, their quantisation (dense layouts) and both references.
struct Host {
  AttnParams p;                     // dense (B, S, H, D) layouts; key_mask host pointer
  std::vector<float> qf, kf, vf;    // unquantised
  std::vector<int8_t> q8, k8;
  std::vector<float> sq, sk;        // (B, Sq, H), (B, Skv, H); one value when per tensor
  AttnI8Scales scales;              // host pointers into sq / sk
  std::vector<__half> vh;           // V as the kernel reads it
  std::vector<float> vr;            // its values
  std::vector<uint8_t> mask;
  std::vector<float> ref_i8, ref_f32;
};

float quantize_tensor(const std::vector<float>& x, std::vector<int8_t>* out) {
  float amax = 0;
  for (float e : x) amax = std::max(amax, std::fabs(e));
  const float s = amax / 127.f;
  out->resize(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    (*out)[i] = static_cast<int8_t>(std::max(-127.f, std::min(127.f, std::round(x[i] / s))));
  return s;
}

// Per (token, head) rows of a dense (B, S, H, D) tensor.
std::vector<float> quantize_rows(const std::vector<float>& x, int rows, int dim, std::vector<int8_t>* out) {
  out->resize(x.size());
  std::vector<float> s(rows);
  for (int r = 0; r < rows; ++r) s[r] = quantize_i8_row(&x[static_cast<size_t>(r) * dim], dim, &(*out)[r * dim]);
  return s;
}

// Runs f(b) for every batch element on a few threads (the references are plain loops).
void for_batches(int batch, const std::function<void(int)>& f) {
  const int n = std::max(1, std::min<int>(batch, static_cast<int>(std::thread::hardware_concurrency())));
  std::vector<std::thread> pool;
  for (int w = 0; w < n; ++w)
    pool.emplace_back([&, w] {
      for (int b = w; b < batch; b += n) f(b);
    });
  for (std::thread& t : pool) t.join();
}

Host make_host(const Case& c, uint32_t seed) {
  Host hs;
  const int B = c.batch, H = c.heads, Sq = c.seq_q, Skv = c.seq_kv, D = c.head_dim;
  AttnParams& p = hs.p;
  p.batch = B; p.heads = H; p.seq_q = Sq; p.seq_kv = Skv; p.head_dim = D;
  p.scale = 1.f / std::sqrt(static_cast<float>(D));
  p.q = p.o = dense(Sq, H, D);
  p.k = p.v = dense(Skv, H, D);
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  hs.qf.resize(static_cast<size_t>(B) * Sq * H * D);
  hs.kf.resize(static_cast<size_t>(B) * Skv * H * D);
  hs.vf.resize(hs.kf.size());
  for (float& e : hs.qf) e = c.spread * normal(gen);
  for (float& e : hs.kf) e = normal(gen);
  for (float& e : hs.vf) e = normal(gen);
  for (int i = 0; i < H * D; ++i) hs.qf[i] = 0.f;  // first query of batch 0: zeros (scale 0)
  if (c.scales == Scales::kTensor) {
    hs.sq = {quantize_tensor(hs.qf, &hs.q8)};
  } else {
    hs.sq = quantize_rows(hs.qf, B * Sq * H, D, &hs.q8);
  }
  if (c.scales == Scales::kTokenHead) {
    hs.sk = quantize_rows(hs.kf, B * Skv * H, D, &hs.k8);
  } else {
    hs.sk = {quantize_tensor(hs.kf, &hs.k8)};
  }
  hs.scales.q = hs.sq.data();
  hs.scales.qs = c.scales == Scales::kTensor ? AttnStrides{} : AttnStrides{static_cast<int64_t>(Sq) * H, H, 1};
  hs.scales.k = hs.sk.data();
  hs.scales.ks = c.scales == Scales::kTokenHead ? AttnStrides{static_cast<int64_t>(Skv) * H, H, 1} : AttnStrides{};
  hs.vh.resize(hs.vf.size());
  hs.vr.resize(hs.vf.size());
  for (size_t i = 0; i < hs.vf.size(); ++i) {
    hs.vh[i] = __float2half_rn(hs.vf[i]);
    hs.vr[i] = __half2float(hs.vh[i]);
  }
  if (c.mask == Mask::kWithFullyMaskedBatch) {
    std::bernoulli_distribution keep(0.7);
    hs.mask.resize(static_cast<size_t>(B) * Skv);
    for (int b = 0; b < B; ++b) {
      for (int j = 0; j < Skv; ++j) hs.mask[b * Skv + j] = b != B - 1 && keep(gen);
      if (b != B - 1) hs.mask[b * Skv] = 1;
    }
    p.key_mask = hs.mask.data();
  }
  hs.ref_i8.resize(static_cast<size_t>(B) * Sq * H * D);
  hs.ref_f32.resize(hs.ref_i8.size());
  for_batches(B, [&](int b) {
    AttnParams pb = p;
    pb.batch = 1;
    pb.key_mask = p.key_mask != nullptr ? p.key_mask + static_cast<size_t>(b) * Skv : nullptr;
    AttnI8Scales sb = hs.scales;
    sb.q += b * sb.qs.batch;
    sb.k += b * sb.ks.batch;
    const size_t qo = static_cast<size_t>(b) * p.q.batch, ko = static_cast<size_t>(b) * p.k.batch;
    mha_i8_ref(pb, hs.q8.data() + qo, hs.k8.data() + ko, hs.vr.data() + ko, sb, c.softmax, hs.ref_i8.data() + qo);
    mha_ref(pb, hs.qf.data() + qo, hs.kf.data() + ko, hs.vf.data() + ko, hs.ref_f32.data() + qo, 1);
  });
  return hs;
}

template <class T>
struct DeviceBuffer {
  explicit DeviceBuffer(size_t n) : count(n) { status = cudaMalloc(&ptr, std::max<size_t>(n, 1) * sizeof(T)); }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  T* ptr = nullptr;
  size_t count = 0;
  cudaError_t status = cudaSuccess;
};

template <class T>
cudaError_t upload(DeviceBuffer<T>& d, const std::vector<T>& h) {
  if (d.status != cudaSuccess) return d.status;
  return cudaMemcpy(d.ptr, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice);
}

// The device layouts of a case:
//   kSeparate: Q8 (B, Sq, H, D); K8 and V (B, H, Skv, D); O (B, Sq, H, D) rows padded by 8 halves.
//   kPackedQK: one int8 buffer (B, Skv, 2, H, D) holding Q and K (the queries are its first Sq tokens; the
//              slots past them hold junk); V (B, Skv, H, D); O (B, Sq, H, D).
// Scales keep the host's dense layout.
struct DeviceCase {
  AttnParams p;
  AttnI8Scales scales;
  std::vector<int8_t> q8, k8;
  std::vector<__half> v;
  size_t o_elems = 0;
  int64_t k_offset = 0;
};

DeviceCase layout_case(const Case& c, const Host& hs) {
  DeviceCase d;
  const int B = c.batch, H = c.heads, Sq = c.seq_q, Skv = c.seq_kv, D = c.head_dim;
  d.p = hs.p;
  d.p.key_mask = nullptr;
  const auto at = [](const AttnStrides& s, int b, int t, int h) { return b * s.batch + t * s.row + h * s.head; };
  if (c.layout == Layout::kSeparate) {
    d.p.k = d.p.v = AttnStrides{static_cast<int64_t>(H) * Skv * D, D, static_cast<int64_t>(Skv) * D};
    const int64_t o_row = static_cast<int64_t>(H) * D + 8;
    d.p.o = AttnStrides{Sq * o_row, o_row, D};
    d.q8 = hs.q8;
    d.k8.resize(hs.k8.size());
  } else {
    const int64_t row = 2 * static_cast<int64_t>(H) * D;
    d.p.q = d.p.k = AttnStrides{Skv * row, row, D};
    d.k_offset = static_cast<int64_t>(H) * D;
    d.q8.assign(static_cast<size_t>(B) * Skv * row, 0);
    for (size_t i = 0; i < d.q8.size(); ++i) d.q8[i] = static_cast<int8_t>(i * 37 % 255 - 127);  // junk
  }
  d.v.resize(hs.vh.size());
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      for (int t = 0; t < Sq && c.layout == Layout::kPackedQK; ++t)
        std::memcpy(&d.q8[at(d.p.q, b, t, h)], &hs.q8[at(hs.p.q, b, t, h)], D);
      for (int t = 0; t < Skv; ++t) {
        int8_t* kd = c.layout == Layout::kSeparate ? &d.k8[at(d.p.k, b, t, h)] : &d.q8[at(d.p.k, b, t, h) + d.k_offset];
        std::memcpy(kd, &hs.k8[at(hs.p.k, b, t, h)], D);
        std::memcpy(&d.v[at(d.p.v, b, t, h)], &hs.vh[at(hs.p.v, b, t, h)], D * sizeof(__half));
      }
    }
  d.o_elems = static_cast<size_t>(B) * d.p.o.batch;
  return d;
}

// Launches `row`, returns the output gathered as dense (B, Sq, H, D); padding_intact is false if anything
// outside the output rows changed from the poison.
struct RowRun {
  cudaError_t launch = cudaSuccess, copy = cudaSuccess;
  std::vector<float> out;
  bool padding_intact = true;
};

RowRun run_row(const Case& c, const Host& hs, const DeviceCase& d, int row) {
  RowRun r;
  DeviceBuffer<int8_t> q8(d.q8.size()), k8(d.k8.size());
  DeviceBuffer<__half> v(d.v.size()), o(d.o_elems);
  DeviceBuffer<float> sq(hs.sq.size()), sk(hs.sk.size());
  DeviceBuffer<uint8_t> mask(hs.mask.size());
  for (cudaError_t s : {upload(q8, d.q8), d.k8.empty() ? cudaSuccess : upload(k8, d.k8), upload(v, d.v),
                        upload(sq, hs.sq), upload(sk, hs.sk), hs.mask.empty() ? cudaSuccess : upload(mask, hs.mask),
                        o.status, cudaMemset(o.ptr, 0xFF, d.o_elems * sizeof(__half))})
    if (s != cudaSuccess) {
      r.copy = s;
      return r;
    }
  AttnParams p = d.p;
  p.key_mask = hs.mask.empty() ? nullptr : mask.ptr;
  AttnI8Scales sc = hs.scales;
  sc.q = sq.ptr;
  sc.k = sk.ptr;
  const int8_t* kp = c.layout == Layout::kSeparate ? k8.ptr : q8.ptr + d.k_offset;
  r.launch = mha_i8_fused(p, q8.ptr, kp, v.ptr, sc, o.ptr, row, nullptr);
  if (r.launch == cudaSuccess) r.launch = cudaDeviceSynchronize();
  if (r.launch != cudaSuccess) return r;
  std::vector<__half> raw(d.o_elems);
  r.copy = cudaMemcpy(raw.data(), o.ptr, raw.size() * sizeof(__half), cudaMemcpyDeviceToHost);
  std::vector<bool> written(raw.size(), false);
  r.out.assign(hs.ref_i8.size(), 0.f);
  for (int b = 0; b < p.batch; ++b)
    for (int i = 0; i < p.seq_q; ++i)
      for (int h = 0; h < p.heads; ++h)
        for (int e = 0; e < p.head_dim; ++e) {
          const int64_t src = b * p.o.batch + i * p.o.row + h * p.o.head + e;
          written[src] = true;
          r.out[b * hs.p.o.batch + i * hs.p.o.row + h * hs.p.o.head + e] = __half2float(raw[src]);
        }
  for (size_t i = 0; i < raw.size(); ++i) {
    uint16_t bits;
    std::memcpy(&bits, &raw[i], 2);
    if (!written[i] && bits != 0xFFFF) r.padding_intact = false;
  }
  return r;
}

class MhaI8CudaTest : public ::testing::TestWithParam<Case> {};

// Output rows (b, i, h) of D values whose every value is finite.
std::vector<bool> finite_rows(const std::vector<float>& x, int dim) {
  std::vector<bool> f(x.size() / dim, true);
  for (size_t i = 0; i < x.size(); ++i)
    if (!std::isfinite(x[i])) f[i / dim] = false;
  return f;
}
// The rows where keep[row] holds, concatenated.
std::vector<float> select_rows(const std::vector<float>& x, const std::vector<bool>& keep, int dim) {
  std::vector<float> out;
  for (size_t r = 0; r < keep.size(); ++r)
    if (keep[r]) out.insert(out.end(), x.begin() + r * dim, x.begin() + (r + 1) * dim);
  return out;
}

TEST_P(MhaI8CudaTest, MatchesReferences) {
  const Case c = GetParam();
  const Host hs = make_host(c, static_cast<uint32_t>(std::hash<std::string>{}(case_name(c))));
  const DeviceCase d = layout_case(c, hs);
  // Scale-max rows overflow fp16 where a logit passes the fixed offset by more than 16 log2 units: those output
  // rows are non-finite in the reference, must be non-finite in the kernel too, and are counted and left out
  // of the error norms. The row-max softmax has none.
  const std::vector<bool> keep = finite_rows(hs.ref_i8, c.head_dim);
  const size_t overflowed = static_cast<size_t>(std::count(keep.begin(), keep.end(), false));
  if (c.softmax == MhaI8Softmax::kRowMax) EXPECT_EQ(overflowed, 0u) << "the row-max reference overflowed";
  const std::vector<float> ref_i8 = select_rows(hs.ref_i8, keep, c.head_dim);
  const std::vector<float> ref_f32 = select_rows(hs.ref_f32, keep, c.head_dim);
  const double quant_err = rel_error(ref_i8, ref_f32);
  int rows = 0;
  for (size_t row = 0; row < kNumMhaI8Variants; ++row) {
    const MhaI8Variant& v = kMhaI8Variants[row];
    if (v.head_dim != c.head_dim || v.softmax != c.softmax) continue;
    ++rows;
    const RowRun r = run_row(c, hs, d, static_cast<int>(row));
    ASSERT_EQ(r.copy, cudaSuccess) << cudaGetErrorString(r.copy);
    ASSERT_EQ(r.launch, cudaSuccess) << v.name << ": " << cudaGetErrorString(r.launch);
    const std::vector<bool> kernel_finite = finite_rows(r.out, c.head_dim);
    size_t mismatched = 0;
    for (size_t i = 0; i < keep.size(); ++i) mismatched += kernel_finite[i] != keep[i];
    const std::vector<float> out = select_rows(r.out, keep, c.head_dim);
    const double err_ref = rel_error(out, ref_i8), err_f32 = rel_error(out, ref_f32);
    std::printf("[i8attn] %-52s %-38s vs ref %.2e  vs fp32 %.2e  (reference's quantisation error %.2e)  "
                "overflowed rows %zu of %zu\n",
                case_name(c).c_str(), v.name, err_ref, err_f32, quant_err, overflowed, keep.size());
    EXPECT_TRUE(r.padding_intact) << v.name << " wrote outside the output rows";
    EXPECT_EQ(mismatched, 0u) << v.name << ": rows finite in one of kernel and reference only";
    EXPECT_LE(err_ref, tol::kInt8AttnVsRef) << v.name;
    EXPECT_LE(err_f32, quant_err + tol::kInt8AttnVsRef) << v.name;
  }
  EXPECT_GT(rows, 0) << "no row for head_dim " << c.head_dim;
}

std::vector<Case> all_cases() {
  using S = MhaI8Softmax;
  const Layout sep = Layout::kSeparate, pk = Layout::kPackedQK;
  const Scales th = Scales::kTokenHead, tq = Scales::kTokenQTensorK, ts = Scales::kTensor;
  const Mask none = Mask::kNone, masked = Mask::kWithFullyMaskedBatch;
  std::vector<Case> cases = {
      {1, 12, 197, 197, 64, sep, th, none, S::kRowMax, 1.f},  {8, 12, 197, 197, 64, pk, tq, none, S::kRowMax, 1.f},
      {64, 12, 197, 197, 64, sep, th, none, S::kRowMax, 1.f}, {64, 12, 197, 197, 64, pk, tq, none, S::kRowMax, 3.f},
      {2, 12, 577, 577, 64, pk, th, none, S::kRowMax, 3.f},   {1, 12, 1025, 1025, 64, sep, ts, none, S::kRowMax, 1.f},
      {1, 12, 1370, 1370, 64, pk, th, none, S::kRowMax, 1.f}, {4, 12, 50, 50, 64, sep, tq, none, S::kRowMax, 3.f},
      {2, 12, 257, 257, 64, pk, th, none, S::kRowMax, 1.f},   {2, 12, 197, 197, 32, sep, th, none, S::kRowMax, 1.f},
      {2, 12, 257, 257, 32, pk, tq, none, S::kRowMax, 3.f},   {2, 12, 197, 197, 128, pk, th, none, S::kRowMax, 1.f},
      {2, 6, 577, 577, 128, sep, tq, none, S::kRowMax, 3.f},  {8, 12, 1, 197, 64, pk, th, none, S::kRowMax, 1.f},
      {4, 12, 1, 1370, 128, pk, tq, none, S::kRowMax, 1.f},   {3, 5, 131, 77, 64, sep, th, none, S::kRowMax, 1.f},
      {2, 3, 7, 5, 32, sep, tq, none, S::kRowMax, 1.f},       {3, 4, 70, 131, 64, sep, th, masked, S::kRowMax, 1.f},
      {3, 2, 1, 197, 128, pk, tq, masked, S::kRowMax, 1.f},   {3, 4, 197, 197, 32, pk, ts, masked, S::kRowMax, 3.f},
      // Scale-max rows (one K scale per tensor); at spread 3 some rows overflow fp16.
      {8, 12, 197, 197, 64, pk, tq, none, S::kScaleMax, 1.f}, {64, 12, 197, 197, 64, sep, tq, none, S::kScaleMax, 3.f},
      {2, 12, 577, 577, 64, sep, ts, none, S::kScaleMax, 1.f}, {3, 5, 131, 77, 64, sep, tq, masked, S::kScaleMax, 1.f},
      {2, 12, 197, 197, 32, pk, tq, none, S::kScaleMax, 1.f}, {2, 12, 197, 197, 128, sep, ts, none, S::kScaleMax, 1.f},
      {8, 12, 1, 197, 64, pk, tq, none, S::kScaleMax, 1.f},
  };
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Shapes, MhaI8CudaTest, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return case_name(info.param); });

int first_row(int head_dim, MhaI8Softmax softmax) {
  for (size_t i = 0; i < kNumMhaI8Variants; ++i)
    if (kMhaI8Variants[i].head_dim == head_dim && kMhaI8Variants[i].softmax == softmax) return static_cast<int>(i);
  return -1;
}

// Q and K all +127 (or K all -127) with per-tensor scales 0.1: logits +-1290 (natural units) against the
// scale-max offset 20.2. Above it by far more than 11.1: the scale-max row's exponentials overflow fp16 and the
// output is not finite (as the reference's); below it by more than 16.6: every p underflows and the output is
// zeros; the row-max softmax gives the exact answer (V's mean) for both.
TEST(MhaI8ScaleMax, OverflowAndUnderflowAreAsDocumented) {
  const int D = 64, S = 20;
  const Case c{1, 1, S, S, D, Layout::kSeparate, Scales::kTensor, Mask::kNone, MhaI8Softmax::kScaleMax, 1.f};
  for (int8_t k_value : {int8_t{127}, int8_t{-127}}) {
    Host hs = make_host(c, 1);
    std::fill(hs.q8.begin(), hs.q8.end(), int8_t{127});
    std::fill(hs.k8.begin(), hs.k8.end(), k_value);
    hs.sq = {0.1f};
    hs.sk = {0.1f};
    hs.scales.q = hs.sq.data();
    hs.scales.k = hs.sk.data();
    std::vector<double> mean(D, 0.0);
    for (int j = 0; j < S; ++j)
      for (int e = 0; e < D; ++e) mean[e] += hs.vr[j * D + e] / S;
    for (MhaI8Softmax softmax : {MhaI8Softmax::kScaleMax, MhaI8Softmax::kRowMax}) {
      std::vector<float> ref(static_cast<size_t>(S) * D);
      mha_i8_ref(hs.p, hs.q8.data(), hs.k8.data(), hs.vr.data(), hs.scales, softmax, ref.data());
      const DeviceCase d = layout_case(c, hs);
      const RowRun r = run_row(c, hs, d, first_row(D, softmax));
      ASSERT_EQ(r.launch, cudaSuccess) << cudaGetErrorString(r.launch);
      bool finite = true, zeros = true, mean_ok = true;
      for (size_t i = 0; i < r.out.size(); ++i) {
        finite = finite && std::isfinite(r.out[i]);
        zeros = zeros && r.out[i] == 0.f;
        mean_ok = mean_ok && std::fabs(r.out[i] - mean[i % D]) <= 2e-3 * (1 + std::fabs(mean[i % D]));
      }
      if (softmax == MhaI8Softmax::kRowMax) {
        EXPECT_TRUE(mean_ok) << "row max, K = " << int{k_value};
      } else if (k_value > 0) {
        EXPECT_FALSE(finite) << "scale-max overflow should give a non-finite row";
        EXPECT_FALSE(std::isfinite(ref[0])) << "the reference models the overflow";
      } else {
        EXPECT_TRUE(zeros) << "scale-max underflow gives zeros";
        EXPECT_EQ(ref[0], 0.f) << "the reference models the underflow";
      }
    }
  }
}

// mha_i8_fused_i8out (the runtime's INT8 attention writing proj's int8 input) on every row it is built for, over
// the runtime's layout (packed int8 Q|K with per-(token, head) scales, fp16 V): codes against rne(o / s) of
// mha_i8_ref's output o, s = max |o| / 120 (some codes near the top), output poisoned with -128 (no code the
// kernel writes). The kernel's fp32 O is within tol::kInt8AttnVsRef of the reference, far below a step, so a
// code can only sit on the other side of a rounding tie: never more than kInt8AttnOutMaxSteps, on at most
// kInt8AttnOutFlipFactor x kInt8AttnVsRef x rms(code) of the codes plus 8 (base/tolerances.h). Full blocks (B1,
// B8 x H12 x S197), the class-token tail (Sq = 1), a masked odd shape, D = 32 (vit-digits) and 128; rows not
// built (scale-max) or of another head dim refuse.
TEST(MhaI8Int8Output, CodesMatchTheReferenceQuantized) {
  const std::vector<Case> cases = {
      {1, 12, 197, 197, 64, Layout::kPackedQK, Scales::kTokenHead, Mask::kNone, MhaI8Softmax::kRowMax, 1.f},
      {8, 12, 197, 197, 64, Layout::kPackedQK, Scales::kTokenHead, Mask::kNone, MhaI8Softmax::kRowMax, 3.f},
      {8, 12, 1, 197, 64, Layout::kPackedQK, Scales::kTokenHead, Mask::kNone, MhaI8Softmax::kRowMax, 1.f},
      {3, 4, 50, 50, 64, Layout::kPackedQK, Scales::kTokenHead, Mask::kWithFullyMaskedBatch, MhaI8Softmax::kRowMax,
       1.f},
      {4, 2, 17, 17, 32, Layout::kPackedQK, Scales::kTokenHead, Mask::kNone, MhaI8Softmax::kRowMax, 1.f},  // digits
      {2, 6, 197, 197, 128, Layout::kPackedQK, Scales::kTokenHead, Mask::kNone, MhaI8Softmax::kRowMax, 1.f},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(case_name(c));
    const Host hs = make_host(c, 7);
    const DeviceCase d = layout_case(c, hs);
    float amax = 0.f;
    for (float x : hs.ref_i8) amax = std::max(amax, std::fabs(x));
    const std::vector<float> o_scale = {amax / 120.f};
    std::vector<int8_t> want(hs.ref_i8.size());
    double sum_sq = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      const float q = std::nearbyint(hs.ref_i8[i] / o_scale[0]);
      want[i] = static_cast<int8_t>(std::max(-127.f, std::min(127.f, q)));
      sum_sq += static_cast<double>(want[i]) * want[i];
    }
    const double rms_code = std::sqrt(sum_sq / static_cast<double>(want.size()));
    DeviceBuffer<int8_t> q8(d.q8.size()), o(d.o_elems);
    DeviceBuffer<__half> v(d.v.size());
    DeviceBuffer<float> sq(hs.sq.size()), sk(hs.sk.size()), os(1);
    DeviceBuffer<uint8_t> mask(hs.mask.size());
    EV_ASSERT_CUDA(upload(q8, d.q8));
    EV_ASSERT_CUDA(upload(v, d.v));
    EV_ASSERT_CUDA(upload(sq, hs.sq));
    EV_ASSERT_CUDA(upload(sk, hs.sk));
    EV_ASSERT_CUDA(upload(os, o_scale));
    if (!hs.mask.empty()) EV_ASSERT_CUDA(upload(mask, hs.mask));
    AttnParams p = d.p;
    p.key_mask = hs.mask.empty() ? nullptr : mask.ptr;
    AttnI8Scales sc = hs.scales;
    sc.q = sq.ptr;
    sc.k = sk.ptr;
    int built = 0;
    for (size_t row = 0; row < kNumMhaI8Variants; ++row) {
      const MhaI8Variant& variant = kMhaI8Variants[row];
      EV_ASSERT_CUDA(cudaMemset(o.ptr, 0x80, d.o_elems));
      const cudaError_t e =
          mha_i8_fused_i8out(p, q8.ptr, q8.ptr + d.k_offset, v.ptr, sc, o.ptr, os.ptr, static_cast<int>(row), nullptr);
      if (variant.head_dim != c.head_dim) {
        EXPECT_EQ(e, cudaErrorNotSupported) << variant.name;
        continue;
      }
      if (!mha_i8_row_has_i8out(variant)) {
        EXPECT_EQ(e, cudaErrorNotSupported) << variant.name << " has no int8-output kernel";
        continue;
      }
      ASSERT_EQ(e, cudaSuccess) << variant.name << ": " << cudaGetErrorString(e);
      EV_ASSERT_CUDA(cudaDeviceSynchronize());
      ++built;
      std::vector<int8_t> raw(d.o_elems);
      EV_ASSERT_CUDA(cudaMemcpy(raw.data(), o.ptr, raw.size(), cudaMemcpyDeviceToHost));
      int64_t flipped = 0, worst = 0, poison = 0;
      for (int b = 0; b < p.batch; ++b)
        for (int i = 0; i < p.seq_q; ++i)
          for (int h = 0; h < p.heads; ++h)
            for (int x = 0; x < p.head_dim; ++x) {
              const int got = raw[b * p.o.batch + i * p.o.row + h * p.o.head + x];
              const int ref = want[b * hs.p.o.batch + i * hs.p.o.row + h * hs.p.o.head + x];
              poison += got == -128;
              flipped += got != ref;
              worst = std::max<int64_t>(worst, std::abs(got - ref));
            }
      const double allowed = tol::kInt8AttnOutFlipFactor * tol::kInt8AttnVsRef * rms_code *
                                 static_cast<double>(want.size()) + 8;
      EXPECT_EQ(poison, 0) << variant.name << ": outputs not written";
      EXPECT_LE(worst, tol::kInt8AttnOutMaxSteps) << variant.name;
      EXPECT_LE(static_cast<double>(flipped), allowed) << variant.name << " (rms code " << rms_code << ")";
      std::printf("%-40s %-32s codes off by one %lld of %zu (allowed %.0f)\n", case_name(c).c_str(), variant.name,
                  static_cast<long long>(flipped), want.size(), allowed);
    }
    EXPECT_GT(built, 0) << "no int8-output row for head_dim " << c.head_dim;
  }
  // One K scale per (batch, head) is not the runtime's layout: refused.
  const Case c{1, 2, 8, 8, 64, Layout::kPackedQK, Scales::kTokenQTensorK, Mask::kNone, MhaI8Softmax::kRowMax, 1.f};
  const Host hs = make_host(c, 3);
  const DeviceCase d = layout_case(c, hs);
  DeviceBuffer<int8_t> q8(d.q8.size()), o(d.o_elems);
  DeviceBuffer<__half> v(d.v.size());
  DeviceBuffer<float> s(64);
  AttnI8Scales sc = hs.scales;
  sc.q = sc.k = s.ptr;
  const int row = first_row(64, MhaI8Softmax::kRowMax);
  EXPECT_EQ(mha_i8_fused_i8out(d.p, q8.ptr, q8.ptr + d.k_offset, v.ptr, sc, o.ptr, s.ptr, row, nullptr),
            cudaErrorNotSupported);
  sc.ks = AttnStrides{8 * 2, 2, 1};
  EXPECT_EQ(mha_i8_fused_i8out(d.p, q8.ptr, q8.ptr + d.k_offset, v.ptr, sc, o.ptr, nullptr, row, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

TEST(MhaI8Launcher, RejectsWhatItCannotServe) {
  DeviceBuffer<int8_t> qk(4096);
  DeviceBuffer<__half> v(4096), o(4096);
  DeviceBuffer<float> s(64);
  ASSERT_EQ(qk.status, cudaSuccess);
  AttnParams p;
  p.batch = 1; p.heads = 1; p.seq_q = 8; p.seq_kv = 8; p.head_dim = 64; p.scale = 0.125f;
  p.q = p.k = p.v = p.o = AttnStrides{8 * 64, 64, 64};
  AttnI8Scales sc;
  sc.q = sc.k = s.ptr;
  const int row64 = first_row(64, MhaI8Softmax::kRowMax), smax64 = first_row(64, MhaI8Softmax::kScaleMax);
  EXPECT_EQ(mha_i8_fused(p, qk.ptr, qk.ptr, v.ptr, sc, o.ptr, row64, nullptr), cudaSuccess);
  EXPECT_EQ(mha_i8_fused(p, qk.ptr + 1, qk.ptr, v.ptr, sc, o.ptr, row64, nullptr), cudaErrorInvalidValue);
  AttnParams odd = p;
  odd.q.row = 72;  // not a multiple of 16 int8 elements
  EXPECT_EQ(mha_i8_fused(odd, qk.ptr, qk.ptr, v.ptr, sc, o.ptr, row64, nullptr), cudaErrorInvalidValue);
  AttnI8Scales per_key = sc;
  per_key.ks.row = 1;
  EXPECT_EQ(mha_i8_fused(p, qk.ptr, qk.ptr, v.ptr, per_key, o.ptr, smax64, nullptr), cudaErrorNotSupported);
  AttnParams d32 = p;
  d32.head_dim = 32;
  EXPECT_EQ(mha_i8_fused(d32, qk.ptr, qk.ptr, v.ptr, sc, o.ptr, row64, nullptr), cudaErrorNotSupported);
  AttnParams zero_scale = p;
  zero_scale.scale = 0.f;
  EXPECT_EQ(mha_i8_fused(zero_scale, qk.ptr, qk.ptr, v.ptr, sc, o.ptr, row64, nullptr), cudaErrorInvalidValue);
  AttnI8Scales no_scales;
  EXPECT_EQ(mha_i8_fused(p, qk.ptr, qk.ptr, v.ptr, no_scales, o.ptr, row64, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

TEST(MhaI8Launcher, EveryRowFitsThisDevice) {
  int device = 0, major = 0, minor = 0, optin = 0;
  EV_ASSERT_CUDA(cudaGetDevice(&device));
  EV_ASSERT_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  EV_ASSERT_CUDA(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  EV_ASSERT_CUDA(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  for (int d : {32, 64, 128})
    for (MhaI8Softmax sm : {MhaI8Softmax::kRowMax, MhaI8Softmax::kScaleMax}) {
      const MhaI8Support s = mha_i8_supports({major * 10 + minor, optin, d, sm, false});
      EXPECT_TRUE(s.ok) << s.reason;
    }
  for (size_t i = 0; i < kNumMhaI8Variants; ++i) {
    int blocks = 0;
    EV_ASSERT_CUDA(mha_i8_resident_blocks(static_cast<int>(i), &blocks));
    EXPECT_GE(blocks, 1) << kMhaI8Variants[i].name;
  }
}

}  // namespace
}  // namespace edgevit
