// LayerNorm fused into the prologue of the linear layer that reads it, for small M (ViT at batch 1: M = 197),
// fp16 in/out, fp32 statistics and accumulation, SM80-class instructions only (cp.async, ldmatrix,
// mma.sync m16n8k16; sm_87 Orin and sm_90 H100/H200).
//
// Why: at batch 1 every kernel of the forward is latency-bound; a LayerNorm is a ~3 us kernel of its own
// (Nsight Compute, H100) in front of each qkv and fc1 GEMM. Here each block copies its 64 rows of x into
// shared memory in one cp.async burst (the whole K <= 1024 of them: 32 x (K + 8) halves, 50 KB at K = 768)
// while the first W tiles are already in flight, normalizes them in place, then runs the GEMM from there: no LayerNorm kernel, no
// round trip of its output through memory. The normalized rows are rounded to fp16 exactly as
// layernorm_f16 rounds its output, so the product sees the same operands as LayerNorm + cuBLASLt.
//
// Block: 32 rows x 64 output features, 4 warps of 16 x 32 (4 m16n8 accumulator tiles each); W streams
// through a 3-stage cp.async ring of 64 x 64 tiles. 32-row blocks (50 + 27 KB of shared memory at K = 768)
// let two blocks share an SM: ViT-B's qkv at batch 1 is 7 x 36 = 252 blocks, one wave on 132 SMs
// (64-row blocks, one per SM, took two). Epilogue: + bias, optional exact erf GELU, fp16.
// The CUDA backend times it against LayerNorm + the pinned cuBLASLt algorithm for each captured batch size
// and uses whichever is faster (runtime/backend_cuda.cpp); ops_cuda_test compares it with a double reference.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "kernels/cuda/mma_sm80.cuh"
#include "kernels/cuda/ops.h"

namespace edgevit::gpu {
namespace {

using cuda::cp_async_16;
using cuda::cp_async_commit;
using cuda::cp_async_wait;
using cuda::ldmatrix_x4;
using cuda::mma_16816;
using cuda::pack_half2;

constexpr int kBM = 32;       // rows of x per block (2 blocks per SM at K = 768: one wave for ViT-B batch 1)
constexpr int kBN = 64;       // output features per block
constexpr int kBK = 64;       // K per W tile
constexpr int kStages = 3;    // W tiles in flight
constexpr int kThreads = 128;  // 4 warps, 2 x 2 over the 32 x 64 output tile (16 x 32 each)
constexpr int kWarpRows = kBM / 2;
constexpr int kMTiles = kWarpRows / 16;
constexpr int kRowsAtOnce = 2;  // LayerNorm rows a warp normalizes together (their reductions interleave)
constexpr int kBRow = kBK + 8;  // halves per shared row of a W tile (+16 B: ldmatrix rows in distinct banks)

constexpr int64_t smem_bytes(int k) {
  return (static_cast<int64_t>(kBM) * (k + 8) + static_cast<int64_t>(kStages) * kBN * kBRow) * 2;
}
static_assert(smem_bytes(kLnLinearMaxK) <= 163 * 1024, "above SM87's 163 KB per-block opt-in");

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__global__ void __launch_bounds__(kThreads) ln_linear_kernel(const __half* __restrict__ x,      // (M, K)
                                                             const __half* __restrict__ gamma,  // (K)
                                                             const __half* __restrict__ beta,   // (K)
                                                             float eps,
                                                             const __half* __restrict__ w,     // (N, K)
                                                             const __half* __restrict__ bias,  // (N) or null
                                                             __half* __restrict__ y,           // (M, N)
                                                             int m, int n, int k, bool gelu) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int lda = k + 8;
  __half* s_a = reinterpret_cast<__half*>(smem_raw);  // (kBM, K + 8): the normalized rows
  __half* s_b = s_a + kBM * lda;                      // (kStages, kBN, kBRow): W tiles
  const int n0 = blockIdx.x * kBN, m0 = blockIdx.y * kBM;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int k_tiles = k / kBK;

  // W tile kt -> stage: 64 rows of W (features n0..n0+63; rows past N zero-filled), K columns of the tile.
  auto load_w = [&](int stage, int kt) {
    __half* dst = s_b + stage * kBN * kBRow;
#pragma unroll
    for (int c = tid; c < kBN * (kBK / 8); c += kThreads) {
      const int r = c / (kBK / 8), ch = c % (kBK / 8);
      const bool valid = n0 + r < n;
      const __half* src = w + (valid ? static_cast<int64_t>(n0 + r) * k : 0) + kt * kBK + ch * 8;
      cp_async_16(dst + r * kBRow + ch * 8, src, valid);
    }
  };
  // x rows m0..m0+63 into s_a in one go (cp.async, rows past M zero-filled): the LayerNorm below then reads
  // shared memory, not 64 dependent round trips to global memory.
  const int chunks = k / 8;
  for (int c = tid; c < kBM * chunks; c += kThreads) {
    const int r = c / chunks, ch = c % chunks;
    const bool valid = m0 + r < m;
    cp_async_16(s_a + r * lda + ch * 8, x + (valid ? static_cast<int64_t>(m0 + r) * k : 0) + ch * 8, valid);
  }
  cp_async_commit();
  // The first W tiles do not depend on the LayerNorm: start them now. One commit group per tile, empty
  // groups past the last tile, so the wait counts below are the same every time.
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < k_tiles) load_w(s, s);
    cp_async_commit();
  }
  cp_async_wait<kStages - 1>();  // the x group (the oldest) has landed; the W tiles may still be in flight
  __syncthreads();

  // LayerNorm in place, one warp per row: fp32 mean, then the mean of squared deviations (two passes over
  // registers, as layernorm_f16), fp16 result. Zero rows (past M) stay zeros.
  constexpr int kMaxChunks = kLnLinearMaxK / 8 / 32;  // 16-byte chunks per lane
  uint4 graw[kMaxChunks], braw[kMaxChunks];
#pragma unroll
  for (int i = 0; i < kMaxChunks; ++i) {
    const int ch = lane + 32 * i;
    if (ch < chunks) {
      graw[i] = __ldg(reinterpret_cast<const uint4*>(gamma + ch * 8));
      braw[i] = __ldg(reinterpret_cast<const uint4*>(beta + ch * 8));
    }
  }
  for (int r0 = warp * kRowsAtOnce; r0 < kBM; r0 += kThreads / 32 * kRowsAtOnce) {
    uint4 raw[kRowsAtOnce][kMaxChunks];
    float sum[kRowsAtOnce], sq[kRowsAtOnce], mean[kRowsAtOnce], rstd[kRowsAtOnce];
#pragma unroll
    for (int j = 0; j < kRowsAtOnce; ++j) {
      sum[j] = 0.f;
      const __half* row = s_a + (r0 + j) * lda;
#pragma unroll
      for (int i = 0; i < kMaxChunks; ++i) {
        const int ch = lane + 32 * i;
        if (ch < chunks) {
          raw[j][i] = *reinterpret_cast<const uint4*>(row + ch * 8);
          const __half2* h = reinterpret_cast<const __half2*>(&raw[j][i]);
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const float2 f = __half22float2(h[e]);
            sum[j] += f.x + f.y;
          }
        }
      }
    }
#pragma unroll
    for (int j = 0; j < kRowsAtOnce; ++j) mean[j] = warp_sum(sum[j]) / static_cast<float>(k);
#pragma unroll
    for (int j = 0; j < kRowsAtOnce; ++j) {
      sq[j] = 0.f;
#pragma unroll
      for (int i = 0; i < kMaxChunks; ++i) {
        if (lane + 32 * i < chunks) {
          const __half2* h = reinterpret_cast<const __half2*>(&raw[j][i]);
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const float2 f = __half22float2(h[e]);
            sq[j] += (f.x - mean[j]) * (f.x - mean[j]) + (f.y - mean[j]) * (f.y - mean[j]);
          }
        }
      }
    }
#pragma unroll
    for (int j = 0; j < kRowsAtOnce; ++j) rstd[j] = rsqrtf(warp_sum(sq[j]) / static_cast<float>(k) + eps);
#pragma unroll
    for (int j = 0; j < kRowsAtOnce; ++j) {
      if (m0 + r0 + j >= m) continue;  // zero rows stay zeros
      __half* row = s_a + (r0 + j) * lda;
#pragma unroll
      for (int i = 0; i < kMaxChunks; ++i) {
        const int ch = lane + 32 * i;
        if (ch < chunks) {
          const __half2* hx = reinterpret_cast<const __half2*>(&raw[j][i]);
          const __half2* hg = reinterpret_cast<const __half2*>(&graw[i]);
          const __half2* hb = reinterpret_cast<const __half2*>(&braw[i]);
          uint4 out;
          uint32_t* o = reinterpret_cast<uint32_t*>(&out);
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const float2 fx = __half22float2(hx[e]), fg = __half22float2(hg[e]), fb = __half22float2(hb[e]);
            o[e] = pack_half2((fx.x - mean[j]) * rstd[j] * fg.x + fb.x, (fx.y - mean[j]) * rstd[j] * fg.y + fb.y);
          }
          *reinterpret_cast<uint4*>(row + ch * 8) = out;
        }
      }
    }
  }

  // GEMM: warp (wm, wn) owns output rows wm*16..+15 and features wn*32..+31 of the block.
  const int warp_m = (warp / 2) * kWarpRows, warp_n = (warp % 2) * 32;
  float acc[kMTiles][4][4];
#pragma unroll
  for (int mi = 0; mi < kMTiles; ++mi)
#pragma unroll
    for (int ni = 0; ni < 4; ++ni) acc[mi][ni][0] = acc[mi][ni][1] = acc[mi][ni][2] = acc[mi][ni][3] = 0.f;

  for (int kt = 0; kt < k_tiles; ++kt) {
    // Refill the stage the previous iteration finished with (the barrier at its end made it free).
    if (kt + kStages - 1 < k_tiles) load_w((kt + kStages - 1) % kStages, kt + kStages - 1);
    cp_async_commit();
    cp_async_wait<kStages - 1>();  // tile kt has landed
    __syncthreads();                // ... for every thread; and s_a is complete before the first use
    const __half* sb = s_b + (kt % kStages) * kBN * kBRow;
#pragma unroll
    for (int ks = 0; ks < kBK / 16; ++ks) {
      uint32_t af[kMTiles][4];
#pragma unroll
      for (int mi = 0; mi < kMTiles; ++mi)
        ldmatrix_x4(af[mi], s_a + (warp_m + mi * 16 + lane % 16) * lda + kt * kBK + ks * 16 + (lane / 16) * 8);
#pragma unroll
      for (int np = 0; np < 2; ++np) {
        uint32_t bf[4];
        ldmatrix_x4(bf, sb + (warp_n + np * 16 + (lane & 7) + ((lane >> 4) << 3)) * kBRow + ks * 16 +
                            ((lane >> 3) & 1) * 8);
#pragma unroll
        for (int mi = 0; mi < kMTiles; ++mi) {
          mma_16816(acc[mi][2 * np], af[mi], bf[0], bf[1]);
          mma_16816(acc[mi][2 * np + 1], af[mi], bf[2], bf[3]);
        }
      }
    }
    __syncthreads();
  }
  cp_async_wait<0>();  // only empty groups can be left; nothing may be in flight when the block exits

  // Epilogue: + bias, GELU, fp16; thread (g, t) of a warp holds rows g and g + 8, features 2t and 2t + 1 of
  // each m16n8 tile.
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int ni = 0; ni < 4; ++ni) {
    const int col = n0 + warp_n + ni * 8 + 2 * t;
    if (col >= n) continue;
    const float b0 = bias != nullptr ? __half2float(bias[col]) : 0.f;
    const float b1 = bias != nullptr ? __half2float(bias[col + 1]) : 0.f;
#pragma unroll
    for (int mi = 0; mi < kMTiles; ++mi) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = m0 + warp_m + mi * 16 + g + 8 * h;
        if (row >= m) continue;
        float v0 = acc[mi][ni][2 * h] + b0, v1 = acc[mi][ni][2 * h + 1] + b1;
        if (gelu) {
          v0 = 0.5f * v0 * (1.f + erff(v0 * 0.70710678118654752f));
          v1 = 0.5f * v1 * (1.f + erff(v1 * 0.70710678118654752f));
        }
        *reinterpret_cast<uint32_t*>(y + static_cast<int64_t>(row) * n + col) = pack_half2(v0, v1);
      }
    }
  }
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

}  // namespace

bool ln_linear_f16_supported(int m, int n, int k, std::string* why) {
  std::string w;
  if (m < 1 || n < 1 || k < 1)
    w = "empty shape";
  else if (k % kBK != 0)
    w = "K = " + std::to_string(k) + " is not a multiple of " + std::to_string(kBK);
  else if (k > kLnLinearMaxK)
    w = "K = " + std::to_string(k) + " > " + std::to_string(kLnLinearMaxK) + " (the normalized rows must fit shared memory)";
  else if (n % 8 != 0)
    w = "N = " + std::to_string(n) + " is not a multiple of 8";
  else if (m > 65535 * kBM)
    w = "M = " + std::to_string(m) + " exceeds the grid";
  if (why != nullptr) *why = w;
  return w.empty();
}

cudaError_t ln_linear_f16(const __half* x, const __half* gamma, const __half* beta, float eps, const __half* w,
                          const __half* bias, __half* y, int m, int n, int k, bool gelu, cudaStream_t stream) {
  if (!ln_linear_f16_supported(m, n, k, nullptr) || !aligned16(x) || !aligned16(gamma) || !aligned16(beta) ||
      !aligned16(w) || (reinterpret_cast<uintptr_t>(y) & 3u) != 0 || (reinterpret_cast<uintptr_t>(bias) & 1u) != 0)
    return cudaErrorInvalidValue;
  // Once per process: opt in to as much of the largest K's shared memory (94 KB) as the device allows; a K
  // that needs more than it gives is refused, and the caller keeps LayerNorm + GEMM.
  static const int64_t granted = [] {
    constexpr int64_t kDefault = 48 * 1024;
    int dev = 0, optin = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess)
      return kDefault;
    const int64_t want = std::min<int64_t>(optin, smem_bytes(kLnLinearMaxK));
    return cudaFuncSetAttribute(ln_linear_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                static_cast<int>(want)) == cudaSuccess
               ? want
               : kDefault;
  }();
  if (smem_bytes(k) > granted) return cudaErrorInvalidValue;
  const dim3 grid((n + kBN - 1) / kBN, (m + kBM - 1) / kBM);
  ln_linear_kernel<<<grid, kThreads, static_cast<size_t>(smem_bytes(k)), stream>>>(x, gamma, beta, eps, w, bias, y, m,
                                                                                  n, k, gelu);
  return cudaGetLastError();
}

}  // namespace edgevit::gpu
