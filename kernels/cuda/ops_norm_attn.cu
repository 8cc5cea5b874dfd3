// CUDA row-reduction kernels of the ViT forward: LayerNorm, and attention for fp32 plans (API and
// conventions: kernels/cuda/ops.h; shared device helpers: kernels/cuda/ops_device.cuh).
//
// Variants and what they cost (ViT-B/16, batch 64, fp16, H100; see docs/benchmarks.md for the whole forward):
//   layernorm_*       one warp per row (2 rows per block below 1024 rows, else 4); the row lives in registers
//                     as 16-byte chunks (C <= 32 * 8 chunks), gamma/beta loaded alongside it, so x is read
//                     once and y written once; two-pass fp32 statistics. Rows whose C is not a multiple of a
//                     chunk, or wider, take a three-pass loop over global memory (L1-resident). ViT-B/16
//                     batch 1 (197 x 768 fp16, 300 KB each way): ~5 us per LN, op by op, launch gap included
//                     (H100, docs/benchmarks.md); gamma/beta hoisting and 2-row blocks not yet measured
//   mha_f32           one block per (b, h, query): query and scores row in shared memory, block max/sum
//                     reductions, then one thread per output dim. fp32 plans only; O(S^2 D) FMAs, no tensor cores
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/ops.h"
#include "kernels/cuda/ops_device.cuh"

namespace edgevit::gpu {
namespace {

// ---- layernorm -------------------------------------------------------------------------------------------

// Rows (warps) per block: kLnWarps, or kLnWarpsFewRows when m < kLnFewRows, so a batch-1 ViT (197 rows)
// spreads over ~100 blocks instead of 50 (one wave on an H100's 132 SMs, and within an 8-SM Orin NX's
// 16 resident blocks per SM).
constexpr int kLnWarps = 4;
constexpr int kLnWarpsFewRows = 2;
constexpr int kLnFewRows = 1024;

// Row in registers: lane l holds chunks l, l + 32, ... (kChunks of them at most), C % chunk == 0. gamma
// and beta are loaded (raw) together with x, so their latency hides behind the row's instead of following
// the two reductions.
template <typename T, int kChunks>
__global__ void __launch_bounds__(kLnWarps * 32)
    layernorm_regs_kernel(const T* x, const T* __restrict__ gamma, const T* __restrict__ beta, T* y, int m, int c,
                          float eps) {
  constexpr int kV = Chunk<T>::kElems;
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= m) return;
  const T* xr = x + static_cast<int64_t>(row) * c;
  T* yr = y + static_cast<int64_t>(row) * c;
  const int nchunks = c / kV;
  // Raw 16-byte words (4 registers per chunk whatever T), widened where used: holding fp16 x as floats
  // next to gamma and beta would cost 8 more registers per chunk (occupancy at large batches).
  uint4 xraw[kChunks], graw[kChunks], braw[kChunks];
#pragma unroll
  for (int i = 0; i < kChunks; ++i) {
    const int ch = lane + 32 * i;
    if (ch < nchunks) {
      xraw[i] = load16(xr + ch * kV);
      graw[i] = __ldg(reinterpret_cast<const uint4*>(gamma + ch * kV));
      braw[i] = __ldg(reinterpret_cast<const uint4*>(beta + ch * kV));
    }
  }
  float sum = 0.f;
#pragma unroll
  for (int i = 0; i < kChunks; ++i) {
    if (lane + 32 * i < nchunks) {
      Chunk<T> v;
      unpack_chunk(xraw[i], v);
#pragma unroll
      for (int e = 0; e < kV; ++e) sum += v.v[e];
    }
  }
  const float mean = warp_sum(sum) / static_cast<float>(c);
  float sq = 0.f;
#pragma unroll
  for (int i = 0; i < kChunks; ++i) {
    if (lane + 32 * i < nchunks) {
      Chunk<T> v;
      unpack_chunk(xraw[i], v);
#pragma unroll
      for (int e = 0; e < kV; ++e) {
        const float d = v.v[e] - mean;
        sq += d * d;
      }
    }
  }
  const float rstd = rsqrtf(warp_sum(sq) / static_cast<float>(c) + eps);
#pragma unroll
  for (int i = 0; i < kChunks; ++i) {
    const int ch = lane + 32 * i;
    if (ch < nchunks) {
      Chunk<T> v, g, b;
      unpack_chunk(xraw[i], v);
      unpack_chunk(graw[i], g);
      unpack_chunk(braw[i], b);
#pragma unroll
      for (int e = 0; e < kV; ++e) v.v[e] = (v.v[e] - mean) * rstd * g.v[e] + b.v[e];
      store_chunk(yr + ch * kV, v);
    }
  }
}

// Any C: three passes over the row (the re-reads hit L1).
template <typename T>
__global__ void __launch_bounds__(kLnWarps * 32)
    layernorm_loop_kernel(const T* x, const T* __restrict__ gamma, const T* __restrict__ beta, T* y, int m, int c,
                          float eps) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= m) return;
  const T* xr = x + static_cast<int64_t>(row) * c;
  T* yr = y + static_cast<int64_t>(row) * c;
  float sum = 0.f;
  for (int j = lane; j < c; j += 32) sum += to_f32(xr[j]);
  const float mean = warp_sum(sum) / static_cast<float>(c);
  float sq = 0.f;
  for (int j = lane; j < c; j += 32) {
    const float d = to_f32(xr[j]) - mean;
    sq += d * d;
  }
  const float rstd = rsqrtf(warp_sum(sq) / static_cast<float>(c) + eps);
  for (int j = lane; j < c; j += 32)
    yr[j] = from_f32<T>((to_f32(xr[j]) - mean) * rstd * to_f32(gamma[j]) + to_f32(beta[j]));
}

template <typename T>
cudaError_t launch_layernorm(const T* x, const T* gamma, const T* beta, T* y, int m, int c, float eps,
                             cudaStream_t stream) {
  if (m <= 0) return cudaSuccess;
  if (c <= 0) return cudaErrorInvalidValue;
  constexpr int kV = Chunk<T>::kElems;
  const int warps = m < kLnFewRows ? kLnWarpsFewRows : kLnWarps;
  const dim3 grid((m + warps - 1) / warps), block(warps * 32);
  const bool vec = c % kV == 0 && aligned16(x) && aligned16(y) && aligned16(gamma) && aligned16(beta);
  const int chunks_per_lane = (c / kV + 31) / 32;
  if (vec && chunks_per_lane <= 1)
    layernorm_regs_kernel<T, 1><<<grid, block, 0, stream>>>(x, gamma, beta, y, m, c, eps);
  else if (vec && chunks_per_lane <= 2)
    layernorm_regs_kernel<T, 2><<<grid, block, 0, stream>>>(x, gamma, beta, y, m, c, eps);
  else if (vec && chunks_per_lane <= 4)
    layernorm_regs_kernel<T, 4><<<grid, block, 0, stream>>>(x, gamma, beta, y, m, c, eps);
  else if (vec && chunks_per_lane <= 8)
    layernorm_regs_kernel<T, 8><<<grid, block, 0, stream>>>(x, gamma, beta, y, m, c, eps);
  else
    layernorm_loop_kernel<T><<<grid, block, 0, stream>>>(x, gamma, beta, y, m, c, eps);
  return cudaGetLastError();
}

// ---- fp32 attention --------------------------------------------------------------------------------------

constexpr int kMhaThreads = 128;

__device__ float block_reduce(float v, bool is_max, float* red) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = is_max ? warp_max(v) : warp_sum(v);
  __syncthreads();  // red may still be read by a previous reduction
  if (lane == 0) red[warp] = v;
  __syncthreads();
  float r = red[0];
  for (int w = 1; w < kMhaThreads / 32; ++w) r = is_max ? fmaxf(r, red[w]) : r + red[w];
  return r;
}

// One block per (b, h, query row i); dynamic shared memory holds the query row (D floats) and its scores
// (Skv floats).
__global__ void __launch_bounds__(kMhaThreads) mha_f32_kernel(AttnParams p, const float* __restrict__ q,
                                                              const float* __restrict__ k,
                                                              const float* __restrict__ v, float* __restrict__ o) {
  extern __shared__ float smem[];
  float* q_row = smem;
  float* s = smem + p.head_dim;
  __shared__ float red[kMhaThreads / 32];
  const int64_t idx = blockIdx.x;  // ((b * H) + h) * Sq + i
  const int i = static_cast<int>(idx % p.seq_q);
  const int h = static_cast<int>((idx / p.seq_q) % p.heads);
  const int b = static_cast<int>(idx / (static_cast<int64_t>(p.seq_q) * p.heads));
  const int d_n = p.head_dim;
  const float* qr = q + b * p.q.batch + i * p.q.row + h * p.q.head;
  for (int d = threadIdx.x; d < d_n; d += kMhaThreads) q_row[d] = qr[d];
  __syncthreads();
  const uint8_t* mask = p.key_mask != nullptr ? p.key_mask + static_cast<int64_t>(b) * p.seq_kv : nullptr;
  float mx = -INFINITY;
  for (int j = threadIdx.x; j < p.seq_kv; j += kMhaThreads) {
    float val = -INFINITY;
    if (mask == nullptr || mask[j] != 0) {
      const float* kr = k + b * p.k.batch + j * p.k.row + h * p.k.head;
      float acc = 0.f;
      for (int d = 0; d < d_n; ++d) acc = fmaf(q_row[d], kr[d], acc);
      val = acc * p.scale;
    }
    s[j] = val;
    mx = fmaxf(mx, val);
  }
  mx = block_reduce(mx, true, red);
  float sum = 0.f;
  for (int j = threadIdx.x; j < p.seq_kv; j += kMhaThreads) {
    const float e = mx == -INFINITY ? 0.f : expf(s[j] - mx);
    s[j] = e;
    sum += e;
  }
  sum = block_reduce(sum, false, red);  // its barriers also publish s[] to the whole block
  const float inv = sum > 0.f ? 1.f / sum : 0.f;
  float* orow = o + b * p.o.batch + i * p.o.row + h * p.o.head;
  for (int d = threadIdx.x; d < d_n; d += kMhaThreads) {
    float acc = 0.f;
    const float* vcol = v + b * p.v.batch + h * p.v.head + d;
    for (int j = 0; j < p.seq_kv; ++j) acc = fmaf(s[j], vcol[static_cast<int64_t>(j) * p.v.row], acc);
    orow[d] = acc * inv;
  }
}

}  // namespace

cudaError_t layernorm_f32(const float* x, const float* gamma, const float* beta, float* y, int m, int c,
                          float eps, cudaStream_t stream) {
  return launch_layernorm(x, gamma, beta, y, m, c, eps, stream);
}
cudaError_t layernorm_f16(const __half* x, const __half* gamma, const __half* beta, __half* y, int m, int c,
                          float eps, cudaStream_t stream) {
  return launch_layernorm(x, gamma, beta, y, m, c, eps, stream);
}

cudaError_t mha_f32(const AttnParams& p, const float* q, const float* k, const float* v, float* o,
                    cudaStream_t stream) {
  if (p.batch <= 0 || p.heads <= 0 || p.seq_q <= 0) return cudaSuccess;
  if (p.head_dim <= 0 || p.seq_kv < 0 || !(p.scale > 0.f)) return cudaErrorInvalidValue;
  const int64_t blocks = static_cast<int64_t>(p.batch) * p.heads * p.seq_q;
  if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
  if (int64_t{p.head_dim} + p.seq_kv > kMhaF32MaxSmemFloats) return cudaErrorInvalidValue;
  const size_t smem = sizeof(float) * (static_cast<size_t>(p.head_dim) + static_cast<size_t>(p.seq_kv));
  mha_f32_kernel<<<static_cast<unsigned>(blocks), kMhaThreads, smem, stream>>>(p, q, k, v, o);
  return cudaGetLastError();
}


}  // namespace edgevit::gpu
