// Device pieces the INT8 producers share (kernels/cuda/quantize_i8.cu, kernels/cuda/layernorm_i8_f64.cu, and the
// fused attention's int8 output, kernels/cuda/mha_softmax_pv.cuh): the reference's quantization rule
// (kernels/cpu/quantize_i8_ref.h), its division-free form (Quantizer), the nearest rule without the tie test for
// producers that are not bit-exact anyway (nearest4), and the warp reductions around them.
// Include from .cu files (and the kernel headers they include) only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace edgevit::gpu::i8prod {

__device__ __forceinline__ float warp_max_f(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// gemm_i8_quantize_ref(v / s): an IEEE division, round to nearest even, saturate to [-127, 127], NaN -> 0.
__device__ __forceinline__ int8_t quantize(float v, float s) {
  if (v != v) return 0;  // before the division: a NaN would take its slow path
  const float q = __fdiv_rn(v, s);
  if (q != q) return 0;
  return static_cast<int8_t>(fminf(127.f, fmaxf(-127.f, rintf(q))));
}

// A row's scale: the calibrated per-tensor one, else the row's max |y| / 127 (1 for an all-zero row).
__device__ __forceinline__ float row_scale(float amax, const float* scale) {
  if (scale != nullptr) return *scale;
  return amax > 0.f ? __fdiv_rn(amax, 127.f) : 1.f;
}

// quantize() without the division on the common path: rne(v * inv), inv = 1 / s (IEEE), gives the same code
// unless v * inv is NaN, within 1e-4 of a half-integer below 128 in magnitude, or inv overflowed (s < 2^-128),
// where quantize() decides. Why equal elsewhere: |fl(v * inv) - v / s| <= 2^-23 |v / s| < 1.6e-5 for
// |v / s| < 128 and fl(v / s) is closer still, so away from a tie both round to the same integer; from 128 on
// both saturate to 127 (tests/kernels/quantize_i8_cuda_test.cu checks values next to every tie).
struct Quantizer {
  float s, inv;
  bool divide;  // inv overflowed: every value takes quantize()
};
__device__ __forceinline__ Quantizer make_quantizer(float s) {
  const float inv = __frcp_rn(s);
  return Quantizer{s, inv, !(inv < INFINITY)};
}
__device__ __forceinline__ int8_t quantize(float v, const Quantizer& z) {
  const float t = __fmul_rn(v, z.inv);
  const float r = rintf(t);
  if (z.divide || t != t || (fabsf(t) < 128.f && !(fabsf(fabsf(__fsub_rn(t, r)) - 0.5f) >= 1e-4f)))
    return quantize(v, z.s);
  return static_cast<int8_t>(fminf(127.f, fmaxf(-127.f, r)));
}

// quantize(v, z)'s common path alone, for callers that test a group of values once: returns rne(v * inv)
// saturated to [-127, 127] and sets *exact when quantize(v, z) must decide instead (inv overflowed, NaN, within
// 1e-4 of a half-integer; also at |t| >= 128 next to one, where both saturate). The caller then recomputes the
// whole group with quantize(v, z) (rare): one branch per group instead of one per value.
__device__ __forceinline__ int8_t quantize_common(float v, const Quantizer& z, bool* exact) {
  const float t = __fmul_rn(v, z.inv);
  const float r = rintf(t);
  *exact = *exact || z.divide || !(fabsf(__fsub_rn(t, r)) <= 0.4999f);
  return static_cast<int8_t>(max(-127, min(127, __float2int_rz(r))));
}

// quantize(v, s) for four values packed little-endian (v0 in the low byte), out of line: the exact path of
// callers that unroll many values calls it next to a rounding tie (rare) instead of inlining an IEEE division
// per value, which keeps those kernels small (the row-per-block rows -> int8 kernel of quantize_i8.cu; the
// warp-per-row kernel was 0.15 us slower with it at batch 8, so it inlines quantize(v, z) instead).
static __device__ __noinline__ uint32_t quantize4_exact(float v0, float v1, float v2, float v3, float s) {
  return static_cast<uint32_t>(static_cast<uint8_t>(quantize(v0, s))) |
         static_cast<uint32_t>(static_cast<uint8_t>(quantize(v1, s))) << 8 |
         static_cast<uint32_t>(static_cast<uint8_t>(quantize(v2, s))) << 16 |
         static_cast<uint32_t>(static_cast<uint8_t>(quantize(v3, s))) << 24;
}

// quantize(v[e], z) for four values, packed as quantize4_exact packs them: the common path for all four, and
// quantize4_exact for the four when one of them needs the exact rule (quantize_common's *exact).
__device__ __forceinline__ uint32_t quantize4(float v0, float v1, float v2, float v3, const Quantizer& z) {
  bool exact = false;
  const uint32_t w = static_cast<uint32_t>(static_cast<uint8_t>(quantize_common(v0, z, &exact))) |
                     static_cast<uint32_t>(static_cast<uint8_t>(quantize_common(v1, z, &exact))) << 8 |
                     static_cast<uint32_t>(static_cast<uint8_t>(quantize_common(v2, z, &exact))) << 16 |
                     static_cast<uint32_t>(static_cast<uint8_t>(quantize_common(v3, z, &exact))) << 24;
  return exact ? quantize4_exact(v0, v1, v2, v3, z.s) : w;
}

// The nearest rule without the tie test, for producers whose values already differ from the reference's in their
// last bits (LayerNorm -> int8: fp32 statistics in another order; the attention's int8 output: another summation
// order), where the exact rule next to a tie buys no equality: t = v * (1 / s) computed by the caller, saturated
// to [-127, 127] and rounded to nearest even by adding 1.5 * 2^23 (the integer lands in the low mantissa bits), so
// the code is the low byte of that float (two's complement for the negative ones): no F2I (a quarter-rate
// conversion), no division, no branch. kNaN: t may be NaN (-> 0, the reference's rule); else the caller knows t is
// not NaN (+-Inf saturates like the reference).
template <bool kNaN>
__device__ __forceinline__ uint32_t nearest_code_bits(float t) {
  if constexpr (kNaN) t = t == t ? t : 0.f;
  return __float_as_uint(__fadd_rn(fminf(fmaxf(t, -127.f), 127.f), 12582912.f));
}
// nearest_code_bits of four values, packed little-endian (t0 in the low byte).
template <bool kNaN>
__device__ __forceinline__ uint32_t nearest4(float t0, float t1, float t2, float t3) {
  return __byte_perm(__byte_perm(nearest_code_bits<kNaN>(t0), nearest_code_bits<kNaN>(t1), 0x0040),
                     __byte_perm(nearest_code_bits<kNaN>(t2), nearest_code_bits<kNaN>(t3), 0x0040), 0x5410);
}

}  // namespace edgevit::gpu::i8prod
