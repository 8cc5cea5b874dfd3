// Private to kernels/cuda/ops_*.cu (internal linkage; include it from those files only): the launch
// geometry and the device helpers the element-wise, token and row kernels share: fp32 conversions, 16-byte
// chunks of fp16/fp32 as floats, alignment checks and warp reductions.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace edgevit::gpu {
namespace {

constexpr int kThreads = 256;

inline unsigned grid_for(int64_t n, int threads = kThreads) {
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 0x7fffffff ? 0x7fffffff : blocks));
}

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
template <typename T>
__device__ __forceinline__ T from_f32(float v);
template <>
__device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }

// 16 bytes of T as floats.
template <typename T>
struct Chunk {
  static constexpr int kElems = 16 / sizeof(T);
  float v[kElems];
};
// The 16 raw bytes, widened to floats.
__device__ __forceinline__ void unpack_chunk(const uint4& r, Chunk<float>& c) {
  c.v[0] = __uint_as_float(r.x);
  c.v[1] = __uint_as_float(r.y);
  c.v[2] = __uint_as_float(r.z);
  c.v[3] = __uint_as_float(r.w);
}
__device__ __forceinline__ void unpack_chunk(const uint4& r, Chunk<__half>& c) {
  const __half2* h = reinterpret_cast<const __half2*>(&r);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __half22float2(h[i]);
    c.v[2 * i] = f.x;
    c.v[2 * i + 1] = f.y;
  }
}
__device__ __forceinline__ uint4 load16(const void* p) { return *reinterpret_cast<const uint4*>(p); }
__device__ __forceinline__ void store_chunk(float* p, const Chunk<float>& c) {
  *reinterpret_cast<float4*>(p) = make_float4(c.v[0], c.v[1], c.v[2], c.v[3]);
}
__device__ __forceinline__ void store_chunk(__half* p, const Chunk<__half>& c) {
  uint4 r;
  __half2* h = reinterpret_cast<__half2*>(&r);
#pragma unroll
  for (int i = 0; i < 4; ++i) h[i] = __floats2half2_rn(c.v[2 * i], c.v[2 * i + 1]);
  *reinterpret_cast<uint4*>(p) = r;
}

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Eight consecutive elements as floats, and back: one 16-byte access for fp16, two for fp32 (p 16-byte aligned).
__device__ __forceinline__ void load8(const __half* p, float (&v)[8]) {
  Chunk<__half> c;
  unpack_chunk(load16(p), c);
#pragma unroll
  for (int i = 0; i < 8; ++i) v[i] = c.v[i];
}
__device__ __forceinline__ void load8(const float* p, float (&v)[8]) {
  Chunk<float> a, b;
  unpack_chunk(load16(p), a);
  unpack_chunk(load16(p + 4), b);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    v[i] = a.v[i];
    v[4 + i] = b.v[i];
  }
}
__device__ __forceinline__ void store8(__half* p, const float (&v)[8]) {
  Chunk<__half> c;
#pragma unroll
  for (int i = 0; i < 8; ++i) c.v[i] = v[i];
  store_chunk(p, c);
}
__device__ __forceinline__ void store8(float* p, const float (&v)[8]) {
  Chunk<float> a, b;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    a.v[i] = v[i];
    b.v[i] = v[4 + i];
  }
  store_chunk(p, a);
  store_chunk(p + 4, b);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int off = 16; off > 0; off /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

}  // namespace
}  // namespace edgevit::gpu
