// Private to kernels/cuda/gemm_i8.cu (internal linkage; include it from that file only): the W8A8 GEMM
// kernel's traits, its tile copies (cp.async into swizzled shared memory, zero-filled past M, N and K), the
// main loop (mma.sync m16n8k32, one barrier per k-tile), the split-K fan-in and the fused epilogues (through
// shared memory; their arithmetic, shared with the epilogue after cuBLASLt IMMA: gemm_i8_epilogue.cuh). The
// design: docs/kernels-gemm-i8.md; the arithmetic: kernels/cpu/gemm_i8_ref.h.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/gemm_i8.h"
#include "kernels/cuda/gemm_i8_epilogue.cuh"
#include "kernels/cuda/mma_sm80.cuh"
#include "kernels/cuda/mma_sm80_s8.cuh"

namespace edgevit {
namespace {

using cuda::cp_async_16_at;
using cuda::cp_async_16_full_at;
using cuda::ldmatrix_x4_at;
using cuda::mma_16832_s8;
using cuda::mma_16832_u8s8;
using cuda::smem_addr;

// Compile-time configuration of one variant; derives shared-memory sizes and checks the limits.
template <int kTileM_, int kTileN_, int kTileK_, int kWarpsM_, int kWarpsN_, int kStages_, int kMinBlocks_,
          bool kLean_ = false>
struct GemmI8Traits {
  static constexpr int kTileM = kTileM_;
  static constexpr int kTileN = kTileN_;
  static constexpr int kTileK = kTileK_;  // bytes of K per stage: one shared-memory row
  static constexpr int kWarpsM = kWarpsM_;
  static constexpr int kWarpsN = kWarpsN_;
  static constexpr int kStages = kStages_;
  static constexpr int kMinBlocks = kMinBlocks_;  // resident blocks per SM: caps registers at 64K / (this x threads)
  static constexpr int kWarps = kWarpsM * kWarpsN;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kWarpM = kTileM / kWarpsM;
  static constexpr int kWarpN = kTileN / kWarpsN;
  static constexpr int kMTiles = kWarpM / 16;  // m16 tiles per warp
  static constexpr int kNTiles = kWarpN / 8;   // n8 tiles per warp
  static constexpr int kChunks = kTileK / 16;  // 16-byte chunks per shared-memory row
  static constexpr int kKSteps = kTileK / 32;  // k32 MMA steps per stage
  static constexpr int kASmem = kTileM * kTileK;
  static constexpr int kBSmem = kTileN * kTileK;
  static constexpr int kStageBytes = kASmem + kBSmem;
  static constexpr int kPipeBytes = kStages * kStageBytes;
  // The epilogue stages the int32 tile through the (then idle) pipeline buffers: in each row, columns
  // 8g .. 8g+3 at words 4g .. 4g+3 and columns 8g+4 .. 8g+7 at kOutHalf + 4g .. (the two halves of a group
  // of eight, so eight lanes reading one half each read 128 contiguous bytes); rows padded by 8 words.
  static constexpr int kOutHalf = kTileN / 2 + 4;
  static constexpr int kOutRow = kTileN + 8;
  static constexpr int kOutBytes = kTileM * kOutRow * 4;
  static constexpr int kSmemBytes = kPipeBytes > kOutBytes ? kPipeBytes : kOutBytes;
  // kLean: the main loop holds one k32 step's B fragments and two m16 A fragments instead of two whole steps'
  // (main_loop_lean), for rows capped at 128 registers whose double-buffered fragments spill: measured per row
  // (docs/kernels-gemm-i8.md "Register-lean main loop"), it pays where the spill was large and costs where small.
  static constexpr bool kLean = kLean_;
  static_assert(kTileK == 64 || kTileK == 128, "64- or 128-byte shared-memory rows (swizzle)");
  static_assert(kWarpM % 16 == 0 && kWarpN % 16 == 0, "warp tile: m16 tiles, pairs of n8 tiles (ldmatrix.x4)");
  static_assert(kStages >= 2 && kThreads <= 256, "2+ stages, at most 8 warps");
  static_assert(kSmemBytes <= 163 * 1024, "above SM87's 163 KB per-block opt-in");
  static_assert(!kLean || kThreads * kMinBlocks >= 512, "lean: for rows capped at 128 registers");
  static_assert(kThreads % (kTileN / 8) == 0, "the epilogue keeps one column group per thread");
};

// Shared-memory byte offset of 16-byte chunk c of row r (kTileK bytes a row). The XOR spreads the 8 rows
// one ldmatrix phase reads over all 32 banks: 128-byte rows XOR with r % 8; 64-byte rows (two to a 128-byte
// line, in different halves) with (r / 2) % 4.
template <int kTileK>
__device__ __forceinline__ uint32_t swizzle(int r, int c) {
  const int x = kTileK == 64 ? (r >> 1) & 3 : r & 7;
  return static_cast<uint32_t>(r * kTileK + ((c ^ x) << 4));
}

// This thread's share of one operand's k-tile copies: kPerThread 16-byte chunks, all in chunk column c,
// rows r0 + i kRowStep (kRowStep is a multiple of 8, so every row has the same swizzle term and chunk i's
// shared-memory offset is a constant). The addresses and the rows' bounds are worked out once per block;
// a k-tile's copy is then a pointer step, a predicate and a cp.async per chunk. Chunks past the matrix's
// rows or past K are zero-filled.
template <class T, int kRows>
struct TileLoader {
  static constexpr int kRowStep = T::kThreads / T::kChunks;
  static constexpr int kPerThread = kRows / kRowStep;
  static_assert(kRows % kRowStep == 0 && kRowStep % 8 == 0 && kPerThread <= 32, "whole rows, one swizzle term");
  const int8_t* src;    // chunk 0 at k-tile 0
  uint32_t smem;        // chunk 0's offset in the operand's shared-memory tile
  uint32_t row_valid;   // bit i: chunk i's row is inside the matrix

  __device__ __forceinline__ TileLoader(const int8_t* matrix, int64_t rows_total, int64_t row0, int64_t k, int tid) {
    const int r = tid / T::kChunks, c = tid % T::kChunks;
    src = matrix + (row0 + r) * k + c * 16;
    smem = swizzle<T::kTileK>(r, c);
    row_valid = 0;
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) row_valid |= (row0 + r + i * kRowStep < rows_total ? 1u : 0u) << i;
  }

  // k-tile kt of matrix (k bytes a row) into the operand's tile at smem_tile (a shared-memory byte address).
  // full: every chunk is inside the matrix (all rows valid, K a multiple of kTileK), so no predicate. A
  // zero-filled chunk reads nothing (src-size 0), so its address needs no clamping.
  __device__ __forceinline__ void load(uint32_t smem_tile, int64_t k, int kt, int tid, bool full) const {
    const int64_t k0 = static_cast<int64_t>(kt) * T::kTileK;
    const int8_t* p = src + k0;
    const int64_t stride = kRowStep * k;
    if (full) {
#pragma unroll
      for (int i = 0; i < kPerThread; ++i) {
        cp_async_16_full_at(smem_tile + smem + i * kRowStep * T::kTileK, p);
        p += stride;
      }
      return;
    }
    const uint32_t valid = k0 + (tid % T::kChunks) * 16 < k ? row_valid : 0u;
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      cp_async_16_at(smem_tile + smem + i * kRowStep * T::kTileK, p, (valid >> i) & 1u);
      p += stride;
    }
  }
};

template <class T>
struct StageLoader {
  TileLoader<T, T::kTileM> x;
  TileLoader<T, T::kTileN> w;
  bool x_full, w_full;  // the block's A / B tiles lie wholly inside x / w
  __device__ __forceinline__ StageLoader(const GemmI8Args& a, int64_t m0, int64_t n0, int tid)
      : x(a.x, a.m, m0, a.k, tid), w(a.w, a.n, n0, a.k, tid) {
    const bool k_whole = a.k % T::kTileK == 0;
    x_full = k_whole && m0 + T::kTileM <= a.m;
    w_full = k_whole && n0 + T::kTileN <= a.n;
  }
  // kAllFull: the caller checked x_full && w_full, so the copies are compiled without predicates (a runtime
  // flag left both paths in the loop, predicated: ~30 issue slots a k-tile spent on the unused one).
  template <bool kAllFull>
  __device__ __forceinline__ void load(const GemmI8Args& a, uint32_t stage_base, int kt, int tid) const {
    x.load(stage_base, a.k, kt, tid, kAllFull || x_full);
    w.load(stage_base + T::kASmem, a.k, kt, tid, kAllFull || w_full);
  }
};

// Per-lane ldmatrix addresses relative to a stage's base, at k32 step 0: A rows (matrix lane/8: rows +8
// for odd, k+16 for the upper two), B rows (matrix lane/8: k+16 for odd, rows +8 for the upper two), with
// the swizzled chunk. Step ks reads chunk 2 ks + h (h = 0, 1) of the same rows; as 2 ks + h = 2 ks ^ h and
// the rows start at multiples of kTileK, its address is the step-0 address XOR 32 ks (one LOP3).
struct LaneOffsets {
  uint32_t a;
  uint32_t b;
};

template <class T>
__device__ __forceinline__ LaneOffsets lane_offsets(int lane, int warp_m, int warp_n) {
  const int x = T::kTileK == 64 ? (lane >> 1) & 3 : lane & 7;
  const int a_r = warp_m * T::kWarpM + (lane & 7) + ((lane >> 3) & 1) * 8;
  const int b_r = warp_n * T::kWarpN + (lane & 7) + (lane >> 4) * 8;
  LaneOffsets o;
  o.a = static_cast<uint32_t>(a_r * T::kTileK + (((lane >> 4) ^ x) << 4));
  o.b = static_cast<uint32_t>(T::kASmem + b_r * T::kTileK + ((((lane >> 3) & 1) ^ x) << 4));
  return o;
}

template <class T>
struct Fragments {
  uint32_t a[T::kMTiles][4];
  uint32_t b[T::kNTiles / 2][4];  // per n8 pair: b0, b1 of the first tile, b0, b1 of the second
};

template <class T>
__device__ __forceinline__ void load_fragments(Fragments<T>& f, uint32_t stage_base, const LaneOffsets& o, int ks) {
  const uint32_t a = stage_base + (o.a ^ static_cast<uint32_t>(ks * 32));
  const uint32_t b = stage_base + (o.b ^ static_cast<uint32_t>(ks * 32));
#pragma unroll
  for (int mt = 0; mt < T::kMTiles; ++mt) ldmatrix_x4_at(f.a[mt], a + mt * 16 * T::kTileK);
#pragma unroll
  for (int np = 0; np < T::kNTiles / 2; ++np) ldmatrix_x4_at(f.b[np], b + np * 16 * T::kTileK);
}

// The MMAs of m16 tile mt over the warp's n8 tiles, one k32 step (kXU8: A holds unsigned codes).
template <class T, bool kXU8>
__device__ __forceinline__ void mma_mtile(int (&acc)[T::kNTiles][4], const uint32_t (&a)[4],
                                          const uint32_t (&b)[T::kNTiles / 2][4]) {
#pragma unroll
  for (int nt = 0; nt < T::kNTiles; ++nt) {
    if constexpr (kXU8) {
      mma_16832_u8s8(acc[nt], a, b[nt / 2][(nt & 1) * 2], b[nt / 2][(nt & 1) * 2 + 1]);
    } else {
      mma_16832_s8(acc[nt], a, b[nt / 2][(nt & 1) * 2], b[nt / 2][(nt & 1) * 2 + 1]);
    }
  }
}

// One MMA k32 step of the warp on fragments already in registers.
template <class T, bool kXU8>
__device__ __forceinline__ void mma_step(int (&acc)[T::kMTiles][T::kNTiles][4], const Fragments<T>& g) {
#pragma unroll
  for (int mt = 0; mt < T::kMTiles; ++mt) mma_mtile<T, kXU8>(acc[mt], g.a[mt], g.b);
}

// One k32 step of a kLean row: step ks's B fragments, then the m16 tiles in turn, tile mt + 1's A fragment
// loading while tile mt's MMAs issue (two A register sets). The fragments' load latency that the
// double-buffered loop hides within a warp is hidden here by the other warps of the scheduler.
template <class T, bool kXU8>
__device__ __forceinline__ void mma_step_lean(int (&acc)[T::kMTiles][T::kNTiles][4], uint32_t stage_base,
                                              const LaneOffsets& o, int ks) {
  const uint32_t a_addr = stage_base + (o.a ^ static_cast<uint32_t>(ks * 32));
  const uint32_t b_addr = stage_base + (o.b ^ static_cast<uint32_t>(ks * 32));
  uint32_t b[T::kNTiles / 2][4];
  uint32_t a[2][4];
  ldmatrix_x4_at(a[0], a_addr);
#pragma unroll
  for (int np = 0; np < T::kNTiles / 2; ++np) ldmatrix_x4_at(b[np], b_addr + np * 16 * T::kTileK);
#pragma unroll
  for (int mt = 0; mt < T::kMTiles; ++mt) {
    if (mt + 1 < T::kMTiles) ldmatrix_x4_at(a[(mt + 1) & 1], a_addr + (mt + 1) * 16 * T::kTileK);
    mma_mtile<T, kXU8>(acc[mt], a[mt & 1], b);
  }
}

// kQkHeadI8 (qkv -> the INT8 attention): eight consecutive outputs of row `row` from column col. Q and K
// columns (col < qk_cols) become int8 codes with their head's scale: the head's head_dim / 8 lanes (consecutive,
// one row: store_tile keeps a row's column groups in consecutive lanes, and valid_args has tile_n a multiple of
// head_dim) reduce the amax by shuffles, then inv = 127 / amax and s = amax / 127 (IEEE divisions, once per
// head) as gemm_i8_head_quantize_ref. V columns are rounded to fp16.
__device__ __forceinline__ void store_qk_head(const GemmI8Args& a, int64_t row, int64_t col, const float (&v)[8],
                                              int lane) {
  if (col >= a.qk_cols) {
    const int64_t nv = a.n - a.qk_cols;
    store16(reinterpret_cast<uint4*>(static_cast<__half*>(a.y_v) + row * nv + (col - a.qk_cols)),
            make_uint4(pack_half2_rn(v[0], v[1]), pack_half2_rn(v[2], v[3]), pack_half2_rn(v[4], v[5]),
                       pack_half2_rn(v[6], v[7])));
    return;
  }
  float amax = 0.f;
#pragma unroll
  for (int j = 0; j < 8; ++j) amax = fmaxf(amax, fabsf(v[j]));
  const int lanes = a.head_dim / 8;
  const unsigned mask = lanes >= 32 ? 0xffffffffu : ((1u << lanes) - 1u) << (lane & ~(lanes - 1));
  for (int o = 1; o < lanes; o <<= 1) amax = fmaxf(amax, __shfl_xor_sync(mask, amax, o));
  const float inv = amax > 0.f ? __fdiv_rn(127.f, amax) : 0.f;
  uint32_t w[2];
#pragma unroll
  for (int h = 0; h < 2; ++h)
    w[h] = quantize(v[4 * h], inv) | quantize(v[4 * h + 1], inv) << 8 | quantize(v[4 * h + 2], inv) << 16 |
           quantize(v[4 * h + 3], inv) << 24;
  *reinterpret_cast<uint2*>(static_cast<int8_t*>(a.y) + row * a.qk_cols + col) = make_uint2(w[0], w[1]);
  if ((lane & (lanes - 1)) == 0) a.qk_scales[row * (a.qk_cols / a.head_dim) + col / a.head_dim] = __fdiv_rn(amax, 127.f);
}

// The block's int32 tile goes through shared memory (fragment layout of m16n8: c0, c1 at row lane/4,
// columns 2 (lane % 4) + {0, 1}; c2, c3 eight rows below; the staged layout is GemmI8Traits::kOutHalf's, so
// neither the fragment stores nor the row reads conflict), then each thread dequantizes eight consecutive
// outputs of a row at a time and stores them with one coalesced store. A thread keeps one group of eight
// columns for the whole tile (kThreads is a multiple of kTileN / 8), so it reads that group's weight scales
// and bias once. The row loop is not unrolled, so the GELU is not copied once per row.
template <class T, int kEpilogue>
__device__ __forceinline__ void store_tile(const GemmI8Args& a, const int (&acc)[T::kMTiles][T::kNTiles][4],
                                           int32_t* tile, int64_t m0, int64_t n0, int warp_m, int warp_n, int tid) {
  const int lane = tid & 31;
  constexpr int kGroups = T::kTileN / 8;
  constexpr int kRowStep = T::kThreads / kGroups;
  const int g = tid % kGroups;
  const int64_t col = n0 + g * 8;
  const bool group_in = col < a.n;  // N is a multiple of 8: a group is all in or all out
  // The group's weight scales and bias, loaded before the staging so that their latency overlaps it.
  float sw[8], bias[8], scale[8];
  const float sx0 = a.sx[0];
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    sw[j] = group_in ? a.sw[col + j] : 0.f;
    bias[j] = group_in && a.bias ? a.bias[col + j] : 0.f;
  }
  __syncthreads();  // every warp is done reading the pipeline's buffers
#pragma unroll
  for (int mt = 0; mt < T::kMTiles; ++mt)
#pragma unroll
    for (int nt = 0; nt < T::kNTiles; ++nt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = warp_m * T::kWarpM + mt * 16 + (lane >> 2) + h * 8;
        const int c = warp_n * T::kWarpN + nt * 8 + (lane & 3) * 2;
        const int pos = (c & 4 ? T::kOutHalf : 0) + (c >> 3) * 4 + (c & 3);
        *reinterpret_cast<int2*>(tile + r * T::kOutRow + pos) = make_int2(acc[mt][nt][2 * h], acc[mt][nt][2 * h + 1]);
      }
  __syncthreads();
  if (!group_in) return;
#pragma unroll
  for (int j = 0; j < 8; ++j) scale[j] = __fmul_rn(sx0, sw[j]);  // per tensor: the scale product once
  const float inv_out_scale = __fdiv_rn(1.f, a.out_scale);
  const int rows = static_cast<int>(a.m - m0 < T::kTileM ? a.m - m0 : T::kTileM);
  const bool per_token = a.sx_per_token;
  int r = tid / kGroups;
  float sx_next = per_token && r < rows ? a.sx[m0 + r] : sx0;  // per token: loaded a row ahead
#pragma unroll 1
  for (; r < rows; r += kRowStep) {
    const int64_t row = m0 + r;
    if (per_token) {
      const float sx = sx_next;
      if (r + kRowStep < rows) sx_next = a.sx[row + kRowStep];
#pragma unroll
      for (int j = 0; j < 8; ++j) scale[j] = __fmul_rn(sx, sw[j]);
    }
    const int4 q0 = *reinterpret_cast<const int4*>(tile + r * T::kOutRow + g * 4);
    const int4 q1 = *reinterpret_cast<const int4*>(tile + r * T::kOutRow + T::kOutHalf + g * 4);
    const int q[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
    float v[8];
    dequantize8(q, scale, bias, v);
    if constexpr (kEpilogue == static_cast<int>(GemmI8Epilogue::kQkHeadI8)) {
      store_qk_head(a, row, col, v, lane);
    } else {
      store8<kEpilogue>(a, row * a.n + col, inv_out_scale, v);
    }
  }
}

// The pipeline's first kStages - 1 k-tiles (k_tiles of them at most), waited for until the first has landed.
template <class T, bool kAllFull>
__device__ __forceinline__ void prologue(uint32_t base, const GemmI8Args& a, const StageLoader<T>& loader,
                                         int kt_begin, int k_tiles, int tid) {
#pragma unroll
  for (int s = 0; s < T::kStages - 1; ++s) {
    if (s < k_tiles) loader.template load<kAllFull>(a, base + s * T::kStageBytes, kt_begin + s, tid);
    cuda::cp_async_commit();
  }
  cuda::cp_async_wait<T::kStages - 2>();
  __syncthreads();
}

// main_loop for kLean rows: the barrier closes each k-tile (no fragments cross it).
template <class T, bool kXU8, bool kAllFull>
__device__ __forceinline__ void main_loop_lean(int (&acc)[T::kMTiles][T::kNTiles][4], uint32_t base,
                                               const LaneOffsets& lo, const GemmI8Args& a,
                                               const StageLoader<T>& loader, int kt_begin, int kt_end, int tid) {
  const int k_tiles = kt_end - kt_begin;
  prologue<T, kAllFull>(base, a, loader, kt_begin, k_tiles, tid);
  int read_stage = 0, write_stage = T::kStages - 1;
  for (int t = 0; t < k_tiles; ++t) {
    if (t + T::kStages - 1 < k_tiles)
      loader.template load<kAllFull>(a, base + write_stage * T::kStageBytes, kt_begin + t + T::kStages - 1, tid);
    cuda::cp_async_commit();
    const uint32_t read_base = base + read_stage * T::kStageBytes;
#pragma unroll
    for (int ks = 0; ks < T::kKSteps; ++ks) mma_step_lean<T, kXU8>(acc, read_base, lo, ks);
    read_stage = read_stage + 1 == T::kStages ? 0 : read_stage + 1;
    write_stage = write_stage + 1 == T::kStages ? 0 : write_stage + 1;
    cuda::cp_async_wait<T::kStages - 2>();
    __syncthreads();
  }
  cuda::cp_async_wait<0>();
}

// The block's K range, kt_begin .. kt_end (in kTileK steps), through the kStages-deep cp.async pipeline.
// One barrier per k-tile, taken before the last k32 step's MMAs: after it, tile kt + 1 has landed (its
// first fragments load during those MMAs) and no warp still reads the stage the next loads overwrite.
template <class T, bool kXU8, bool kAllFull>
__device__ __forceinline__ void main_loop(int (&acc)[T::kMTiles][T::kNTiles][4], uint32_t base,
                                          const LaneOffsets& lo, const GemmI8Args& a, const StageLoader<T>& loader,
                                          int kt_begin, int kt_end, int tid) {
  if constexpr (T::kLean) {
    main_loop_lean<T, kXU8, kAllFull>(acc, base, lo, a, loader, kt_begin, kt_end, tid);
    return;
  }
  const int k_tiles = kt_end - kt_begin;
  prologue<T, kAllFull>(base, a, loader, kt_begin, k_tiles, tid);
  Fragments<T> f[2];
  load_fragments<T>(f[0], base, lo, 0);
  int read_stage = 0, write_stage = T::kStages - 1;
  for (int t = 0; t < k_tiles; ++t) {
    const uint32_t read_base = base + read_stage * T::kStageBytes;
    if (t + T::kStages - 1 < k_tiles)
      loader.template load<kAllFull>(a, base + write_stage * T::kStageBytes, kt_begin + t + T::kStages - 1, tid);
    cuda::cp_async_commit();
    read_stage = read_stage + 1 == T::kStages ? 0 : read_stage + 1;
    write_stage = write_stage + 1 == T::kStages ? 0 : write_stage + 1;
#pragma unroll
    for (int ks = 0; ks < T::kKSteps; ++ks) {
      if (ks + 1 < T::kKSteps) {
        load_fragments<T>(f[(ks + 1) & 1], read_base, lo, ks + 1);
      } else {
        cuda::cp_async_wait<T::kStages - 2>();
        __syncthreads();
        if (t + 1 < k_tiles) load_fragments<T>(f[(ks + 1) & 1], base + read_stage * T::kStageBytes, lo, 0);
      }
      mma_step<T, kXU8>(acc, f[ks & 1]);
    }
  }
  cuda::cp_async_wait<0>();
}

// Split-K: the block's int32 partial tile goes to the workspace (one int4 per accumulator quad and thread,
// coalesced); the last of the tile's gridDim.z blocks to arrive (a counter per tile) adds the others'
// partials to its own and runs the epilogue. Integer sums are exact in any order, so the result does not
// depend on which block is last. That block sets the counter back to 0 for the next launch. Returns
// whether this block is the last.
template <class T>
__device__ __forceinline__ bool reduce_split(int (&acc)[T::kMTiles][T::kNTiles][4], void* workspace, int tid) {
  const int splits = static_cast<int>(gridDim.z), z = static_cast<int>(blockIdx.z);
  const int tile = static_cast<int>(blockIdx.y * gridDim.x + blockIdx.x);
  int* counters = static_cast<int*>(workspace);
  int4* partials = reinterpret_cast<int4*>(static_cast<uint8_t*>(workspace) + gpu::kGemmI8CounterBytes);
  constexpr int kQuads = T::kMTiles * T::kNTiles;
  int4* mine = partials + (static_cast<int64_t>(tile) * splits + z) * kQuads * T::kThreads;
#pragma unroll
  for (int mt = 0; mt < T::kMTiles; ++mt)
#pragma unroll
    for (int nt = 0; nt < T::kNTiles; ++nt)
      __stcg(mine + (mt * T::kNTiles + nt) * T::kThreads + tid,
             make_int4(acc[mt][nt][0], acc[mt][nt][1], acc[mt][nt][2], acc[mt][nt][3]));
  __threadfence();
  __syncthreads();
  int arrived = 0;
  if (tid == 0) arrived = atomicAdd(counters + tile, 1);
  if (!__syncthreads_or(tid == 0 && arrived == splits - 1)) return false;
  __threadfence();
  for (int other = 0; other < splits; ++other) {
    if (other == z) continue;
    const int4* theirs = partials + (static_cast<int64_t>(tile) * splits + other) * kQuads * T::kThreads;
#pragma unroll
    for (int mt = 0; mt < T::kMTiles; ++mt)
#pragma unroll
      for (int nt = 0; nt < T::kNTiles; ++nt) {
        const int4 q = __ldcg(theirs + (mt * T::kNTiles + nt) * T::kThreads + tid);
        acc[mt][nt][0] += q.x;
        acc[mt][nt][1] += q.y;
        acc[mt][nt][2] += q.z;
        acc[mt][nt][3] += q.w;
      }
  }
  if (tid == 0) counters[tile] = 0;
  return true;
}

// One block: a kTileM x kTileN output tile over its share of K (all of it when gridDim.z is 1). kXU8: x holds
// unsigned codes (GemmI8Args::x_u8).
template <class T, int kEpilogue, bool kXU8>
__global__ void __launch_bounds__(T::kThreads, T::kMinBlocks) gemm_i8_kernel(const GemmI8Args a) {
  extern __shared__ __align__(128) uint8_t smem[];
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int warp_m = warp / T::kWarpsN, warp_n = warp % T::kWarpsN;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * T::kTileM;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * T::kTileN;
  const int k_tiles = static_cast<int>((a.k + T::kTileK - 1) / T::kTileK);
  const int kt_begin = static_cast<int>(static_cast<int64_t>(k_tiles) * blockIdx.z / gridDim.z);
  const int kt_end = static_cast<int>(static_cast<int64_t>(k_tiles) * (blockIdx.z + 1) / gridDim.z);
  const uint32_t base = smem_addr(smem);
  const LaneOffsets lo = lane_offsets<T>(lane, warp_m, warp_n);

  int acc[T::kMTiles][T::kNTiles][4];
#pragma unroll
  for (int mt = 0; mt < T::kMTiles; ++mt)
#pragma unroll
    for (int nt = 0; nt < T::kNTiles; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[mt][nt][i] = 0;
  if (kt_end > kt_begin) {
    const StageLoader<T> loader(a, m0, n0, tid);
    if (loader.x_full && loader.w_full) {  // block-uniform: interior tiles take the unpredicated loop
      main_loop<T, kXU8, true>(acc, base, lo, a, loader, kt_begin, kt_end, tid);
    } else {
      main_loop<T, kXU8, false>(acc, base, lo, a, loader, kt_begin, kt_end, tid);
    }
  }
  if (gridDim.z > 1 && !reduce_split<T>(acc, a.workspace, tid)) return;
  store_tile<T, kEpilogue>(a, acc, reinterpret_cast<int32_t*>(smem), m0, n0, warp_m, warp_n, tid);
}

}  // namespace
}  // namespace edgevit
