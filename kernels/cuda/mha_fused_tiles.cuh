// Private to kernels/cuda/mha_fused.cu (internal linkage; include it from that file only): the fused attention
// kernel's compile-time traits, its arguments, and its data movement: global -> shared tile copies (cp.async,
// zero-filled past the sequence) and the per-lane ldmatrix addresses. The kernel is in mha_fused_kernel.cuh;
// the design and the variants are described at the top of mha_fused.cu.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/attn_params.h"
#include "kernels/cuda/mma_sm80.cuh"
#include "kernels/mha_variants.h"

namespace edgevit {
namespace {

using cuda::cp_async_16;
using cuda::smem_addr;

// Compile-time configuration of one variant; derives shared-memory sizes and checks the limits.
template <int kHeadDim_, int kQTile_, int kWarps_, int kKvTile_, int kStages_, bool kQReload_, int kKvSplit_>
struct FlashFwdTraits {
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kQTile = kQTile_;
  static constexpr int kWarps = kWarps_;
  static constexpr int kKvTile = kKvTile_;
  static constexpr int kStages = kStages_;
  static constexpr bool kQReload = kQReload_;  // Q fragments re-read from shared memory per tile
  static constexpr int kKvSplit = kKvSplit_;   // warps per row group, each taking a slice of every K/V tile
  static constexpr int kRowGroups = kWarps / kKvSplit;
  static constexpr int kKvSlice = kKvTile / kKvSplit;  // keys of a tile one warp takes
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kWarpRows = kQTile / kRowGroups;
  static constexpr int kMTiles = kWarpRows / 16;  // m16 tiles per warp; they share each K/V fragment
  static constexpr int kSmemRow = kHeadDim + 8;   // halves; +16 B keeps ldmatrix rows in distinct banks
  static constexpr int kChunks = kHeadDim / 8;    // 16-byte chunks per row
  static constexpr int kQSmem = kQTile * kSmemRow;
  static constexpr int kKvSmem = kKvTile * kSmemRow;
  static constexpr int64_t kSmemBytes = static_cast<int64_t>(kQSmem + 2 * kStages * kKvSmem) * 2;
  static constexpr int kDSteps = kHeadDim / 16;  // k steps of S = Q K^T
  static constexpr int kSTiles = kKvSlice / 8;   // n8 tiles of S per m tile
  static constexpr int kOTiles = kHeadDim / 8;   // n8 tiles of O per m tile
  // Register target: 16-row warps with D <= 64 and 64-key tiles fit 128 registers, so 16 warps per SM stay resident.
  // 32-row warps that re-read Q with 32-key tiles fit 143 registers: 12 warps per SM (3 blocks of 4, 6 of 2).
  // 16-row warps that re-read Q with 32-key tiles: <= 102 registers, 20 warps per SM (5 blocks of 4).
  static constexpr int kMinBlocks = (kHeadDim <= 64 && kMTiles == 1 && kQReload && kKvSlice <= 32)   ? 20 / kWarps
                                    : (kHeadDim <= 64 && kMTiles == 1 && kKvSlice <= 64)                ? 16 / kWarps
                                    : (kHeadDim <= 64 && kMTiles == 2 && kQReload && kKvTile <= 32) ? 12 / kWarps
                                                                                                   : 1;

  static_assert(kHeadDim % 16 == 0 && kHeadDim <= 256, "head_dim: multiple of 16, at most 256");
  static_assert(kWarps % kKvSplit == 0 && (kKvSplit == 1 || kMTiles == 1), "split-KV: whole groups of 16-row warps");
  static_assert(kWarpRows * kRowGroups == kQTile && kWarpRows % 16 == 0 && kMTiles <= 2, "16 or 32 rows per warp");
  static_assert(kKvSlice * kKvSplit == kKvTile && kKvSlice % 16 == 0, "kv tile (slice): multiple of 16 keys");
  // Split-KV: each warp's partial (max and sum per row, O unnormalised) goes through the K/V buffers.
  static constexpr int kCombineRow = kHeadDim + 4;  // floats per row of a partial O
  static constexpr int64_t kCombineBytes = static_cast<int64_t>(kWarps) * 16 * (2 + kCombineRow) * 4;
  static_assert(kKvSplit == 1 || kCombineBytes <= static_cast<int64_t>(2 * kStages * kKvSmem) * 2,
                "split-KV partials must fit the K/V buffers");
  static_assert(kStages == 1 || kStages == 2, "one or two K/V buffers");
  static_assert(kThreads <= 256, "at most 8 warps");
  static_assert(kSmemBytes == mha_fused_smem_bytes(kHeadDim, kQTile, kKvTile, kStages),
                "traits and kernels/mha_variants.h disagree on shared memory");
  static_assert(kSmemBytes <= 163 * 1024, "above SM87's 163 KB per-block opt-in");
};

struct FusedArgs {
  const __half* q;  // element (b, s, h, d) at q[b*qs.batch + s*qs.row + h*qs.head + d]
  const __half* k;  // likewise with ks, seq_kv rows
  const __half* v;  // likewise with vs, seq_kv rows
  __half* o;        // likewise with os, seq_q rows (fp16 output); nullptr when o_i8 is set
  AttnStrides qs, ks, vs, os;
  const uint8_t* key_mask;  // (B, Skv) or nullptr
  int seq_q;
  int seq_kv;
  float scale_log2;  // scale * log2(e)
  // Last, so that the fields above keep their parameter offsets in the fp16 instantiations:
  int8_t* o_i8;          // int8 output, likewise with os; nullptr: fp16 output to o
  const float* o_scale;  // (1) device, with o_i8: the per-tensor scale s of the codes rne(o / s)
};

// Whether load_tile<T, kRows> takes its fast path: every thread the same 16-byte chunk column of rows
// r, r + kThreads / kChunks, ... (at most 8 of them).
template <class T, int kRows>
constexpr bool kFastTileCopy = T::kThreads % T::kChunks == 0 && (kRows * T::kChunks) % T::kThreads == 0 &&
                               kRows * T::kChunks / T::kThreads <= 8;

// Copies rows [row0, row0 + rows) of a (seq, D) matrix with row stride `stride` into smem rows of
// kSmemRow halves; rows at or past `seq` are zero-filled.
template <class T, int kRows>
__device__ __forceinline__ void load_tile(__half* smem, const __half* gmem, int64_t stride, int row0, int seq,
                                          int tid) {
  if constexpr (kFastTileCopy<T, kRows>) {
    // Every thread copies the same chunk column of rows r, r + kRowStep, ... (at most 8: more held
    // pointers spilled the 128-register rows on sm_87): one 64-bit row offset per call and additions
    // after it. The general loop below spent ~100 integer instructions per tile on divisions and 64-bit
    // products (H100, B64 H12 S197: 64.4 -> 58.1 us with this path). Here it serves the one-time Q and first
    // K/V tiles; the K/V loop's copies go through copy_kv_tile, whose source pointers are loop-carried.
    constexpr int kRowStep = T::kThreads / T::kChunks;
    const int r = tid / T::kChunks, ch = tid % T::kChunks;
    const __half* src = gmem + static_cast<int64_t>(row0 + r) * stride + ch * 8;
    __half* dst = smem + r * T::kSmemRow + ch * 8;
    const int64_t step = static_cast<int64_t>(kRowStep) * stride;
#pragma unroll
    for (int i = 0; i < kRows / kRowStep; ++i) {
      const bool valid = row0 + r + i * kRowStep < seq;
      cp_async_16(dst + i * kRowStep * T::kSmemRow, valid ? src + i * step : gmem + ch * 8, valid);
    }
  } else {
#pragma unroll
    for (int c = tid; c < kRows * T::kChunks; c += T::kThreads) {
      const int r = c / T::kChunks;
      const int ch = c % T::kChunks;
      const bool valid = row0 + r < seq;
      const __half* src = gmem + (valid ? static_cast<int64_t>(row0 + r) * stride : 0) + ch * 8;
      cp_async_16(smem + r * T::kSmemRow + ch * 8, src, valid);
    }
  }
}

// This thread's share of the K or V tile copies in the loop, for kFastTileCopy<T, kKvTile>: the source of its
// chunk in the next tile to copy, carried from tile to tile (a loop-carried pointer stays in registers; the
// row offset recomputed per call, as load_tile does, was rematerialised by ptxas into ~15 integer
// instructions per copied tile on sm_90), and its destination in buffer 0.
struct KvCopy {
  const __half* next;  // gmem + (kKvTile + r) * stride + ch * 8, then one tile further per copy
  uint32_t dst;        // shared byte address of (row r, chunk ch) in buffer 0
  int r;
};
template <class T>
__device__ __forceinline__ KvCopy make_kv_copy(const __half* gmem, int64_t stride, const __half* smem, int tid) {
  const int r = tid / T::kChunks, ch = tid % T::kChunks;
  return KvCopy{gmem + static_cast<int64_t>(T::kKvTile + r) * stride + ch * 8,
                smem_addr(smem) + 2u * (r * T::kSmemRow + ch * 8), r};
}
// The next tile, rows [row0, row0 + kKvTile) of the matrix at gmem (row stride `stride`, as given to
// make_kv_copy), into the buffer at byte offset buf_bytes; rows at or past seq are zero-filled (their
// source, never read, is gmem).
template <class T>
__device__ __forceinline__ void copy_kv_tile(KvCopy& c, const __half* gmem, int64_t stride, uint32_t buf_bytes,
                                             int row0, int seq) {
  constexpr int kRowStep = T::kThreads / T::kChunks;
  const int64_t step = static_cast<int64_t>(kRowStep) * stride;
#pragma unroll
  for (int i = 0; i < T::kKvTile / kRowStep; ++i) {
    const bool valid = row0 + c.r + i * kRowStep < seq;
    cuda::cp_async_16_at(c.dst + buf_bytes + 2u * (i * kRowStep * T::kSmemRow), valid ? c.next + i * step : gmem,
                         valid);
  }
  c.next += static_cast<int64_t>(T::kKvTile) * stride;
}

// Issues the cp.async copies of the K and V tiles starting at key row0 into buffer `stage` (not committed).
template <class T>
__device__ __forceinline__ void copy_next_kv(KvCopy& k_copy, KvCopy& v_copy, const __half* kg, const __half* vg,
                                             int64_t k_stride, int64_t v_stride, __half* s_k, __half* s_v,
                                             int stage, int row0, int seq_kv, int tid) {
  if constexpr (kFastTileCopy<T, T::kKvTile>) {
    const uint32_t buf = static_cast<uint32_t>(stage) * (T::kKvSmem * 2);
    copy_kv_tile<T>(k_copy, kg, k_stride, buf, row0, seq_kv);
    copy_kv_tile<T>(v_copy, vg, v_stride, buf, row0, seq_kv);
  } else {
    load_tile<T, T::kKvTile>(s_k + stage * T::kKvSmem, kg, k_stride, row0, seq_kv, tid);
    load_tile<T, T::kKvTile>(s_v + stage * T::kKvSmem, vg, v_stride, row0, seq_kv, tid);
  }
}

// Per-lane shared byte addresses of the ldmatrix rows (lane i names row i % 8 of matrix i / 8), computed
// once: in the loop every fragment load is this base plus the stage and a compile-time offset. Computed
// per load inside the skipped-group branches, they cost ~8 integer instructions per LDSM (SASS, sm_90).
//   Q (A operand): matrices (rows 0-7, cols 0-7), (rows 8-15, 0-7), (0-7, 8-15), (8-15, 8-15).
//   K (B operand of S = Q K^T, keys as n): (keys 0-7, d 0-7), (0-7, 8-15), (8-15, 0-7), (8-15, 8-15).
//   V (B operand of O = P V, transposed): (keys 0-7, d 0-7), (keys 8-15, d 0-7), (0-7, 8-15), (8-15, 8-15).
struct LdsmLanes {
  uint32_t q;  // in s_q, at the warp's first row
  uint32_t k;  // in s_k buffer 0, at the warp's first key
  uint32_t v;  // in s_v buffer 0, at the warp's first key
};
template <class T>
__device__ __forceinline__ LdsmLanes ldsm_lanes(const __half* s_q, const __half* s_k, const __half* s_v,
                                                int warp_row0, int slice0, int lane) {
  const uint32_t sq_lane = smem_addr(s_q) + 2u * ((warp_row0 + lane % 16) * T::kSmemRow + (lane / 16) * 8);
  const uint32_t sk_lane =
      smem_addr(s_k) + 2u * ((slice0 + (lane & 7) + ((lane >> 4) << 3)) * T::kSmemRow + ((lane >> 3) & 1) * 8);
  const uint32_t sv_lane =
      smem_addr(s_v) + 2u * ((slice0 + (lane & 7) + (((lane >> 3) & 1) << 3)) * T::kSmemRow + ((lane >> 4) << 3));
  return LdsmLanes{sq_lane, sk_lane, sv_lane};
}

}  // namespace
}  // namespace edgevit
