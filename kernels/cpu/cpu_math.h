// Vectorisable fp32 math shared by the CPU kernels (private to kernels/cpu).
// glibc's scalar expf/erff do not vectorise without -ffast-math (libmvec is only declared under
// __FAST_MATH__), and erff measured 39 ns/element here: 5.9 ms for one ViT-Ti MLP activation. These are
// plain branch-free float loops the compiler turns into SIMD for the baseline ISA.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

// Function multiversioning by hand: hot loops are compiled twice, for the baseline ISA and (x86-64 only)
// with AVX2+FMA, and picked at run time. target_clones("arch=haswell") dispatches on the CPU *model*
// (a Skylake Xeon gets the baseline clone) and target_clones("avx2") cannot add FMA, hence this.
#if defined(__x86_64__) && defined(__GNUC__)
#define EV_HAVE_AVX2_CLONE 1
#define EV_TARGET_AVX2 __attribute__((target("avx2,fma")))
#else
#define EV_HAVE_AVX2_CLONE 0
#define EV_TARGET_AVX2
#endif
#define EV_ALWAYS_INLINE inline __attribute__((always_inline))

// The AVX-512 clone (x86-64 only; 16 fp32 lanes): gcc spells "use 512-bit vectors" as a target option,
// clang as its own attribute (and warns on the other). Pick it with use_avx512().
#if EV_HAVE_AVX2_CLONE && defined(__clang__)
#define EV_TARGET_AVX512 __attribute__((target("avx512f,avx512dq,avx512vl,avx512bw,fma"), min_vector_width(512)))
#elif EV_HAVE_AVX2_CLONE
#define EV_TARGET_AVX512 __attribute__((target("avx512f,avx512dq,avx512vl,avx512bw,fma,prefer-vector-width=512")))
#else
#define EV_TARGET_AVX512
#endif

namespace edgevit::cpu_detail {

// True when the AVX2+FMA clones may run on this CPU (evaluated once).
inline bool use_avx2() {
#if EV_HAVE_AVX2_CLONE
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return avx2;
#else
  return false;
#endif
}

// True when the AVX-512 clones may run on this CPU (evaluated once).
inline bool use_avx512() {
#if EV_HAVE_AVX2_CLONE
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
                         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw");
  return ok;
#else
  return false;
#endif
}

// Under -ftrapping-math (GCC's default) a float comparison feeding a select is not if-converted, and the
// loop stays scalar. So the functions below select only through min/max patterns and integer bit masks.

// e^x for x <= 0 (softmax and erfc only need that half), Cephes expf polynomial after Cody-Waite range
// reduction: <= 2 ulp on [-87.3, 0]. Below about -87.7 (including -inf) the result is exactly 0 (denormals
// are flushed). NaN in gives 0.
// The clamp to -100 is an unsigned min on the bits (for x <= 0 a larger bit pattern is a more negative
// number): as a float compare GCC keeps it a branch (NaN semantics), folds e^-100 on one side, and the
// loop would not vectorise.
EV_ALWAYS_INLINE float exp_approx(float x) {
  constexpr uint32_t kMinus100 = 0xC2C80000u;  // bits of -100.f
  uint32_t xb;
  std::memcpy(&xb, &x, sizeof xb);
  xb = xb > kMinus100 ? kMinus100 : xb;
  std::memcpy(&x, &xb, sizeof x);
  const float kRound = 12582912.f;  // 1.5 * 2^23: adding it rounds to the nearest integer
  const float n = (x * 1.44269504088896341f + kRound) - kRound;
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float y = 1.9875691500e-4f;
  y = y * r + 1.3981999507e-3f;
  y = y * r + 8.3334519073e-3f;
  y = y * r + 4.1665795894e-2f;
  y = y * r + 1.6666665459e-1f;
  y = y * r + 5.0000001201e-1f;
  y = y * r * r + r + 1.f;
  int32_t biased = static_cast<int32_t>(n) + 127;
  biased = biased < 0 ? 0 : biased;  // exponent field 0 with zero mantissa: scale = +0
  const int32_t bits = biased << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return y * scale;
}

// sign bit of x set ? neg : pos, through integer masks.
EV_ALWAYS_INLINE float select_by_sign(float x, float neg, float pos) {
  int32_t xb, nb, pb;
  std::memcpy(&xb, &x, sizeof xb);
  std::memcpy(&nb, &neg, sizeof nb);
  std::memcpy(&pb, &pos, sizeof pb);
  const int32_t m = xb >> 31;  // all ones when negative
  const int32_t rb = (nb & m) | (pb & ~m);
  float r;
  std::memcpy(&r, &rb, sizeof r);
  return r;
}

// erfc(z) for z >= 0: Numerical Recipes' Chebyshev fit, fractional error < 1.2e-7 everywhere.
EV_ALWAYS_INLINE float erfc_nonneg(float z) {
  const float t = 1.f / (1.f + 0.5f * z);
  float p = 0.17087277f;
  p = p * t - 0.82215223f;
  p = p * t + 1.48851587f;
  p = p * t - 1.13520398f;
  p = p * t + 0.27886807f;
  p = p * t - 0.18628806f;
  p = p * t + 0.09678418f;
  p = p * t + 0.37409196f;
  p = p * t + 1.00002368f;
  p = p * t - 1.26551223f;
  return t * exp_approx(p - z * z);
}

// Exact (erf) GELU 0.5 x (1 + erf(x / sqrt 2)). For x < 0, 1 + erf(x/sqrt2) = erfc(|x|/sqrt2) is
// computed directly, so the left tail keeps full relative precision instead of cancelling.
EV_ALWAYS_INLINE float gelu_erf(float x) {
  const float z = std::fabs(x) * 0.70710678118654752f;
  const float c = erfc_nonneg(z);
  return 0.5f * x * select_by_sign(x, c, 2.f - c);
}

// x (n) <- gelu_erf(x) (n) [+ bias (n) first when bias != nullptr], one vectorised pass.
EV_ALWAYS_INLINE void bias_gelu_body(float* __restrict x, const float* __restrict bias, int64_t n) {
  if (bias != nullptr) {
    for (int64_t i = 0; i < n; ++i) x[i] = gelu_erf(x[i] + bias[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) x[i] = gelu_erf(x[i]);
  }
}
#if EV_HAVE_AVX2_CLONE
// The same exact GELU for 16 lanes with AVX-512's own instructions, where the compiler-vectorised body
// spends most of its time: the reciprocal as vrcp14ps + one Newton step (|rel. error| ~2^-28) instead of
// vdivps (10-cycle throughput per zmm on Sapphire Rapids), 2^n applied with vscalefps, the tail masked.
// exp_approx's result for x <= 0, same polynomial; 0 where n <= -127, as in exp_approx.
EV_TARGET_AVX512 inline __m512 exp_approx_avx512(__m512 x) {
  // (The maskz_ forms with a full mask: GCC 12's unmasked ones warn about their undefined source.)
  const __mmask16 all = 0xFFFF;
  x = _mm512_maskz_max_ps(all, x, _mm512_set1_ps(-100.f));  // NaN -> -100 (max returns its second operand)
  const __m512 n = _mm512_maskz_roundscale_ps(all, _mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                              _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 y = _mm512_set1_ps(1.9875691500e-4f);
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.3981999507e-3f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(8.3334519073e-3f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(4.1665795894e-2f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.6666665459e-1f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(5.0000001201e-1f));
  y = _mm512_add_ps(_mm512_fmadd_ps(y, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.f));
  const __mmask16 normal = _mm512_cmp_ps_mask(n, _mm512_set1_ps(-127.f), _CMP_GT_OQ);
  return _mm512_maskz_scalef_ps(normal, y, n);
}

EV_TARGET_AVX512 inline __m512 gelu_erf_avx512(__m512 x) {
  const __m512 z = _mm512_mul_ps(_mm512_abs_ps(x), _mm512_set1_ps(0.70710678118654752f));
  const __m512 den = _mm512_fmadd_ps(z, _mm512_set1_ps(0.5f), _mm512_set1_ps(1.f));
  __m512 t = _mm512_maskz_rcp14_ps(0xFFFF, den);
  t = _mm512_fmadd_ps(t, _mm512_fnmadd_ps(den, t, _mm512_set1_ps(1.f)), t);
  __m512 p = _mm512_set1_ps(0.17087277f);
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-0.82215223f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(1.48851587f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-1.13520398f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(0.27886807f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-0.18628806f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(0.09678418f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(0.37409196f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(1.00002368f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-1.26551223f));
  const __m512 c = _mm512_mul_ps(t, exp_approx_avx512(_mm512_fnmadd_ps(z, z, p)));  // erfc(z)
  // x < 0: 0.5 x erfc(z); x >= 0: 0.5 x (2 - erfc(z)) = x - 0.5 x erfc(z).
  const __m512 h = _mm512_mul_ps(_mm512_mul_ps(x, _mm512_set1_ps(0.5f)), c);
  const __mmask16 neg = _mm512_movepi32_mask(_mm512_castps_si512(x));
  return _mm512_mask_blend_ps(neg, _mm512_sub_ps(x, h), h);
}

EV_TARGET_AVX512 inline void bias_gelu_avx512(float* x, const float* bias, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 v = _mm512_loadu_ps(x + i);
    if (bias != nullptr) v = _mm512_add_ps(v, _mm512_loadu_ps(bias + i));
    _mm512_storeu_ps(x + i, gelu_erf_avx512(v));
  }
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1u);
    __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    if (bias != nullptr) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, bias + i));
    _mm512_mask_storeu_ps(x + i, m, gelu_erf_avx512(v));
  }
}
#else
inline void bias_gelu_avx512(float* x, const float* bias, int64_t n) { bias_gelu_body(x, bias, n); }
#endif
EV_TARGET_AVX2 inline void bias_gelu_avx2(float* x, const float* bias, int64_t n) { bias_gelu_body(x, bias, n); }
inline void bias_gelu_base(float* x, const float* bias, int64_t n) { bias_gelu_body(x, bias, n); }
inline void bias_gelu(float* x, const float* bias, int64_t n) {
  if (use_avx512()) {
    bias_gelu_avx512(x, bias, n);
  } else if (use_avx2()) {
    bias_gelu_avx2(x, bias, n);
  } else {
    bias_gelu_base(x, bias, n);
  }
}

// Tanh-approximation GELU (PyTorch's F.gelu(x, approximate='tanh'), SigLIP's gelu_pytorch_tanh, timm's
// gelu_tanh): 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3). Since 1 + tanh(u) = 2 / (1 + e^-2u),
// this is x / (1 + e^-2u), computed with e = e^-2|u| <= 1 only (no overflow): x / (1 + e) for x >= 0 and
// x e / (1 + e) for x < 0, so neither tail cancels.
// 2|u| = a (kA + kB a^2), a = |x|, is formed in double and split into hi + lo floats, e = e^-hi (1 - lo): in
// the left tail the result is about x e^-2|u| and inherits the absolute error of 2|u| (up to 87 before it
// underflows near x = -10.4) as relative error; formed in fp32 that was 1.3e-5 near x = -10, this way the
// whole range is within 3e-7 of gelu_tanh_ref (gelu_test). a is clamped to 64 first (e is 0 from a ~ 10.4 on),
// so nothing overflows: large x gives x, large negative x -0, +inf +inf; -inf gives NaN (-inf * 0), as
// gelu_erf and PyTorch do; NaN stays NaN.
constexpr double kGeluTanh2A = 1.5957691216057308;    // 2 sqrt(2/pi)
constexpr double kGeluTanh2B = 0.07135481627260025;   // 2 sqrt(2/pi) 0.044715
constexpr int32_t kGeluTanhClampBits = 0x42800000;  // bits of 64.f
EV_ALWAYS_INLINE float gelu_tanh(float x) {
  float a = std::fabs(x);
  int32_t ab;
  std::memcpy(&ab, &a, sizeof ab);
  ab = ab > kGeluTanhClampBits ? kGeluTanhClampBits : ab;  // min(a, 64) on the bits (a >= 0); NaN -> 64
  std::memcpy(&a, &ab, sizeof a);
  const double ad = a;
  const double t = ad * (kGeluTanh2A + kGeluTanh2B * (ad * ad));  // 2|u|
  const float hi = static_cast<float>(t);
  const float lo = static_cast<float>(t - static_cast<double>(hi));
  const float e = exp_approx(-hi) * (1.f - lo);  // e^-2|u|, in (0, 1]
  return x * select_by_sign(x, e, 1.f) / (1.f + e);
}

// x (n) <- gelu_tanh(x) (n) [+ bias (n) first when bias != nullptr], one vectorised pass.
EV_ALWAYS_INLINE void bias_gelu_tanh_body(float* __restrict x, const float* __restrict bias, int64_t n) {
  if (bias != nullptr) {
    for (int64_t i = 0; i < n; ++i) x[i] = gelu_tanh(x[i] + bias[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) x[i] = gelu_tanh(x[i]);
  }
}
#if EV_HAVE_AVX2_CLONE
// gelu_tanh for 16 lanes with AVX-512's own instructions, as gelu_erf_avx512: 2|u| in double on two halves
// of 8 lanes, the reciprocal of 1 + e (in [1, 2]) as vrcp14ps + one Newton step (|rel. error| ~2^-28),
// exp_approx_avx512, the tail masked. (maskz_ forms with full masks, as in exp_approx_avx512.)
// 2|u| (8 lanes) in double, split into hi + lo (gelu_tanh).
EV_TARGET_AVX512 inline void gelu_tanh_arg_avx512(__m256 a, __m256& hi, __m256& lo) {
  const __m512d ad = _mm512_maskz_cvtps_pd(0xFF, a);
  const __m512d t = _mm512_mul_pd(ad, _mm512_fmadd_pd(_mm512_mul_pd(ad, ad), _mm512_set1_pd(kGeluTanh2B),
                                                      _mm512_set1_pd(kGeluTanh2A)));
  hi = _mm512_maskz_cvtpd_ps(0xFF, t);
  lo = _mm512_maskz_cvtpd_ps(0xFF, _mm512_sub_pd(t, _mm512_maskz_cvtps_pd(0xFF, hi)));
}
EV_TARGET_AVX512 inline __m512 gelu_tanh_avx512(__m512 x) {
  const __mmask16 all = 0xFFFF;
  // NaN -> 64 (min returns its second operand)
  const __m512 a = _mm512_maskz_min_ps(all, _mm512_abs_ps(x), _mm512_set1_ps(64.f));
  __m256 hi0, lo0, hi1, lo1;
  gelu_tanh_arg_avx512(_mm512_maskz_extractf32x8_ps(0xFF, a, 0), hi0, lo0);
  gelu_tanh_arg_avx512(_mm512_maskz_extractf32x8_ps(0xFF, a, 1), hi1, lo1);
  const __m512 hi = _mm512_maskz_insertf32x8(all, _mm512_castps256_ps512(hi0), hi1, 1);
  const __m512 lo = _mm512_maskz_insertf32x8(all, _mm512_castps256_ps512(lo0), lo1, 1);
  const __m512 e = _mm512_mul_ps(exp_approx_avx512(_mm512_sub_ps(_mm512_setzero_ps(), hi)),
                                 _mm512_sub_ps(_mm512_set1_ps(1.f), lo));  // e^-2|u|
  const __m512 den = _mm512_add_ps(e, _mm512_set1_ps(1.f));
  __m512 r = _mm512_maskz_rcp14_ps(all, den);
  r = _mm512_fmadd_ps(r, _mm512_fnmadd_ps(den, r, _mm512_set1_ps(1.f)), r);
  const __mmask16 neg = _mm512_movepi32_mask(_mm512_castps_si512(x));
  const __m512 num = _mm512_mask_blend_ps(neg, _mm512_set1_ps(1.f), e);  // x < 0: e, else 1
  return _mm512_mul_ps(_mm512_mul_ps(x, num), r);
}

EV_TARGET_AVX512 inline void bias_gelu_tanh_avx512(float* x, const float* bias, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 v = _mm512_loadu_ps(x + i);
    if (bias != nullptr) v = _mm512_add_ps(v, _mm512_loadu_ps(bias + i));
    _mm512_storeu_ps(x + i, gelu_tanh_avx512(v));
  }
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1u);
    __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    if (bias != nullptr) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, bias + i));
    _mm512_mask_storeu_ps(x + i, m, gelu_tanh_avx512(v));
  }
}
#else
inline void bias_gelu_tanh_avx512(float* x, const float* bias, int64_t n) { bias_gelu_tanh_body(x, bias, n); }
#endif
EV_TARGET_AVX2 inline void bias_gelu_tanh_avx2(float* x, const float* bias, int64_t n) {
  bias_gelu_tanh_body(x, bias, n);
}
inline void bias_gelu_tanh_base(float* x, const float* bias, int64_t n) { bias_gelu_tanh_body(x, bias, n); }
inline void bias_gelu_tanh(float* x, const float* bias, int64_t n) {
  if (use_avx512()) {
    bias_gelu_tanh_avx512(x, bias, n);
  } else if (use_avx2()) {
    bias_gelu_tanh_avx2(x, bias, n);
  } else {
    bias_gelu_tanh_base(x, bias, n);
  }
}

// QuickGELU (OpenAI CLIP's act, timm `quick_gelu`, HF `quick_gelu`): x * sigmoid(1.702 x) = x / (1 + e^(-1.702 x)),
// in fp32 with std::exp (within 2 ulp of quick_gelu_ref). Large negative x: e^(...) is inf and the result -0,
// large positive x: x; NaN stays NaN.
EV_ALWAYS_INLINE float quick_gelu(float x) { return x / (1.f + std::exp(-1.702f * x)); }
// x (n) <- quick_gelu(x) (n) [+ bias (n) first when bias != nullptr].
EV_ALWAYS_INLINE void bias_quick_gelu(float* __restrict x, const float* __restrict bias, int64_t n) {
  if (bias != nullptr) {
    for (int64_t i = 0; i < n; ++i) x[i] = quick_gelu(x[i] + bias[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) x[i] = quick_gelu(x[i]);
  }
}

}  // namespace edgevit::cpu_detail
