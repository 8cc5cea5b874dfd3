// Symmetric INT8 quantization of activation rows, the arithmetic of the CPU INT8 path (docs/int8.md) and of
// the LayerNorm -> int8 producers on every backend (and, unsigned, of per-token GELU -> uint8 below):
//   s[r] = scale                         per tensor (scale > 0: the calibrated scale)
//   s[r] = amax_r / 127 (1 if amax_r = 0)  per token (scale <= 0: dynamic, amax_r = max |x[r][.]|)
//   q[r][c] = gemm_i8_quantize_ref(x[r][c] / s[r])   round to nearest even, saturate to [-127, 127]
// (a division: the producers' rule. The GEMM's own 8-bit epilogue, fc1's per-tensor GELU -> uint8, multiplies
// by the rounded 1 / out_scale instead: kernels/cpu/gemm_i8_ref.h; the CPU rows use that there.)
#pragma once

#include <cstdint>

namespace edgevit {

// x (m, k) fp32 -> q (m, k) int8 and s (m) fp32. The caller keeps ownership of every buffer.
void quantize_rows_i8_ref(const float* x, int64_t m, int64_t k, float scale, int8_t* q, float* s);

// The scale of one row under the same rule (scale > 0: scale; else the row's amax / 127, or 1).
float quantize_row_scale_ref(const float* x, int64_t k, float scale);

// Unsigned rows (fc2's input u = GELU + kGemmI8GeluShift >= 0, per token: kernels/cpu/gemm_i8_ref.h):
//   s[r] = scale > 0 ? scale : (umax_r / 255, or 1 if umax_r = max(0, max_c u[r][c]) is 0)
//   q[r][c] = gemm_i8_quantize_u8_ref(u[r][c] / s[r])   round to nearest even, saturate to [0, 255]
// u (m, k) fp32 -> q (m, k) uint8 and s (m) fp32. The caller keeps ownership of every buffer.
void quantize_rows_u8_ref(const float* u, int64_t m, int64_t k, float scale, uint8_t* q, float* s);

}  // namespace edgevit
