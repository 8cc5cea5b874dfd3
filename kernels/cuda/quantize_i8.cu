// INT8 producers on the GPU (kernels/cuda/quantize_i8.h): LayerNorm -> int8 and rows -> int8, fp16 or fp32 in.
//   row kernels (kVec)  the row held in registers (kVec chunks of 8 elements per thread), 16-byte loads, one read
//                       of the row from global memory, gamma / beta read with x (fp16, kVec <= 3), a multiply
//                       per code, 8-byte stores of 8 codes.
//                       below 8 rows per SM: a row per block of ceil(C / 256) warps (<= 8), reductions by
//                       shuffles then shared memory, the exact rule out of line (quantize4); from there a warp
//                       per row (C <= 2048), 2 rows per block (4 from 2048 rows), the exact rule inlined.
//                       ViT-B/16 LayerNorm -> int8 on the H200, median in the graph replay (CUPTI trace):
//                       batch 1, a row per block, 2.30 us (the fp16 LayerNorm's 2.05); batch 8, a warp per row,
//                       3.01 us (2.88); batch 64 10.94 us (11.3) (docs/benchmarks.md "INT8 end to end").
//   generic             one warp per row, scalar loops over global memory: any C, any alignment (C > 2048,
//                       C not a multiple of 8, unaligned pointers).
// Rows -> int8 give the reference's q = rne(x / s) (IEEE division) bit for bit: the generic kernel divides, the
// row kernels multiply by 1 / s and divide only next to a rounding tie (Quantizer in quantize_i8_device.cuh, proof
// beside it). LayerNorm -> int8 in the row kernels quantizes its finite rows as rne(y * (1 / s)) without that tie
// rule (quantize_store8_nearest): its y already differs from the reference's in the last bits.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cfloat>
#include <cstdint>

#include "kernels/cuda/quantize_i8.h"
#include "kernels/cuda/quantize_i8_device.cuh"

namespace edgevit::gpu {
namespace {

using i8prod::make_quantizer;
using i8prod::quantize;
using i8prod::quantize4;
using i8prod::Quantizer;
using i8prod::row_scale;
using i8prod::warp_max_f;

constexpr int kChunk = 8;  // elements per 16-byte fp16 load (two loads for fp32)

__device__ float warp_sum_f(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ float to_f(__half v) { return __half2float(v); }
__device__ float to_f(float v) { return v; }

// Eight elements as loaded (16 bytes of fp16, 32 of fp32), converted to float where used: gamma and beta read
// early stay packed (fewer registers than floats).
template <class In>
struct Raw8;
template <>
struct Raw8<__half> {
  uint4 u;
};
template <>
struct Raw8<float> {
  float4 a, b;
};
__device__ Raw8<__half> load_raw8(const __half* p) { return Raw8<__half>{__ldg(reinterpret_cast<const uint4*>(p))}; }
__device__ Raw8<float> load_raw8(const float* p) {
  return Raw8<float>{__ldg(reinterpret_cast<const float4*>(p)), __ldg(reinterpret_cast<const float4*>(p) + 1)};
}
__device__ void to_floats(const Raw8<__half>& r, float (&v)[kChunk]) {
  const __half2* h = reinterpret_cast<const __half2*>(&r.u);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float2 f = __half22float2(h[j]);
    v[2 * j] = f.x;
    v[2 * j + 1] = f.y;
  }
}
__device__ void to_floats(const Raw8<float>& r, float (&v)[kChunk]) {
  v[0] = r.a.x, v[1] = r.a.y, v[2] = r.a.z, v[3] = r.a.w, v[4] = r.b.x, v[5] = r.b.y, v[6] = r.b.z, v[7] = r.b.w;
}
// Eight consecutive elements from a 16-byte aligned address, as floats.
template <class In>
__device__ void load8(const In* p, float (&v)[kChunk]) {
  to_floats(load_raw8(p), v);
}

// Quantizes eight values and writes them with one 8-byte store (q 8-byte aligned). kOutOfLine: the common path,
// the exact rule out of line for a group of four next to a rounding tie (quantize4); else quantize(v, z) inlined
// per value. Measured in the graph (H200, ViT-B, docs/benchmarks.md): the row-per-block kernel at batch 1 with
// the first; the warp-per-row kernel at batch 8 took 4.06 us with the first against 3.90 with the second.
template <bool kOutOfLine>
__device__ void quantize_store8(const float (&v)[kChunk], const Quantizer& z, int8_t* q) {
  uint32_t w[2] = {0, 0};
  if constexpr (kOutOfLine) {
    w[0] = quantize4(v[0], v[1], v[2], v[3], z);
    w[1] = quantize4(v[4], v[5], v[6], v[7], z);
  } else {
#pragma unroll
    for (int j = 0; j < kChunk; ++j)
      w[j / 4] |= static_cast<uint32_t>(static_cast<uint8_t>(quantize(v[j], z))) << (8 * (j % 4));
  }
  *reinterpret_cast<uint2*>(q) = make_uint2(w[0], w[1]);
}

// rne(v[j] * inv) saturated to [-127, 127] for eight values that are not NaN, one 8-byte store: the LayerNorm's
// codes by the nearest rule without the tie test (i8prod::nearest4: y already differs from the reference's in the
// last bits, fp32 statistics in another order against its float64).
__device__ void quantize_store8_nearest(const float (&v)[kChunk], float inv, int8_t* q) {
  *reinterpret_cast<uint2*>(q) =
      make_uint2(i8prod::nearest4<false>(__fmul_rn(v[0], inv), __fmul_rn(v[1], inv), __fmul_rn(v[2], inv),
                                         __fmul_rn(v[3], inv)),
                 i8prod::nearest4<false>(__fmul_rn(v[4], inv), __fmul_rn(v[5], inv), __fmul_rn(v[6], inv),
                                         __fmul_rn(v[7], inv)));
}

// max |v[e]| over a chunk as a balanced tree (fmaxf is exact, so the order is free; depth 3, not a chain of 8).
__device__ float chunk_amax(const float (&v)[kChunk]) {
  const float a = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
  const float b = fmaxf(fmaxf(fabsf(v[4]), fabsf(v[5])), fmaxf(fabsf(v[6]), fabsf(v[7])));
  return fmaxf(a, b);
}

// Sum (kMax false) or max of v over the row's threads, the same value in each: the warp's butterfly, then (kBlock:
// a row per block) the warps' results through red (one float per warp), combined in warp order.
template <bool kBlock, bool kMax>
__device__ float row_reduce(float v, float* red) {
  v = kMax ? warp_max_f(v) : warp_sum_f(v);
  if constexpr (kBlock) {
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
    __syncthreads();
    v = red[0];
    for (int w = 1; w < static_cast<int>(blockDim.x / 32); ++w) v = kMax ? fmaxf(v, red[w]) : v + red[w];
  }
  return v;
}

// This thread's chunks of a row's codes (chunk j at element (j nt + ti) 8 of qr): LayerNorm's finite rows by the
// nearest rule without the tie test (quantize_store8_nearest; `finite_row` and z are uniform over the row's
// threads), other rows by the reference's exact rule.
template <int kVec, bool kNorm, bool kBlock>
__device__ __forceinline__ void store_row_codes(const float (&v)[kVec][kChunk], const Quantizer& z, bool finite_row,
                                                int8_t* qr, int nt, int ti, int c) {
  if (kNorm && finite_row && !z.divide) {
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      const int i = (j * nt + ti) * kChunk;
      if (i < c) quantize_store8_nearest(v[j], z.inv, qr + i);
    }
    return;
  }
#pragma unroll
  for (int j = 0; j < kVec; ++j) {
    const int i = (j * nt + ti) * kChunk;
    if (i < c) quantize_store8<kBlock>(v[j], z, qr + i);
  }
}

// The row held in registers: thread t of the row's nt threads owns chunks t, t + nt, ... (coalesced 16-byte
// loads). kBlock false: a warp per row (nt = 32, blockDim.x / 32 rows a block); true: a row per block of up to
// kMaxRowWarps warps (nt = blockDim.x), for few rows, where one warp's chain of dependent instructions over the
// whole row is the kernel's time (ViT-B batch 1: 197 rows on 132 SMs, one warp a scheduler).
// kNorm: LayerNorm (gamma, beta) then quantize; else quantize the row as it is (gamma, beta unused). Template
// parameters, so that each kernel holds only its own path's code.
constexpr int kMaxRowWarps = 8;
template <class In, int kVec, bool kNorm, bool kBlock>
__global__ void __launch_bounds__(kMaxRowWarps * 32)
    rows_i8_vec_kernel(const In* __restrict__ x, const In* __restrict__ gamma, const In* __restrict__ beta,
                       const float* scale, int8_t* __restrict__ q, float* __restrict__ s, int m, int c, float eps) {
  __shared__ float red[3][kBlock ? kMaxRowWarps : 1];  // the cross-warp partials of the three reductions
  const int row = kBlock ? blockIdx.x : blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const int ti = kBlock ? threadIdx.x : threadIdx.x % 32, nt = kBlock ? blockDim.x : 32;
  if (row >= m) return;
  const In* xr = x + static_cast<int64_t>(row) * c;
  float v[kVec][kChunk];
#pragma unroll
  for (int j = 0; j < kVec; ++j) {
    const int i = (j * nt + ti) * kChunk;
    if (i < c) load8(xr + i, v[j]);
  }
  // fp16 rows of up to 768 channels (kVec <= 3): gamma and beta are read with x, before the reductions, so
  // their latency overlaps; other rows read them after (registers).
  constexpr bool kEarly = sizeof(In) == 2 && kVec <= 3;
  Raw8<In> g_early[kEarly ? kVec : 1], b_early[kEarly ? kVec : 1];
  if (kEarly && kNorm)
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      const int i = (j * nt + ti) * kChunk;
      if (i < c) {
        g_early[kEarly ? j : 0] = load_raw8(gamma + i);
        b_early[kEarly ? j : 0] = load_raw8(beta + i);
      }
    }
  float amax = 0.f;
  bool finite_row = false;  // kNorm: the statistics are finite (then every value is, gamma and beta being finite)
  if constexpr (kNorm) {
    float sum = 0.f;
#pragma unroll
    for (int j = 0; j < kVec; ++j)
      if ((j * nt + ti) * kChunk < c)
#pragma unroll
        for (int e = 0; e < kChunk; ++e) sum += v[j][e];
    const float mean = row_reduce<kBlock, false>(sum, red[0]) / static_cast<float>(c);
    float sq = 0.f;
#pragma unroll
    for (int j = 0; j < kVec; ++j)
      if ((j * nt + ti) * kChunk < c)
#pragma unroll
        for (int e = 0; e < kChunk; ++e) {
          const float d = v[j][e] - mean;
          sq += d * d;
        }
    const float rstd = rsqrtf(row_reduce<kBlock, false>(sq, red[1]) / static_cast<float>(c) + eps);
    finite_row = fabsf(mean) <= FLT_MAX && rstd == rstd;
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      const int i = (j * nt + ti) * kChunk;
      if (i >= c) continue;
      float g[kChunk], b[kChunk];
      if (kEarly) {
        to_floats(g_early[kEarly ? j : 0], g);
        to_floats(b_early[kEarly ? j : 0], b);
      } else {
        load8(gamma + i, g);
        load8(beta + i, b);
      }
#pragma unroll
      for (int e = 0; e < kChunk; ++e) v[j][e] = (v[j][e] - mean) * rstd * g[e] + b[e];
      amax = fmaxf(amax, chunk_amax(v[j]));
    }
  } else if (scale == nullptr) {
#pragma unroll
    for (int j = 0; j < kVec; ++j)
      if ((j * nt + ti) * kChunk < c) amax = fmaxf(amax, chunk_amax(v[j]));
  }
  const float sr = row_scale(scale == nullptr ? row_reduce<kBlock, true>(amax, red[2]) : 0.f, scale);
  const Quantizer z = make_quantizer(sr);
  store_row_codes<kVec, kNorm, kBlock>(v, z, finite_row, q + static_cast<int64_t>(row) * c, nt, ti, c);
  if (ti == 0) s[row] = sr;
}

// Any shape and alignment: one warp per row, scalar reads of global memory (the row stays in L1).
template <class In>
__global__ void __launch_bounds__(128)
    rows_i8_generic_kernel(const In* x, const In* __restrict__ gamma, const In* __restrict__ beta,
                           const float* scale, int8_t* q, float* s, int m, int c, float eps) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= m) return;
  const In* xr = x + static_cast<int64_t>(row) * c;
  float mean = 0.f, rstd = 1.f;
  if (gamma != nullptr) {
    float sum = 0.f;
    for (int i = lane; i < c; i += 32) sum += to_f(xr[i]);
    mean = warp_sum_f(sum) / static_cast<float>(c);
    float sq = 0.f;
    for (int i = lane; i < c; i += 32) {
      const float d = to_f(xr[i]) - mean;
      sq += d * d;
    }
    rstd = rsqrtf(warp_sum_f(sq) / static_cast<float>(c) + eps);
  }
  auto y_at = [&](int i) {
    return gamma == nullptr ? to_f(xr[i]) : (to_f(xr[i]) - mean) * rstd * to_f(gamma[i]) + to_f(beta[i]);
  };
  float amax = 0.f;
  if (scale == nullptr)
    for (int i = lane; i < c; i += 32) amax = fmaxf(amax, fabsf(y_at(i)));
  const float sr = row_scale(warp_max_f(amax), scale);
  int8_t* qr = q + static_cast<int64_t>(row) * c;
  for (int i = lane; i < c; i += 32) qr[i] = quantize(y_at(i), sr);
  if (lane == 0) s[row] = sr;
}

bool aligned(const void* p, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

template <class In>
using RowsKernel = void (*)(const In*, const In*, const In*, const float*, int8_t*, float*, int, int, float);

// A launch: the kernel, its block and grid.
template <class In>
struct RowsLaunch {
  RowsKernel<In> kernel;
  int threads, blocks;
};

template <class In, bool kNorm>
RowsKernel<In> pick_warp_row(int chunks) {
  if (chunks <= 1) return rows_i8_vec_kernel<In, 1, kNorm, false>;
  if (chunks <= 2) return rows_i8_vec_kernel<In, 2, kNorm, false>;
  if (chunks <= 3) return rows_i8_vec_kernel<In, 3, kNorm, false>;
  if (chunks <= 4) return rows_i8_vec_kernel<In, 4, kNorm, false>;
  if (chunks <= 6) return rows_i8_vec_kernel<In, 6, kNorm, false>;
  return rows_i8_vec_kernel<In, 8, kNorm, false>;
}

template <class In, bool kNorm>
RowsKernel<In> pick_block_row(int chunks) {
  if (chunks <= 1) return rows_i8_vec_kernel<In, 1, kNorm, true>;
  if (chunks <= 2) return rows_i8_vec_kernel<In, 2, kNorm, true>;
  return rows_i8_vec_kernel<In, 4, kNorm, true>;
}

// A row per block of ceil(C / 8 / 32) warps (at most kMaxRowWarps) below kBlockRowsPerSm rows per SM: a warp per
// row would leave the schedulers (4 an SM) with fewer than two warps each, and its time is one warp's dependent
// chain over the whole row (H200, 132 SMs: ViT-B batch 1, 197 rows, takes a block per row, batch 8, 1576 rows, a
// warp per row; an 8-SM Orin NX a warp per row from 64 rows). With LayerNorm's nearest rule too (H200, ViT-B INT8
// end to end): a warp per row at batch 1 / 4 takes 0.429-0.431 / 0.717-0.719 ms, a block per row 0.421-0.423 /
// 0.714-0.716.
constexpr int kBlockRowsPerSm = 8;

int multiprocessors() {
  int device = 0, sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess)
    return 0;  // unknown: a warp per row (the launch then reports any sticky error)
  return sms;
}

// The register-resident kernel for C (a row per warp, or per block for few rows), or the generic one.
template <class In>
RowsLaunch<In> pick(const In* x, const In* gamma, const In* beta, const int8_t* q, int m, int c) {
  const bool vec = c % kChunk == 0 && aligned(x, 16) && aligned(q, 8) &&
                   (gamma == nullptr || (aligned(gamma, 16) && aligned(beta, 16)));
  const int chunks = c / kChunk;
  const int rows_per_block = m >= 2048 ? 4 : 2;  // warp per row: enough blocks for a ViT's 197 rows on 132 SMs
  const int warp_blocks = (m + rows_per_block - 1) / rows_per_block;
  if (!vec || chunks > 8 * 32) return {rows_i8_generic_kernel<In>, rows_per_block * 32, warp_blocks};
  const int warps = std::min(kMaxRowWarps, (chunks + 31) / 32);
  const int per_thread = (chunks + warps * 32 - 1) / (warps * 32);
  if (per_thread <= 4 && m < kBlockRowsPerSm * multiprocessors())
    return {gamma == nullptr ? pick_block_row<In, false>(per_thread) : pick_block_row<In, true>(per_thread),
            warps * 32, m};
  const int per_lane = (chunks + 31) / 32;
  return {gamma == nullptr ? pick_warp_row<In, false>(per_lane) : pick_warp_row<In, true>(per_lane),
          rows_per_block * 32, warp_blocks};
}

template <class In>
cudaError_t launch_rows(const In* x, const In* gamma, const In* beta, const float* scale, int8_t* q, float* s, int m,
                        int c, float eps, cudaStream_t stream) {
  const RowsLaunch<In> l = pick(x, gamma, beta, q, m, c);
  l.kernel<<<l.blocks, l.threads, 0, stream>>>(x, gamma, beta, scale, q, s, m, c, eps);
  return cudaGetLastError();
}

template <class In>
cudaError_t layernorm_i8(const In* x, const In* gamma, const In* beta, const float* scale, int8_t* q, float* s, int m,
                         int c, float eps, cudaStream_t stream) {
  if (m <= 0 || c <= 0 || x == nullptr || gamma == nullptr || beta == nullptr || q == nullptr || s == nullptr)
    return cudaErrorInvalidValue;
  return launch_rows(x, gamma, beta, scale, q, s, m, c, eps, stream);
}

template <class In>
cudaError_t quantize_rows_i8(const In* x, const float* scale, int8_t* q, float* s, int m, int k, cudaStream_t stream) {
  if (m <= 0 || k <= 0 || x == nullptr || q == nullptr || s == nullptr) return cudaErrorInvalidValue;
  return launch_rows<In>(x, nullptr, nullptr, scale, q, s, m, k, 0.f, stream);
}

}  // namespace

cudaError_t layernorm_i8_f16(const __half* x, const __half* gamma, const __half* beta, const float* scale,
                             int8_t* q, float* s, int m, int c, float eps, cudaStream_t stream) {
  return layernorm_i8(x, gamma, beta, scale, q, s, m, c, eps, stream);
}

cudaError_t layernorm_i8_f32(const float* x, const float* gamma, const float* beta, const float* scale, int8_t* q,
                             float* s, int m, int c, float eps, cudaStream_t stream) {
  return layernorm_i8(x, gamma, beta, scale, q, s, m, c, eps, stream);
}

cudaError_t quantize_rows_i8_f16(const __half* x, const float* scale, int8_t* q, float* s, int m, int k,
                                 cudaStream_t stream) {
  return quantize_rows_i8(x, scale, q, s, m, k, stream);
}

cudaError_t quantize_rows_i8_f32(const float* x, const float* scale, int8_t* q, float* s, int m, int k,
                                 cudaStream_t stream) {
  return quantize_rows_i8(x, scale, q, s, m, k, stream);
}

}  // namespace edgevit::gpu
