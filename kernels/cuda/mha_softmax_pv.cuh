// The pieces the two fused attention kernels share (kernels/cuda/mha_fused_kernel.cuh, fp16 Q.K^T, and
// kernels/cuda/mha_i8_kernel.cuh, int8 Q.K^T): after the scores, both run the same fp32 online softmax
// primitives, O += P V with fp16 P and V, and the same normalised fp16 staging of O. SM80-class only
// (mma.sync, ldmatrix, ex2.approx), so sm_87 SASS runs on Orin. Fragment layouts: the m16n8k16
// accumulator layout of kernels/cuda/mma_sm80.cuh; a thread holds rows g and g + 8 of each m16 tile and the
// column pair 2t, 2t + 1 of each n8 tile.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/mma_sm80.cuh"

namespace edgevit::cuda {

// Lazy rescaling threshold of the online softmax, in log2 units: the reference max moves only when a tile's
// max passes it by more than this, so p = 2^(s - ref) <= 2^8 (fp16-safe).
constexpr float kRescaleLog2 = 8.f;

// 2^x (ex2.approx.ftz: 2 ulp; 2^-inf = 0).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// 2^x on the FMA and integer pipes instead of MUFU (FlashAttention-4's split of the exponentials: MUFU
// does 16 ex2 per clock per SM, so at D = 64 it is busy for ~60% of the tensor pipe's time at the mma.sync
// ceiling; the kernel computes a fixed share of its exponentials here). Cody-Waite split x = n + f with
// n = round(x) (adding 1.5 * 2^23 rounds to nearest and leaves n in the low mantissa bits), f in
// [-0.5, 0.5]; 2^f by a degree-3 polynomial (relative minimax fit on [-0.5, 0.5], max relative error
// 7.5e-5, below fp16's half ulp 2.4e-4: P is rounded to fp16 next); then n is added to the exponent field.
// x is clamped at -126 first, so the exponent add stays in range (2^-inf = 0 here is a float denormal,
// which rounds to fp16 zero as ex2.approx's 0 does). Valid for x <= 127 (the softmax feeds x <= 8).
__device__ __forceinline__ float exp2_fma(float x) {
  constexpr float kRound = 12582912.f;  // 1.5 * 2^23
  x = fmaxf(x, -126.f);
  const float t = __fadd_rn(x, kRound);
  const float f = __fsub_rn(x, __fsub_rn(t, kRound));
  const float p = fmaf(fmaf(fmaf(0.0551716648f, f, 0.242611125f), f, 0.693260968f), f, 0.999928057f);
  return __int_as_float(__float_as_int(p) + (__float_as_int(t) << 23));
}

// max(v[kLo], ..., v[kLo + kN - 1]) as a balanced tree of FMNMX (dependency depth log2 kN), every index a
// compile-time constant so that v stays in registers.
template <int kLo, int kN>
__device__ __forceinline__ float max_tree(const float* v) {
  if constexpr (kN == 1) {
    return v[kLo];
  } else {
    return fmaxf(max_tree<kLo, kN / 2>(v), max_tree<kLo + kN / 2, kN - kN / 2>(v));
  }
}

// O += P V over the first n_pairs 16-key groups of the V tile at shared byte address sv (kRowHalves halves
// a key row), for the warp's first kM m16 tiles, and the row sums += P times a ones fragment. P (fp32, the
// accumulator layout) is rounded to fp16: the accumulator layout of two n8 tiles is the A fragment of
// m16n8k16, 16 keys at a time.
template <int kM, int kMTiles, int kOTiles, int kSTiles, int kHeadDim, int kRowHalves>
__device__ __forceinline__ void accumulate_pv_f16(float (&o_acc)[kMTiles][kOTiles][4], float (&row_sum)[kMTiles][4],
                                                  const float (&p)[kMTiles][kSTiles][4], uint32_t sv, int n_pairs) {
  const uint32_t ones = 0x3C003C00u;  // half2(1, 1)
#pragma unroll
  for (int kp = 0; kp < kSTiles / 2; ++kp) {
    if (kp < n_pairs) {
      uint32_t pa[kM][4];
#pragma unroll
      for (int m = 0; m < kM; ++m) {
        pa[m][0] = pack_half2(p[m][2 * kp][0], p[m][2 * kp][1]);
        pa[m][1] = pack_half2(p[m][2 * kp][2], p[m][2 * kp][3]);
        pa[m][2] = pack_half2(p[m][2 * kp + 1][0], p[m][2 * kp + 1][1]);
        pa[m][3] = pack_half2(p[m][2 * kp + 1][2], p[m][2 * kp + 1][3]);
        mma_16816(row_sum[m], pa[m], ones, ones);
      }
#pragma unroll
      for (int dp = 0; dp < kHeadDim / 16; ++dp) {
        uint32_t vb[4];
        ldmatrix_x4_trans_at(vb, sv + 2 * (kp * 16 * kRowHalves + dp * 16));
#pragma unroll
        for (int m = 0; m < kM; ++m) {
          mma_16816(o_acc[m][2 * dp], pa[m], vb[0], vb[1]);
          mma_16816(o_acc[m][2 * dp + 1], pa[m], vb[2], vb[3]);
        }
      }
    }
  }
}

// Normalises the warp's rows of O (row sum 0, no valid key: zeros) and stages them as fp16 at so (the warp's
// first row, kRowHalves halves a row); g and t are the thread's accumulator row and column pair.
template <int kMTiles, int kOTiles, int kRowHalves>
__device__ __forceinline__ void stage_output_f16(__half* so, const float (&o_acc)[kMTiles][kOTiles][4],
                                                 const float (&row_sum)[kMTiles][4], int g, int t) {
#pragma unroll
  for (int m = 0; m < kMTiles; ++m) {
    float inv[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float l = row_sum[m][2 * r];
      inv[r] = l > 0.f ? 1.f / l : 0.f;
    }
#pragma unroll
    for (int i = 0; i < kOTiles; ++i) {
      const int col = i * 8 + 2 * t;
      *reinterpret_cast<__half2*>(so + (m * 16 + g) * kRowHalves + col) =
          __floats2half2_rn(o_acc[m][i][0] * inv[0], o_acc[m][i][1] * inv[0]);
      *reinterpret_cast<__half2*>(so + (m * 16 + g + 8) * kRowHalves + col) =
          __floats2half2_rn(o_acc[m][i][2] * inv[1], o_acc[m][i][3] * inv[1]);
    }
  }
}

}  // namespace edgevit::cuda
