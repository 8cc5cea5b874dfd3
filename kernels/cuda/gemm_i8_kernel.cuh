// Private to kernels/cuda/gemm_i8.cu (internal linkage; include it from that file only): the W8A8 GEMM
// kernel's traits, its tile copies (cp.async into swizzled shared memory, zero-filled past M, N and K), the
// warp's mma.sync m16n8k32 loop over one pipeline stage, and the fused epilogues. The design is described at
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
template <int kTileM_, int kTileN_, int kWarpsM_, int kWarpsN_, int kStages_, int kMinBlocks_>
struct GemmI8Traits {
  static constexpr int kTileM = kTileM_;
  static constexpr int kTileN = kTileN_;
  static constexpr int kTileK = 64;  // bytes of K per stage: one 64-byte shared-memory row, two k32 steps
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
  static constexpr int kASmem = kTileM * kTileK;
  static constexpr int kBSmem = kTileN * kTileK;
  static constexpr int kStageBytes = kASmem + kBSmem;
  static constexpr int kSmemBytes = kStages * kStageBytes;
  static_assert(kWarpM % 16 == 0 && kWarpN % 16 == 0, "warp tile: m16 tiles, pairs of n8 tiles (ldmatrix.x4)");
  static_assert((kTileM * 4) % kThreads == 0 && (kTileN * 4) % kThreads == 0, "whole 16-byte chunks per thread");
  static_assert(kStages >= 2 && kThreads <= 256, "2+ stages, at most 8 warps");
  static_assert(kSmemBytes <= 163 * 1024, "above SM87's 163 KB per-block opt-in");
};

// Shared-memory byte offset of 16-byte chunk c (0..3) of 64-byte row r. The XOR spreads the 8 rows one
// ldmatrix phase reads over all 32 banks (rows 2i and 2i+1 share a 128-byte line, in different halves).
__device__ __forceinline__ uint32_t swizzle(int r, int c) {
  return static_cast<uint32_t>(r * 64 + ((c ^ ((r >> 1) & 3)) << 4));
}

// kRows x 64 bytes of src (rows_total x k, row-major) from (row0, k0) into smem_base; rows past
// rows_total and chunks past k are zero-filled.
template <class T, int kRows>
__device__ __forceinline__ void load_rows(uint32_t smem_base, const int8_t* __restrict__ src, int64_t rows_total,
                                          int64_t row0, int64_t k, int64_t k0, int tid) {
  constexpr int kPerThread = kRows * 4 / T::kThreads;
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int idx = tid + i * T::kThreads;
    const int r = idx >> 2, c = idx & 3;
    const int64_t gr = row0 + r, gk = k0 + c * 16;
    const bool valid = gr < rows_total && gk < k;
    cp_async_16_at(smem_base + swizzle(r, c), valid ? src + gr * k + gk : src, valid);
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
struct LaneOffsets {
  uint32_t a_row;
  uint32_t b_row;
  uint32_t a_col[2];
  uint32_t b_col[2];
};

template <class T>
__device__ __forceinline__ LaneOffsets lane_offsets(int lane, int warp_m, int warp_n) {
  LaneOffsets o;
  const int x = (lane >> 1) & 3;
  const int a_r = warp_m * T::kWarpM + (lane & 7) + ((lane >> 3) & 1) * 8;
  const int b_r = warp_n * T::kWarpN + (lane & 7) + (lane >> 4) * 8;
  o.a_row = static_cast<uint32_t>(a_r * 64);
  o.b_row = static_cast<uint32_t>(T::kASmem + b_r * 64);
#pragma unroll
  for (int ks = 0; ks < 2; ++ks) {
    o.a_col[ks] = static_cast<uint32_t>(((ks * 2 + (lane >> 4)) ^ x) << 4);
    o.b_col[ks] = static_cast<uint32_t>(((ks * 2 + ((lane >> 3) & 1)) ^ x) << 4);
  }
  return o;
}

// The warp's MMAs over one stage (64 of K: two k32 steps).
template <class T>
__device__ __forceinline__ void mma_stage(int (&acc)[T::kMTiles][T::kNTiles][4], uint32_t stage_base,
                                          const LaneOffsets& o) {
#pragma unroll
  for (int ks = 0; ks < 2; ++ks) {
    uint32_t af[T::kMTiles][4];
    uint32_t bf[T::kNTiles / 2][4];
#pragma unroll
    for (int mt = 0; mt < T::kMTiles; ++mt) ldmatrix_x4_at(af[mt], stage_base + o.a_row + mt * 16 * 64 + o.a_col[ks]);
#pragma unroll
    for (int np = 0; np < T::kNTiles / 2; ++np)
      ldmatrix_x4_at(bf[np], stage_base + o.b_row + np * 16 * 64 + o.b_col[ks]);
#pragma unroll
    for (int mt = 0; mt < T::kMTiles; ++mt) {
#pragma unroll
      for (int nt = 0; nt < T::kNTiles; ++nt) {
        mma_16832_s8(acc[mt][nt], af[mt], bf[nt / 2][(nt & 1) * 2], bf[nt / 2][(nt & 1) * 2 + 1]);
      }
    }
  }
}

// One output element pair's epilogue (columns col, col + 1 of row `row`), in the order of gemm_i8_ref.h;
// __fmul_rn / __fadd_rn keep nvcc from contracting steps into FMAs the reference does not make.
__device__ __forceinline__ float gelu_erf(float v) {
  const float e = erfcf(__fmul_rn(v, -0.70710678f));
  return __fmul_rn(__fmul_rn(0.5f, v), e);
}

__device__ __forceinline__ int8_t quantize(float v, float out_scale) {
  const float q = __fdiv_rn(v, out_scale);
  if (q != q) return 0;
  return static_cast<int8_t>(__float2int_rn(fminf(fmaxf(q, -127.f), 127.f)));
}

template <int kEpilogue>
__device__ __forceinline__ void store_pair(const GemmI8Args& a, int64_t row, int64_t col, float v0, float v1) {
  constexpr auto e = static_cast<GemmI8Epilogue>(kEpilogue);
  if constexpr (e == GemmI8Epilogue::kF16BiasGelu || e == GemmI8Epilogue::kI8BiasGelu) {
    v0 = gelu_erf(v0);
    v1 = gelu_erf(v1);
  }
  const int64_t o = row * a.n + col;
  if constexpr (e == GemmI8Epilogue::kF32) {
    *reinterpret_cast<float2*>(static_cast<float*>(a.y) + o) = make_float2(v0, v1);
  } else if constexpr (e == GemmI8Epilogue::kF16BiasResidual) {
    __half2* p = reinterpret_cast<__half2*>(static_cast<__half*>(a.y) + o);
    const float2 r = __half22float2(*p);
    *p = __floats2half2_rn(__fadd_rn(r.x, v0), __fadd_rn(r.y, v1));
  } else if constexpr (e == GemmI8Epilogue::kF16Bias || e == GemmI8Epilogue::kF16BiasGelu) {
    *reinterpret_cast<__half2*>(static_cast<__half*>(a.y) + o) = __floats2half2_rn(v0, v1);
  } else {
    char2 q;
    q.x = quantize(v0, a.out_scale);
    q.y = quantize(v1, a.out_scale);
    *reinterpret_cast<char2*>(static_cast<int8_t*>(a.y) + o) = q;
  }
}

// Dequantizes the warp's accumulators and stores them through the epilogue. Fragment layout of m16n8:
// c0, c1 at row lane/4, columns 2 (lane % 4) + {0, 1}; c2, c3 eight rows below.
template <class T, int kEpilogue>
__device__ __forceinline__ void store_tile(const GemmI8Args& a, const int (&acc)[T::kMTiles][T::kNTiles][4],
                                           int64_t row_base, int64_t col_base, int lane) {
  const float sx0 = a.sx[0];
#pragma unroll
  for (int nt = 0; nt < T::kNTiles; ++nt) {
    const int64_t col = col_base + nt * 8 + (lane & 3) * 2;
    if (col >= a.n) continue;  // N is a multiple of 8: col + 1 < N too
    const float sw0 = a.sw[col], sw1 = a.sw[col + 1];
    const float b0 = a.bias ? a.bias[col] : 0.f, b1 = a.bias ? a.bias[col + 1] : 0.f;
#pragma unroll
    for (int mt = 0; mt < T::kMTiles; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t row = row_base + mt * 16 + (lane >> 2) + h * 8;
        if (row >= a.m) continue;
        const float sx = a.sx_per_token ? a.sx[row] : sx0;
        const float v0 = __fmaf_rn(__int2float_rn(acc[mt][nt][2 * h]), __fmul_rn(sx, sw0), b0);
        const float v1 = __fmaf_rn(__int2float_rn(acc[mt][nt][2 * h + 1]), __fmul_rn(sx, sw1), b1);
        store_pair<kEpilogue>(a, row, col, v0, v1);
      }
    }
  }
}

// One block: a kTileM x kTileN output tile, K in 64-byte stages through a kStages-deep cp.async pipeline.
template <class T, int kEpilogue>
__global__ void __launch_bounds__(T::kThreads, T::kMinBlocks) gemm_i8_kernel(const GemmI8Args a) {
  extern __shared__ __align__(128) uint8_t smem[];
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int warp_m = warp / T::kWarpsN, warp_n = warp % T::kWarpsN;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * T::kTileM;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * T::kTileN;
  const int k_tiles = static_cast<int>((a.k + T::kTileK - 1) / T::kTileK);
  const uint32_t base = smem_addr(smem);
  const LaneOffsets lo = lane_offsets<T>(lane, warp_m, warp_n);

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
  store_tile<T, kEpilogue>(a, acc, m0 + warp_m * T::kWarpM, n0 + warp_n * T::kWarpN, lane);
}

}  // namespace
}  // namespace edgevit
