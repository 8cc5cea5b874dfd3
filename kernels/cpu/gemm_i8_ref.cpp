// The W8A8 GEMM's CPU reference; the arithmetic is spelled out in kernels/cpu/gemm_i8_ref.h.
#include "kernels/cpu/gemm_i8_ref.h"

#include <cmath>
#include <cstring>
#include <initializer_list>

namespace edgevit {

const char* gemm_i8_epilogue_name(GemmI8Epilogue e) {
  switch (e) {
    case GemmI8Epilogue::kF32: return "f32";
    case GemmI8Epilogue::kF16Bias: return "f16_bias";
    case GemmI8Epilogue::kF16BiasGelu: return "f16_bias_gelu";
    case GemmI8Epilogue::kF16BiasResidual: return "f16_bias_residual";
    case GemmI8Epilogue::kI8Bias: return "i8_bias";
    case GemmI8Epilogue::kI8BiasGelu: return "u8_bias_gelu";
    case GemmI8Epilogue::kF32BiasResidual: return "f32_bias_residual";
    case GemmI8Epilogue::kQkHeadI8: return "qk_head_i8";
  }
  return "?";
}

namespace {

// acc (m, n) = x (m, k) @ w (n, k)^T in int32, for int8 or uint8 x.
template <class X>
void accumulate(int64_t m, int64_t n, int64_t k, const X* x, const int8_t* w, int32_t* acc) {
  for (int64_t i = 0; i < m; ++i) {
    const X* xr = x + i * k;
    for (int64_t j = 0; j < n; ++j) {
      const int8_t* wr = w + j * k;
      int32_t s = 0;
      for (int64_t p = 0; p < k; ++p) s += static_cast<int32_t>(xr[p]) * static_cast<int32_t>(wr[p]);
      acc[i * n + j] = s;
    }
  }
}

}  // namespace

void gemm_i8_accumulate_ref(int64_t m, int64_t n, int64_t k, const int8_t* x, const int8_t* w, int32_t* acc) {
  accumulate(m, n, k, x, w, acc);
}

void gemm_u8i8_accumulate_ref(int64_t m, int64_t n, int64_t k, const uint8_t* x, const int8_t* w, int32_t* acc) {
  accumulate(m, n, k, x, w, acc);
}

float gemm_i8_dequant_ref(int32_t acc, float sx, float sw, float bias) {
  const float scale = sx * sw;
  return std::fma(static_cast<float>(acc), scale, bias);
}

const float kGemmI8GeluTable[kGemmI8GeluTableRows][4] = {
#include "kernels/cpu/gemm_i8_gelu_table.inc"
};

float gemm_i8_gelu_ref(float v) {
  const float t = std::fmin(std::fmax(v, -kGemmI8GeluClamp), kGemmI8GeluClamp) * kGemmI8GeluInvStep;
  const float tm = t + 12582912.f;
  const float d = t - (tm - 12582912.f);
  uint32_t bits = 0;
  std::memcpy(&bits, &tm, sizeof bits);  // 0x4B400000 + round(t): the rounded integer in the low bits
  const float* c = kGemmI8GeluTable[static_cast<int>(bits - 0x4B400000u) + kGemmI8GeluTableCenter];
  const float p = std::fma(d, std::fma(d, std::fma(d, c[3], c[2]), c[1]), c[0]);
  return v * p;
}

int8_t gemm_i8_quantize_ref(float q) {
  if (std::isnan(q)) return 0;
  const float r = std::nearbyint(q);  // the default rounding mode: to nearest, ties to even
  if (r > 127.f) return 127;
  if (r < -127.f) return -127;
  return static_cast<int8_t>(r);
}

uint8_t gemm_i8_quantize_u8_ref(float q) {
  if (std::isnan(q)) return 0;
  const float r = std::nearbyint(q);
  if (r > 255.f) return 255;
  if (r < 0.f) return 0;
  return static_cast<uint8_t>(r);
}

float gemm_i8_head_quantize_ref(const float* v, int64_t d, int8_t* q) {
  float amax = 0.f;
  for (int64_t i = 0; i < d; ++i) amax = std::fmax(amax, std::fabs(v[i]));
  const float inv = amax > 0.f ? 127.f / amax : 0.f;
  for (int64_t i = 0; i < d; ++i) q[i] = gemm_i8_quantize_ref(v[i] * inv);
  return amax / 127.f;
}

void gemm_i8_fold_shift_into_bias(int64_t n, int64_t k, const int8_t* wq, const float* sw, const float* bias,
                                  float shift, float* out) {
  for (int64_t j = 0; j < n; ++j) {
    int64_t sum = 0;
    for (int64_t p = 0; p < k; ++p) sum += wq[j * k + p];
    const double b = bias ? static_cast<double>(bias[j]) : 0.0;
    out[j] = static_cast<float>(b - static_cast<double>(shift) * static_cast<double>(sw[j]) * static_cast<double>(sum));
  }
}

namespace {

// kQkHeadI8: v of every column into y_f32, then the Q and K heads of each row quantized.
void qk_head_epilogue_ref(const GemmI8RefArgs& a, const int32_t* acc, float* y_f32, int8_t* y_i8) {
  const int64_t heads = a.qk_cols / a.head_dim;
  for (int64_t i = 0; i < a.m; ++i) {
    const float sx = a.sx[a.sx_per_token ? i : 0];
    float* v = y_f32 + i * a.n;
    for (int64_t j = 0; j < a.n; ++j) v[j] = gemm_i8_dequant_ref(acc[i * a.n + j], sx, a.sw[j], a.bias ? a.bias[j] : 0.f);
    for (int64_t h = 0; h < heads; ++h)
      a.y_qk_scales[i * heads + h] =
          gemm_i8_head_quantize_ref(v + h * a.head_dim, a.head_dim, y_i8 + i * a.qk_cols + h * a.head_dim);
  }
}

}  // namespace

void gemm_i8_epilogue_ref(const GemmI8RefArgs& a, const int32_t* acc, const float* residual, float* y_f32,
                          int8_t* y_i8) {
  const GemmI8Epilogue e = a.epilogue;
  if (gemm_i8_epilogue_is_qk_head(e)) {
    qk_head_epilogue_ref(a, acc, y_f32, y_i8);
    return;
  }
  const float inv_out_scale = 1.f / a.out_scale;
  for (int64_t i = 0; i < a.m; ++i) {
    const float sx = a.sx[a.sx_per_token ? i : 0];
    for (int64_t j = 0; j < a.n; ++j) {
      const int64_t o = i * a.n + j;
      float v = gemm_i8_dequant_ref(acc[o], sx, a.sw[j], a.bias ? a.bias[j] : 0.f);
      if (gemm_i8_epilogue_has_gelu(e)) v = gemm_i8_gelu_ref(v);
      if (gemm_i8_epilogue_has_residual(e)) v = residual[o] + v;
      if (gemm_i8_epilogue_is_u8(e)) {  // fc1 -> fc2's input: u = g + shift in unsigned codes
        const float q = (v + kGemmI8GeluShift) * inv_out_scale;
        if (y_f32) y_f32[o] = q;
        reinterpret_cast<uint8_t*>(y_i8)[o] = gemm_i8_quantize_u8_ref(q);
      } else if (gemm_i8_epilogue_is_i8(e)) {
        const float q = v * inv_out_scale;
        if (y_f32) y_f32[o] = q;
        y_i8[o] = gemm_i8_quantize_ref(q);
      } else {
        y_f32[o] = v;
      }
    }
  }
}

void gemm_i8_ref(const GemmI8RefArgs& a, int32_t* acc_scratch, const float* residual, float* y_f32, int8_t* y_i8) {
  if (a.x_u8) {
    gemm_u8i8_accumulate_ref(a.m, a.n, a.k, reinterpret_cast<const uint8_t*>(a.x), a.w, acc_scratch);
  } else {
    gemm_i8_accumulate_ref(a.m, a.n, a.k, a.x, a.w, acc_scratch);
  }
  gemm_i8_epilogue_ref(a, acc_scratch, residual, y_f32, y_i8);
}

}  // namespace edgevit
