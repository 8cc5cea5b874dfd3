// Fused multi-head attention, fp16 in/out, FlashAttention-2 style, SM80-class instructions only
// (mma.sync m16n8k16, ldmatrix, cp.async; valid for CUDA 11.4+, SASS for sm_87 Orin and sm_90 H100/H200).
//
// One block per (q tile, head, batch). Each warp owns 16 or 32 query rows (one or two m16 tiles sharing
// every K/V fragment; with split-KV, kv_split warps share 16 rows and each takes its slice of the keys):
// its Q fragments stay in registers, K/V tiles of kv_tile keys stream through shared
// memory (cp.async, double-buffered when stages == 2), S = Q K^T and O += P V run on the tensor cores with
// fp32 accumulators, and the softmax is online in fp32 registers (running max and sum in log2 units;
// p = ex2(s * scale * log2 e - max): the scale is applied once, in the same FFMA). Keys past Skv or masked
// out are -inf before the max (only tiles holding such keys pay for the test); a row with no valid key
// ends with sum 0 and is written as zeros. Rows past Sq / Skv are zero-filled by cp.async (src-size 0), so
// inputs need no padding; a K/V tile's trailing 16-key groups that hold no valid key are skipped, and warps
// whose rows all lie past Sq skip the arithmetic.
//
// Variants: the rows of kMhaVariants (kernels/mha_variants.h), flash_fwd_f16_d{D}_q{rows}_w{warps}_kv{keys}
// _s{stages}, instantiated here in table order. Measured on an H200 (docs/benchmarks.md, docs/kernels-mha.md):
//   v1 (16-row warps, exp2f, mask test on every tile, 131 regs): d64 B64 H12 S197: 96 us (q64_w4);
//     0.37-0.68x of the best torch SDPA backend over the six ViT shapes.
//   v2 (ex2.approx + FFMA scale, mask test only where needed, 128-register target, optional 32-row warps):
//     q64_w4_kv64_s2 78 us at B64 H12 S197 (cuDNN 46, FA2 63), 0.51-0.84x of the best SDPA.
//   v3 (optional Q re-read from shared memory per tile (_qs rows), so 32-row warps fit 143 registers and
//     3 blocks/SM; rows chosen by blocks per SM): H100, q128_w4_kv32_s2_qs 68 us at B64 H12 S197 (cuDNN 46,
//     FA2 64), 0.50-0.93x of the best SDPA; ncu: issue/latency-bound, tensor pipe 22%.
//   v4 (split-KV rows (_ks{n}): n warps share 16 query rows, each taking 1/n of every K/V tile's
//     keys, partials combined through shared memory by combine_split_kv; for grids that leave SMs idle):
//     H100, B1 H12 S197 8.3 -> 5.8 us (q32_w8_kv128_s2_ks4; cuDNN 8.0), B8 H3 S197 9.0 -> 8.3.
//   v5 (fewer instructions per tile: lazy rescaling of O (the reference max moves only past 2^8), row sums
//     of P on the tensor cores, tile loads with per-thread constant offsets): H100, ncu instructions at B64
//     H12 S197 29.1 M -> 26.1 M before the loads; B64 H12 S197 68.0 -> 58.3 us, B4 H16 S1025 124.1 ->
//     102.1 (cuDNN 45.6 / 66.0, FA2 ~64 / ~96).
//   v6 (this code: the SASS loop of q128_w4_kv32_s2_qs still recomputed every ldmatrix address and every
//     copy's 64-bit row offset from the lane index (ptxas rematerialisation inside the skipped-group
//     branches); they are now loop-carried registers; the first S product starts from RZ; the row max is a
//     per-thread tree and the quad shuffles run only when a warp vote says a reference must move; 32-key
//     slices compute every 16-key group): loop 674 -> 542 SASS instructions, ncu 17.5 M instructions at
//     B64 H12 S197 (cuDNN 18.6 M); H100 B64 H12 S197 57.9 -> 47.3 us, B16 H6 S577 59.1 -> 42.0, B4 H16 S1025
//     102.6 -> 78.1 (cuDNN 45.7 / 33.8 / 66.9).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <mutex>
#include <utility>

#include "kernels/cuda/mha.h"
#include "kernels/cuda/mma_sm80.cuh"
#include "kernels/mha_variants.h"

namespace edgevit {
namespace {

using cuda::cp_async_16;
using cuda::cp_async_commit;
using cuda::cp_async_wait;
using cuda::ldmatrix_x4_at;
using cuda::ldmatrix_x4_trans_at;
using cuda::smem_addr;
using cuda::mma_16816;
using cuda::mma_16816_zero_c;
using cuda::pack_half2;

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
  __half* o;        // likewise with os, seq_q rows
  AttnStrides qs, ks, vs, os;
  const uint8_t* key_mask;  // (B, Skv) or nullptr
  int seq_q;
  int seq_kv;
  float scale_log2;  // scale * log2(e)
};

// Lazy rescaling threshold of the online softmax, in log2 units (see the softmax below).
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

// Split-KV epilogue: the kKvSplit warps of a row group hold partial results over disjoint key slices of
// the same 16 rows (running max m_j in log2 units, sum l_j of 2^(s - m_j), O_j unnormalised). Through
// shared memory (the K/V buffers, free now) each output element becomes
//   sum_j 2^(m_j - M) O_j / sum_j 2^(m_j - M) l_j,   M = max_j m_j,
// and a row no slice has a valid key for (every m_j = -inf) is zeros, as without the split.
template <class T>
__device__ __forceinline__ void combine_split_kv(const FusedArgs& a, __half* og, float* buf,
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
    uint4 out;
    out.x = pack_half2(acc[0] * inv, acc[1] * inv);
    out.y = pack_half2(acc[2] * inv, acc[3] * inv);
    out.z = pack_half2(acc[4] * inv, acc[5] * inv);
    out.w = pack_half2(acc[6] * inv, acc[7] * inv);
    *reinterpret_cast<uint4*>(og + static_cast<int64_t>(row) * a.os.row + ch * 8) = out;
  }
}

template <class T>
__global__ void __launch_bounds__(T::kThreads, T::kMinBlocks) flash_fwd_kernel(const FusedArgs a) {
  constexpr int kM = T::kMTiles;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __half* s_q = reinterpret_cast<__half*>(smem_raw);  // (kQTile, kSmemRow); reused to stage O
  __half* s_k = s_q + T::kQSmem;                      // (kStages, kKvTile, kSmemRow)
  __half* s_v = s_k + T::kStages * T::kKvSmem;        // (kStages, kKvTile, kSmemRow)

  const int q0 = blockIdx.x * T::kQTile;
  const int h = blockIdx.y;
  const int b = blockIdx.z;
  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int g = lane / 4;  // accumulator row within an 8-row half of an m tile
  const int t = lane % 4;  // accumulator column pair
  const int split = warp % T::kKvSplit;          // which slice of every K/V tile this warp takes
  const int slice0 = split * T::kKvSlice;        // its first key within a tile
  const int warp_row0 = (warp / T::kKvSplit) * T::kWarpRows;

  const __half* qg = a.q + b * a.qs.batch + h * a.qs.head;
  const __half* kg = a.k + b * a.ks.batch + h * a.ks.head;
  const __half* vg = a.v + b * a.vs.batch + h * a.vs.head;
  __half* og = a.o + b * a.os.batch + h * a.os.head;
  const uint8_t* mask = a.key_mask != nullptr ? a.key_mask + static_cast<int64_t>(b) * a.seq_kv : nullptr;

  const int n_kv = (a.seq_kv + T::kKvTile - 1) / T::kKvTile;
  const bool warp_active = q0 + warp_row0 < a.seq_q;
  // Per-lane shared byte addresses of the ldmatrix rows (lane i names row i % 8 of matrix i / 8), computed
  // once: in the loop every fragment load is this base plus the stage and a compile-time offset. Computed
  // per load inside the skipped-group branches, they cost ~8 integer instructions per LDSM (SASS, sm_90).
  //   Q (A operand): matrices (rows 0-7, cols 0-7), (rows 8-15, 0-7), (0-7, 8-15), (8-15, 8-15).
  //   K (B operand of S = Q K^T, keys as n): (keys 0-7, d 0-7), (0-7, 8-15), (8-15, 0-7), (8-15, 8-15).
  //   V (B operand of O = P V, transposed): (keys 0-7, d 0-7), (keys 8-15, d 0-7), (0-7, 8-15), (8-15, 8-15).
  const uint32_t sq_lane = smem_addr(s_q) + 2u * ((warp_row0 + lane % 16) * T::kSmemRow + (lane / 16) * 8);
  const uint32_t sk_lane =
      smem_addr(s_k) + 2u * ((slice0 + (lane & 7) + ((lane >> 4) << 3)) * T::kSmemRow + ((lane >> 3) & 1) * 8);
  const uint32_t sv_lane =
      smem_addr(s_v) + 2u * ((slice0 + (lane & 7) + (((lane >> 3) & 1) << 3)) * T::kSmemRow + ((lane >> 4) << 3));

  load_tile<T, T::kQTile>(s_q, qg, a.qs.row, q0, a.seq_q, tid);
  if (n_kv > 0) {
    load_tile<T, T::kKvTile>(s_k, kg, a.ks.row, 0, a.seq_kv, tid);
    load_tile<T, T::kKvTile>(s_v, vg, a.vs.row, 0, a.seq_kv, tid);
  }
  cp_async_commit();

  float o_acc[kM][T::kOTiles][4];
#pragma unroll
  for (int m = 0; m < kM; ++m)
#pragma unroll
    for (int i = 0; i < T::kOTiles; ++i) o_acc[m][i][0] = o_acc[m][i][1] = o_acc[m][i][2] = o_acc[m][i][3] = 0.f;
  // Reference max of the scaled scores (log2 units) per m tile and 8-row half, and the row sums of P as an
  // m16n8 accumulator: P (fp16, as the P V product sees it) times a ones fragment on the tensor cores, so
  // each thread holds its rows' complete sums (elements 0 / 2: rows g / g + 8) with no per-score FADD and
  // no shuffles at the end.
  float row_max[kM][2], row_sum[kM][4];
#pragma unroll
  for (int m = 0; m < kM; ++m) {
    row_max[m][0] = row_max[m][1] = -INFINITY;
    row_sum[m][0] = row_sum[m][1] = row_sum[m][2] = row_sum[m][3] = 0.f;
  }
  const uint32_t ones = 0x3C003C00u;  // half2(1, 1)
  // Per-thread K / V copy state (unused, and optimised away, without the fast copy layout).
  KvCopy k_copy = make_kv_copy<T>(kg, a.ks.row, s_k, tid);
  KvCopy v_copy = make_kv_copy<T>(vg, a.vs.row, s_v, tid);
  // This tile's K / V ldmatrix bases (sk_lane / sv_lane plus the stage), carried from tile to tile for the
  // same reason as the copy pointers: inside the skipped-group branches ptxas otherwise recomputes them from
  // the lane index at every LDSM (~8 integer instructions each).
  uint32_t sk_cur = sk_lane, sv_cur = sv_lane;
  const uint32_t k_toggle = T::kStages == 2 ? sk_lane ^ (sk_lane + T::kKvSmem * 2) : 0u;
  const uint32_t v_toggle = T::kStages == 2 ? sv_lane ^ (sv_lane + T::kKvSmem * 2) : 0u;
  // Held Q fragments (unused, and optimised away, when T::kQReload).
  uint32_t q_frag[kM][T::kQReload ? 1 : T::kDSteps][4];

  for (int it = 0; it < n_kv; ++it) {
    const int kv0 = it * T::kKvTile;
    if (T::kStages > 1 && it + 1 < n_kv) {
      const int next = (it + 1) % T::kStages;
      if constexpr (kFastTileCopy<T, T::kKvTile>) {
        const uint32_t buf = static_cast<uint32_t>(next) * (T::kKvSmem * 2);
        copy_kv_tile<T>(k_copy, kg, a.ks.row, buf, kv0 + T::kKvTile, a.seq_kv);
        copy_kv_tile<T>(v_copy, vg, a.vs.row, buf, kv0 + T::kKvTile, a.seq_kv);
      } else {
        load_tile<T, T::kKvTile>(s_k + next * T::kKvSmem, kg, a.ks.row, kv0 + T::kKvTile, a.seq_kv, tid);
        load_tile<T, T::kKvTile>(s_v + next * T::kKvSmem, vg, a.vs.row, kv0 + T::kKvTile, a.seq_kv, tid);
      }
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();

    if (warp_active) {
      if (!T::kQReload && it == 0) {
#pragma unroll
        for (int m = 0; m < kM; ++m)
#pragma unroll
          for (int ds = 0; ds < (T::kQReload ? 1 : T::kDSteps); ++ds)
            ldmatrix_x4_at(q_frag[m][ds], sq_lane + 2 * (m * 16 * T::kSmemRow + ds * 16));
      }
      const uint32_t sk = sk_cur, sv = sv_cur;
      // Valid keys of this warp's slice of the tile (the whole tile without split-KV).
      const int kv_valid = max(0, min(T::kKvSlice, a.seq_kv - kv0 - slice0));
      // 16-key groups holding at least one valid key; the others are skipped, except with slices of at most
      // 32 keys, where the test and its branches cost every tile more than the one group it can skip in the
      // last (skipped groups read zero-filled K / V rows and have p = 0, so computing them changes nothing).
      const int n_pairs = T::kKvSlice <= 32 ? T::kSTiles / 2 : (kv_valid + 15) / 16;

      // S = Q K^T (kWarpRows x kKvTile per warp), fp32, unscaled. The first k step starts from a zero
      // accumulator operand (RZ in the HMMA) instead of zeroing S first (one CS2R per two scores per tile).
      // Skipped groups (past the valid keys, slices wider than 32 keys) are left unwritten: every column there
      // is >= kv_valid, so the test below assigns them -inf before anything reads them.
      float s[kM][T::kSTiles][4];
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

      // Keys past Skv or masked out become -inf; only tiles that hold such keys pay for the test.
      if (kv_valid < T::kKvSlice || mask != nullptr) {
#pragma unroll
        for (int nt = 0; nt < T::kSTiles; ++nt) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int col = nt * 8 + 2 * t + e;
            bool ok = col < kv_valid;
            if (ok && mask != nullptr) ok = mask[kv0 + slice0 + col] != 0;
            if (!ok) {
#pragma unroll
              for (int m = 0; m < kM; ++m) s[m][nt][e] = s[m][nt][e + 2] = -INFINITY;
            }
          }
        }
      }
      // Online softmax in log2 units: p = 2^(s * scale_log2 - max), one FFMA and one ex2 per score. The m
      // tiles share one vote and branch, so their maxima and their exponentials each form one basic block
      // that ptxas can interleave (a vote per m tile split them).
      float cand[kM][2];
      bool grow = false;
#pragma unroll
      for (int m = 0; m < kM; ++m) {
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
          cand[m][r] = max_tree<0, T::kSTiles>(part[r]) * a.scale_log2;
          grow = grow || cand[m][r] > row_max[m][r] + kRescaleLog2;  // the first valid key: -inf + 8 = -inf
        }
      }
      // Lazy rescaling: the reference max of a row moves only when a tile's max passes it by more than
      // kRescaleLog2, so p = 2^(s - max) stays <= 2^kRescaleLog2 = 256 (fp16 keeps its relative precision
      // there, far below 65504). The test needs no row max: if no thread's own columns pass its reference,
      // the row's do not either, so only then (a warp vote) are the four threads of each row combined (two
      // shuffles, off the common path) and O and the sum rescaled. O and the sum always share one reference
      // max, and the four threads of a row always hold the same one, so the final O / sum is the same
      // softmax.
      if (__any_sync(0xffffffffu, grow)) {
#pragma unroll
        for (int m = 0; m < kM; ++m) {
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
#pragma unroll
      for (int m = 0; m < kM; ++m) {
        const float m_use[2] = {row_max[m][0] == -INFINITY ? 0.f : row_max[m][0],
                                row_max[m][1] == -INFINITY ? 0.f : row_max[m][1]};
#pragma unroll
        for (int nt = 0; nt < T::kSTiles; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) s[m][nt][e] = fast_exp2(fmaf(s[m][nt][e], a.scale_log2, -m_use[e / 2]));
        }
      }

      // O += P V: P's accumulator layout is the A-fragment layout of m16n8k16, 16 keys at a time.
#pragma unroll
      for (int kp = 0; kp < T::kSTiles / 2; ++kp) {
        if (kp < n_pairs) {
          uint32_t pa[kM][4];
#pragma unroll
          for (int m = 0; m < kM; ++m) {
            pa[m][0] = pack_half2(s[m][2 * kp][0], s[m][2 * kp][1]);
            pa[m][1] = pack_half2(s[m][2 * kp][2], s[m][2 * kp][3]);
            pa[m][2] = pack_half2(s[m][2 * kp + 1][0], s[m][2 * kp + 1][1]);
            pa[m][3] = pack_half2(s[m][2 * kp + 1][2], s[m][2 * kp + 1][3]);
            mma_16816(row_sum[m], pa[m], ones, ones);
          }
#pragma unroll
          for (int dp = 0; dp < T::kHeadDim / 16; ++dp) {
            uint32_t vb[4];
            ldmatrix_x4_trans_at(vb, sv + 2 * (kp * 16 * T::kSmemRow + dp * 16));
#pragma unroll
            for (int m = 0; m < kM; ++m) {
              mma_16816(o_acc[m][2 * dp], pa[m], vb[0], vb[1]);
              mma_16816(o_acc[m][2 * dp + 1], pa[m], vb[2], vb[3]);
            }
          }
        }
      }
    }
    __syncthreads();
    if (T::kStages == 1 && it + 1 < n_kv) {
      if constexpr (kFastTileCopy<T, T::kKvTile>) {
        copy_kv_tile<T>(k_copy, kg, a.ks.row, 0, kv0 + T::kKvTile, a.seq_kv);
        copy_kv_tile<T>(v_copy, vg, a.vs.row, 0, kv0 + T::kKvTile, a.seq_kv);
      } else {
        load_tile<T, T::kKvTile>(s_k, kg, a.ks.row, kv0 + T::kKvTile, a.seq_kv, tid);
        load_tile<T, T::kKvTile>(s_v, vg, a.vs.row, kv0 + T::kKvTile, a.seq_kv, tid);
      }
      cp_async_commit();
    }
    sk_cur ^= k_toggle;
    sv_cur ^= v_toggle;
  }
  // When Skv == 0 the Q copies (issued by all threads, into every warp's rows) may still be in flight.
  cp_async_wait<0>();
  __syncthreads();
  if (T::kKvSplit > 1) {
    combine_split_kv<T>(a, og, reinterpret_cast<float*>(s_k), o_acc[0], row_max[0], row_sum[0], q0 + warp_row0, warp,
                        lane);
    return;
  }
  if (!warp_active) return;

  // Normalise, stage the warp's rows in its own part of s_q, then write 16-byte chunks.
  __half* so = s_q + warp_row0 * T::kSmemRow;
#pragma unroll
  for (int m = 0; m < kM; ++m) {
    float inv[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float l = row_sum[m][2 * r];
      inv[r] = l > 0.f ? 1.f / l : 0.f;  // no valid key: the row is zeros
    }
#pragma unroll
    for (int i = 0; i < T::kOTiles; ++i) {
      const int col = i * 8 + 2 * t;
      *reinterpret_cast<__half2*>(so + (m * 16 + g) * T::kSmemRow + col) =
          __floats2half2_rn(o_acc[m][i][0] * inv[0], o_acc[m][i][1] * inv[0]);
      *reinterpret_cast<__half2*>(so + (m * 16 + g + 8) * T::kSmemRow + col) =
          __floats2half2_rn(o_acc[m][i][2] * inv[1], o_acc[m][i][3] * inv[1]);
    }
  }
  __syncwarp();
#pragma unroll
  for (int c = lane; c < T::kWarpRows * T::kChunks; c += 32) {
    const int r = c / T::kChunks;
    const int ch = c % T::kChunks;
    const int row = q0 + warp_row0 + r;
    if (row < a.seq_q)
      *reinterpret_cast<uint4*>(og + static_cast<int64_t>(row) * a.os.row + ch * 8) =
          *reinterpret_cast<const uint4*>(so + r * T::kSmemRow + ch * 8);
  }
}

template <size_t kRow>
cudaError_t launch_row(const FusedArgs& args, int batch, int heads, cudaStream_t stream) {
  constexpr MhaVariant row = kMhaVariants[kRow];
  using T = FlashFwdTraits<row.head_dim, row.q_tile, row.threads / 32, row.kv_tile, row.stages, row.q_smem,
                           row.kv_split>;
  // Once per instantiation: opt in to more than 48 KB of dynamic shared memory.
  static const cudaError_t attr_status =
      T::kSmemBytes > kMhaDefaultSmemBytes
          ? cudaFuncSetAttribute(flash_fwd_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 static_cast<int>(T::kSmemBytes))
          : cudaSuccess;
  if (attr_status != cudaSuccess) return attr_status;
  const dim3 grid((args.seq_q + T::kQTile - 1) / T::kQTile, heads, batch);
  flash_fwd_kernel<T><<<grid, T::kThreads, T::kSmemBytes, stream>>>(args);
  return cudaGetLastError();
}

// Blocks of a row that can be resident on one SM of the current device (registers, shared memory, threads).
template <size_t kRow>
cudaError_t resident_row(int* blocks) {
  constexpr MhaVariant row = kMhaVariants[kRow];
  using T = FlashFwdTraits<row.head_dim, row.q_tile, row.threads / 32, row.kv_tile, row.stages, row.q_smem,
                           row.kv_split>;
  if (T::kSmemBytes > kMhaDefaultSmemBytes) {
    const cudaError_t err = cudaFuncSetAttribute(flash_fwd_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                 static_cast<int>(T::kSmemBytes));
    if (err != cudaSuccess) return err;
  }
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, flash_fwd_kernel<T>, T::kThreads, T::kSmemBytes);
}

using LaunchFn = cudaError_t (*)(const FusedArgs&, int, int, cudaStream_t);
using ResidentFn = cudaError_t (*)(int*);
template <size_t... kRows>
constexpr std::array<LaunchFn, sizeof...(kRows)> make_launch_table(std::index_sequence<kRows...>) {
  return {&launch_row<kRows>...};
}
template <size_t... kRows>
constexpr std::array<ResidentFn, sizeof...(kRows)> make_resident_table(std::index_sequence<kRows...>) {
  return {&resident_row<kRows>...};
}
constexpr std::array<LaunchFn, kNumMhaVariants> kLaunch =
    make_launch_table(std::make_index_sequence<kNumMhaVariants>{});
constexpr std::array<ResidentFn, kNumMhaVariants> kResident =
    make_resident_table(std::make_index_sequence<kNumMhaVariants>{});

// Device capabilities, queried once per device.
struct DeviceCaps {
  int sm = 0;
  int sm_count = 0;
  int64_t smem_optin = 0;
  cudaError_t status = cudaSuccess;
};
DeviceCaps device_caps(int device) {
  constexpr int kMaxDevices = 64;
  static std::mutex mu;
  static DeviceCaps caps[kMaxDevices];
  static bool known[kMaxDevices] = {};
  if (device < 0 || device >= kMaxDevices) return DeviceCaps{0, 0, 0, cudaErrorInvalidDevice};
  std::lock_guard<std::mutex> lock(mu);
  if (!known[device]) {
    int major = 0, minor = 0, optin = 0;
    DeviceCaps c;
    c.status = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    if (c.status == cudaSuccess)
      c.status = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
    if (c.status == cudaSuccess)
      c.status = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
    if (c.status == cudaSuccess)
      c.status = cudaDeviceGetAttribute(&c.sm_count, cudaDevAttrMultiProcessorCount, device);
    c.sm = major * 10 + minor;
    c.smem_optin = optin;
    caps[device] = c;
    known[device] = true;
  }
  return caps[device];
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }
bool strides_ok(const AttnStrides& s) { return s.batch % 8 == 0 && s.row % 8 == 0 && s.head % 8 == 0; }

}  // namespace

cudaError_t mha_fused_f16_variant(const AttnParams& p, const __half* q, const __half* k, const __half* v,
                                  __half* o, int variant_index, cudaStream_t stream) {
  if (p.batch < 0 || p.heads < 0 || p.seq_q < 0 || p.seq_kv < 0 || p.batch > 65535 || p.heads > 65535)
    return cudaErrorInvalidValue;
  if (!(p.scale > 0.f)) return cudaErrorInvalidValue;  // the running max is kept in scaled units
  if (p.batch == 0 || p.heads == 0 || p.seq_q == 0) return cudaSuccess;
  if (!aligned16(q) || !aligned16(k) || !aligned16(v) || !aligned16(o) || !strides_ok(p.q) ||
      !strides_ok(p.k) || !strides_ok(p.v) || !strides_ok(p.o))
    return cudaErrorInvalidValue;
  size_t row = 0;
  if (variant_index >= 0) {
    if (static_cast<size_t>(variant_index) >= kNumMhaVariants ||
        kMhaVariants[variant_index].head_dim != p.head_dim)
      return cudaErrorInvalidValue;
    row = static_cast<size_t>(variant_index);
  } else {
    int device = 0;
    cudaError_t err = cudaGetDevice(&device);
    if (err != cudaSuccess) return err;
    const DeviceCaps caps = device_caps(device);
    if (caps.status != cudaSuccess) return caps.status;
    const MhaGrid grid{p.batch, p.heads, p.seq_q, caps.sm_count};
    const MhaChoice choice = choose_mha(caps.sm, caps.smem_optin, p.head_dim, true, false, &grid);
    if (!choice.fused) return cudaErrorNotSupported;
    row = static_cast<size_t>(choice.variant - kMhaVariants);
  }
  FusedArgs args{q, k, v, o, p.q, p.k, p.v, p.o, p.key_mask, p.seq_q, p.seq_kv,
                 p.scale * 1.4426950408889634f};
  return kLaunch[row](args, p.batch, p.heads, stream);
}

cudaError_t mha_fused_resident_blocks(int variant_index, int* blocks) {
  if (blocks == nullptr || variant_index < 0 || static_cast<size_t>(variant_index) >= kNumMhaVariants)
    return cudaErrorInvalidValue;
  return kResident[static_cast<size_t>(variant_index)](blocks);
}

cudaError_t mha_fused_f16(const AttnParams& p, const __half* q, const __half* k, const __half* v, __half* o,
                          cudaStream_t stream) {
  return mha_fused_f16_variant(p, q, k, v, o, -1, stream);
}

}  // namespace edgevit
