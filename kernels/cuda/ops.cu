// CUDA kernels of the ViT forward besides GEMMs and fp16 attention (API and conventions: kernels/cuda/ops.h).
//
// Variants and what they cost (ViT-B/16, batch 64, fp16, H100; see docs/benchmarks.md for the whole forward):
//   cast_*            grid-stride, 16-byte loads where the pointers allow; the input cast reads the mapped host
//                     staging buffer over PCIe (zero-copy on Jetson), so its speed is the link's
//   im2col_*          8 output elements per thread (16-byte loads and stores) when patch % 8 == 0 and the
//                     buffers are 16-byte aligned, else one thread per element
//   assemble_tokens_* 8 embedding elements per thread when embed % 8 == 0 and the tensors are aligned, else one
//                     per element
//   layernorm_*       one warp per row (2 rows per block below 1024 rows, else 4); the row lives in registers
//                     as 16-byte chunks (C <= 32 * 8 chunks), gamma/beta loaded alongside it, so x is read
//                     once and y written once; two-pass fp32 statistics. Rows whose C is not a multiple of a
//                     chunk, or wider, take a three-pass loop over global memory (L1-resident). ViT-B/16
//                     batch 1 (197 x 768 fp16, 300 KB each way): ~5 us per LN as of 2026-11-22 (op by op,
//                     launch gap included); gamma/beta hoisting and 2-row blocks not yet measured
//   gelu_f32          grid-stride, erff
//   gelu_tanh_*       grid-stride, expf of 2|u| formed in float-float (fma error-free products), fp32 math for
//                     fp16 storage; within 3.4e-7 relative of gelu_tanh_ref over [-20, 20] element by element (H200,
//                     2026-11-26; 2|u| in plain fp32 gave 2.4e-6 there, 1.3e-5 on the host). ViT-B/16 batch 64 MLP
//                     activation (38.7M elements) on H200: f32 216 us (erf gelu_f32 166 us), f16 170 us
//   pool_*            one thread per (b, e), fp32 sum over tokens (coalesced across e)
//   mha_f32           one block per (b, h, query): query and scores row in shared memory, block max/sum
//                     reductions, then one thread per output dim. fp32 plans only; O(S^2 D) FMAs, no tensor cores
//   xor_fold_u32      grid-stride 16-byte loads, warp XOR, one atomicXor per warp; init-time only (it streams
//                     a buffer through L2 before each timed GEMM run when the backend picks cuBLASLt algorithms)
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cuda/ops.h"

namespace edgevit::gpu {
namespace {

constexpr int kThreads = 256;

unsigned grid_for(int64_t n, int threads = kThreads) {
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 0x7fffffff ? 0x7fffffff : blocks));
}

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
template <typename T>
__device__ __forceinline__ T from_f32(float v);
template <>
__device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }

// 16 bytes of T as floats.
template <typename T>
struct Chunk {
  static constexpr int kElems = 16 / sizeof(T);
  float v[kElems];
};
// The 16 raw bytes, widened to floats.
__device__ __forceinline__ void unpack_chunk(const uint4& r, Chunk<float>& c) {
  c.v[0] = __uint_as_float(r.x);
  c.v[1] = __uint_as_float(r.y);
  c.v[2] = __uint_as_float(r.z);
  c.v[3] = __uint_as_float(r.w);
}
__device__ __forceinline__ void unpack_chunk(const uint4& r, Chunk<__half>& c) {
  const __half2* h = reinterpret_cast<const __half2*>(&r);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __half22float2(h[i]);
    c.v[2 * i] = f.x;
    c.v[2 * i + 1] = f.y;
  }
}
__device__ __forceinline__ uint4 load16(const void* p) { return *reinterpret_cast<const uint4*>(p); }
__device__ __forceinline__ void store_chunk(float* p, const Chunk<float>& c) {
  *reinterpret_cast<float4*>(p) = make_float4(c.v[0], c.v[1], c.v[2], c.v[3]);
}
__device__ __forceinline__ void store_chunk(__half* p, const Chunk<__half>& c) {
  uint4 r;
  __half2* h = reinterpret_cast<__half2*>(&r);
#pragma unroll
  for (int i = 0; i < 4; ++i) h[i] = __floats2half2_rn(c.v[2 * i], c.v[2 * i + 1]);
  *reinterpret_cast<uint4*>(p) = r;
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Eight consecutive elements as floats, and back: one 16-byte access for fp16, two for fp32 (p 16-byte aligned).
__device__ __forceinline__ void load8(const __half* p, float (&v)[8]) {
  Chunk<__half> c;
  unpack_chunk(load16(p), c);
#pragma unroll
  for (int i = 0; i < 8; ++i) v[i] = c.v[i];
}
__device__ __forceinline__ void load8(const float* p, float (&v)[8]) {
  Chunk<float> a, b;
  unpack_chunk(load16(p), a);
  unpack_chunk(load16(p + 4), b);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    v[i] = a.v[i];
    v[4 + i] = b.v[i];
  }
}
__device__ __forceinline__ void store8(__half* p, const float (&v)[8]) {
  Chunk<__half> c;
#pragma unroll
  for (int i = 0; i < 8; ++i) c.v[i] = v[i];
  store_chunk(p, c);
}
__device__ __forceinline__ void store8(float* p, const float (&v)[8]) {
  Chunk<float> a, b;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    a.v[i] = v[i];
    b.v[i] = v[4 + i];
  }
  store_chunk(p, a);
  store_chunk(p + 4, b);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int off = 16; off > 0; off /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

// ---- casts -----------------------------------------------------------------------------------------------

template <typename Tin, typename Tout>
__global__ void cast_kernel(const Tin* __restrict__ src, Tout* __restrict__ dst, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    dst[i] = from_f32<Tout>(to_f32(src[i]));
}

// The output cast, counting non-finite values as it goes (outputs_finite's meaning): one atomic per thread
// that saw one, so a finite output costs no atomics.
template <typename Tin>
__global__ void cast_count_kernel(const Tin* __restrict__ src, float* __restrict__ dst, int64_t n,
                                  unsigned* __restrict__ nonfinite) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  unsigned bad = 0;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float v = to_f32(src[i]);
    dst[i] = v;
    bad += isfinite(v) ? 0u : 1u;
  }
  if (bad != 0) atomicAdd(nonfinite, bad);
}

// Four elements per thread: one 16-byte load of fp32 (over PCIe for the input staging, wide requests count).
__global__ void cast_f32_to_f16_x4_kernel(const float4* __restrict__ src, __half2* __restrict__ dst, int64_t n4) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n4; i += stride) {
    const float4 v = src[i];
    dst[2 * i] = __floats2half2_rn(v.x, v.y);
    dst[2 * i + 1] = __floats2half2_rn(v.z, v.w);
  }
}

template <typename Tin, typename Tout>
cudaError_t launch_cast(const Tin* src, Tout* dst, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  cast_kernel<Tin, Tout><<<grid_for(n), kThreads, 0, stream>>>(src, dst, n);
  return cudaGetLastError();
}

// ---- im2col ----------------------------------------------------------------------------------------------

template <typename Tin, typename Tout>
__global__ void im2col_kernel(const Tin* __restrict__ img,  // (B, C, S, S)
                              Tout* __restrict__ cols,      // (B * P, C * p * p)
                              int batch, int chans, int img_size, int patch) {
  const int grid = img_size / patch;
  const int64_t row_len = static_cast<int64_t>(chans) * patch * patch;
  const int64_t n = static_cast<int64_t>(batch) * grid * grid * row_len;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t r = i / row_len;
    const int col = static_cast<int>(i - r * row_len);
    const int kx = col % patch, ky = (col / patch) % patch, c = col / (patch * patch);
    const int64_t b = r / (grid * grid);
    const int pidx = static_cast<int>(r - b * grid * grid);
    const int py = pidx / grid, px = pidx % grid;
    const int64_t src = ((b * chans + c) * img_size + py * patch + ky) * img_size + px * patch + kx;
    cols[i] = from_f32<Tout>(to_f32(img[src]));
  }
}

// Eight outputs per thread, for patch % 8 == 0 (ViT's 16 and 32) and 16-byte aligned buffers: the 8
// consecutive kx of one (c, ky) are one 16-byte run of an image row, so loads and stores are 16 bytes wide,
// and the index arithmetic is 32-bit, once per 8 elements (the scalar kernel above does 64-bit division per
// element: ViT-B/16 batch 64 took 93 us, 413 GB/s, on an H100).
template <typename Tin, typename Tout>
__global__ void im2col_x8_kernel(const Tin* __restrict__ img,  // (B, C, S, S)
                                 Tout* __restrict__ cols,      // (B * P, C * p * p)
                                 int batch, int chans, int img_size, int patch) {
  const int grid = img_size / patch;
  const int row_chunks = chans * patch * patch / 8;
  const int n = batch * grid * grid * row_chunks;  // < 2^30 (the launcher checks): i + stride cannot overflow
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const int r = i / row_chunks;
    const int col = (i - r * row_chunks) * 8;
    const int kx = col % patch, ky = (col / patch) % patch, c = col / (patch * patch);
    const int b = r / (grid * grid);
    const int pidx = r - b * grid * grid;
    const int py = pidx / grid, px = pidx % grid;
    const int64_t src = ((static_cast<int64_t>(b) * chans + c) * img_size + py * patch + ky) * img_size + px * patch + kx;
    float v[8];
    load8(img + src, v);
    store8(cols + static_cast<int64_t>(i) * 8, v);
  }
}

template <typename Tin, typename Tout>
cudaError_t launch_im2col(const Tin* img, Tout* cols, int batch, int chans, int img_size, int patch,
                          cudaStream_t stream) {
  if (patch <= 0 || img_size % patch != 0) return cudaErrorInvalidValue;
  const int64_t n = static_cast<int64_t>(batch) * chans * img_size * img_size;
  if (n <= 0) return cudaSuccess;
  if (patch % 8 == 0 && img_size % 8 == 0 && n / 8 < (int64_t{1} << 30) && aligned16(img) && aligned16(cols)) {
    im2col_x8_kernel<Tin, Tout><<<grid_for(n / 8), kThreads, 0, stream>>>(img, cols, batch, chans, img_size, patch);
    return cudaGetLastError();
  }
  im2col_kernel<Tin, Tout><<<grid_for(n), kThreads, 0, stream>>>(img, cols, batch, chans, img_size, patch);
  return cudaGetLastError();
}

// ---- assemble tokens -------------------------------------------------------------------------------------

template <typename T>
__global__ void assemble_kernel(const T* __restrict__ patches,  // (B, P, E)
                                const T* __restrict__ cls,      // (E) or nullptr
                                const T* __restrict__ reg,      // (R, E) or nullptr
                                int reg_tokens,
                                const T* __restrict__ pos,      // (P, E) if no_embed_class else (T, E)
                                bool no_embed_class,
                                T* __restrict__ x,              // (B, T, E)
                                int batch, int num_patches, int embed) {
  const int n_cls = cls != nullptr ? 1 : 0;
  const int n_reg = reg != nullptr ? reg_tokens : 0;
  const int prefix = n_cls + n_reg;
  const int tokens = prefix + num_patches;
  const int64_t n = static_cast<int64_t>(batch) * tokens * embed;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int j = static_cast<int>(i % embed);
    const int64_t bt = i / embed;
    const int t = static_cast<int>(bt % tokens);
    const int64_t b = bt / tokens;
    float v;
    if (t < n_cls) {
      v = to_f32(cls[j]);
    } else if (t < prefix) {
      v = to_f32(reg[static_cast<int64_t>(t - n_cls) * embed + j]);
    } else {
      v = to_f32(patches[(b * num_patches + (t - prefix)) * embed + j]);
    }
    if (!no_embed_class) {
      v += to_f32(pos[static_cast<int64_t>(t) * embed + j]);
    } else if (t >= prefix) {
      v += to_f32(pos[static_cast<int64_t>(t - prefix) * embed + j]);
    }
    x[i] = from_f32<T>(v);
  }
}

// Eight embedding elements per thread, for embed % 8 == 0 and 16-byte aligned tensors: 16-byte loads of the
// token's source row and of its position embedding, one 16-byte store, 32-bit indices once per 8 elements
// (the scalar kernel above: 57 us, 680 GB/s, for ViT-B/16 batch 64 on an H100). Same fp32 sum as above.
template <typename T>
__global__ void assemble_x8_kernel(const T* __restrict__ patches,  // (B, P, E)
                                   const T* __restrict__ cls,      // (E) or nullptr
                                   const T* __restrict__ reg,      // (R, E) or nullptr
                                   int reg_tokens,
                                   const T* __restrict__ pos,      // (P, E) if no_embed_class else (T, E)
                                   bool no_embed_class,
                                   T* __restrict__ x,              // (B, T, E)
                                   int batch, int num_patches, int embed) {
  const int n_cls = cls != nullptr ? 1 : 0;
  const int n_reg = reg != nullptr ? reg_tokens : 0;
  const int prefix = n_cls + n_reg;
  const int tokens = prefix + num_patches;
  const int row_chunks = embed / 8;
  const int n = batch * tokens * row_chunks;  // < 2^30 (the launcher checks): i + stride cannot overflow
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const int bt = i / row_chunks;
    const int j = (i - bt * row_chunks) * 8;
    const int b = bt / tokens;
    const int t = bt - b * tokens;
    const T* src = t < n_cls    ? cls + j
                   : t < prefix ? reg + static_cast<int64_t>(t - n_cls) * embed + j
                                : patches + (static_cast<int64_t>(b) * num_patches + (t - prefix)) * embed + j;
    float v[8];
    load8(src, v);
    const int pos_row = !no_embed_class ? t : t - prefix;  // < 0: a prefix token without a position embedding
    if (pos_row >= 0) {
      float p[8];
      load8(pos + static_cast<int64_t>(pos_row) * embed + j, p);
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] += p[e];
    }
    store8(x + static_cast<int64_t>(i) * 8, v);
  }
}

template <typename T>
cudaError_t launch_assemble(const T* patches, const T* cls, const T* reg, int reg_tokens, const T* pos,
                            bool no_embed_class, T* x, int batch, int num_patches, int embed, cudaStream_t stream) {
  const int prefix = (cls != nullptr ? 1 : 0) + (reg != nullptr ? reg_tokens : 0);
  const int64_t n = static_cast<int64_t>(batch) * (prefix + num_patches) * embed;
  if (n <= 0) return cudaSuccess;
  if (embed % 8 == 0 && n / 8 < (int64_t{1} << 30) && aligned16(patches) && aligned16(pos) && aligned16(x) &&
      (cls == nullptr || aligned16(cls)) && (reg == nullptr || aligned16(reg))) {
    assemble_x8_kernel<T><<<grid_for(n / 8), kThreads, 0, stream>>>(patches, cls, reg, reg_tokens, pos, no_embed_class,
                                                                    x, batch, num_patches, embed);
    return cudaGetLastError();
  }
  assemble_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(patches, cls, reg, reg_tokens, pos, no_embed_class, x,
                                                            batch, num_patches, embed);
  return cudaGetLastError();
}

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

// ---- gelu, pool ------------------------------------------------------------------------------------------

__global__ void gelu_f32_kernel(float* __restrict__ x, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float v = x[i];
    x[i] = 0.5f * v * (1.f + erff(v * 0.70710678118654752f));
  }
}

// gelu_tanh (meaning of gelu_tanh_ref): x / (1 + e^-2u) = 0.5 x (1 + tanh u), u = sqrt(2/pi) (x + 0.044715 x^3),
// with e = e^-2|u| <= 1 (x / (1 + e) for x >= 0, x e / (1 + e) below: no overflow, no cancellation). In the left
// tail the result is about x e^-2|u|, whose relative error is the absolute error of 2|u| (up to ~87 before it
// underflows), so 2|u| = a (A + B a^2), a = min(|x|, 64), is carried as t + te in float-float: Dekker products
// through fmaf, Knuth's two-sum, constants split into hi + lo; then e = expf(-t) (1 - te). The clamp (NaN -> 64:
// fminf returns the number) changes no result (e is 0 from a ~ 10.4 on): +inf -> +inf, -inf -> NaN (-inf * 0,
// as the CPU kernel and PyTorch), NaN -> NaN, large negative x -> -0.
__device__ __forceinline__ float gelu_tanh_f32_math(float x) {
  constexpr float kAHi = 1.59576917f, kALo = -4.53406805e-08f;    // 2 sqrt(2/pi) = kAHi + kALo
  constexpr float kBHi = 0.0713548139f, kBLo = 2.39883247e-09f;   // 2 sqrt(2/pi) 0.044715 = kBHi + kBLo
  // The rounded products and the sum whose errors are recovered are __fmul_rn / __fadd_rn: nvcc must not
  // contract them into FMAs (kAHi + kBHi * p would become one, and two-sum's error term would be wrong).
  const float a = fminf(fabsf(x), 64.f);
  const float p = __fmul_rn(a, a), pe = fmaf(a, a, -p);                                  // a^2 = p + pe
  const float q = __fmul_rn(kBHi, p), qe = fmaf(kBHi, p, -q) + fmaf(kBHi, pe, kBLo * p);  // B a^2 ~ q + qe
  const float s = __fadd_rn(kAHi, q), bb = s - kAHi, se = (kAHi - (s - bb)) + (q - bb);   // kAHi + q = s + se
  const float t = __fmul_rn(a, s), te = fmaf(a, s, -t) + a * (se + qe + kALo);           // 2|u| ~ t + te
  const float e = expf(-t) * (1.f - te);                                           // e^-2|u|
  return x * (signbit(x) ? e : 1.f) / (1.f + e);
}

template <typename T>
__global__ void gelu_tanh_kernel(T* __restrict__ x, int64_t n) {  // x (n), in place
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    x[i] = from_f32<T>(gelu_tanh_f32_math(to_f32(x[i])));
}

template <typename T>
__global__ void pool_kernel(const T* __restrict__ x,  // (B, T, E)
                            T* __restrict__ out,      // (B, E)
                            int batch, int tokens, int embed, bool avg, int prefix) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<int64_t>(batch) * embed) return;
  const int64_t b = i / embed;
  const int j = static_cast<int>(i % embed);
  const T* xb = x + b * tokens * embed;
  if (!avg) {
    out[i] = xb[j];
    return;
  }
  float s = 0.f;
  for (int t = prefix; t < tokens; ++t) s += to_f32(xb[static_cast<int64_t>(t) * embed + j]);
  out[i] = from_f32<T>(tokens > prefix ? s / static_cast<float>(tokens - prefix) : 0.f);
}

template <typename T>
cudaError_t launch_pool(const T* x, T* out, int batch, int tokens, int embed, bool avg, int prefix,
                        cudaStream_t stream) {
  const int64_t n = static_cast<int64_t>(batch) * embed;
  if (n <= 0) return cudaSuccess;
  pool_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(x, out, batch, tokens, embed, avg, prefix);
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

// ---- xor fold --------------------------------------------------------------------------------------------

constexpr int kFoldBlocks = 1024;

__global__ void xor_fold_kernel(const uint4* __restrict__ src, int64_t n16, uint32_t* acc) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  uint32_t v = 0;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n16; i += stride) {
    const uint4 r = src[i];
    v ^= r.x ^ r.y ^ r.z ^ r.w;
  }
#pragma unroll
  for (int off = 16; off > 0; off /= 2) v ^= __shfl_xor_sync(0xffffffffu, v, off);
  if (threadIdx.x % 32 == 0) atomicXor(acc, v);
}

}  // namespace

cudaError_t xor_fold_u32(const void* src, int64_t bytes, uint32_t* acc, cudaStream_t stream) {
  if (bytes < 0 || bytes % 16 != 0 || !aligned16(src)) return cudaErrorInvalidValue;
  if (bytes == 0) return cudaSuccess;
  const int64_t n16 = bytes / 16;
  const unsigned grid = std::min<unsigned>(grid_for(n16), kFoldBlocks);
  xor_fold_kernel<<<grid, kThreads, 0, stream>>>(static_cast<const uint4*>(src), n16, acc);
  return cudaGetLastError();
}

cudaError_t cast_f32_to_f16(const float* src, __half* dst, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  if (n % 4 == 0 && aligned16(src) && (reinterpret_cast<uintptr_t>(dst) & 7u) == 0) {
    cast_f32_to_f16_x4_kernel<<<grid_for(n / 4), kThreads, 0, stream>>>(reinterpret_cast<const float4*>(src),
                                                                       reinterpret_cast<__half2*>(dst), n / 4);
    return cudaGetLastError();
  }
  return launch_cast(src, dst, n, stream);
}
cudaError_t cast_f16_to_f32(const __half* src, float* dst, int64_t n, cudaStream_t stream) {
  return launch_cast(src, dst, n, stream);
}
cudaError_t copy_f32(const float* src, float* dst, int64_t n, cudaStream_t stream) {
  return launch_cast(src, dst, n, stream);
}

template <typename Tin>
cudaError_t launch_cast_count(const Tin* src, float* dst, int64_t n, unsigned* nonfinite, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  cast_count_kernel<Tin><<<grid_for(n), kThreads, 0, stream>>>(src, dst, n, nonfinite);
  return cudaGetLastError();
}
cudaError_t cast_f16_to_f32_count_nonfinite(const __half* src, float* dst, int64_t n, unsigned* nonfinite,
                                            cudaStream_t stream) {
  return launch_cast_count(src, dst, n, nonfinite, stream);
}
cudaError_t copy_f32_count_nonfinite(const float* src, float* dst, int64_t n, unsigned* nonfinite,
                                     cudaStream_t stream) {
  return launch_cast_count(src, dst, n, nonfinite, stream);
}

cudaError_t im2col_patches_f32(const float* img, float* cols, int batch, int chans, int img_size, int patch,
                               cudaStream_t stream) {
  return launch_im2col(img, cols, batch, chans, img_size, patch, stream);
}
cudaError_t im2col_patches_f32_to_f16(const float* img, __half* cols, int batch, int chans, int img_size,
                                      int patch, cudaStream_t stream) {
  return launch_im2col(img, cols, batch, chans, img_size, patch, stream);
}
cudaError_t im2col_patches_f16(const __half* img, __half* cols, int batch, int chans, int img_size, int patch,
                               cudaStream_t stream) {
  return launch_im2col(img, cols, batch, chans, img_size, patch, stream);
}

cudaError_t assemble_tokens_f32(const float* patch_tokens, const float* cls, const float* reg, int reg_tokens,
                                const float* pos, bool no_embed_class, float* x, int batch, int num_patches,
                                int embed, cudaStream_t stream) {
  return launch_assemble(patch_tokens, cls, reg, reg_tokens, pos, no_embed_class, x, batch, num_patches, embed,
                         stream);
}
cudaError_t assemble_tokens_f16(const __half* patch_tokens, const __half* cls, const __half* reg, int reg_tokens,
                                const __half* pos, bool no_embed_class, __half* x, int batch, int num_patches,
                                int embed, cudaStream_t stream) {
  return launch_assemble(patch_tokens, cls, reg, reg_tokens, pos, no_embed_class, x, batch, num_patches, embed,
                         stream);
}

cudaError_t layernorm_f32(const float* x, const float* gamma, const float* beta, float* y, int m, int c,
                          float eps, cudaStream_t stream) {
  return launch_layernorm(x, gamma, beta, y, m, c, eps, stream);
}
cudaError_t layernorm_f16(const __half* x, const __half* gamma, const __half* beta, __half* y, int m, int c,
                          float eps, cudaStream_t stream) {
  return launch_layernorm(x, gamma, beta, y, m, c, eps, stream);
}

cudaError_t gelu_f32(float* x, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  gelu_f32_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, n);
  return cudaGetLastError();
}

cudaError_t gelu_tanh_f32(float* x, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  gelu_tanh_kernel<float><<<grid_for(n), kThreads, 0, stream>>>(x, n);
  return cudaGetLastError();
}
cudaError_t gelu_tanh_f16(__half* x, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  gelu_tanh_kernel<__half><<<grid_for(n), kThreads, 0, stream>>>(x, n);
  return cudaGetLastError();
}

cudaError_t pool_f32(const float* x, float* out, int batch, int tokens, int embed, bool avg, int prefix,
                     cudaStream_t stream) {
  return launch_pool(x, out, batch, tokens, embed, avg, prefix, stream);
}
cudaError_t pool_f16(const __half* x, __half* out, int batch, int tokens, int embed, bool avg, int prefix,
                     cudaStream_t stream) {
  return launch_pool(x, out, batch, tokens, embed, avg, prefix, stream);
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
