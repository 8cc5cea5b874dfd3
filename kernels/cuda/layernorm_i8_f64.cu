// LayerNorm -> int8 in float64 (kernels/cuda/layernorm_i8_f64.h): layernorm_ref's operations in its order,
// each one rounded (the __d*_rn intrinsics: no contraction into fma, as the CPU's -std=c++17 build does not
// contract either); only the two sums run in another order (lanes, then a shuffle tree).
// layernorm_f32_f64 is the same without the int8 step (fp32 out: the INT8 twin row cuda.layernorm_f64), and
// qk_norm_f32_f64 the same over each head's q and k vector in place (qk_norm_ref: the twin row cuda.qk_norm_f64).
//   variant  one warp per row, 4 rows per block: 14-15 us a call for ViT-B/16 at batch 1 on the H200 (float64
//            arithmetic; `bench --profile` of the fp32 mode, docs/int8.md "fp32 mode"): a checking mode only.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/layernorm_i8_f64.h"
#include "kernels/cuda/quantize_i8_device.cuh"

namespace edgevit::gpu {
namespace {

using i8prod::quantize;
using i8prod::row_scale;
using i8prod::warp_max_f;

constexpr int kRowsPerBlock = 4;

__device__ double warp_sum_d(double v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = __dadd_rn(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// layernorm_ref's row statistics by one warp: the mean and 1 / sqrt(var + eps), in float64.
struct RowStats {
  double mean, rstd;
};
__device__ RowStats row_stats(const float* xr, int c, float eps, int lane) {
  double sum = 0;
  for (int i = lane; i < c; i += 32) sum = __dadd_rn(sum, static_cast<double>(xr[i]));
  const double mean = __ddiv_rn(warp_sum_d(sum), static_cast<double>(c));
  double sq = 0;
  for (int i = lane; i < c; i += 32) {
    const double d = __dsub_rn(static_cast<double>(xr[i]), mean);
    sq = __dadd_rn(sq, __dmul_rn(d, d));
  }
  const double var = __ddiv_rn(warp_sum_d(sq), static_cast<double>(c));
  return RowStats{mean, __ddiv_rn(1.0, __dsqrt_rn(__dadd_rn(var, static_cast<double>(eps))))};
}

// layernorm_ref's y for element i of the row, rounded once to fp32.
__device__ float affine(const RowStats& st, float x, float gamma, float beta) {
  const double centred = __dsub_rn(static_cast<double>(x), st.mean);
  const double t = __dmul_rn(__dmul_rn(centred, st.rstd), static_cast<double>(gamma));
  return __double2float_rn(__dadd_rn(t, static_cast<double>(beta)));
}

__global__ void __launch_bounds__(32 * kRowsPerBlock)
    layernorm_i8_f64_kernel(const float* __restrict__ x, const float* __restrict__ gamma,
                            const float* __restrict__ beta, const float* scale, int8_t* __restrict__ q,
                            float* __restrict__ s, int m, int c, float eps) {
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= m) return;
  const float* xr = x + static_cast<int64_t>(row) * c;
  const RowStats st = row_stats(xr, c, eps, lane);
  float amax = 0.f;
  if (scale == nullptr)
    for (int i = lane; i < c; i += 32) amax = fmaxf(amax, fabsf(affine(st, xr[i], gamma[i], beta[i])));
  amax = warp_max_f(amax);
  const float sr = row_scale(amax, scale);
  int8_t* qr = q + static_cast<int64_t>(row) * c;
  for (int i = lane; i < c; i += 32) qr[i] = quantize(affine(st, xr[i], gamma[i], beta[i]), sr);
  if (lane == 0) s[row] = sr;
}

// y may alias x: each warp reads its row whole (the statistics) before it writes any of it, and writes
// element i only from the lane that read it last.
__global__ void __launch_bounds__(32 * kRowsPerBlock)
    layernorm_f64_kernel(const float* x, const float* __restrict__ gamma, const float* __restrict__ beta, float* y,
                         int m, int c, float eps) {
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= m) return;
  const float* xr = x + static_cast<int64_t>(row) * c;
  const RowStats st = row_stats(xr, c, eps, lane);
  float* yr = y + static_cast<int64_t>(row) * c;
  for (int i = lane; i < c; i += 32) yr[i] = affine(st, xr[i], gamma[i], beta[i]);
}

// qk_norm_ref's LayerNorm of one head's q or k vector (D) per warp, in place on qkv (rows, 3, H, D).
__global__ void __launch_bounds__(32 * kRowsPerBlock)
    qk_norm_f64_kernel(float* qkv, const float* __restrict__ q_gamma, const float* __restrict__ q_beta,
                       const float* __restrict__ k_gamma, const float* __restrict__ k_beta, int64_t vectors,
                       int heads, int d, float eps) {
  const int64_t vec = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;  // (row, part, head)
  const int lane = threadIdx.x % 32;
  if (vec >= vectors) return;
  const int64_t r = vec / (2 * heads);
  const int part = static_cast<int>(vec / heads % 2), h = static_cast<int>(vec % heads);
  float* v = qkv + ((r * 3 + part) * heads + h) * d;
  const float* g = part == 0 ? q_gamma : k_gamma;
  const float* b = part == 0 ? q_beta : k_beta;
  const RowStats st = row_stats(v, d, eps, lane);
  for (int i = lane; i < d; i += 32) v[i] = affine(st, v[i], g[i], b[i]);
}

}  // namespace

cudaError_t layernorm_i8_f32_f64(const float* x, const float* gamma, const float* beta, const float* scale,
                                 int8_t* q, float* s, int m, int c, float eps, cudaStream_t stream) {
  if (m < 0 || c < 1 || x == nullptr || gamma == nullptr || beta == nullptr || q == nullptr || s == nullptr)
    return cudaErrorInvalidValue;
  if (m == 0) return cudaSuccess;
  layernorm_i8_f64_kernel<<<(m + kRowsPerBlock - 1) / kRowsPerBlock, 32 * kRowsPerBlock, 0, stream>>>(
      x, gamma, beta, scale, q, s, m, c, eps);
  return cudaGetLastError();
}

cudaError_t layernorm_f32_f64(const float* x, const float* gamma, const float* beta, float* y, int m, int c,
                              float eps, cudaStream_t stream) {
  if (m < 0 || c < 1 || x == nullptr || gamma == nullptr || beta == nullptr || y == nullptr)
    return cudaErrorInvalidValue;
  if (m == 0) return cudaSuccess;
  layernorm_f64_kernel<<<(m + kRowsPerBlock - 1) / kRowsPerBlock, 32 * kRowsPerBlock, 0, stream>>>(x, gamma, beta, y,
                                                                                                  m, c, eps);
  return cudaGetLastError();
}

cudaError_t qk_norm_f32_f64(float* qkv, const float* q_gamma, const float* q_beta, const float* k_gamma,
                            const float* k_beta, int rows, int heads, int head_dim, float eps, cudaStream_t stream) {
  if (rows < 0 || heads < 1 || head_dim < 1 || qkv == nullptr || q_gamma == nullptr || q_beta == nullptr ||
      k_gamma == nullptr || k_beta == nullptr)
    return cudaErrorInvalidValue;
  const int64_t vectors = int64_t{rows} * 2 * heads;
  const int64_t blocks = (vectors + kRowsPerBlock - 1) / kRowsPerBlock;
  if (blocks == 0) return cudaSuccess;
  if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
  qk_norm_f64_kernel<<<static_cast<unsigned>(blocks), 32 * kRowsPerBlock, 0, stream>>>(
      qkv, q_gamma, q_beta, k_gamma, k_beta, vectors, heads, head_dim, eps);
  return cudaGetLastError();
}

}  // namespace edgevit::gpu
