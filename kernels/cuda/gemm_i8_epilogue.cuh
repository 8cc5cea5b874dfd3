// The W8A8 GEMM's epilogue arithmetic on the device (the fp32 steps of kernels/cpu/gemm_i8_ref.h, in its
// order): the table GELU, the int8 / uint8 requantization, the fp16 packing and store8, which writes
// eight consecutive outputs of one row through any GemmI8Epilogue. Shared by the mma.sync kernel's fused store
// (gemm_i8_kernel.cuh) and the standalone epilogue over cuBLASLt IMMA's int32 output (gemm_i8_epilogue.cu), so
// both round exactly as the reference does. Internal linkage: include it from .cu files only.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/gemm_i8.h"

namespace edgevit {
namespace {

using gpu::GemmI8Args;

// The epilogue's steps, in the order of gemm_i8_ref.h; __fmul_rn / __fadd_rn / __fmaf_rn keep nvcc from
// contracting or reordering steps, so every output equals the reference's bit for bit.
// The GELU's table (gemm_i8_ref.h: one cubic of Phi per quarter step), read through the read-only cache: 720
// bytes that stay in L1, one 16-byte load an output.
__device__ const float4 kGeluTable[kGemmI8GeluTableRows] = {
#include "kernels/cpu/gemm_i8_gelu_table.inc"
};

// g = v Phi(v): t = 4 clamp(v) rounded to k by adding and removing 1.5 * 2^23 (k is then the low bits of the
// sum: no F2I), d = t - k, Phi from row k's cubic in d.
__device__ __forceinline__ float gelu_table(float v) {
  const float t = __fmul_rn(fminf(fmaxf(v, -kGemmI8GeluClamp), kGemmI8GeluClamp), kGemmI8GeluInvStep);
  const float tm = __fadd_rn(t, 12582912.f);
  const float d = __fadd_rn(t, -__fadd_rn(tm, -12582912.f));
  const int row = static_cast<int>(__float_as_uint(tm) - 0x4B400000u) + kGemmI8GeluTableCenter;
  const float4 c = __ldg(&kGeluTable[row]);
  return __fmul_rn(v, __fmaf_rn(d, __fmaf_rn(d, __fmaf_rn(d, c.w, c.z), c.y), c.x));
}

__device__ __forceinline__ uint32_t quantize(float v, float inv_out_scale) {
  const float q = __fmul_rn(v, inv_out_scale);
  if (q != q) return 0;
  return static_cast<uint32_t>(__float2int_rn(fminf(fmaxf(q, -127.f), 127.f))) & 0xffu;
}

// fc1's unsigned output: u = g + kGemmI8GeluShift, then u * inv rounded to nearest even in [0, 255], as the
// float's bits: the clamp sends NaN to 0 (fmaxf returns the non-NaN operand, the reference's NaN -> 0), and
// adding 1.5 * 2^23 rounds to an integer (to nearest even) held in the low mantissa bits, so the code is the
// low byte (no F2I, a quarter-rate conversion). The caller packs four low bytes with byte permutes.
__device__ __forceinline__ uint32_t quantize_u8_bits(float g, float inv_out_scale) {
  const float q = __fmul_rn(__fadd_rn(g, kGemmI8GeluShift), inv_out_scale);
  return __float_as_uint(__fadd_rn(fminf(fmaxf(q, 0.f), 255.f), 12582912.f));
}

// The low bytes of a, b, c, d as one word (a in the lowest byte).
__device__ __forceinline__ uint32_t pack_low_bytes(uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  return __byte_perm(__byte_perm(a, b, 0x0040), __byte_perm(c, d, 0x0040), 0x5410);
}

__device__ __forceinline__ uint32_t pack_half2_rn(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// One 16-byte store. `*p = value` of a uint4 built from four packed words compiled to four 4-byte stores where
// nothing read *p first (nvcc 13, the kF16Bias and kF16BiasGelu epilogues; PTX st.global.u32 x 4); the
// intrinsic keeps it one st.global.v4.
__device__ __forceinline__ void store16(uint4* p, uint4 value) { __stwb(p, value); }

// Eight consecutive outputs (columns col .. col + 7 of one row: y + o) through the epilogue, one 16-byte
// store (8 bytes for int8, two for fp32). kF32's instantiation also serves kF32BiasResidual (a uniform
// branch on a.epilogue: y = y + v in place), so the fp32 residual adds no kernel per tile row.
template <int kEpilogue>
__device__ __forceinline__ void store8(const GemmI8Args& a, int64_t o, float inv_out_scale, float (&v)[8]) {
  constexpr auto e = static_cast<GemmI8Epilogue>(kEpilogue);
  if constexpr (e == GemmI8Epilogue::kF16BiasGelu || e == GemmI8Epilogue::kI8BiasGelu) {
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = gelu_table(v[j]);
  }
  if constexpr (e == GemmI8Epilogue::kF32) {
    float4* p = reinterpret_cast<float4*>(static_cast<float*>(a.y) + o);
    if (a.epilogue == GemmI8Epilogue::kF32BiasResidual) {
      const float4 r0 = p[0], r1 = p[1];
      const float r[8] = {r0.x, r0.y, r0.z, r0.w, r1.x, r1.y, r1.z, r1.w};
#pragma unroll
      for (int j = 0; j < 8; ++j) v[j] = __fadd_rn(r[j], v[j]);
    }
    p[0] = make_float4(v[0], v[1], v[2], v[3]);
    p[1] = make_float4(v[4], v[5], v[6], v[7]);
  } else if constexpr (e == GemmI8Epilogue::kI8Bias || e == GemmI8Epilogue::kI8BiasGelu) {
    uint32_t w[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if constexpr (e == GemmI8Epilogue::kI8BiasGelu) {
        w[h] = pack_low_bytes(quantize_u8_bits(v[4 * h], inv_out_scale), quantize_u8_bits(v[4 * h + 1], inv_out_scale),
                              quantize_u8_bits(v[4 * h + 2], inv_out_scale),
                              quantize_u8_bits(v[4 * h + 3], inv_out_scale));
      } else {
        w[h] = quantize(v[4 * h], inv_out_scale) | quantize(v[4 * h + 1], inv_out_scale) << 8 |
               quantize(v[4 * h + 2], inv_out_scale) << 16 | quantize(v[4 * h + 3], inv_out_scale) << 24;
      }
    }
    *reinterpret_cast<uint2*>(static_cast<int8_t*>(a.y) + o) = make_uint2(w[0], w[1]);
  } else {
    uint4* p = reinterpret_cast<uint4*>(static_cast<__half*>(a.y) + o);
    if constexpr (e == GemmI8Epilogue::kF16BiasResidual) {
      const uint4 r = *p;
      const uint32_t rw[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&rw[j]));
        v[2 * j] = __fadd_rn(f.x, v[2 * j]);
        v[2 * j + 1] = __fadd_rn(f.y, v[2 * j + 1]);
      }
    }
    store16(p, make_uint4(pack_half2_rn(v[0], v[1]), pack_half2_rn(v[2], v[3]), pack_half2_rn(v[4], v[5]),
                          pack_half2_rn(v[6], v[7])));
  }
}

// v (8) = fma(float(acc[j]), sx * sw[j], bias[j]): the dequantization (gemm_i8_dequant_ref), scale[j] = sx * sw[j]
// rounded once by the caller.
__device__ __forceinline__ void dequantize8(const int (&q)[8], const float (&scale)[8], const float (&bias)[8],
                                            float (&v)[8]) {
#pragma unroll
  for (int j = 0; j < 8; ++j) v[j] = __fmaf_rn(__int2float_rn(q[j]), scale[j], bias[j]);
}

}  // namespace
}  // namespace edgevit
