// Private to kernels/cuda/mha_i8.cu (internal linkage; include it from that file only): the INT8 fused
// attention kernel, flash_fwd_i8_kernel<I8Traits<...>>, its traits, arguments and phases. The design is at the
// top of mha_i8.cu and in docs/kernels-mha-i8.md. The online softmax follows the fp16 kernel's
// (kernels/cuda/mha_fused_kernel.cuh) with the per-row score multiplier of the int8 scales; O += P V and the
// output staging are the fp16 kernel's own (kernels/cuda/mha_softmax_pv.cuh).
#pragma once

#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "kernels/attn_params.h"
#include "kernels/cuda/mha_i8_variants.h"
#include "kernels/cuda/mha_softmax_pv.cuh"
#include "kernels/cuda/mma_sm80.cuh"

namespace edgevit {
namespace {
namespace i8attn {

using cuda::accumulate_pv_f16;
using cuda::cp_async_16_at;
using cuda::cp_async_commit;
using cuda::cp_async_wait;
using cuda::fast_exp2;
using cuda::kRescaleLog2;
using cuda::ldmatrix_x4_at;
using cuda::ldmatrix_x4_trans_at;
using cuda::max_tree;
using cuda::mma_16816;
using cuda::pack_half2;
using cuda::smem_addr;
using cuda::stage_output_f16;
using cuda::stage_output_i8;

// The int32 accumulators start at the bits of 1.5 * 2^23 (12582912.f): for |S| < 2^22 the int32 sum
// 0x4B400000 + S read as a float is exactly 12582912 + S, so the scores reach the float pipe without I2F
// (a quarter-rate conversion on SM80-class GPUs). |S| <= 128^3 = 2^21 for D <= 128.
constexpr uint32_t kBiasBits = 0x4B400000u;
constexpr float kBias = 12582912.f;
// Smallest per-row multiplier: a zero scale (an all-zero Q row) still yields -inf for masked keys, not NaN.
constexpr float kMinRowMul = 1e-30f;

// c (16x8, s32) = a (16x32, s8, row) * b (32x8, s8, col) + kBiasBits.
__device__ __forceinline__ void mma_s8_biased(int (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%10, %10, %10, %10};\n"
      : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(kBiasBits));
}
// c += a * b (s8 x s8 -> s32).
__device__ __forceinline__ void mma_s8(int (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// 4-byte global -> shared copy, zero-filled when !valid (the per-key K scales).
__device__ __forceinline__ void cp_async_4_at(uint32_t smem_dst, const void* gmem_src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_dst), "l"(gmem_src), "r"(valid ? 4 : 0));
}

template <int kHeadDim_, int kQTile_, int kWarps_, int kKvTile_, int kStages_, bool kScaleMax_, bool kPerKey_>
struct I8Traits {
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kQTile = kQTile_;
  static constexpr int kWarps = kWarps_;
  static constexpr int kKvTile = kKvTile_;
  static constexpr int kStages = kStages_;
  static constexpr bool kScaleMax = kScaleMax_;  // fixed softmax offset (use_int8_scale_max)
  static constexpr bool kPerKey = kPerKey_;      // per-key K scales (FADD + FMUL per score)
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kWarpRows = kQTile / kWarps;
  static constexpr int kMTiles = kWarpRows / 16;
  static constexpr int kRowI8 = kHeadDim + 16;  // bytes per int8 Q/K row in shared memory
  static constexpr int kRowV = kHeadDim + 8;    // halves per V (and staged O) row
  static constexpr int kChunksI8 = kHeadDim / 16;
  static constexpr int kChunksV = kHeadDim / 8;
  static constexpr int kQBytes = kQTile * kRowI8;
  static constexpr int kKBytes = kKvTile * kRowI8;
  static constexpr int kVBytes = kKvTile * kRowV * 2;
  static constexpr int kKsBytes = kKvTile * 4;  // per-key K scales of one tile
  static constexpr int64_t kSmemBytes = mha_i8_smem_bytes(kHeadDim, kQTile, kKvTile, kStages);
  static constexpr int kDSteps = kHeadDim / 32;  // k steps of S = Q K^T (m16n8k32)
  static constexpr int kSTiles = kKvTile / 8;
  static constexpr int kOTiles = kHeadDim / 8;
  // Register targets (sm_87 ptxas, no spills): 16-row warps with D <= 64 and 32-key tiles within 102 registers
  // (20 warps per SM); 16-row warps with 64-key tiles and 32-row warps with 32-key tiles within 168 (12 warps),
  // except 32-row warps with per-key K scales (they spilled there: no bound, 2 blocks of 4 warps).
  static constexpr int kMinBlocks = (kHeadDim <= 64 && kMTiles == 1 && kKvTile <= 32)   ? 20 / kWarps
                                    : (kHeadDim <= 64 && kMTiles == 1 && kKvTile <= 64) ? 12 / kWarps
                                    : (kHeadDim <= 64 && kMTiles == 2 && kKvTile <= 32 && !kPerKey) ? 12 / kWarps
                                                                                         : 1;
  static_assert(kHeadDim % 32 == 0 && kHeadDim <= 128, "head_dim: multiple of 32, at most 128 (|S| < 2^22)");
  static_assert(kWarpRows * kWarps == kQTile && kWarpRows % 16 == 0 && kMTiles <= 2, "16 or 32 rows per warp");
  static_assert(kKvTile % 16 == 0, "kv tile: multiple of 16 keys");
  static_assert(kStages == 1 || kStages == 2, "one or two K/V buffers");
  static_assert(kThreads % kChunksV == 0 && kThreads % kChunksI8 == 0, "copy layout");
  static_assert(kKvTile <= kThreads, "one thread per key copies the per-key K scales");
  static_assert(kSmemBytes <= 163 * 1024, "above SM87's 163 KB per-block opt-in");
  static_assert(!(kScaleMax && kPerKey), "the fixed offset needs one K scale per (batch, head)");
};

struct I8Args {
  const int8_t* q;  // element (b, s, h, d) at q[b*qs.batch + s*qs.row + h*qs.head + d], s < seq_q
  const int8_t* k;  // likewise with ks, s < seq_kv
  const __half* v;  // likewise with vs, s < seq_kv
  __half* o;        // likewise with os, s < seq_q (fp16 output)
  int8_t* o_i8;     // likewise: int8 codes at the per-tensor scale *o_scale (the int8-output instantiations)
  const float* o_scale;
  AttnStrides qs, ks, vs, os;
  const float* q_scale;  // (b, s, h) at q_scale[b*qss.batch + s*qss.row + h*qss.head]
  const float* k_scale;  // likewise with kss
  AttnStrides qss, kss;
  const uint8_t* key_mask;  // (B, Skv) or nullptr
  int seq_q;
  int seq_kv;
  float scale_log2;  // scale * log2(e)
};

// One thread's share of the copies of a (rows x D) tile: a fixed 16-byte chunk column of rows r, r + kStep,
// ..., with its source pointer carried from tile to tile (a loop-carried pointer stays in registers).
template <class Elem, int kRows, int kChunks, int kPitchBytes, int kThreads>
struct TileCopy {
  static constexpr int kStep = kThreads / kChunks;
  static constexpr int kIters = (kRows + kStep - 1) / kStep;
  const Elem* next;  // source of (row r, chunk ch) of the next tile
  uint32_t dst;      // shared byte address of (row r, chunk ch) in buffer 0
  int r;

  __device__ __forceinline__ TileCopy(const Elem* gmem, int64_t stride, uint32_t smem, int row0, int tid) {
    r = tid / kChunks;
    const int ch = tid % kChunks;
    next = gmem + static_cast<int64_t>(row0 + r) * stride + ch * (16 / sizeof(Elem));
    dst = smem + r * kPitchBytes + ch * 16;
  }
  // Copies rows [row0, row0 + kRows) into the buffer at byte offset buf (zero-fill at or past seq); the
  // source pointer then moves one tile on.
  __device__ __forceinline__ void copy(const Elem* gmem, int64_t stride, uint32_t buf, int row0, int seq) {
    const int64_t step = static_cast<int64_t>(kStep) * stride;
#pragma unroll
    for (int i = 0; i < kIters; ++i) {
      if (kRows % kStep != 0 && r + i * kStep >= kRows) break;
      const bool valid = row0 + r + i * kStep < seq;
      cp_async_16_at(dst + buf + i * kStep * kPitchBytes, valid ? next + i * step : gmem, valid);
    }
    next += static_cast<int64_t>(kRows) * stride;
  }
};

// Per-row multipliers a (log2 units per integer unit of S) of this thread's rows (m tile m, half r):
// scale * log2 e * sq(row) [* sk of the (batch, head) without per-key scales], at least kMinRowMul.
template <class T>
__device__ __forceinline__ void row_multipliers(float (&a)[T::kMTiles][2], const I8Args& args, int b, int h,
                                                int row0, int g) {
  const float* qsc = args.q_scale + b * args.qss.batch + h * args.qss.head;
  const float sk = T::kPerKey ? 1.f : args.k_scale[b * args.kss.batch + h * args.kss.head];
#pragma unroll
  for (int m = 0; m < T::kMTiles; ++m)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = row0 + m * 16 + g + 8 * r;
      const float sq = row < args.seq_q ? qsc[static_cast<int64_t>(row) * args.qss.row] : 0.f;
      a[m][r] = fmaxf(sq * sk * args.scale_log2, kMinRowMul);
    }
}

// S = Q K^T over the tile at shared byte address sk (n_pairs 16-key groups), as biased floats 12582912 + S.
template <class T, int kMA>
__device__ __forceinline__ void compute_scores(float (&s)[T::kMTiles][T::kSTiles][4],
                                               const uint32_t (&q_frag)[T::kMTiles][T::kDSteps][4], uint32_t sk,
                                               int n_pairs) {
  int acc[T::kMTiles][T::kSTiles][4];
#pragma unroll
  for (int ds = 0; ds < T::kDSteps; ++ds) {
#pragma unroll
    for (int np = 0; np < T::kSTiles / 2; ++np) {
      if (np < n_pairs) {
        uint32_t kb[4];
        ldmatrix_x4_at(kb, sk + np * 16 * T::kRowI8 + ds * 32);
#pragma unroll
        for (int m = 0; m < kMA; ++m) {
          if (ds == 0) {
            mma_s8_biased(acc[m][2 * np], q_frag[m][0], kb[0], kb[1]);
            mma_s8_biased(acc[m][2 * np + 1], q_frag[m][0], kb[2], kb[3]);
          } else {
            mma_s8(acc[m][2 * np], q_frag[m][ds], kb[0], kb[1]);
            mma_s8(acc[m][2 * np + 1], q_frag[m][ds], kb[2], kb[3]);
          }
        }
      }
    }
  }
#pragma unroll
  for (int m = 0; m < kMA; ++m)
#pragma unroll
    for (int nt = 0; nt < T::kSTiles; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[m][nt][e] = __int_as_float(acc[m][nt][e]);
}

// Per-key K scales: s = (s - 12582912) * sk(key) (the subtraction is exact); s_ks holds the tile's kKvTile
// scales in shared memory, 0 past Skv (those keys are masked afterwards).
template <class T, int kMA>
__device__ __forceinline__ void apply_key_scales(float (&s)[T::kMTiles][T::kSTiles][4], const float* s_ks, int t) {
#pragma unroll
  for (int nt = 0; nt < T::kSTiles; ++nt)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const float sk = s_ks[nt * 8 + 2 * t + e];
#pragma unroll
      for (int m = 0; m < kMA; ++m) {
        s[m][nt][e] = (s[m][nt][e] - kBias) * sk;
        s[m][nt][e + 2] = (s[m][nt][e + 2] - kBias) * sk;
      }
    }
}

// Keys at or past kv_valid, or masked out, become -inf.
template <class T, int kMA>
__device__ __forceinline__ void mask_scores(float (&s)[T::kMTiles][T::kSTiles][4], const uint8_t* mask, int key0,
                                            int kv_valid, int t) {
#pragma unroll
  for (int nt = 0; nt < T::kSTiles; ++nt)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int col = nt * 8 + 2 * t + e;
      bool ok = col < kv_valid;
      if (ok && mask != nullptr) ok = mask[key0 + col] != 0;
      if (!ok) {
#pragma unroll
        for (int m = 0; m < kMA; ++m) s[m][nt][e] = s[m][nt][e + 2] = -INFINITY;
      }
    }
}

// Online softmax in log2 units with lazy rescaling (the fp16 kernel's, with a per-row multiplier a instead
// of one scale): p = 2^(s a - ref), ref moving only when a tile's max passes it by more than kRescaleLog2.
// The scores may carry the bias 12582912 (per-tensor K scale): it shifts every score of a row, and the
// reference max with it, by the same amount, so the differences s a - ref are those of the unbiased scores
// up to the rounding of ref (a constant per reference, undone exactly by the rescaling's ref_old - ref_new).
template <class T, int kMA>
__device__ __forceinline__ void online_softmax(float (&s)[T::kMTiles][T::kSTiles][4],
                                               float (&o_acc)[T::kMTiles][T::kOTiles][4],
                                               float (&row_max)[T::kMTiles][2], float (&row_sum)[T::kMTiles][4],
                                               const float (&a)[T::kMTiles][2]) {
  float cand[T::kMTiles][2];
  bool grow = false;
#pragma unroll
  for (int m = 0; m < kMA; ++m) {
    float part[2][T::kSTiles];
#pragma unroll
    for (int nt = 0; nt < T::kSTiles; ++nt) {
      part[0][nt] = fmaxf(s[m][nt][0], s[m][nt][1]);
      part[1][nt] = fmaxf(s[m][nt][2], s[m][nt][3]);
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      cand[m][r] = max_tree<0, T::kSTiles>(part[r]) * a[m][r];
      grow = grow || cand[m][r] > row_max[m][r] + kRescaleLog2;
    }
  }
  if (__any_sync(0xffffffffu, grow)) {
#pragma unroll
    for (int m = 0; m < kMA; ++m)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float c = cand[m][r];
        c = fmaxf(c, __shfl_xor_sync(0xffffffffu, c, 1));
        c = fmaxf(c, __shfl_xor_sync(0xffffffffu, c, 2));
        const float m_new = fmaxf(row_max[m][r], c);
        const float m_ref = m_new == -INFINITY ? 0.f : m_new;
        const float alpha = fast_exp2(row_max[m][r] - m_ref);
        row_max[m][r] = m_new;
        row_sum[m][2 * r] *= alpha;
        row_sum[m][2 * r + 1] *= alpha;
#pragma unroll
        for (int i = 0; i < T::kOTiles; ++i) {
          o_acc[m][i][2 * r] *= alpha;
          o_acc[m][i][2 * r + 1] *= alpha;
        }
      }
  }
#pragma unroll
  for (int m = 0; m < kMA; ++m) {
    const float m_use[2] = {row_max[m][0] == -INFINITY ? 0.f : row_max[m][0],
                            row_max[m][1] == -INFINITY ? 0.f : row_max[m][1]};
#pragma unroll
    for (int nt = 0; nt < T::kSTiles; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[m][nt][e] = fast_exp2(fmaf(s[m][nt][e], a[m][e / 2], -m_use[e / 2]));
  }
}

// The scale-max softmax: p = 2^(s a - off), off = -offset_add (fixed per row: no max, no rescaling).
template <class T, int kMA>
__device__ __forceinline__ void fixed_offset_softmax(float (&s)[T::kMTiles][T::kSTiles][4],
                                                     const float (&a)[T::kMTiles][2],
                                                     const float (&offset_add)[T::kMTiles][2]) {
#pragma unroll
  for (int m = 0; m < kMA; ++m)
#pragma unroll
    for (int nt = 0; nt < T::kSTiles; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[m][nt][e] = fast_exp2(fmaf(s[m][nt][e], a[m][e / 2], offset_add[m][e / 2]));
}

// A warp's accumulators and per-row constants, carried across K/V tiles (registers after inlining).
template <class T>
struct WarpState {
  float o_acc[T::kMTiles][T::kOTiles][4];
  float row_max[T::kMTiles][2];
  float row_sum[T::kMTiles][4];
  float rmul[T::kMTiles][2];        // per-row multiplier a (row_multipliers)
  float offset_add[T::kMTiles][2];  // scale-max rows: -(12582912 + 127^2) a
};

// Zero O and the row sums, reference maxima at -inf, the per-row multipliers and scale-max offsets of the
// warp's rows from row0.
template <class T>
__device__ __forceinline__ void init_warp_state(WarpState<T>& w, const I8Args& a, int b, int h, int row0, int g) {
  row_multipliers<T>(w.rmul, a, b, h, row0, g);
#pragma unroll
  for (int m = 0; m < T::kMTiles; ++m) {
#pragma unroll
    for (int r = 0; r < 2; ++r) w.offset_add[m][r] = -((kBias + 16129.f) * w.rmul[m][r]);
#pragma unroll
    for (int i = 0; i < T::kOTiles; ++i) w.o_acc[m][i][0] = w.o_acc[m][i][1] = w.o_acc[m][i][2] = w.o_acc[m][i][3] = 0.f;
    w.row_max[m][0] = w.row_max[m][1] = -INFINITY;
    w.row_sum[m][0] = w.row_sum[m][1] = w.row_sum[m][2] = w.row_sum[m][3] = 0.f;
  }
}

// The warp's int8 Q fragments (A operands of m16n8k32), held in registers for every tile.
template <class T>
__device__ __forceinline__ void load_q_fragments(uint32_t (&q_frag)[T::kMTiles][T::kDSteps][4], uint32_t sq_lane) {
#pragma unroll
  for (int m = 0; m < T::kMTiles; ++m)
#pragma unroll
    for (int ds = 0; ds < T::kDSteps; ++ds) ldmatrix_x4_at(q_frag[m][ds], sq_lane + m * 16 * T::kRowI8 + ds * 32);
}

// One K/V tile for one warp: S = Q K^T, per-key scales, masking, softmax, O += P V. Keys past Skv or masked
// out become -inf (only tiles holding such keys pay for the test). kPairs: the 16-key groups computed (the
// tile's, or fewer for a last tile whose valid keys all lie in its first kPairs groups; a compile-time count:
// a runtime one cost registers and spills on sm_87; tiles of more than 32 keys compute every group: those
// past the valid keys read zero-filled rows and get p = 0). kMA: how many of the warp's m tiles are computed.
template <class T, int kMA, int kPairs>
__device__ __forceinline__ void tile_step(WarpState<T>& w, const uint32_t (&q_frag)[T::kMTiles][T::kDSteps][4],
                                          uint32_t sk, uint32_t sv, const float* s_ks, const uint8_t* mask, int kv0,
                                          int kv_valid, int t) {
  float s[T::kMTiles][T::kSTiles][4];
  compute_scores<T, kMA>(s, q_frag, sk, kPairs);
  if (T::kPerKey) apply_key_scales<T, kMA>(s, s_ks, t);
  if (kv_valid < T::kKvTile || mask != nullptr) mask_scores<T, kMA>(s, mask, kv0, kv_valid, t);
  if (T::kScaleMax) {
    fixed_offset_softmax<T, kMA>(s, w.rmul, w.offset_add);
  } else {
    online_softmax<T, kMA>(s, w.o_acc, w.row_max, w.row_sum, w.rmul);
  }
  accumulate_pv_f16<kMA, T::kMTiles, T::kOTiles, T::kSTiles, T::kHeadDim, T::kRowV>(w.o_acc, w.row_sum, s, sv,
                                                                                   kPairs);
}

// tile_step for this tile's valid keys: the full tile on the common path; with 16-row warps, a 32-key tile with
// at most 16 valid keys (the last one) takes one 16-key group. (That second code path made 32-row warps spill
// within their 168 registers on sm_87, as did skipping the second m tile of a warp whose rows there all lie
// past Sq.)
template <class T>
__device__ __forceinline__ void dispatch_tile(WarpState<T>& w, const uint32_t (&q_frag)[T::kMTiles][T::kDSteps][4],
                                              uint32_t sk, uint32_t sv, const float* s_ks, const uint8_t* mask,
                                              int kv0, int kv_valid, int t) {
  if (T::kKvTile == 32 && T::kMTiles == 1 && kv_valid <= 16) {
    tile_step<T, T::kMTiles, 1>(w, q_frag, sk, sv, s_ks, mask, kv0, kv_valid, t);
  } else {
    tile_step<T, T::kMTiles, T::kSTiles / 2>(w, q_frag, sk, sv, s_ks, mask, kv0, kv_valid, t);
  }
}

}  // namespace i8attn
}  // namespace
}  // namespace edgevit
