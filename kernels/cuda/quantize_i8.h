// INT8 producers on the GPU (docs/int8.md): the LayerNorm that writes its output as int8 for the next W8A8
// GEMM (qkv, fc1), and the row quantizer for an activation (proj's input, the attention's output); each for
// fp16 input (the fp16 residual stream) and fp32 input (an fp32 residual stream: gamma and beta fp32 too).
// Same arithmetic as the CPU path: fp32 statistics and affine as layernorm_ref, then
// kernels/cpu/quantize_i8_ref.h's rule: s[r] = scale (per tensor, *scale > 0) or the row's max |y| / 127
// (per token: scale == nullptr; 1 for an all-zero row), q = rne(y / s[r]) saturated to [-127, 127].
// Reference: layernorm_ref + quantize_rows_i8_ref (tests/kernels/quantize_i8_cuda_test.cu).
// One warp per row held in registers (C <= 2048, C a multiple of 8, 16-byte aligned x / gamma / beta and
// 8-byte aligned q), else a scalar fallback for any shape: kernels/cuda/quantize_i8.cu.
// Pointers are device pointers; the caller keeps ownership. Only enqueue work on `stream`.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace edgevit::gpu {

// x (M, C) fp16, gamma/beta (C) fp16 -> q (M, C) int8, s (M) fp32. scale: device pointer to the calibrated
// per-tensor scale, or nullptr for per-token scales.
cudaError_t layernorm_i8_f16(const __half* x, const __half* gamma, const __half* beta, const float* scale,
                             int8_t* q, float* s, int m, int c, float eps, cudaStream_t stream);

// x (M, C), gamma/beta (C) fp32 -> q (M, C) int8, s (M) fp32; same arithmetic and scale as layernorm_i8_f16.
cudaError_t layernorm_i8_f32(const float* x, const float* gamma, const float* beta, const float* scale, int8_t* q,
                             float* s, int m, int c, float eps, cudaStream_t stream);

// x (M, K) fp16 -> q (M, K) int8, s (M) fp32; scale as above.
cudaError_t quantize_rows_i8_f16(const __half* x, const float* scale, int8_t* q, float* s, int m, int k,
                                 cudaStream_t stream);

// x (M, K) fp32 -> q (M, K) int8, s (M) fp32; scale as above.
cudaError_t quantize_rows_i8_f32(const float* x, const float* scale, int8_t* q, float* s, int m, int k,
                                 cudaStream_t stream);

}  // namespace edgevit::gpu
