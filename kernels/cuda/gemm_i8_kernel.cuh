// Private to kernels/cuda/gemm_i8.cu (internal linkage; include it from that file only): the W8A8 GEMM
// kernel's traits, its tile copies (cp.async into swizzled shared memory, zero-filled past M, N and K), the
// warp's mma.sync m16n8k32 loop over one pipeline stage, and the fused epilogues (through shared memory). The design is described at
// the top of gemm_i8.cu; the arithmetic at the top of kernels/cpu/gemm_i8_ref.h.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/gemm_i8.h"
#include "kernels/cuda/mma_sm80.cuh"
#include "kernels/cuda/mma_sm80_s8.cuh"

namespace edgevit {
namespace {

using cuda::cp_async_16_at;
using cuda::ldmatrix_x4_at;
using cuda::mma_16832_s8;
using cuda::smem_addr;
using gpu::GemmI8Args;

// Compile-time configuration of one variant; derives shared-memory sizes and checks the limits.
template <int kTileM_, int kTileN_, int kTileK_, int kWarpsM_, int kWarpsN_, int kStages_, int kMinBlocks_>
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
  // The epilogue stages the int32 tile through the (then idle) pipeline buffers: rows padded by 8 words.
  static constexpr int kOutRow = kTileN + 8;
  static constexpr int kOutBytes = kTileM * kOutRow * 4;
  static constexpr int kSmemBytes = kPipeBytes > kOutBytes ? kPipeBytes : kOutBytes;
  static_assert(kTileK == 64 || kTileK == 128, "64- or 128-byte shared-memory rows (swizzle)");
  static_assert(kWarpM % 16 == 0 && kWarpN % 16 == 0, "warp tile: m16 tiles, pairs of n8 tiles (ldmatrix.x4)");
  static_assert((kTileM * kChunks) % kThreads == 0 && (kTileN * kChunks) % kThreads == 0,
                "whole 16-byte chunks per thread");
  static_assert(kStages >= 2 && kThreads <= 256, "2+ stages, at most 8 warps");
  static_assert(kSmemBytes <= 163 * 1024, "above SM87's 163 KB per-block opt-in");
};

// Shared-memory byte offset of 16-byte chunk c of row r (kTileK bytes a row). The XOR spreads the 8 rows
// one ldmatrix phase reads over all 32 banks: 128-byte rows XOR with r % 8; 64-byte rows (two to a 128-byte
// line, in different halves) with (r / 2) % 4.
template <int kTileK>
__device__ __forceinline__ uint32_t swizzle(int r, int c) {
  const int x = kTileK == 64 ? (r >> 1) & 3 : r & 7;
  return static_cast<uint32_t>(r * kTileK + ((c ^ x) << 4));
}

// kRows x kTileK bytes of src (rows_total x k, row-major) from (row0, k0) into smem_base; rows past
// rows_total and chunks past k are zero-filled.
template <class T, int kRows>
__device__ __forceinline__ void load_rows(uint32_t smem_base, const int8_t* __restrict__ src, int64_t rows_total,
                                          int64_t row0, int64_t k, int64_t k0, int tid) {
  constexpr int kPerThread = kRows * T::kChunks / T::kThreads;
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int idx = tid + i * T::kThreads;
    const int r = idx / T::kChunks, c = idx % T::kChunks;
    const int64_t gr = row0 + r, gk = k0 + c * 16;
    const bool valid = gr < rows_total && gk < k;
    cp_async_16_at(smem_base + swizzle<T::kTileK>(r, c), valid ? src + gr * k + gk : src, valid);
  }
}

template <class T>
__device__ __forceinline__ void load_stage(uint32_t stage_base, const GemmI8Args& a, int64_t m0, int64_t n0,
                                           int64_t k0, int tid) {
  load_rows<T, T::kTileM>(stage_base, a.x, a.m, m0, a.k, k0, tid);
  load_rows<T, T::kTileN>(stage_base + T::kASmem, a.w, a.n, n0, a.k, k0, tid);
}

// Per-lane ldmatrix addresses, relative to a stage's base: A rows (matrix lane/8: rows +8 for odd, k+16
// for the upper two), B rows (matrix lane/8: k+16 for odd, rows +8 for the upper two), and the swizzled
// chunk offset of each k32 step (the XOR term depends on lane % 8 only, as warp and tile rows are
// multiples of 16).
template <int kKSteps>
struct LaneOffsets {
  uint32_t a_row;
  uint32_t b_row;
  uint32_t a_col[kKSteps];
  uint32_t b_col[kKSteps];
};

template <class T>
__device__ __forceinline__ LaneOffsets<T::kKSteps> lane_offsets(int lane, int warp_m, int warp_n) {
  LaneOffsets<T::kKSteps> o;
  const int x = T::kTileK == 64 ? (lane >> 1) & 3 : lane & 7;
  const int a_r = warp_m * T::kWarpM + (lane & 7) + ((lane >> 3) & 1) * 8;
  const int b_r = warp_n * T::kWarpN + (lane & 7) + (lane >> 4) * 8;
  o.a_row = static_cast<uint32_t>(a_r * T::kTileK);
  o.b_row = static_cast<uint32_t>(T::kASmem + b_r * T::kTileK);
#pragma unroll
  for (int ks = 0; ks < T::kKSteps; ++ks) {
    o.a_col[ks] = static_cast<uint32_t>(((ks * 2 + (lane >> 4)) ^ x) << 4);
    o.b_col[ks] = static_cast<uint32_t>(((ks * 2 + ((lane >> 3) & 1)) ^ x) << 4);
  }
  return o;
}

template <class T>
struct Fragments {
  uint32_t a[T::kMTiles][4];
  uint32_t b[T::kNTiles / 2][4];  // per n8 pair: b0, b1 of the first tile, b0, b1 of the second
};

template <class T>
__device__ __forceinline__ void load_fragments(Fragments<T>& f, uint32_t stage_base, const LaneOffsets<T::kKSteps>& o,
                                               int ks) {
#pragma unroll
  for (int mt = 0; mt < T::kMTiles; ++mt)
    ldmatrix_x4_at(f.a[mt], stage_base + o.a_row + mt * 16 * T::kTileK + o.a_col[ks]);
#pragma unroll
  for (int np = 0; np < T::kNTiles / 2; ++np)
    ldmatrix_x4_at(f.b[np], stage_base + o.b_row + np * 16 * T::kTileK + o.b_col[ks]);
}

// The warp's MMAs over one stage (kKSteps k32 steps); the next step's fragments load during this one's MMAs.
template <class T>
__device__ __forceinline__ void mma_stage(int (&acc)[T::kMTiles][T::kNTiles][4], uint32_t stage_base,
                                          const LaneOffsets<T::kKSteps>& o) {
  Fragments<T> f[2];
  load_fragments<T>(f[0], stage_base, o, 0);
#pragma unroll
  for (int ks = 0; ks < T::kKSteps; ++ks) {
    if (ks + 1 < T::kKSteps) load_fragments<T>(f[(ks + 1) & 1], stage_base, o, ks + 1);
    const Fragments<T>& g = f[ks & 1];
#pragma unroll
    for (int mt = 0; mt < T::kMTiles; ++mt) {
#pragma unroll
      for (int nt = 0; nt < T::kNTiles; ++nt) {
        mma_16832_s8(acc[mt][nt], g.a[mt], g.b[nt / 2][(nt & 1) * 2], g.b[nt / 2][(nt & 1) * 2 + 1]);
      }
    }
  }
}

// The epilogue's steps, in the order of gemm_i8_ref.h; __fmul_rn / __fadd_rn keep nvcc from contracting
// steps into FMAs the reference does not make.
__device__ __forceinline__ float gelu_erf(float v) {
  const float e = erfcf(__fmul_rn(v, -0.70710678f));
  return __fmul_rn(__fmul_rn(0.5f, v), e);
}

__device__ __forceinline__ uint32_t quantize(float v, float out_scale) {
  const float q = __fdiv_rn(v, out_scale);
  if (q != q) return 0;
  return static_cast<uint32_t>(__float2int_rn(fminf(fmaxf(q, -127.f), 127.f))) & 0xffu;
}

__device__ __forceinline__ uint32_t pack_half2_rn(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// Eight consecutive outputs (columns col .. col + 7 of one row: y + o) through the epilogue, one 16-byte
// store (8 bytes for int8, two for fp32).
template <int kEpilogue>
__device__ __forceinline__ void store8(const GemmI8Args& a, int64_t o, float (&v)[8]) {
  constexpr auto e = static_cast<GemmI8Epilogue>(kEpilogue);
  if constexpr (e == GemmI8Epilogue::kF16BiasGelu || e == GemmI8Epilogue::kI8BiasGelu) {
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = gelu_erf(v[j]);
  }
  if constexpr (e == GemmI8Epilogue::kF32) {
    float4* p = reinterpret_cast<float4*>(static_cast<float*>(a.y) + o);
    p[0] = make_float4(v[0], v[1], v[2], v[3]);
    p[1] = make_float4(v[4], v[5], v[6], v[7]);
  } else if constexpr (e == GemmI8Epilogue::kI8Bias || e == GemmI8Epilogue::kI8BiasGelu) {
    uint32_t w[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      w[h] = quantize(v[4 * h], a.out_scale) | quantize(v[4 * h + 1], a.out_scale) << 8 |
             quantize(v[4 * h + 2], a.out_scale) << 16 | quantize(v[4 * h + 3], a.out_scale) << 24;
    }
    *reinterpret_cast<uint2*>(static_cast<int8_t*>(a.y) + o) = make_uint2(w[0], w[1]);
  } else {
    uint4* p = reinterpret_cast<uint4*>(static_cast<__half*>(a.y) + o);
    if constexpr (e == GemmI8Epilogue::kF16BiasResidual) {
      const uint4 r = *p;
      const uint32_t rw[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&rw[j]));
        v[2 * j] = __fadd_rn(f.x, v[2 * j]);
        v[2 * j + 1] = __fadd_rn(f.y, v[2 * j + 1]);
      }
    }
    *p = make_uint4(pack_half2_rn(v[0], v[1]), pack_half2_rn(v[2], v[3]), pack_half2_rn(v[4], v[5]),
                    pack_half2_rn(v[6], v[7]));
  }
}

// The block's int32 tile goes through shared memory (fragment layout of m16n8: c0, c1 at row lane/4,
// columns 2 (lane % 4) + {0, 1}; c2, c3 eight rows below), then each thread dequantizes eight consecutive
// outputs of a row at a time and stores them with one coalesced store. The loop is not unrolled, so the
// GELU's erfc and the requantization are not copied once per accumulator.
template <class T, int kEpilogue>
__device__ __forceinline__ void store_tile(const GemmI8Args& a, const int (&acc)[T::kMTiles][T::kNTiles][4],
                                           int32_t* tile, int64_t m0, int64_t n0, int warp_m, int warp_n, int tid) {
  const int lane = tid & 31;
  __syncthreads();  // every warp is done reading the pipeline's buffers
#pragma unroll
  for (int mt = 0; mt < T::kMTiles; ++mt)
#pragma unroll
    for (int nt = 0; nt < T::kNTiles; ++nt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = warp_m * T::kWarpM + mt * 16 + (lane >> 2) + h * 8;
        const int c = warp_n * T::kWarpN + nt * 8 + (lane & 3) * 2;
        *reinterpret_cast<int2*>(tile + r * T::kOutRow + c) = make_int2(acc[mt][nt][2 * h], acc[mt][nt][2 * h + 1]);
      }
  __syncthreads();
  constexpr int kGroups = T::kTileN / 8;
#pragma unroll 1
  for (int idx = tid; idx < T::kTileM * kGroups; idx += T::kThreads) {
    const int r = idx / kGroups, g = idx % kGroups;
    const int64_t row = m0 + r, col = n0 + g * 8;
    if (row >= a.m || col >= a.n) continue;  // N is a multiple of 8: a group is all in or all out
    const int4 q0 = *reinterpret_cast<const int4*>(tile + r * T::kOutRow + g * 8);
    const int4 q1 = *reinterpret_cast<const int4*>(tile + r * T::kOutRow + g * 8 + 4);
    const int q[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
    const float sx = a.sx[a.sx_per_token ? row : 0];
    float v[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const float b = a.bias ? a.bias[col + j] : 0.f;
      v[j] = __fmaf_rn(__int2float_rn(q[j]), __fmul_rn(sx, a.sw[col + j]), b);
    }
    store8<kEpilogue>(a, row * a.n + col, v);
  }
}

// One block: a kTileM x kTileN output tile, K in kTileK-byte stages through a kStages-deep cp.async pipeline.
template <class T, int kEpilogue>
__global__ void __launch_bounds__(T::kThreads, T::kMinBlocks) gemm_i8_kernel(const GemmI8Args a) {
  extern __shared__ __align__(128) uint8_t smem[];
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int warp_m = warp / T::kWarpsN, warp_n = warp % T::kWarpsN;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * T::kTileM;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * T::kTileN;
  const int k_tiles = static_cast<int>((a.k + T::kTileK - 1) / T::kTileK);
  const uint32_t base = smem_addr(smem);
  const LaneOffsets<T::kKSteps> lo = lane_offsets<T>(lane, warp_m, warp_n);

  int acc[T::kMTiles][T::kNTiles][4];
#pragma unroll
  for (int mt = 0; mt < T::kMTiles; ++mt)
#pragma unroll
    for (int nt = 0; nt < T::kNTiles; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[mt][nt][i] = 0;

#pragma unroll
  for (int s = 0; s < T::kStages - 1; ++s) {
    if (s < k_tiles) load_stage<T>(base + s * T::kStageBytes, a, m0, n0, static_cast<int64_t>(s) * T::kTileK, tid);
    cuda::cp_async_commit();
  }
  for (int kt = 0; kt < k_tiles; ++kt) {
    cuda::cp_async_wait<T::kStages - 2>();
    __syncthreads();  // tile kt landed for every thread; every warp is done with the stage refilled below
    const int next = kt + T::kStages - 1;
    if (next < k_tiles)
      load_stage<T>(base + (next % T::kStages) * T::kStageBytes, a, m0, n0, static_cast<int64_t>(next) * T::kTileK,
                    tid);
    cuda::cp_async_commit();
    mma_stage<T>(acc, base + (kt % T::kStages) * T::kStageBytes, lo);
  }
  cuda::cp_async_wait<0>();
  store_tile<T, kEpilogue>(a, acc, reinterpret_cast<int32_t*>(smem), m0, n0, warp_m, warp_n, tid);
}

}  // namespace
}  // namespace edgevit
