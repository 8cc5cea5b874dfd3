// The INT8 twin kernels in float64 (kernels/cuda/twin_f64.h): mha_ref's and linear_ref's operations in their
// order, each one rounded (__d*_rn), the result rounded once to fp32.
//   mha_f64     one block of 128 threads per (b, h, query row)
//   linear_f64  16 x 16 outputs per block, K in tiles of 16 through shared memory
// Not timed per kernel: with them the fp32 mode's ViT-B/16 forward takes 3.03 ms at batch 1 and 101.8 ms at 64
// on the H200 (docs/benchmarks.md "INT8 end to end"), about what the fp32 kernels they replaced took.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/twin_f64.h"

namespace edgevit::gpu {
namespace {

constexpr int kMhaThreads = 128;
constexpr int kTile = 16;

__device__ double block_max(double v, double* red) {
  for (int o = 16; o > 0; o >>= 1) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) red[warp] = v;
  __syncthreads();
  double r = red[0];
  for (int w = 1; w < kMhaThreads / 32; ++w) r = fmax(r, red[w]);
  return r;
}

// Dynamic shared memory: the query row (D doubles), then e_j, later w_j = e_j / denom (Skv doubles).
__global__ void __launch_bounds__(kMhaThreads) mha_f64_kernel(AttnParams p, const float* __restrict__ q,
                                                              const float* __restrict__ k,
                                                              const float* __restrict__ v, float* __restrict__ o) {
  extern __shared__ double sm[];
  double* qd = sm;
  double* e = sm + p.head_dim;
  __shared__ double red[kMhaThreads / 32];
  __shared__ double denom;
  const int64_t idx = blockIdx.x;  // ((b * H) + h) * Sq + i
  const int i = static_cast<int>(idx % p.seq_q);
  const int h = static_cast<int>((idx / p.seq_q) % p.heads);
  const int b = static_cast<int>(idx / (static_cast<int64_t>(p.seq_q) * p.heads));
  const int dn = p.head_dim;
  const float* qr = q + b * p.q.batch + i * p.q.row + h * p.q.head;
  for (int d = threadIdx.x; d < dn; d += kMhaThreads) qd[d] = static_cast<double>(qr[d]);
  __syncthreads();
  const uint8_t* mask = p.key_mask != nullptr ? p.key_mask + static_cast<int64_t>(b) * p.seq_kv : nullptr;
  const double scale = static_cast<double>(p.scale);
  double mx = -INFINITY;
  for (int j = threadIdx.x; j < p.seq_kv; j += kMhaThreads) {
    double sj = -INFINITY;  // masked: no weight
    if (mask == nullptr || mask[j] != 0) {
      const float* kr = k + b * p.k.batch + j * p.k.row + h * p.k.head;
      double s = 0;
      for (int d = 0; d < dn; ++d) s = __dadd_rn(s, __dmul_rn(qd[d], static_cast<double>(kr[d])));
      sj = __dmul_rn(s, scale);
    }
    e[j] = sj;
    mx = fmax(mx, sj);
  }
  mx = block_max(mx, red);  // its barrier also publishes e[]
  float* orow = o + b * p.o.batch + i * p.o.row + h * p.o.head;
  if (mx == -INFINITY) {  // every key masked: zeros, as mha_ref
    for (int d = threadIdx.x; d < dn; d += kMhaThreads) orow[d] = 0.f;
    return;
  }
  for (int j = threadIdx.x; j < p.seq_kv; j += kMhaThreads) e[j] = e[j] == -INFINITY ? 0.0 : exp(__dsub_rn(e[j], mx));
  __syncthreads();
  if (threadIdx.x == 0) {  // mha_ref's order: j = 0, 1, ...
    double s = 0;
    for (int j = 0; j < p.seq_kv; ++j)
      if (mask == nullptr || mask[j] != 0) s = __dadd_rn(s, e[j]);
    denom = s;
  }
  __syncthreads();
  for (int j = threadIdx.x; j < p.seq_kv; j += kMhaThreads) e[j] = __ddiv_rn(e[j], denom);
  __syncthreads();
  for (int d = threadIdx.x; d < dn; d += kMhaThreads) {
    double acc = 0;
    const float* vc = v + b * p.v.batch + h * p.v.head + d;
    for (int j = 0; j < p.seq_kv; ++j)
      if (mask == nullptr || mask[j] != 0)
        acc = __dadd_rn(acc, __dmul_rn(e[j], static_cast<double>(vc[static_cast<int64_t>(j) * p.v.row])));
    orow[d] = __double2float_rn(acc);
  }
}

// linear_ref's epilogue of acc (float64) for output element y (its residual on entry for kResidualAdd).
__device__ float epilogue(double acc, float y, Epilogue ep) {
  switch (ep) {
    case Epilogue::kNone: break;
    case Epilogue::kGelu: acc = __dmul_rn(__dmul_rn(0.5, acc), erfc(__ddiv_rn(-acc, sqrt(2.0)))); break;
    case Epilogue::kResidualAdd: acc = __dadd_rn(static_cast<double>(y), acc); break;
    case Epilogue::kGeluTanh: {
      const double c3 = __dmul_rn(__dmul_rn(__dmul_rn(0.044715, acc), acc), acc);
      const double u = __dmul_rn(sqrt(2.0 / 3.14159265358979323846), __dadd_rn(acc, c3));
      acc = __ddiv_rn(acc, __dadd_rn(1.0, exp(__dmul_rn(-2.0, u))));
      break;
    }
    case Epilogue::kQuickGelu: acc = __ddiv_rn(acc, __dadd_rn(1.0, exp(__dmul_rn(-1.702, acc)))); break;
    case Epilogue::kTanh: acc = tanh(acc); break;
  }
  return __double2float_rn(acc);
}

__global__ void __launch_bounds__(kTile * kTile) linear_f64_kernel(const float* __restrict__ x,
                                                                   const float* __restrict__ w,
                                                                   const float* __restrict__ bias, float* y, int m,
                                                                   int n, int k, Epilogue ep) {
  __shared__ float xs[kTile][kTile + 1];
  __shared__ float ws[kTile][kTile + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int row = blockIdx.y * kTile + ty, col = blockIdx.x * kTile + tx;
  double acc = bias != nullptr && col < n ? static_cast<double>(bias[col]) : 0.0;
  for (int t0 = 0; t0 < k; t0 += kTile) {
    const int xr = blockIdx.y * kTile + ty, wr = blockIdx.x * kTile + ty;  // rows loaded by this thread
    xs[ty][tx] = xr < m && t0 + tx < k ? x[static_cast<int64_t>(xr) * k + t0 + tx] : 0.f;
    ws[ty][tx] = wr < n && t0 + tx < k ? w[static_cast<int64_t>(wr) * k + t0 + tx] : 0.f;
    __syncthreads();
    const int tn = k - t0 < kTile ? k - t0 : kTile;
    for (int t = 0; t < tn; ++t)
      acc = __dadd_rn(acc, __dmul_rn(static_cast<double>(xs[ty][t]), static_cast<double>(ws[tx][t])));
    __syncthreads();
  }
  if (row < m && col < n) {
    float& out = y[static_cast<int64_t>(row) * n + col];
    out = epilogue(acc, out, ep);
  }
}

}  // namespace

cudaError_t mha_f64(const AttnParams& p, const float* q, const float* k, const float* v, float* o,
                    cudaStream_t stream) {
  if (p.batch <= 0 || p.heads <= 0 || p.seq_q <= 0) return cudaSuccess;
  if (p.head_dim <= 0 || p.seq_kv < 0 || !(p.scale > 0.f) || q == nullptr || k == nullptr || v == nullptr ||
      o == nullptr)
    return cudaErrorInvalidValue;
  const int64_t blocks = static_cast<int64_t>(p.batch) * p.heads * p.seq_q;
  if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
  if (int64_t{p.head_dim} + p.seq_kv > kMhaF64MaxSmemDoubles) return cudaErrorInvalidValue;
  const size_t smem = sizeof(double) * (static_cast<size_t>(p.head_dim) + static_cast<size_t>(p.seq_kv));
  mha_f64_kernel<<<static_cast<unsigned>(blocks), kMhaThreads, smem, stream>>>(p, q, k, v, o);
  return cudaGetLastError();
}

cudaError_t linear_f64(const float* x, const float* w, const float* bias, float* y, int m, int n, int k,
                       Epilogue ep, cudaStream_t stream) {
  if (m < 0 || n < 0 || k < 0) return cudaErrorInvalidValue;
  if (m == 0 || n == 0) return cudaSuccess;
  if (y == nullptr || (k > 0 && (x == nullptr || w == nullptr))) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>((n + kTile - 1) / kTile), static_cast<unsigned>((m + kTile - 1) / kTile));
  if (grid.y > 65535u) return cudaErrorInvalidValue;
  linear_f64_kernel<<<grid, dim3(kTile, kTile), 0, stream>>>(x, w, bias, y, m, n, k, ep);
  return cudaGetLastError();
}

}  // namespace edgevit::gpu
