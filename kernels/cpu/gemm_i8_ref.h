// The W8A8 GEMM's arithmetic on the CPU: the reference for the CUDA kernels (kernels/cuda/gemm_i8.h) and the
// CPU INT8 path. Plain loops, exact:
//   acc[m][n] = sum_k x_q[m][k] * w_q[n][k]                     int8 x int8 -> int32, exact (K <= 2^17);
//                                                               uint8 x int8 (x_u8) exact for K <= 2^16
//   v         = fma(float(acc), sx[m or 0] * sw[n], bias[n])    fp32; float(acc) rounds to nearest even,
//                                                               the scale product is one rounded multiply
//   then the epilogue (GemmI8Epilogue) in fp32, each step one rounded operation in this order:
//   GELU (erf)  t = clamp(v, -5.5, 5.5) * 4 (exact); ti = (t + 1.5 * 2^23) - 1.5 * 2^23 (t rounded to the
//               nearest integer k, ties to even, by the two adds); d = t - ti (exact, in [-1/2, 1/2]);
//               p = c0 + d (c1 + d (c2 + d c3)) (Horner, one fma a step) with row k + 22 of kGemmI8GeluTable
//               (Phi, the normal CDF, as a cubic on [k - 1/2, k + 1/2] / 4: tools/int8/make_gelu_table.py);
//               g = v * p. |g - v Phi(v)| <= 1e-6 for |v| <= 12 (tests/kernels/gemm_i8_slow_test.cpp checks
//               every float32 there); NaN stays NaN (the clamp sends it to -5.5, v * p is NaN). Why a table:
//               thirteen instructions an output on the GPU (two min / max, the multiply, three adds, the row's
//               index and one 16-byte load, three fma, the product), against ~27 for a rational fp32 erf with a
//               division-free reciprocal and ~75 for erfc, and the GELU is most of fc1's epilogue
//               (docs/kernels-gemm-i8.md); only IEEE adds, multiplies and fma, so the CPU matches bit for bit.
//   residual    y = r + v                 (r: the residual's fp16 value, or its fp32 value for kF32BiasResidual)
//   INT8 out    q = v * inv, inv = 1 / out_scale (rounded once), rounded to nearest even, saturated to
//               [-127, 127]  (a multiply: the GPU's IEEE division is ~10 instructions an output)
//   UINT8 out   (kI8BiasGelu, fc1 -> fc2's input) u = g + kGemmI8GeluShift (one rounded add), q = u * inv
//               rounded to nearest even, saturated to [0, 255]: GELU's output is one-sided (>= -0.16997), so
//               the shifted value u >= 0 spends all 256 codes on the range that occurs (docs/int8.md). The
//               consumer (fc2, x_u8) reads u ~ q * sx; the shift is folded into its bias at load
//               (gemm_i8_fold_shift_into_bias), so its output is that of the unshifted input.
// The CUDA kernels perform the same operations in the same order: their outputs equal the reference's.
#pragma once

#include <cstdint>

namespace edgevit {

// The GELU's table (above): kGemmI8GeluTableRows cubics of Phi, row k + kGemmI8GeluTableCenter for
// t = 4 clamp(v) rounded to k; each row {c0, c1, c2, c3}.
constexpr float kGemmI8GeluClamp = 5.5f;    // Phi(-5.5) = 1.9e-8: beyond, v * Phi(+-5.5) is within 1e-6 for |v| <= 12
constexpr float kGemmI8GeluInvStep = 4.f;   // intervals of 1/4 (a power of two: t = v * 4 is exact)
constexpr int kGemmI8GeluTableCenter = 22;  // kGemmI8GeluClamp * kGemmI8GeluInvStep
constexpr int kGemmI8GeluTableRows = 2 * kGemmI8GeluTableCenter + 1;
extern const float kGemmI8GeluTable[kGemmI8GeluTableRows][4];

// The shift c of fc2's unsigned input u = GELU(v) + c. The erf GELU's minimum is -0.16997120748 (at
// v = -0.75179); the table's GELU below is within 1e-6 of it. c = 0.17f (0.1700000018) exceeds both by
// 2.9e-5, so u > 0 for every finite v: no code is spent below the range and none saturates at 0. A round
// constant rather than the exact minimum: the margin is far below any calibrated step (>= 1e-3 in the models
// measured), and a value one can write down keeps the scale file's `gelu_shift` metadata readable.
constexpr float kGemmI8GeluShift = 0.17f;

// What the GEMM writes. Every epilogue adds the bias when one is given (nullptr: none).
enum class GemmI8Epilogue : int {
  kF32 = 0,          // y: float (M, N), the dequantized value v (qkv in runtime.int8_float: fp32; with unit
                     // scales and no bias float(acc): the int32-exact checks)
  kF16Bias,          // y: half (M, N) = fp16(v)
  kF16BiasGelu,      // y: half (M, N) = fp16(gelu(v))
  kF16BiasResidual,  // y: half (M, N) in place: y = fp16(y + v)
  kI8Bias,           // y: int8 (M, N) = sat(rne(v / out_scale))
  kI8BiasGelu,       // y: uint8 (M, N) = sat[0,255](rne((gelu(v) + kGemmI8GeluShift) / out_scale)): fc2's input
  kF32BiasResidual,  // y: float (M, N) in place: y = y + v (the fp32 residual stream, runtime.int8_float: fp32)
  kQkHeadI8,         // qkv for the INT8 attention: int8 Q|K (M, qk_cols) with a scale per (row, head), V (M,
                     // N - qk_cols) float (gemm_i8_head_quantize_ref; runtime.int8_attention: int8)
};
constexpr int kGemmI8EpilogueCount = 8;
const char* gemm_i8_epilogue_name(GemmI8Epilogue e);
inline bool gemm_i8_epilogue_is_i8(GemmI8Epilogue e) {
  return e == GemmI8Epilogue::kI8Bias || e == GemmI8Epilogue::kI8BiasGelu;
}
inline bool gemm_i8_epilogue_is_qk_head(GemmI8Epilogue e) { return e == GemmI8Epilogue::kQkHeadI8; }
inline bool gemm_i8_epilogue_has_residual(GemmI8Epilogue e) {
  return e == GemmI8Epilogue::kF16BiasResidual || e == GemmI8Epilogue::kF32BiasResidual;
}
inline bool gemm_i8_epilogue_is_f32(GemmI8Epilogue e) {
  return e == GemmI8Epilogue::kF32 || e == GemmI8Epilogue::kF32BiasResidual;
}
// The 8-bit output is unsigned (codes 0..255 of GELU + kGemmI8GeluShift).
inline bool gemm_i8_epilogue_is_u8(GemmI8Epilogue e) { return e == GemmI8Epilogue::kI8BiasGelu; }
inline bool gemm_i8_epilogue_has_gelu(GemmI8Epilogue e) {
  return e == GemmI8Epilogue::kF16BiasGelu || e == GemmI8Epilogue::kI8BiasGelu;
}

// Shapes, operands and scales. The caller keeps ownership of every buffer.
struct GemmI8RefArgs {
  int64_t m = 0, n = 0, k = 0;
  const int8_t* x = nullptr;   // (M, K) row-major, symmetric int8 activations (x_u8: uint8 codes, as bytes)
  const int8_t* w = nullptr;   // (N, K) row-major, symmetric int8 weights
  const float* sx = nullptr;   // (M) when sx_per_token, else (1): activation scale
  bool sx_per_token = false;
  const float* sw = nullptr;   // (N): weight scale per output channel
  const float* bias = nullptr; // (N) or nullptr
  GemmI8Epilogue epilogue = GemmI8Epilogue::kF32;
  float out_scale = 1.f;       // kI8*: the output's scale (outputs are v * (1 / out_scale))
  bool x_u8 = false;           // x holds unsigned codes 0..255 (fc2's input: GELU + kGemmI8GeluShift)
  int64_t qk_cols = 0;         // kQkHeadI8: the int8 columns (Q and K), a multiple of head_dim
  int64_t head_dim = 0;        // kQkHeadI8: columns per head
  float* y_qk_scales = nullptr;  // kQkHeadI8 output: (M, qk_cols / head_dim) fp32, the heads' scales
};

// acc (M, N) = x (M, K) w (N, K)^T in int32; the second with unsigned activations (K <= 2^16).
void gemm_i8_accumulate_ref(int64_t m, int64_t n, int64_t k, const int8_t* x, const int8_t* w, int32_t* acc);
void gemm_u8i8_accumulate_ref(int64_t m, int64_t n, int64_t k, const uint8_t* x, const int8_t* w, int32_t* acc);

// The epilogue over acc (M, N). residual: (M, N), read for the residual epilogues only (kF16BiasResidual: fp16
// values as float; kF32BiasResidual: fp32 values).
// y_f32 (M, N): the fp32 value before the output's rounding (kF32, kF16*: the value fp16 rounds; kI8*:
// v * (1 / out_scale), the value rounded to 8 bits); may be nullptr for kI8*. y_i8 (M, N): kI8* only, int8
// codes for kI8Bias, uint8 codes (stored as the same bytes) for kI8BiasGelu. kQkHeadI8: y_f32 (M, N) the
// dequantized v of every column (V's values), y_i8 (M, qk_cols) the Q and K codes, a.y_qk_scales their scales.
void gemm_i8_epilogue_ref(const GemmI8RefArgs& a, const int32_t* acc, const float* residual, float* y_f32,
                          int8_t* y_i8);

// One output element's fp32 steps (shared by gemm_i8_epilogue_ref and the CPU INT8 path).
float gemm_i8_dequant_ref(int32_t acc, float sx, float sw, float bias);
float gemm_i8_gelu_ref(float v);
int8_t gemm_i8_quantize_ref(float q);     // rne, saturated to [-127, 127]; NaN -> 0
uint8_t gemm_i8_quantize_u8_ref(float q);  // rne, saturated to [0, 255]; NaN -> 0
// One head's d values v -> int8 codes q (kQkHeadI8's rule above); returns the head's scale amax / 127.
float gemm_i8_head_quantize_ref(const float* v, int64_t d, int8_t* q);

// The bias of a GEMM whose input is u = x + shift in unsigned codes (fc2): out[n] = bias[n] - shift * sw[n] *
// sum_k wq[n][k], so that acc(q, wq) * sx * sw + out = (sum_k (q sx - shift) wq sw) + bias for any sx: the
// shift cancels exactly in the integer path (the quantized weights, not the fp32 ones). The sum and product
// in double, the result rounded once to fp32. wq (N, K), sw (N), bias (N) or nullptr (0), out (N).
void gemm_i8_fold_shift_into_bias(int64_t n, int64_t k, const int8_t* wq, const float* sw, const float* bias,
                                  float shift, float* out);

// Both: acc in a scratch buffer the caller provides (M x N int32).
void gemm_i8_ref(const GemmI8RefArgs& a, int32_t* acc_scratch, const float* residual, float* y_f32, int8_t* y_i8);

}  // namespace edgevit
