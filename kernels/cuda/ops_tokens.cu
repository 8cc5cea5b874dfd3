// CUDA token kernels of the ViT forward: patch im2col, token assembly (class, register and position
// embeddings) and pooling (API and conventions: kernels/cuda/ops.h; shared device helpers:
// kernels/cuda/ops_device.cuh).
//
// Variants and what they cost (ViT-B/16, batch 64, fp16, H100; see docs/benchmarks.md for the whole forward):
//   im2col_*          8 output elements per thread (16-byte loads and stores) when patch % 8 == 0 and the
//                     buffers are 16-byte aligned; else a block per patch row through shared memory (patch 14)
//                     when patch * img_w elements fit 48 KB; else one thread per element
//   assemble_tokens_* 8 embedding elements per thread when embed % 8 == 0 and the tensors are aligned, else one
//                     per element
//   pool_*            one thread per (b, e), fp32 sum over tokens (coalesced across e)
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/ops.h"
#include "kernels/cuda/ops_device.cuh"

namespace edgevit::gpu {
namespace {

// ---- im2col ----------------------------------------------------------------------------------------------

template <typename Tin, typename Tout>
__global__ void im2col_kernel(const Tin* __restrict__ img,  // (B, C, img_h, img_w)
                              Tout* __restrict__ cols,      // (B * P, C * p * p), P = grid_h * grid_w
                              int batch, int chans, int img_h, int img_w, int patch) {
  const int grid_h = img_h / patch, grid_w = img_w / patch;
  const int64_t row_len = static_cast<int64_t>(chans) * patch * patch;
  const int64_t n = static_cast<int64_t>(batch) * grid_h * grid_w * row_len;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t r = i / row_len;
    const int col = static_cast<int>(i - r * row_len);
    const int kx = col % patch, ky = (col / patch) % patch, c = col / (patch * patch);
    const int64_t b = r / (grid_h * grid_w);
    const int pidx = static_cast<int>(r - b * grid_h * grid_w);
    const int py = pidx / grid_w, px = pidx % grid_w;
    const int64_t src = ((b * chans + c) * img_h + py * patch + ky) * img_w + px * patch + kx;
    cols[i] = from_f32<Tout>(to_f32(img[src]));
  }
}

// Eight outputs per thread, for patch % 8 == 0 (ViT's 16 and 32) and 16-byte aligned buffers: the 8
// consecutive kx of one (c, ky) are one 16-byte run of an image row, so loads and stores are 16 bytes wide,
// and the index arithmetic is 32-bit, once per 8 elements (the scalar kernel above does 64-bit division per
// element: ViT-B/16 batch 64 took 93 us, 413 GB/s, on an H100).
template <typename Tin, typename Tout>
__global__ void im2col_x8_kernel(const Tin* __restrict__ img,  // (B, C, img_h, img_w)
                                 Tout* __restrict__ cols,      // (B * P, C * p * p), P = grid_h * grid_w
                                 int batch, int chans, int img_h, int img_w, int patch) {
  const int grid_h = img_h / patch, grid_w = img_w / patch;
  const int row_chunks = chans * patch * patch / 8;
  const int n = batch * grid_h * grid_w * row_chunks;  // < 2^30 (the launcher checks): i + stride cannot overflow
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const int r = i / row_chunks;
    const int col = (i - r * row_chunks) * 8;
    const int kx = col % patch, ky = (col / patch) % patch, c = col / (patch * patch);
    const int b = r / (grid_h * grid_w);
    const int pidx = r - b * grid_h * grid_w;
    const int py = pidx / grid_w, px = pidx % grid_w;
    const int64_t src = ((static_cast<int64_t>(b) * chans + c) * img_h + py * patch + ky) * img_w + px * patch + kx;
    float v[8];
    load8(img + src, v);
    store8(cols + static_cast<int64_t>(i) * 8, v);
  }
}

// A block per (py, c, b) for the other patches (DINOv2's and CLIP ViT-L's 14): the patch's `patch` image rows of
// channel c are one contiguous run of patch * img_w elements, copied into shared memory with coalesced loads (16
// bytes wide where the run allows); then thread t owns element t = ky * patch + kx of the channel's segment of
// every patch in the row, written at (py, px) for px = 0 .. grid_w - 1: each px is one coalesced run of patch^2
// outputs, and the index arithmetic is once per thread. (One thread per element took 528 us at DINOv2-S/14 518 px,
// batch 64, on the H200: 390 GB/s, the integer divisions per element.) The launcher picks it when the rows fit
// kIm2colRowsSmem.
constexpr int kIm2colRowsSmem = 48 * 1024;
template <typename Tin, typename Tout>
__global__ void im2col_rows_kernel(const Tin* __restrict__ img,  // (B, C, img_h, img_w)
                                   Tout* __restrict__ cols,      // (B * P, C * p * p), P = grid_h * grid_w
                                   int chans, int img_h, int img_w, int patch) {
  extern __shared__ __align__(16) unsigned char im2col_smem[];
  Tin* rows = reinterpret_cast<Tin*>(im2col_smem);  // (patch, img_w)
  const int grid_h = img_h / patch, grid_w = img_w / patch;
  const int py = static_cast<int>(blockIdx.x), c = static_cast<int>(blockIdx.y), b = static_cast<int>(blockIdx.z);
  const Tin* src = img + ((static_cast<int64_t>(b) * chans + c) * img_h + static_cast<int64_t>(py) * patch) * img_w;
  const int n = patch * img_w;
  constexpr int kPer16 = 16 / static_cast<int>(sizeof(Tin));
  if (reinterpret_cast<uintptr_t>(src) % 16 == 0 && n % kPer16 == 0) {
    for (int i = threadIdx.x; i < n / kPer16; i += blockDim.x)
      reinterpret_cast<uint4*>(rows)[i] = __ldg(reinterpret_cast<const uint4*>(src) + i);
  } else {
    for (int i = threadIdx.x; i < n; i += blockDim.x) rows[i] = src[i];
  }
  __syncthreads();
  const int pp = patch * patch;
  const int64_t row_len = static_cast<int64_t>(chans) * pp;
  Tout* dst = cols + (static_cast<int64_t>(b) * grid_h + py) * grid_w * row_len + static_cast<int64_t>(c) * pp;
  for (int t = threadIdx.x; t < pp; t += blockDim.x) {
    const int ky = t / patch, kx = t - ky * patch;
    const Tin* s = rows + ky * img_w + kx;
    Tout* d = dst + t;
    for (int px = 0; px < grid_w; ++px, s += patch, d += row_len) *d = from_f32<Tout>(to_f32(*s));
  }
}

template <typename Tin, typename Tout>
cudaError_t launch_im2col(const Tin* img, Tout* cols, int batch, int chans, int img_h, int img_w, int patch,
                          cudaStream_t stream) {
  if (patch <= 0 || img_h % patch != 0 || img_w % patch != 0) return cudaErrorInvalidValue;
  const int64_t n = static_cast<int64_t>(batch) * chans * img_h * img_w;
  if (n <= 0) return cudaSuccess;
  if (patch % 8 == 0 && n / 8 < (int64_t{1} << 30) && aligned16(img) && aligned16(cols)) {
    im2col_x8_kernel<Tin, Tout><<<grid_for(n / 8), kThreads, 0, stream>>>(img, cols, batch, chans, img_h, img_w,
                                                                          patch);
    return cudaGetLastError();
  }
  const int64_t smem = static_cast<int64_t>(patch) * img_w * static_cast<int64_t>(sizeof(Tin));
  if (smem <= kIm2colRowsSmem && chans <= 65535 && batch <= 65535) {
    const dim3 grid(static_cast<unsigned>(img_h / patch), static_cast<unsigned>(chans), static_cast<unsigned>(batch));
    im2col_rows_kernel<Tin, Tout><<<grid, kThreads, static_cast<size_t>(smem), stream>>>(img, cols, chans, img_h,
                                                                                          img_w, patch);
    return cudaGetLastError();
  }
  im2col_kernel<Tin, Tout><<<grid_for(n), kThreads, 0, stream>>>(img, cols, batch, chans, img_h, img_w, patch);
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


// ---- pool ----------------------------------------------------------------------------------------------

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

}  // namespace

cudaError_t im2col_patches_f32(const float* img, float* cols, int batch, int chans, int img_h, int img_w,
                               int patch, cudaStream_t stream) {
  return launch_im2col(img, cols, batch, chans, img_h, img_w, patch, stream);
}
cudaError_t im2col_patches_f32_to_f16(const float* img, __half* cols, int batch, int chans, int img_h, int img_w,
                                      int patch, cudaStream_t stream) {
  return launch_im2col(img, cols, batch, chans, img_h, img_w, patch, stream);
}
cudaError_t im2col_patches_f16(const __half* img, __half* cols, int batch, int chans, int img_h, int img_w,
                               int patch, cudaStream_t stream) {
  return launch_im2col(img, cols, batch, chans, img_h, img_w, patch, stream);
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

cudaError_t pool_f32(const float* x, float* out, int batch, int tokens, int embed, bool avg, int prefix,
                     cudaStream_t stream) {
  return launch_pool(x, out, batch, tokens, embed, avg, prefix, stream);
}
cudaError_t pool_f16(const __half* x, __half* out, int batch, int tokens, int embed, bool avg, int prefix,
                     cudaStream_t stream) {
  return launch_pool(x, out, batch, tokens, embed, avg, prefix, stream);
}

}  // namespace edgevit::gpu
