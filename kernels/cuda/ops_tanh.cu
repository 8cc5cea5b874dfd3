// tanh in place (API: kernels/cuda/ops.h; reference: linear_ref's Epilogue::kTanh in kernels/cpu/linear_ref.cpp,
// checked through the op cases' "vit pooler pooler.dense"). HF ViTModel's pooler runs it after cuBLASLt's bias
// epilogue over its (B, E) output.
//
// Variants and what they cost (memory bound, one read and one write of a (B, E) tensor: negligible beside the
// forward; docs/benchmarks.md):
//   tanh_*   one thread per element, grid-stride, fp32 math (tanhf), fp16 rounded once on store
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/ops.h"
#include "kernels/cuda/ops_device.cuh"

namespace edgevit::gpu {
namespace {

template <typename T>
__global__ void tanh_kernel(T* __restrict__ x,  // (n)
                            int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    x[i] = from_f32<T>(tanhf(to_f32(x[i])));
}

template <typename T>
cudaError_t launch_tanh(T* x, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  tanh_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(x, n);
  return cudaGetLastError();
}

}  // namespace

cudaError_t tanh_f32(float* x, int64_t n, cudaStream_t stream) { return launch_tanh(x, n, stream); }
cudaError_t tanh_f16(__half* x, int64_t n, cudaStream_t stream) { return launch_tanh(x, n, stream); }

}  // namespace edgevit::gpu
