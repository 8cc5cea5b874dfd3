// Private to kernels/cuda/mha_fused.cu (internal linkage; include it from that file only): the fused attention
// kernel, flash_fwd_kernel<FlashFwdTraits<...>>, and its phases as __forceinline__ device functions (load the
// tiles, S = Q K^T, masking, online softmax, O += P V, split-KV combine, normalise and store). The design and
// the variants are described at the top of mha_fused.cu.
#pragma once

#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/mha_fused_tiles.cuh"
#include "kernels/cuda/mha_softmax_pv.cuh"
#include "kernels/cuda/mma_sm80.cuh"

namespace edgevit {
namespace {

using cuda::accumulate_pv_f16;
using cuda::cp_async_commit;
using cuda::cp_async_wait;
using cuda::fast_exp2;
using cuda::kRescaleLog2;
using cuda::ldmatrix_x4_at;
using cuda::ldmatrix_x4_trans_at;
using cuda::max_tree;
using cuda::mma_16816;
using cuda::mma_16816_zero_c;
using cuda::pack_half2;
using cuda::stage_output_f16;
using cuda::stage_output_i8;

// Split-KV epilogue: the kKvSplit warps of a row group hold partial results over disjoint key slices of
// the same 16 rows (running max m_j in log2 units, sum l_j of 2^(s - m_j), O_j unnormalised). Through
// shared memory (the K/V buffers, free now) each output element becomes
//   sum_j 2^(m_j - M) O_j / sum_j 2^(m_j - M) l_j,   M = max_j m_j,
// and a row no slice has a valid key for (every m_j = -inf) is zeros, as without the split.
template <class T, bool kI8Out, class OutT>
__device__ __forceinline__ void combine_split_kv(const FusedArgs& a, OutT* og, float o_scale, float* buf,
                                                 const float (&o_acc)[T::kOTiles][4], const float (&row_max)[2],
                                                 const float (&row_sum)[4], int row0, int warp, int lane) {
  const int g = lane / 4, t = lane % 4;
  float* ml = buf + warp * 16 * 2;                                          // (16 rows, {m, l}) per warp
  float* po = buf + T::kWarps * 16 * 2 + warp * 16 * T::kCombineRow;        // (16 rows, D) per warp
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float l = row_sum[2 * r];
    if (t == 0) {
      ml[(g + 8 * r) * 2] = row_max[r];
      ml[(g + 8 * r) * 2 + 1] = l;
    }
  }
#pragma unroll
  for (int i = 0; i < T::kOTiles; ++i) {
    const int col = i * 8 + 2 * t;
    *reinterpret_cast<float2*>(po + g * T::kCombineRow + col) = make_float2(o_acc[i][0], o_acc[i][1]);
    *reinterpret_cast<float2*>(po + (g + 8) * T::kCombineRow + col) = make_float2(o_acc[i][2], o_acc[i][3]);
  }
  __syncthreads();
  // The group's threads take 8-column chunks of its 16 rows.
  const int group_warp0 = warp - warp % T::kKvSplit;
  const float inv_scale = 1.f / o_scale;  // kI8Out's (unused, removed, without it)
  for (int c = (warp % T::kKvSplit) * 32 + lane; c < 16 * T::kChunks; c += T::kKvSplit * 32) {
    const int r = c / T::kChunks, ch = c % T::kChunks;
    const int row = row0 + r;
    if (row >= a.seq_q) continue;
    float m_max = -INFINITY;
#pragma unroll
    for (int j = 0; j < T::kKvSplit; ++j) m_max = fmaxf(m_max, buf[(group_warp0 + j) * 32 + r * 2]);
    float w[T::kKvSplit], l = 0.f;
#pragma unroll
    for (int j = 0; j < T::kKvSplit; ++j) {
      const float m_j = buf[(group_warp0 + j) * 32 + r * 2];
      w[j] = m_j == -INFINITY ? 0.f : fast_exp2(m_j - m_max);
      l += w[j] * buf[(group_warp0 + j) * 32 + r * 2 + 1];
    }
    const float inv = l > 0.f ? 1.f / l : 0.f;  // no valid key: the row is zeros
    float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int j = 0; j < T::kKvSplit; ++j) {
      const float* src = buf + T::kWarps * 16 * 2 + (group_warp0 + j) * 16 * T::kCombineRow + r * T::kCombineRow + ch * 8;
      const float4 lo = *reinterpret_cast<const float4*>(src), hi = *reinterpret_cast<const float4*>(src + 4);
      acc[0] += w[j] * lo.x; acc[1] += w[j] * lo.y; acc[2] += w[j] * lo.z; acc[3] += w[j] * lo.w;
      acc[4] += w[j] * hi.x; acc[5] += w[j] * hi.y; acc[6] += w[j] * hi.z; acc[7] += w[j] * hi.w;
    }
    if constexpr (kI8Out) {  // the fp32 normalised values quantized (stage_output_i8's rule)
      const float f = inv * inv_scale;
      *reinterpret_cast<uint2*>(og + static_cast<int64_t>(row) * a.os.row + ch * 8) =
          make_uint2(gpu::i8prod::nearest4<true>(acc[0] * f, acc[1] * f, acc[2] * f, acc[3] * f),
                     gpu::i8prod::nearest4<true>(acc[4] * f, acc[5] * f, acc[6] * f, acc[7] * f));
    } else {
      uint4 out;
      out.x = pack_half2(acc[0] * inv, acc[1] * inv);
      out.y = pack_half2(acc[2] * inv, acc[3] * inv);
      out.z = pack_half2(acc[4] * inv, acc[5] * inv);
      out.w = pack_half2(acc[6] * inv, acc[7] * inv);
      *reinterpret_cast<uint4*>(og + static_cast<int64_t>(row) * a.os.row + ch * 8) = out;
    }
  }
}

// The kernel's phases, one __forceinline__ function each (the inlined code is the kernel's own; the register
// fragments are passed by reference and stay in registers).

// Before tile it (keys from kv0): with two buffers, issues the copies of tile it + 1 into the other one and
// waits for tile it's group only; otherwise (one buffer or the last tile) waits for every copy.
template <class T>
__device__ __forceinline__ void prefetch_next_kv(const FusedArgs& a, KvCopy& k_copy, KvCopy& v_copy, const __half* kg,
                                                 const __half* vg, __half* s_k, __half* s_v, int it, int n_kv,
                                                 int kv0, int tid) {
  if (T::kStages > 1 && it + 1 < n_kv) {
    copy_next_kv<T>(k_copy, v_copy, kg, vg, a.ks.row, a.vs.row, s_k, s_v, (it + 1) % T::kStages, kv0 + T::kKvTile,
                    a.seq_kv, tid);
    cp_async_commit();
    cp_async_wait<1>();
  } else {
    cp_async_wait<0>();
  }
}

// One buffer: after every warp is done with tile it (keys from kv0), the copies of tile it + 1 into it.
template <class T>
__device__ __forceinline__ void reload_single_buffer(const FusedArgs& a, KvCopy& k_copy, KvCopy& v_copy,
                                                     const __half* kg, const __half* vg, __half* s_k, __half* s_v,
                                                     int it, int n_kv, int kv0, int tid) {
  if (T::kStages == 1 && it + 1 < n_kv) {
    copy_next_kv<T>(k_copy, v_copy, kg, vg, a.ks.row, a.vs.row, s_k, s_v, 0, kv0 + T::kKvTile, a.seq_kv, tid);
    cp_async_commit();
  }
}

// Zero O and the row sums of P; the reference maxima start at -inf.
template <class T>
__device__ __forceinline__ void init_accumulators(float (&o_acc)[T::kMTiles][T::kOTiles][4],
                                                  float (&row_max)[T::kMTiles][2], float (&row_sum)[T::kMTiles][4]) {
#pragma unroll
  for (int m = 0; m < T::kMTiles; ++m)
#pragma unroll
    for (int i = 0; i < T::kOTiles; ++i) o_acc[m][i][0] = o_acc[m][i][1] = o_acc[m][i][2] = o_acc[m][i][3] = 0.f;
#pragma unroll
  for (int m = 0; m < T::kMTiles; ++m) {
    row_max[m][0] = row_max[m][1] = -INFINITY;
    row_sum[m][0] = row_sum[m][1] = row_sum[m][2] = row_sum[m][3] = 0.f;
  }
}

// The warp's Q fragments, held in registers for every tile (rows without kQReload).
template <class T>
__device__ __forceinline__ void load_q_fragments(uint32_t (&q_frag)[T::kMTiles][T::kQReload ? 1 : T::kDSteps][4],
                                                 uint32_t sq_lane) {
#pragma unroll
  for (int m = 0; m < T::kMTiles; ++m)
#pragma unroll
    for (int ds = 0; ds < (T::kQReload ? 1 : T::kDSteps); ++ds)
      ldmatrix_x4_at(q_frag[m][ds], sq_lane + 2 * (m * 16 * T::kSmemRow + ds * 16));
}

// S = Q K^T (kWarpRows x kKvSlice per warp), fp32, unscaled, over the first n_pairs 16-key groups of the
// tile at shared byte address sk. The first k step starts from a zero accumulator operand (RZ in the HMMA)
// instead of zeroing S first (one CS2R per two scores per tile). Skipped groups (past the valid keys, slices
// wider than 32 keys) are left unwritten: every column there is >= kv_valid, so mask_scores assigns them
// -inf before anything reads them.
template <class T>
__device__ __forceinline__ void compute_scores(float (&s)[T::kMTiles][T::kSTiles][4],
                                               uint32_t (&q_frag)[T::kMTiles][T::kQReload ? 1 : T::kDSteps][4],
                                               uint32_t sq_lane, uint32_t sk, int n_pairs) {
  constexpr int kM = T::kMTiles;
#pragma unroll
  for (int ds = 0; ds < T::kDSteps; ++ds) {
    uint32_t qs_frag[kM][4];
    if (T::kQReload) {
#pragma unroll
      for (int m = 0; m < kM; ++m)
        ldmatrix_x4_at(qs_frag[m], sq_lane + 2 * (m * 16 * T::kSmemRow + ds * 16));
    }
#pragma unroll
    for (int np = 0; np < T::kSTiles / 2; ++np) {
      if (np < n_pairs) {
        uint32_t kb[4];
        ldmatrix_x4_at(kb, sk + 2 * (np * 16 * T::kSmemRow + ds * 16));
#pragma unroll
        for (int m = 0; m < kM; ++m) {
          const uint32_t(&qa)[4] = T::kQReload ? qs_frag[m] : q_frag[m][T::kQReload ? 0 : ds];
          if (ds == 0) {
            mma_16816_zero_c(s[m][2 * np], qa, kb[0], kb[1]);
            mma_16816_zero_c(s[m][2 * np + 1], qa, kb[2], kb[3]);
          } else {
            mma_16816(s[m][2 * np], qa, kb[0], kb[1]);
            mma_16816(s[m][2 * np + 1], qa, kb[2], kb[3]);
          }
        }
      }
    }
  }
}

// Keys at or past kv_valid in the slice, or masked out (mask[key0 + col] == 0), become -inf; t is the
// thread's accumulator column pair. The caller calls it only for tiles that hold such keys.
template <class T>
__device__ __forceinline__ void mask_scores(float (&s)[T::kMTiles][T::kSTiles][4], const uint8_t* mask, int key0,
                                            int kv_valid, int t) {
#pragma unroll
  for (int nt = 0; nt < T::kSTiles; ++nt) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int col = nt * 8 + 2 * t + e;
      bool ok = col < kv_valid;
      if (ok && mask != nullptr) ok = mask[key0 + col] != 0;
      if (!ok) {
#pragma unroll
        for (int m = 0; m < T::kMTiles; ++m) s[m][nt][e] = s[m][nt][e + 2] = -INFINITY;
      }
    }
  }
}

// The tile's candidate maxima of the scaled scores (log2 units) of this thread's rows, cand[m][r] for row
// half r of m tile m; returns whether any passes its reference max by more than kRescaleLog2.
template <class T>
__device__ __forceinline__ bool tile_max_candidates(float (&cand)[T::kMTiles][2],
                                                    const float (&s)[T::kMTiles][T::kSTiles][4],
                                                    const float (&row_max)[T::kMTiles][2], float scale_log2) {
  bool grow = false;
#pragma unroll
  for (int m = 0; m < T::kMTiles; ++m) {
    // This thread's maximum of each of its two rows over its columns of the tile, as a tree (depth
    // log2(2 kSTiles) instead of a chain of kSTiles dependent FMNMX).
    float part[2][T::kSTiles];
#pragma unroll
    for (int nt = 0; nt < T::kSTiles; ++nt) {
      part[0][nt] = fmaxf(s[m][nt][0], s[m][nt][1]);
      part[1][nt] = fmaxf(s[m][nt][2], s[m][nt][3]);
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      cand[m][r] = max_tree<0, T::kSTiles>(part[r]) * scale_log2;
      grow = grow || cand[m][r] > row_max[m][r] + kRescaleLog2;  // the first valid key: -inf + 8 = -inf
    }
  }
  return grow;
}

// Moves each row's reference max to the row max of the candidates (two quad shuffles) and rescales O and
// the row sums to it.
template <class T>
__device__ __forceinline__ void rescale_to_new_max(const float (&cand)[T::kMTiles][2],
                                                   float (&o_acc)[T::kMTiles][T::kOTiles][4],
                                                   float (&row_max)[T::kMTiles][2], float (&row_sum)[T::kMTiles][4]) {
#pragma unroll
  for (int m = 0; m < T::kMTiles; ++m) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float c = cand[m][r];
      c = fmaxf(c, __shfl_xor_sync(0xffffffffu, c, 1));
      c = fmaxf(c, __shfl_xor_sync(0xffffffffu, c, 2));
      const float m_new = fmaxf(row_max[m][r], c);
      const float m_ref = m_new == -INFINITY ? 0.f : m_new;  // no valid key yet: keep 2^(-inf - -inf) away
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
}

// Online softmax in log2 units: p = 2^(s * scale_log2 - max), one FFMA and one ex2 per score, written over
// s. The m tiles share one vote and branch, so their maxima and their exponentials each form one basic block
// that ptxas can interleave (a vote per m tile split them).
// Lazy rescaling: the reference max of a row moves only when a tile's max passes it by more than
// kRescaleLog2, so p = 2^(s - max) stays <= 2^kRescaleLog2 = 256 (fp16 keeps its relative precision
// there, far below 65504). The test needs no row max: if no thread's own columns pass its reference,
// the row's do not either, so only then (a warp vote) are the four threads of each row combined (two
// shuffles, off the common path) and O and the sum rescaled. O and the sum always share one reference
// max, and the four threads of a row always hold the same one, so the final O / sum is the same
// softmax.
template <class T>
__device__ __forceinline__ void online_softmax(float (&s)[T::kMTiles][T::kSTiles][4],
                                               float (&o_acc)[T::kMTiles][T::kOTiles][4],
                                               float (&row_max)[T::kMTiles][2], float (&row_sum)[T::kMTiles][4],
                                               float scale_log2) {
  float cand[T::kMTiles][2];
  const bool grow = tile_max_candidates<T>(cand, s, row_max, scale_log2);
  if (__any_sync(0xffffffffu, grow)) rescale_to_new_max<T>(cand, o_acc, row_max, row_sum);
#pragma unroll
  for (int m = 0; m < T::kMTiles; ++m) {
    const float m_use[2] = {row_max[m][0] == -INFINITY ? 0.f : row_max[m][0],
                            row_max[m][1] == -INFINITY ? 0.f : row_max[m][1]};
#pragma unroll
    for (int nt = 0; nt < T::kSTiles; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) s[m][nt][e] = fast_exp2(fmaf(s[m][nt][e], scale_log2, -m_use[e / 2]));
    }
  }
}

// The output's base pointer: fp16 o, or int8 o_i8 with kI8Out.
template <bool kI8Out>
__device__ __forceinline__ auto output_base(const FusedArgs& a) {
  if constexpr (kI8Out) {
    return a.o_i8;
  } else {
    return a.o;
  }
}

// The K/V loop of one- and two-stage rows (tile 0 with Q in flight, issued by the caller): per tile, the
// copies of the next tile (two buffers), S = Q K^T, mask, softmax, O += P V, then a barrier before the buffer
// is reused.
template <class T>
__device__ __forceinline__ void kv_loop(const FusedArgs& a, float (&o_acc)[T::kMTiles][T::kOTiles][4],
                                        float (&row_max)[T::kMTiles][2], float (&row_sum)[T::kMTiles][4],
                                        const __half* kg, const __half* vg, __half* s_k, __half* s_v,
                                        const LdsmLanes& lanes, const uint8_t* mask, int n_kv, int slice0,
                                        bool warp_active, int tid) {
  // Per-thread K / V copy state (unused, and optimised away, without the fast copy layout).
  KvCopy k_copy = make_kv_copy<T>(kg, a.ks.row, s_k, tid);
  KvCopy v_copy = make_kv_copy<T>(vg, a.vs.row, s_v, tid);
  // This tile's K / V ldmatrix bases, loop-carried like the copy pointers (else rematerialised per LDSM).
  uint32_t sk_cur = lanes.k, sv_cur = lanes.v;
  const uint32_t k_toggle = T::kStages == 2 ? lanes.k ^ (lanes.k + T::kKvSmem * 2) : 0u;
  const uint32_t v_toggle = T::kStages == 2 ? lanes.v ^ (lanes.v + T::kKvSmem * 2) : 0u;
  uint32_t q_frag[T::kMTiles][T::kQReload ? 1 : T::kDSteps][4];  // held Q (unused, optimised away, when T::kQReload)
  for (int it = 0; it < n_kv; ++it) {
    const int kv0 = it * T::kKvTile;
    prefetch_next_kv<T>(a, k_copy, v_copy, kg, vg, s_k, s_v, it, n_kv, kv0, tid);
    __syncthreads();
    if (warp_active) {
      if (!T::kQReload && it == 0) load_q_fragments<T>(q_frag, lanes.q);
      const uint32_t sk = sk_cur, sv = sv_cur;
      const int kv_valid = max(0, min(T::kKvSlice, a.seq_kv - kv0 - slice0));  // in the warp's slice
      // 16-key groups holding a valid key; slices of <= 32 keys compute all (the test would cost every tile
      // more than the group it can skip; skipped groups read zero-filled rows and have p = 0).
      const int n_pairs = T::kKvSlice <= 32 ? T::kSTiles / 2 : (kv_valid + 15) / 16;
      float s[T::kMTiles][T::kSTiles][4];
      compute_scores<T>(s, q_frag, lanes.q, sk, n_pairs);
      // Keys past Skv or masked out become -inf; only tiles that hold such keys pay for the test.
      if (kv_valid < T::kKvSlice || mask != nullptr) mask_scores<T>(s, mask, kv0 + slice0, kv_valid, tid % 4);
      online_softmax<T>(s, o_acc, row_max, row_sum, a.scale_log2);
      accumulate_pv_f16<T::kMTiles, T::kMTiles, T::kOTiles, T::kSTiles, T::kHeadDim, T::kSmemRow>(o_acc, row_sum, s,
                                                                                                 sv, n_pairs);
    }
    __syncthreads();
    reload_single_buffer<T>(a, k_copy, v_copy, kg, vg, s_k, s_v, it, n_kv, kv0, tid);
    sk_cur ^= k_toggle;
    sv_cur ^= v_toggle;
  }
}

// kI8Out: write int8 codes at the per-tensor scale *a.o_scale to a.o_i8 instead of fp16 O to a.o (a template
// parameter, so that the fp16 instantiations compile exactly as without it).
template <class T, bool kI8Out>
__global__ void __launch_bounds__(T::kThreads, T::kMinBlocks) flash_fwd_kernel(const FusedArgs a) {
  constexpr int kM = T::kMTiles;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __half* s_q = reinterpret_cast<__half*>(smem_raw);  // (kQTile, kSmemRow); reused to stage O
  __half* s_k = s_q + T::kQSmem;                      // (kStages, kKvTile, kSmemRow)
  __half* s_v = s_k + T::kStages * T::kKvSmem;        // (kStages, kKvTile, kSmemRow)

  const int q0 = blockIdx.x * T::kQTile;
  const int h = blockIdx.y, b = blockIdx.z;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;  // accumulator row (within an 8-row half) and column pair
  const int split = warp % T::kKvSplit, slice0 = split * T::kKvSlice;  // this warp's slice of a K/V tile
  const int warp_row0 = (warp / T::kKvSplit) * T::kWarpRows;

  const __half* qg = a.q + b * a.qs.batch + h * a.qs.head;
  const __half* kg = a.k + b * a.ks.batch + h * a.ks.head;
  const __half* vg = a.v + b * a.vs.batch + h * a.vs.head;
  auto* og = output_base<kI8Out>(a) + b * a.os.batch + h * a.os.head;  // (b, 0, h, 0) of o (fp16) or o_i8
  // The int8 output's scale, loaded before the K/V loop (read at the end, its latency would add to every block).
  float o_scale = 0.f;
  if constexpr (kI8Out) o_scale = __ldg(a.o_scale);
  const uint8_t* mask = a.key_mask != nullptr ? a.key_mask + static_cast<int64_t>(b) * a.seq_kv : nullptr;
  const int n_kv = (a.seq_kv + T::kKvTile - 1) / T::kKvTile;
  const bool warp_active = q0 + warp_row0 < a.seq_q;
  const LdsmLanes lanes = ldsm_lanes<T>(s_q, s_k, s_v, warp_row0, slice0, lane);

  load_tile<T, T::kQTile>(s_q, qg, a.qs.row, q0, a.seq_q, tid);
  if (n_kv > 0) {
    load_tile<T, T::kKvTile>(s_k, kg, a.ks.row, 0, a.seq_kv, tid);
    load_tile<T, T::kKvTile>(s_v, vg, a.vs.row, 0, a.seq_kv, tid);
  }
  cp_async_commit();
  float o_acc[kM][T::kOTiles][4], row_max[kM][2], row_sum[kM][4];
  init_accumulators<T>(o_acc, row_max, row_sum);
  kv_loop<T>(a, o_acc, row_max, row_sum, kg, vg, s_k, s_v, lanes, mask, n_kv, slice0, warp_active, tid);
  // When Skv == 0 the Q copies (issued by all threads, into every warp's rows) may still be in flight.
  cp_async_wait<0>();
  __syncthreads();
  if (T::kKvSplit > 1) {
    combine_split_kv<T, kI8Out>(a, og, o_scale, reinterpret_cast<float*>(s_k), o_acc[0], row_max[0], row_sum[0],
                                q0 + warp_row0, warp, lane);
    return;
  }
  if (!warp_active) return;
  // Normalise and stage the warp's rows in its part of s_q, then write 16-byte chunks (8-byte chunks of int8
  // codes; these loops stay here: as a function, their lane-dependent trip count compiled to other code).
  __half* so = s_q + warp_row0 * T::kSmemRow;
  if constexpr (kI8Out) {
    int8_t* so8 = reinterpret_cast<int8_t*>(so);  // rows of 2 kSmemRow bytes, the fp16 staging's pitch
    stage_output_i8<T::kMTiles, T::kOTiles, 2 * T::kSmemRow>(so8, o_acc, row_sum, 1.f / o_scale, g, t);
    __syncwarp();
#pragma unroll
    for (int c = lane; c < T::kWarpRows * T::kChunks; c += 32) {
      const int r = c / T::kChunks, ch = c % T::kChunks;
      const int row = q0 + warp_row0 + r;
      if (row < a.seq_q)
        *reinterpret_cast<uint2*>(og + static_cast<int64_t>(row) * a.os.row + ch * 8) =
            *reinterpret_cast<const uint2*>(so8 + r * 2 * T::kSmemRow + ch * 8);
    }
  } else {
    stage_output_f16<T::kMTiles, T::kOTiles, T::kSmemRow>(so, o_acc, row_sum, g, t);
    __syncwarp();
#pragma unroll
    for (int c = lane; c < T::kWarpRows * T::kChunks; c += 32) {
      const int r = c / T::kChunks, ch = c % T::kChunks;
      const int row = q0 + warp_row0 + r;
      if (row < a.seq_q)
        *reinterpret_cast<uint4*>(og + static_cast<int64_t>(row) * a.os.row + ch * 8) =
            *reinterpret_cast<const uint4*>(so + r * T::kSmemRow + ch * 8);
    }
  }
}

}  // namespace
}  // namespace edgevit
