// Device pieces the INT8 producers share (kernels/cuda/quantize_i8.cu, kernels/cuda/layernorm_i8_f64.cu): the
// reference's quantization rule (kernels/cpu/quantize_i8_ref.h) and the warp reductions around it. Include
// from those .cu files only.
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
  const float q = __fdiv_rn(v, s);
  if (q != q) return 0;
  return static_cast<int8_t>(fminf(127.f, fmaxf(-127.f, rintf(q))));
}

// A row's scale: the calibrated per-tensor one, else the row's max |y| / 127 (1 for an all-zero row).
__device__ __forceinline__ float row_scale(float amax, const float* scale) {
  if (scale != nullptr) return *scale;
  return amax > 0.f ? __fdiv_rn(amax, 127.f) : 1.f;
}

}  // namespace edgevit::gpu::i8prod
