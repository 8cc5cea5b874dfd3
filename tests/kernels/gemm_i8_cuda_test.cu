// The W8A8 GEMM kernels (kernels/cuda/gemm_i8.h) against the CPU reference (kernels/cpu/gemm_i8_ref.h),
// through the launcher the runtime calls: every variant x epilogue x activation-scale mode (per tensor, per
// token) at odd M (1, 17, 197, 1000), N in {64, 768, 2304}, K in {32, 768, 3072}, and a small set with N
// and K that overhang the tiles (N = 200, K = 96) and one deep pipeline (K = 544) for the sanitizers. Split-K
// rows share one zeroed workspace per shape, which every launch must leave zeroed. Outputs are poisoned (NaN,
// int8 -128, which no epilogue writes) before each launch, except the residual's input.
// Unsigned activations (x_u8, fc2's input: codes 0..255) run through every variant with the kF32 (exactness)
// and kF16BiasResidual / kF32BiasResidual (fc2's) epilogues; kI8BiasGelu writes unsigned codes (poisoned
// with 0x80, which is a valid code: an unwritten output still shows unless the reference holds 128 there).
// Rule: every output equals the reference's bit for bit. The int32 accumulation is exact (kF32 with unit
// scales and no bias equals float(acc)); the epilogue makes the same rounded fp32 operations in the same
// order (gemm_i8_ref.h), so fp32 outputs (kF32, kF32BiasResidual over an fp32 residual that fp16 cannot
// hold) are equal, fp16 outputs equal the reference's fp32 value rounded to nearest even, and int8 outputs
// are equal. kQkHeadI8 (qkv's int8 Q|K per (token, head) and fp16 V for the INT8 attention) has its own test.
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cpu/gemm_i8_ref.h"
#include "kernels/cuda/gemm_i8.h"
#include "tests/kernels/gemm_i8_problem.h"
#include "tests/testutil/cuda_main.h"

namespace edgevit {
namespace {

using gemmi8test::DeviceBuffer;
using gemmi8test::make_problem;
using gemmi8test::Problem;
using gemmi8test::upload;

// Mismatches of one run against the reference, with the first few described.
struct Mismatches {
  int64_t count = 0;
  std::ostringstream first;
  void add(int64_t i, double got, double want) {
    if (count++ < 5) first << " [" << i << "] got " << got << " want " << want << ";";
  }
};

void check_output(const Problem& p, GemmI8Epilogue e, const std::vector<float>& ref, const std::vector<int8_t>& ref_i8,
                  const void* got, Mismatches* mm) {
  const int64_t total = p.m * p.n;
  if (gemm_i8_epilogue_is_f32(e)) {
    const float* g = static_cast<const float*>(got);
    for (int64_t i = 0; i < total; ++i)
      if (!(g[i] == ref[i])) mm->add(i, g[i], ref[i]);
  } else if (gemm_i8_epilogue_is_i8(e)) {
    const int8_t* g = static_cast<const int8_t*>(got);
    for (int64_t i = 0; i < total; ++i)
      if (g[i] != ref_i8[i]) mm->add(i, g[i], ref_i8[i]);
  } else {
    const __half* g = static_cast<const __half*>(got);
    for (int64_t i = 0; i < total; ++i) {
      const float r16 = __half2float(__float2half_rn(ref[i]));
      const float v = __half2float(g[i]);
      if (!(v == r16)) mm->add(i, v, r16);
    }
  }
}

size_t out_bytes(GemmI8Epilogue e) {
  return gemm_i8_epilogue_is_f32(e) ? 4 : gemm_i8_epilogue_is_i8(e) ? 1 : 2;
}

// Unsigned activations through one variant (a: its arguments for the signed run, scales on the device):
// int32 exactness with unit scales, then fc2's epilogue per tensor and per token.
void check_u8_input(const Problem& p, gpu::GemmI8Args a, const uint8_t* dxu, const std::vector<__half>& residual16,
                    float* dy, const char* name, std::vector<float>* ref, std::vector<uint8_t>* got) {
  const int64_t m = p.m, n = p.n;
  a.x = reinterpret_cast<const int8_t*>(dxu);
  a.x_u8 = true;
  const std::vector<float> ones(n, 1.f);
  DeviceBuffer<float> dones(n);
  upload(dones, ones);
  a.sx = dones.p;
  a.sx_per_token = false;
  a.sw = dones.p;
  a.bias = nullptr;
  a.epilogue = GemmI8Epilogue::kF32;
  ASSERT_EQ(cudaMemset(dy, 0xff, m * n * 4), cudaSuccess);
  ASSERT_EQ(gpu::gemm_i8(a, nullptr), cudaSuccess) << name;
  ASSERT_EQ(cudaMemcpy(got->data(), dy, m * n * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  int64_t inexact = 0;
  for (int64_t i = 0; i < m * n; ++i)
    inexact += reinterpret_cast<const float*>(got->data())[i] != static_cast<float>(p.acc_u8[i]);
  EXPECT_EQ(inexact, 0) << name << ": uint8 x int8 accumulation not exact";
  DeviceBuffer<float> dsx_t(1), dsx_m(m), dsw(n), dbias(n);
  upload(dsx_t, p.sx_tensor);
  upload(dsx_m, p.sx_token);
  upload(dsw, p.sw);
  upload(dbias, p.bias);
  // fc2's epilogue: into the fp16 residual, or the fp32 one (runtime.int8_float: fp32).
  for (GemmI8Epilogue e : {GemmI8Epilogue::kF16BiasResidual, GemmI8Epilogue::kF32BiasResidual})
    for (int per_token = 0; per_token < 2; ++per_token) {
      const bool f32 = e == GemmI8Epilogue::kF32BiasResidual;
      GemmI8RefArgs r{m, n, p.k, reinterpret_cast<const int8_t*>(p.xu.data()), p.w.data(),
                      per_token ? p.sx_token.data() : p.sx_tensor.data(), per_token != 0, p.sw.data(), p.bias.data(),
                      e, 1.f};
      r.x_u8 = true;
      gemm_i8_epilogue_ref(r, p.acc_u8.data(), f32 ? p.residual32.data() : p.residual.data(), ref->data(), nullptr);
      a.sx = per_token ? dsx_m.p : dsx_t.p;
      a.sx_per_token = per_token != 0;
      a.sw = dsw.p;
      a.bias = dbias.p;
      a.epilogue = e;
      if (f32) {
        ASSERT_EQ(cudaMemcpy(dy, p.residual32.data(), m * n * 4, cudaMemcpyHostToDevice), cudaSuccess);
      } else {
        ASSERT_EQ(cudaMemcpy(dy, residual16.data(), m * n * 2, cudaMemcpyHostToDevice), cudaSuccess);
      }
      ASSERT_EQ(gpu::gemm_i8(a, nullptr), cudaSuccess) << name;
      ASSERT_EQ(cudaMemcpy(got->data(), dy, m * n * out_bytes(e), cudaMemcpyDeviceToHost), cudaSuccess);
      Mismatches mm;
      check_output(p, e, *ref, {}, got->data(), &mm);
      EXPECT_EQ(mm.count, 0) << name << " u8 input " << gemm_i8_epilogue_name(e)
                             << (per_token ? " per-token" : " per-tensor") << ":" << mm.first.str();
    }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the scale buffers are freed on return
}

// Every variant x epilogue x scale mode at one shape, then the same variant with unsigned activations.
void check_shape(int64_t m, int64_t n, int64_t k) {
  SCOPED_TRACE(::testing::Message() << "M " << m << " N " << n << " K " << k);
  const Problem p = make_problem(m, n, k, static_cast<uint32_t>(m * 131 + n * 7 + k));
  DeviceBuffer<int8_t> dx(p.x.size()), dw(p.w.size());
  DeviceBuffer<uint8_t> dxu(p.xu.size());
  DeviceBuffer<float> dsx_t(1), dsx_m(m), dsw(n), dbias(n), dy(m * n);
  upload(dxu, p.xu);
  upload(dx, p.x);
  upload(dw, p.w);
  upload(dsx_t, p.sx_tensor);
  upload(dsx_m, p.sx_token);
  upload(dsw, p.sw);
  upload(dbias, p.bias);
  std::vector<__half> residual16(m * n);
  for (int64_t i = 0; i < m * n; ++i) residual16[i] = __float2half_rn(p.residual[i]);
  const std::vector<float> ones_n(n, 1.f), one = {1.f};
  DeviceBuffer<float> dones_n(n), done(1);
  upload(dones_n, ones_n);
  upload(done, one);

  int count = 0;
  const gpu::GemmI8Variant* rows = gpu::gemm_i8_variants(&count);
  size_t ws_bytes = 0;  // split-K rows: one zeroed workspace, left zeroed by every launch
  for (int vi = 0; vi < count; ++vi) {
    gpu::GemmI8Args probe;
    probe.m = m, probe.n = n, probe.k = k, probe.variant = vi;
    ws_bytes = std::max(ws_bytes, gpu::gemm_i8_workspace_bytes(probe));
  }
  DeviceBuffer<uint8_t> dws(ws_bytes);
  ASSERT_EQ(cudaMemset(dws.p, 0, std::max<size_t>(ws_bytes, 1)), cudaSuccess);
  std::vector<float> ref(m * n);
  std::vector<int8_t> ref_i8(m * n);
  std::vector<uint8_t> got(m * n * 4);
  for (int vi = 0; vi < count; ++vi) {
    gpu::GemmI8Args a;
    a.m = m;
    a.n = n;
    a.k = k;
    a.x = dx.p;
    a.w = dw.p;
    a.y = dy.p;
    a.variant = vi;
    a.workspace = dws.p;
    // int32 exactness: unit scales, no bias.
    a.sx = done.p;
    a.sw = dones_n.p;
    a.epilogue = GemmI8Epilogue::kF32;
    ASSERT_EQ(cudaMemset(dy.p, 0xff, m * n * 4), cudaSuccess);
    ASSERT_EQ(gpu::gemm_i8(a, nullptr), cudaSuccess) << rows[vi].name;
    ASSERT_EQ(cudaMemcpy(got.data(), dy.p, m * n * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    int64_t inexact = 0;
    for (int64_t i = 0; i < m * n; ++i)
      inexact += reinterpret_cast<const float*>(got.data())[i] != static_cast<float>(p.acc[i]);
    EXPECT_EQ(inexact, 0) << rows[vi].name << ": int32 accumulation not exact";

    for (int ei = 0; ei < kGemmI8EpilogueCount; ++ei) {
      for (int per_token = 0; per_token < 2; ++per_token) {
        const auto e = static_cast<GemmI8Epilogue>(ei);
        if (gemm_i8_epilogue_is_qk_head(e)) continue;  // its own shapes: QkHeadEpilogueEqualsTheReference
        GemmI8RefArgs r{m, n, k, p.x.data(), p.w.data(), per_token ? p.sx_token.data() : p.sx_tensor.data(),
                        per_token != 0, p.sw.data(), p.bias.data(), e, 1.f};
        if (gemm_i8_epilogue_is_i8(e)) {  // out_scale: the largest value maps to 150 (u8: 300), so some saturate
          GemmI8RefArgs r32 = r;
          r32.epilogue = gemm_i8_epilogue_has_gelu(e) ? GemmI8Epilogue::kF16BiasGelu : GemmI8Epilogue::kF16Bias;
          gemm_i8_epilogue_ref(r32, p.acc.data(), nullptr, ref.data(), nullptr);
          float mx = 0.f;
          for (float v : ref) mx = std::max(mx, std::fabs(v));
          r.out_scale = mx > 0.f ? mx / (gemm_i8_epilogue_is_u8(e) ? 300.f : 150.f) : 1.f;
        }
        const bool f32_residual = e == GemmI8Epilogue::kF32BiasResidual;
        gemm_i8_epilogue_ref(r, p.acc.data(), f32_residual ? p.residual32.data() : p.residual.data(), ref.data(),
                             ref_i8.data());
        a.sx = per_token ? dsx_m.p : dsx_t.p;
        a.sx_per_token = per_token != 0;
        a.sw = dsw.p;
        a.bias = r.bias ? dbias.p : nullptr;
        a.epilogue = e;
        a.out_scale = r.out_scale;
        if (e == GemmI8Epilogue::kF16BiasResidual) {
          ASSERT_EQ(cudaMemcpy(dy.p, residual16.data(), m * n * 2, cudaMemcpyHostToDevice), cudaSuccess);
        } else if (f32_residual) {
          ASSERT_EQ(cudaMemcpy(dy.p, p.residual32.data(), m * n * 4, cudaMemcpyHostToDevice), cudaSuccess);
        } else {
          ASSERT_EQ(cudaMemset(dy.p, gemm_i8_epilogue_is_i8(e) ? 0x80 : 0xff, m * n * 4), cudaSuccess);
        }
        ASSERT_EQ(gpu::gemm_i8(a, nullptr), cudaSuccess);
        ASSERT_EQ(cudaMemcpy(got.data(), dy.p, m * n * out_bytes(e), cudaMemcpyDeviceToHost), cudaSuccess);
        Mismatches mm;
        check_output(p, e, ref, ref_i8, got.data(), &mm);
        EXPECT_EQ(mm.count, 0) << rows[vi].name << " " << gemm_i8_epilogue_name(e)
                               << (per_token ? " per-token" : " per-tensor") << ":" << mm.first.str();
      }
    }
    check_u8_input(p, a, dxu.p, residual16, dy.p, rows[vi].name, &ref, &got);
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  // Split rows' counters are back to zero (the next launch relies on it).
  const size_t counter_bytes = std::min<size_t>(ws_bytes, gpu::kGemmI8CounterBytes);
  std::vector<uint8_t> counters(counter_bytes);
  ASSERT_EQ(cudaMemcpy(counters.data(), dws.p, counter_bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(std::count(counters.begin(), counters.end(), 0), static_cast<std::ptrdiff_t>(counter_bytes))
      << "split-K counters not reset";
}

TEST(GemmI8Cuda, SmallShapesOverhangingTiles) {
  for (int64_t m : {1, 17, 197})
    for (int64_t n : {64, 200})
      for (int64_t k : {32, 96, 768}) check_shape(m, n, k);
}

// K = 544: 8.5 stages through every variant's pipeline (the sanitizer's racecheck runs this one).
TEST(GemmI8Cuda, DeepPipelineOneShape) { check_shape(130, 264, 544); }

TEST(GemmI8Cuda, VitShapes) {
  for (int64_t m : {1, 17, 197, 1000})
    for (int64_t n : {64, 768, 2304})
      for (int64_t k : {32, 768, 3072}) check_shape(m, n, k);
}

// kQkHeadI8 (qkv for the INT8 attention) on every row that serves the head dim (gemm_i8_variant_serves_qk_head;
// the others must refuse): N = 3E with the first 2E columns Q and K, int8 codes and per-(row, head) scales equal
// to gemm_i8_head_quantize_ref's bit for bit, V equal to the reference's fp32 value rounded to fp16; outputs
// poisoned (codes -128, scales and V NaN). Head dims 32, 64 (ViT-B: E 768, K 768) and 128, per tensor and per
// token, M 1 .. 1000.
void check_qk_head(int64_t m, int64_t e, int64_t d, int64_t k) {
  SCOPED_TRACE(::testing::Message() << "M " << m << " E " << e << " D " << d << " K " << k);
  const int64_t n = 3 * e, qk = 2 * e, heads = qk / d;
  const Problem p = make_problem(m, n, k, static_cast<uint32_t>(m * 31 + e + d));
  DeviceBuffer<int8_t> dx(p.x.size()), dw(p.w.size()), dq(m * qk);
  DeviceBuffer<float> dsx_t(1), dsx_m(m), dsw(n), dbias(n), dscales(m * heads);
  DeviceBuffer<__half> dv(m * e);
  upload(dx, p.x);
  upload(dw, p.w);
  upload(dsx_t, p.sx_tensor);
  upload(dsx_m, p.sx_token);
  upload(dsw, p.sw);
  upload(dbias, p.bias);
  int count = 0;
  const gpu::GemmI8Variant* rows = gpu::gemm_i8_variants(&count);
  std::vector<float> ref(m * n), ref_scales(m * heads), got_scales(m * heads);
  std::vector<int8_t> ref_q(m * qk), got_q(m * qk);
  std::vector<__half> got_v(m * e);
  int served = 0;
  for (int per_token = 0; per_token < 2; ++per_token) {
    GemmI8RefArgs r{m, n, k, p.x.data(), p.w.data(), per_token ? p.sx_token.data() : p.sx_tensor.data(),
                    per_token != 0, p.sw.data(), p.bias.data(), GemmI8Epilogue::kQkHeadI8, 1.f};
    r.qk_cols = qk;
    r.head_dim = d;
    r.y_qk_scales = ref_scales.data();
    gemm_i8_epilogue_ref(r, p.acc.data(), nullptr, ref.data(), ref_q.data());
    for (int vi = 0; vi < count; ++vi) {
      if (rows[vi].split_k > 1) continue;  // no workspace here; the split rows' fan-in is the other epilogues'
      gpu::GemmI8Args a;
      a.m = m, a.n = n, a.k = k, a.x = dx.p, a.w = dw.p, a.variant = vi;
      a.sx = per_token ? dsx_m.p : dsx_t.p;
      a.sx_per_token = per_token != 0;
      a.sw = dsw.p;
      a.bias = dbias.p;
      a.epilogue = GemmI8Epilogue::kQkHeadI8;
      a.y = dq.p;
      a.y_v = dv.p;
      a.qk_scales = dscales.p;
      a.qk_cols = qk;
      a.head_dim = d;
      if (!gpu::gemm_i8_variant_serves_qk_head(rows[vi], d, qk, n)) {
        EXPECT_EQ(gpu::gemm_i8(a, nullptr), cudaErrorInvalidValue) << rows[vi].name;
        continue;
      }
      ++served;
      ASSERT_EQ(cudaMemset(dq.p, 0x80, m * qk), cudaSuccess);
      ASSERT_EQ(cudaMemset(dscales.p, 0xff, m * heads * 4), cudaSuccess);
      ASSERT_EQ(cudaMemset(dv.p, 0xff, m * e * 2), cudaSuccess);
      ASSERT_EQ(gpu::gemm_i8(a, nullptr), cudaSuccess) << rows[vi].name;
      ASSERT_EQ(cudaMemcpy(got_q.data(), dq.p, m * qk, cudaMemcpyDeviceToHost), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(got_scales.data(), dscales.p, m * heads * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(got_v.data(), dv.p, m * e * 2, cudaMemcpyDeviceToHost), cudaSuccess);
      Mismatches mq, ms, mv;
      for (int64_t i = 0; i < m * qk; ++i)
        if (got_q[i] != ref_q[i]) mq.add(i, got_q[i], ref_q[i]);
      for (int64_t i = 0; i < m * heads; ++i)
        if (!(got_scales[i] == ref_scales[i])) ms.add(i, got_scales[i], ref_scales[i]);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < e; ++j) {
          const float want = __half2float(__float2half_rn(ref[i * n + qk + j]));
          const float got = __half2float(got_v[i * e + j]);
          if (!(got == want)) mv.add(i * e + j, got, want);
        }
      const char* mode = per_token ? " per-token" : " per-tensor";
      EXPECT_EQ(mq.count, 0) << rows[vi].name << mode << " Q/K codes:" << mq.first.str();
      EXPECT_EQ(ms.count, 0) << rows[vi].name << mode << " scales:" << ms.first.str();
      EXPECT_EQ(mv.count, 0) << rows[vi].name << mode << " V:" << mv.first.str();
    }
  }
  EXPECT_GT(served, 0) << "no row writes kQkHeadI8 for head_dim " << d;
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

TEST(GemmI8Cuda, QkHeadEpilogueEqualsTheReference) {
  for (int64_t m : {1, 17, 197}) {
    check_qk_head(m, 128, 64, 96);
    check_qk_head(m, 128, 32, 96);
    check_qk_head(m, 256, 128, 64);
  }
  check_qk_head(1000, 768, 64, 768);  // ViT-B's qkv at batch ~5
}

TEST(GemmI8Cuda, RejectsBadArguments) {
  DeviceBuffer<int8_t> dx(64 * 64), dw(64 * 64);
  DeviceBuffer<float> ds(64), dy(64 * 64);
  gpu::GemmI8Args a;
  a.m = 64;
  a.n = 64;
  a.k = 64;
  a.x = dx.p;
  a.w = dw.p;
  a.sx = ds.p;
  a.sw = ds.p;
  a.y = dy.p;
  a.variant = 0;
  EXPECT_EQ(gpu::gemm_i8(a, nullptr), cudaSuccess);
  int count = 0;
  gpu::gemm_i8_variants(&count);
  for (int bad : {-1, count}) {
    gpu::GemmI8Args b = a;
    b.variant = bad;
    EXPECT_EQ(gpu::gemm_i8(b, nullptr), cudaErrorInvalidValue) << "variant " << bad;
  }
  gpu::GemmI8Args b = a;
  b.k = 48;  // not a multiple of 32
  EXPECT_EQ(gpu::gemm_i8(b, nullptr), cudaErrorInvalidValue);
  b = a;
  b.n = 60;  // not a multiple of 8
  EXPECT_EQ(gpu::gemm_i8(b, nullptr), cudaErrorInvalidValue);
  b = a;
  b.x = dx.p + 1;  // misaligned
  EXPECT_EQ(gpu::gemm_i8(b, nullptr), cudaErrorInvalidValue);
  b = a;
  b.epilogue = GemmI8Epilogue::kI8Bias;
  b.out_scale = 0.f;
  EXPECT_EQ(gpu::gemm_i8(b, nullptr), cudaErrorInvalidValue);
  b = a;
  b.x_u8 = true;  // unsigned activations: kF32, kF32BiasResidual and kF16BiasResidual only
  b.epilogue = GemmI8Epilogue::kF32;
  EXPECT_EQ(gpu::gemm_i8(b, nullptr), cudaSuccess);
  for (GemmI8Epilogue e : {GemmI8Epilogue::kF16Bias, GemmI8Epilogue::kF16BiasGelu, GemmI8Epilogue::kI8Bias,
                           GemmI8Epilogue::kI8BiasGelu}) {
    b.epilogue = e;
    b.out_scale = 1.f;
    EXPECT_EQ(gpu::gemm_i8(b, nullptr), cudaErrorInvalidValue) << gemm_i8_epilogue_name(e);
  }
  const gpu::GemmI8Variant* rows = gpu::gemm_i8_variants(&count);
  for (int vi = 0; vi < count; ++vi) {
    if (rows[vi].split_k <= 1) continue;
    b = a;
    b.variant = vi;  // a split row without its workspace
    EXPECT_GT(gpu::gemm_i8_workspace_bytes(b), 0u) << rows[vi].name;
    EXPECT_EQ(gpu::gemm_i8(b, nullptr), cudaErrorInvalidValue) << rows[vi].name;
  }
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

}  // namespace
}  // namespace edgevit
