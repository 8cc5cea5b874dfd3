// QuickGELU, x * sigmoid(1.702 x), in place (API: kernels/cuda/ops.h; reference: quick_gelu_ref in
// kernels/cpu/gelu_ref.cpp). The CLIP linear row runs it after cuBLASLt's bias epilogue.
//
// Variants and what they cost (memory bound: one read and one write of the MLP hidden tensor; docs/benchmarks.md):
//   quick_gelu_*   one thread per element, grid-stride, fp32 math (__expf), fp16 rounded once on store
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/ops.h"
#include "kernels/cuda/ops_device.cuh"

namespace edgevit::gpu {
namespace {

template <typename T>
__global__ void quick_gelu_kernel(T* __restrict__ x,  // (n)
                                  int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float v = to_f32(x[i]);
    x[i] = from_f32<T>(v / (1.f + __expf(-1.702f * v)));  // -inf exponent side: v / inf = -0
  }
}

template <typename T>
cudaError_t launch_quick_gelu(T* x, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  quick_gelu_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(x, n);
  return cudaGetLastError();
}

}  // namespace

cudaError_t quick_gelu_f32(float* x, int64_t n, cudaStream_t stream) { return launch_quick_gelu(x, n, stream); }
cudaError_t quick_gelu_f16(__half* x, int64_t n, cudaStream_t stream) { return launch_quick_gelu(x, n, stream); }

}  // namespace edgevit::gpu
