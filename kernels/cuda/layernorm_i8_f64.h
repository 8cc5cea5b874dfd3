// LayerNorm -> int8 over an fp32 residual with layernorm_ref's arithmetic (kernels/cpu/layernorm_ref.cpp): mean
// and variance in float64, y = float((x - mean) * rstd * gamma + beta) evaluated in float64 and rounded once,
// then kernels/cpu/quantize_i8_ref.h's rule (s = scale, or the row's max |y| / 127; q = rne(y / s) saturated to
// [-127, 127]). The CPU INT8 path's LayerNorm -> int8 computes exactly this (runtime/cpu/ops_cpu_int8.cpp), so
// the two agree code for code: the float64 sums differ only in order (~1e-16 relative), which moves y's
// rounding to fp32 only for a value within that of a rounding boundary. It serves runtime.int8_float: fp32
// (docs/int8.md "fp32 mode", the CPU INT8 path's twin on the GPU); kernels/cuda/quantize_i8.h's fp32
// statistics are the fast form, whose ulp-level differences flip int8 roundings downstream.
// Reference: layernorm_ref + quantize_rows_i8_ref; test: tests/kernels/layernorm_i8_f64_cuda_test.cu.
// One warp per row, plain loops over global memory (L1-resident rows), four rows per block; float64 on every
// SM80-class GPU (a LayerNorm is ~10 flops an element: 0.06 ms at ViT-B/16 batch 64 on an H200 is the guess to
// measure, docs/benchmarks.md "INT8 end to end" has the whole forward).
// Pointers are device pointers; the caller keeps ownership. Only enqueue work on `stream`.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace edgevit::gpu {

// x (M, C), gamma/beta (C) fp32 -> q (M, C) int8, s (M) fp32. scale: device pointer to the calibrated
// per-tensor scale, or nullptr for per-token scales.
cudaError_t layernorm_i8_f32_f64(const float* x, const float* gamma, const float* beta, const float* scale,
                                 int8_t* q, float* s, int m, int c, float eps, cudaStream_t stream);

// The same LayerNorm without the int8 step: y (M, C) fp32 = layernorm_ref's float64 value rounded once (y may
// alias x). The INT8 twin row cuda.layernorm_f64 (norm_pre, the final norm, the heads' norms of the fp32 mode).
cudaError_t layernorm_f32_f64(const float* x, const float* gamma, const float* beta, float* y, int m, int c,
                              float eps, cudaStream_t stream);

// qk_norm_ref's meaning in float64, one warp per vector: each head's q (q_gamma, q_beta) and k (k_gamma,
// k_beta) of qkv (rows, 3, H, D) normalised in place over D, v untouched. The INT8 twin row cuda.qk_norm_f64.
cudaError_t qk_norm_f32_f64(float* qkv, const float* q_gamma, const float* q_beta, const float* k_gamma,
                            const float* k_beta, int rows, int heads, int head_dim, float eps, cudaStream_t stream);

}  // namespace edgevit::gpu
