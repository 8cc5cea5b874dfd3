// CUDA element-wise kernels of the ViT forward: casts and copies (with non-finite counting), GELU, and the
// XOR fold (API and conventions: kernels/cuda/ops.h; shared device helpers: kernels/cuda/ops_device.cuh).
//
// Variants and what they cost (ViT-B/16, batch 64, fp16, H100; see docs/benchmarks.md for the whole forward):
//   cast_*            grid-stride, 16-byte loads where the pointers allow; the input cast reads the mapped host
//                     staging buffer over PCIe (zero-copy on Jetson), so its speed is the link's
//   gelu_f32          grid-stride, erff
//   gelu_tanh_*       grid-stride, expf of 2|u| formed in float-float (fma error-free products), fp32 math for
//                     fp16 storage; within 3.4e-7 relative of gelu_tanh_ref over [-20, 20] element by element (H200,
//                     2026-11-26; 2|u| in plain fp32 gave 2.4e-6 there, 1.3e-5 on the host). ViT-B/16 batch 64 MLP
//                     activation (38.7M elements) on H200: f32 216 us (erf gelu_f32 166 us), f16 170 us
//   xor_fold_u32      grid-stride 16-byte loads, warp XOR, one atomicXor per warp; init-time only (it streams
//                     a buffer through L2 before each timed GEMM run when the backend picks cuBLASLt algorithms)
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cuda/ops.h"
#include "kernels/cuda/ops_device.cuh"

namespace edgevit::gpu {
namespace {

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

// ---- gelu -------------------------------------------------------------------------------------------------

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

}  // namespace edgevit::gpu
