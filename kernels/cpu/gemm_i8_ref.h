// The W8A8 GEMM's arithmetic on the CPU: the reference for the CUDA kernels (kernels/cuda/gemm_i8.h) and the
// CPU INT8 path. Plain loops, exact:
//   acc[m][n] = sum_k x_q[m][k] * w_q[n][k]                     int8 x int8 -> int32, exact (K <= 2^17)
//   v         = fma(float(acc), sx[m or 0] * sw[n], bias[n])    fp32; float(acc) rounds to nearest even,
//                                                               the scale product is one rounded multiply
//   then the epilogue (GemmI8Epilogue) in fp32, each step one rounded operation in this order:
//   GELU (erf)  g = (0.5 * v) * erfc(v * -0.70710678)  (= 1 + erf(v / sqrt 2), accurate for negative v)
//   residual    y = r + v                 (r: the residual's fp16 value)
//   INT8 out    q = v / out_scale, rounded to nearest even, saturated to [-127, 127]
// The CUDA kernels perform the same operations in the same order (erfc may differ by a few ulps).
#pragma once

#include <cstdint>

namespace edgevit {

// What the GEMM writes. Every epilogue adds the bias when one is given (nullptr: none).
enum class GemmI8Epilogue : int {
  kF32 = 0,          // y: float (M, N), the dequantized value v (int32-exact checks: unit scales, no bias)
  kF16Bias,          // y: half (M, N) = fp16(v)
  kF16BiasGelu,      // y: half (M, N) = fp16(gelu(v))
  kF16BiasResidual,  // y: half (M, N) in place: y = fp16(y + v)
  kI8Bias,           // y: int8 (M, N) = sat(rne(v / out_scale))
  kI8BiasGelu,       // y: int8 (M, N) = sat(rne(gelu(v) / out_scale))
};
constexpr int kGemmI8EpilogueCount = 6;
const char* gemm_i8_epilogue_name(GemmI8Epilogue e);
inline bool gemm_i8_epilogue_is_i8(GemmI8Epilogue e) {
  return e == GemmI8Epilogue::kI8Bias || e == GemmI8Epilogue::kI8BiasGelu;
}
inline bool gemm_i8_epilogue_has_gelu(GemmI8Epilogue e) {
  return e == GemmI8Epilogue::kF16BiasGelu || e == GemmI8Epilogue::kI8BiasGelu;
}

// Shapes, operands and scales. The caller keeps ownership of every buffer.
struct GemmI8RefArgs {
  int64_t m = 0, n = 0, k = 0;
  const int8_t* x = nullptr;   // (M, K) row-major, symmetric int8 activations
  const int8_t* w = nullptr;   // (N, K) row-major, symmetric int8 weights
  const float* sx = nullptr;   // (M) when sx_per_token, else (1): activation scale
  bool sx_per_token = false;
  const float* sw = nullptr;   // (N): weight scale per output channel
  const float* bias = nullptr; // (N) or nullptr
  GemmI8Epilogue epilogue = GemmI8Epilogue::kF32;
  float out_scale = 1.f;       // kI8*: the output's scale
};

// acc (M, N) = x (M, K) w (N, K)^T in int32.
void gemm_i8_accumulate_ref(int64_t m, int64_t n, int64_t k, const int8_t* x, const int8_t* w, int32_t* acc);

// The epilogue over acc (M, N). residual: (M, N) fp16 values as float, read for kF16BiasResidual only.
// y_f32 (M, N): the fp32 value before the output's rounding (kF32, kF16*: the value fp16 rounds; kI8*:
// v / out_scale, the value rounded to int8); may be nullptr for kI8*. y_i8 (M, N): kI8* only.
void gemm_i8_epilogue_ref(const GemmI8RefArgs& a, const int32_t* acc, const float* residual, float* y_f32,
                          int8_t* y_i8);

// One output element's fp32 steps (shared by gemm_i8_epilogue_ref and the CPU INT8 path).
float gemm_i8_dequant_ref(int32_t acc, float sx, float sw, float bias);
float gemm_i8_gelu_ref(float v);
int8_t gemm_i8_quantize_ref(float q);  // rne, saturated to [-127, 127]; NaN -> 0

// Both: acc in a scratch buffer the caller provides (M x N int32).
void gemm_i8_ref(const GemmI8RefArgs& a, int32_t* acc_scratch, const float* residual, float* y_f32, int8_t* y_i8);

}  // namespace edgevit
