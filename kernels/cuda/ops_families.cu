// CUDA kernels the ViT families beyond the plain one need (API and conventions: kernels/cuda/ops.h; shared
// device helpers: kernels/cuda/ops_device.cuh).
//
// Variants and what they cost (memory bound, a few microseconds at ViT sizes; docs/benchmarks.md):
//   pool_prefix_*     one thread per output element: the mean of the first `count` tokens (fp32 sum), or their
//                     concatenation (DeiT distilled's class and distillation tokens)
//   qk_norm_*         one warp per (token, q|k, head) vector of head_dim: two-pass fp32 statistics with warp
//                     sums, normalized in place (timm qk_norm)
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/ops.h"
#include "kernels/cuda/ops_device.cuh"

namespace edgevit::gpu {
namespace {

template <typename T>
__global__ void pool_prefix_kernel(const T* __restrict__ x,  // (B, T, E)
                                   T* __restrict__ out,      // (B, E), or (B, count * E) when concat
                                   int batch, int tokens, int embed, int count, bool concat) {
  const int64_t width = concat ? static_cast<int64_t>(count) * embed : embed;
  const int64_t n = static_cast<int64_t>(batch) * width;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t b = i / width;
    const int64_t j = i - b * width;
    const T* xb = x + b * tokens * embed;
    if (concat) {
      out[i] = xb[j];  // tokens [0, count) are contiguous
      continue;
    }
    float s = 0.f;
    for (int t = 0; t < count; ++t) s += to_f32(xb[static_cast<int64_t>(t) * embed + j]);
    out[i] = from_f32<T>(s / static_cast<float>(count));
  }
}

template <typename T>
cudaError_t launch_pool_prefix(const T* x, T* out, int batch, int tokens, int embed, int count, bool concat,
                               cudaStream_t stream) {
  if (count < 1 || count > tokens) return cudaErrorInvalidValue;
  const int64_t n = static_cast<int64_t>(batch) * embed * (concat ? count : 1);
  pool_prefix_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(x, out, batch, tokens, embed, count, concat);
  return cudaGetLastError();
}

constexpr int kWarpsPerBlock = kThreads / 32;

template <typename T>
__global__ void qk_norm_kernel(T* __restrict__ qkv,  // (rows, 3, H, D): q and k in place
                               const T* __restrict__ q_gamma, const T* __restrict__ q_beta,  // (D)
                               const T* __restrict__ k_gamma, const T* __restrict__ k_beta,  // (D)
                               int64_t vectors, int heads, int head_dim, float eps) {
  const int lane = threadIdx.x & 31;
  const int64_t vec = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (vec >= vectors) return;
  const int64_t row = vec / (2 * heads);
  const int within = static_cast<int>(vec - row * 2 * heads);  // [0, H): q heads, [H, 2H): k heads
  T* v = qkv + (row * 3 * heads + within) * head_dim;
  const T* g = within < heads ? q_gamma : k_gamma;
  const T* b = within < heads ? q_beta : k_beta;
  float s = 0.f;
  for (int j = lane; j < head_dim; j += 32) s += to_f32(v[j]);
  const float mean = warp_sum(s) / static_cast<float>(head_dim);
  float q = 0.f;
  for (int j = lane; j < head_dim; j += 32) {
    const float dv = to_f32(v[j]) - mean;
    q += dv * dv;
  }
  const float inv = rsqrtf(warp_sum(q) / static_cast<float>(head_dim) + eps);
  for (int j = lane; j < head_dim; j += 32)
    v[j] = from_f32<T>((to_f32(v[j]) - mean) * inv * to_f32(g[j]) + to_f32(b[j]));
}

template <typename T>
cudaError_t launch_qk_norm(T* qkv, const T* qg, const T* qb, const T* kg, const T* kb, int rows, int heads,
                           int head_dim, float eps, cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  const int64_t vectors = int64_t{rows} * 2 * heads;
  const int64_t blocks = (vectors + kWarpsPerBlock - 1) / kWarpsPerBlock;
  if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
  qk_norm_kernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(qkv, qg, qb, kg, kb, vectors, heads,
                                                                            head_dim, eps);
  return cudaGetLastError();
}

}  // namespace

cudaError_t qk_norm_f32(float* qkv, const float* q_gamma, const float* q_beta, const float* k_gamma,
                        const float* k_beta, int rows, int heads, int head_dim, float eps, cudaStream_t stream) {
  return launch_qk_norm(qkv, q_gamma, q_beta, k_gamma, k_beta, rows, heads, head_dim, eps, stream);
}

cudaError_t qk_norm_f16(__half* qkv, const __half* q_gamma, const __half* q_beta, const __half* k_gamma,
                        const __half* k_beta, int rows, int heads, int head_dim, float eps, cudaStream_t stream) {
  return launch_qk_norm(qkv, q_gamma, q_beta, k_gamma, k_beta, rows, heads, head_dim, eps, stream);
}

cudaError_t pool_prefix_f32(const float* x, float* out, int batch, int tokens, int embed, int count, bool concat,
                            cudaStream_t stream) {
  return launch_pool_prefix(x, out, batch, tokens, embed, count, concat, stream);
}

cudaError_t pool_prefix_f16(const __half* x, __half* out, int batch, int tokens, int embed, int count, bool concat,
                            cudaStream_t stream) {
  return launch_pool_prefix(x, out, batch, tokens, embed, count, concat, stream);
}

}  // namespace edgevit::gpu
