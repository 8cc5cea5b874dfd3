// INT8 producers on the GPU (kernels/cuda/quantize_i8.h): LayerNorm -> int8 and fp16 rows -> int8.
//   layernorm_i8_f16       one warp per row: mean, variance (two-pass, fp32), the row's max |y| when per
//                          token, then y = (x - mean) * rstd * gamma + beta quantized; not yet timed
//   quantize_rows_i8_f16   one warp per row: the row's max |x| when per token, then quantize; not yet timed
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/quantize_i8.h"

namespace edgevit::gpu {
namespace {

constexpr int kWarps = 4;  // rows per block

__device__ float warp_sum_f(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ float warp_max_f(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// gemm_i8_quantize_ref: round to nearest even, saturate to [-127, 127] (NaN -> 0).
__device__ int8_t quantize(float v, float s) {
  const float q = __fdiv_rn(v, s);
  if (q != q) return 0;
  const float r = rintf(q);
  return static_cast<int8_t>(fminf(127.f, fmaxf(-127.f, r)));
}

__device__ float row_scale(float amax, const float* scale) {
  if (scale != nullptr) return *scale;
  return amax > 0.f ? __fdiv_rn(amax, 127.f) : 1.f;
}

__global__ void __launch_bounds__(kWarps * 32)
    layernorm_i8_kernel(const __half* x, const __half* __restrict__ gamma, const __half* __restrict__ beta,
                        const float* scale, int8_t* q, float* s, int m, int c, float eps) {
  const int row = blockIdx.x * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= m) return;
  const __half* xr = x + static_cast<int64_t>(row) * c;
  float sum = 0.f;
  for (int i = lane; i < c; i += 32) sum += __half2float(xr[i]);
  const float mean = warp_sum_f(sum) / static_cast<float>(c);
  float sq = 0.f;
  for (int i = lane; i < c; i += 32) {
    const float d = __half2float(xr[i]) - mean;
    sq += d * d;
  }
  const float rstd = rsqrtf(warp_sum_f(sq) / static_cast<float>(c) + eps);
  auto y_at = [&](int i) {
    return (__half2float(xr[i]) - mean) * rstd * __half2float(gamma[i]) + __half2float(beta[i]);
  };
  float amax = 0.f;
  if (scale == nullptr)
    for (int i = lane; i < c; i += 32) amax = fmaxf(amax, fabsf(y_at(i)));
  const float sr = row_scale(warp_max_f(amax), scale);
  int8_t* qr = q + static_cast<int64_t>(row) * c;
  for (int i = lane; i < c; i += 32) qr[i] = quantize(y_at(i), sr);
  if (lane == 0) s[row] = sr;
}

__global__ void __launch_bounds__(kWarps * 32)
    quantize_rows_kernel(const __half* x, const float* scale, int8_t* q, float* s, int m, int k) {
  const int row = blockIdx.x * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= m) return;
  const __half* xr = x + static_cast<int64_t>(row) * k;
  float amax = 0.f;
  if (scale == nullptr)
    for (int i = lane; i < k; i += 32) amax = fmaxf(amax, fabsf(__half2float(xr[i])));
  const float sr = row_scale(warp_max_f(amax), scale);
  int8_t* qr = q + static_cast<int64_t>(row) * k;
  for (int i = lane; i < k; i += 32) qr[i] = quantize(__half2float(xr[i]), sr);
  if (lane == 0) s[row] = sr;
}

}  // namespace

cudaError_t layernorm_i8_f16(const __half* x, const __half* gamma, const __half* beta, const float* scale,
                             int8_t* q, float* s, int m, int c, float eps, cudaStream_t stream) {
  if (m <= 0 || c <= 0 || x == nullptr || gamma == nullptr || beta == nullptr || q == nullptr || s == nullptr)
    return cudaErrorInvalidValue;
  layernorm_i8_kernel<<<(m + kWarps - 1) / kWarps, kWarps * 32, 0, stream>>>(x, gamma, beta, scale, q, s, m, c, eps);
  return cudaGetLastError();
}

cudaError_t quantize_rows_i8_f16(const __half* x, const float* scale, int8_t* q, float* s, int m, int k,
                                 cudaStream_t stream) {
  if (m <= 0 || k <= 0 || x == nullptr || q == nullptr || s == nullptr) return cudaErrorInvalidValue;
  quantize_rows_kernel<<<(m + kWarps - 1) / kWarps, kWarps * 32, 0, stream>>>(x, scale, q, s, m, k);
  return cudaGetLastError();
}

}  // namespace edgevit::gpu
