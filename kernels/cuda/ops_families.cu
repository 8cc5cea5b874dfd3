// CUDA kernels the ViT families beyond the plain one need (API and conventions: kernels/cuda/ops.h; shared
// device helpers: kernels/cuda/ops_device.cuh).
//
// Variants and what they cost (memory bound, a few microseconds at ViT sizes; docs/benchmarks.md):
//   pool_prefix_*     one thread per output element: the mean of the first `count` tokens (fp32 sum), or their
//                     concatenation (DeiT distilled's class and distillation tokens)
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

}  // namespace

cudaError_t pool_prefix_f32(const float* x, float* out, int batch, int tokens, int embed, int count, bool concat,
                            cudaStream_t stream) {
  return launch_pool_prefix(x, out, batch, tokens, embed, count, concat, stream);
}

cudaError_t pool_prefix_f16(const __half* x, __half* out, int batch, int tokens, int embed, int count, bool concat,
                            cudaStream_t stream) {
  return launch_pool_prefix(x, out, batch, tokens, embed, count, concat, stream);
}

}  // namespace edgevit::gpu
