// The pieces the two fused attention kernels share (kernels/cuda/mha_fused_kernel.cuh, fp16 Q.K^T, and
// kernels/cuda/mha_i8_kernel.cuh, int8 Q.K^T): after the scores, both run the same fp32 online softmax
// primitives, O += P V with fp16 P and V, and the same normalised staging of O: fp16, or int8 codes at one
// per-tensor scale (the next GEMM's input, quantized from the fp32 normalised O). SM80-class only
// (mma.sync, ldmatrix, ex2.approx), so sm_87 SASS runs on Orin. Fragment layouts: the m16n8k16
// accumulator layout of kernels/cuda/mma_sm80.cuh; a thread holds rows g and g + 8 of each m16 tile and the
// column pair 2t, 2t + 1 of each n8 tile.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/mma_sm80.cuh"
#include "kernels/cuda/quantize_i8_device.cuh"

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

// The int8 form of stage_output_f16: each normalised fp32 output o (before any fp16 rounding, so closer to
// the exact attention than quantizing an fp16 O) becomes the code rne(o / s) saturated to [-127, 127], as
// rne(acc * (1 / l) * (1 / s)) with one multiply by the row's factor and the nearest rule without the tie test
// (i8prod::nearest4: the attention's o differs from the reference's in the last bits, so the exact rule would buy
// no equality), staged at so as bytes, kRowBytes a row; a row with no valid key is zeros (code 0).
template <int kMTiles, int kOTiles, int kRowBytes>
__device__ __forceinline__ void stage_output_i8(int8_t* so, const float (&o_acc)[kMTiles][kOTiles][4],
                                                const float (&row_sum)[kMTiles][4], float inv_scale, int g, int t) {
#pragma unroll
  for (int m = 0; m < kMTiles; ++m) {
    float f[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float l = row_sum[m][2 * r];
      f[r] = l > 0.f ? (1.f / l) * inv_scale : 0.f;
    }
#pragma unroll
    for (int i = 0; i < kOTiles; ++i) {
      const int col = i * 8 + 2 * t;
      const uint32_t w = gpu::i8prod::nearest4<true>(o_acc[m][i][0] * f[0], o_acc[m][i][1] * f[0],
                                                     o_acc[m][i][2] * f[1], o_acc[m][i][3] * f[1]);
      *reinterpret_cast<uint16_t*>(so + (m * 16 + g) * kRowBytes + col) = static_cast<uint16_t>(w);
      *reinterpret_cast<uint16_t*>(so + (m * 16 + g + 8) * kRowBytes + col) = static_cast<uint16_t>(w >> 16);
    }
  }
}

}  // namespace edgevit::cuda
