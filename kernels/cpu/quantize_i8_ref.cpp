// INT8 row quantization (symmetric int8, and unsigned uint8 rows) (kernels/cpu/quantize_i8_ref.h).
#include "kernels/cpu/quantize_i8_ref.h"

#include <cmath>

#include "kernels/cpu/gemm_i8_ref.h"

namespace edgevit {

float quantize_row_scale_ref(const float* x, int64_t k, float scale) {
  if (scale > 0) return scale;
  float amax = 0;
  for (int64_t c = 0; c < k; ++c) amax = std::fmax(amax, std::fabs(x[c]));
  return amax > 0 ? amax / 127.f : 1.f;
}

void quantize_rows_i8_ref(const float* x, int64_t m, int64_t k, float scale, int8_t* q, float* s) {
  for (int64_t r = 0; r < m; ++r) {
    const float* xr = x + r * k;
    const float sr = quantize_row_scale_ref(xr, k, scale);
    s[r] = sr;
    for (int64_t c = 0; c < k; ++c) q[r * k + c] = gemm_i8_quantize_ref(xr[c] / sr);
  }
}

void quantize_rows_u8_ref(const float* u, int64_t m, int64_t k, float scale, uint8_t* q, float* s) {
  for (int64_t r = 0; r < m; ++r) {
    const float* ur = u + r * k;
    float sr = scale;
    if (!(sr > 0)) {
      float umax = 0;
      for (int64_t c = 0; c < k; ++c) umax = std::fmax(umax, ur[c]);
      sr = umax > 0 ? umax / 255.f : 1.f;
    }
    s[r] = sr;
    for (int64_t c = 0; c < k; ++c) q[r * k + c] = gemm_i8_quantize_u8_ref(ur[c] / sr);
  }
}

}  // namespace edgevit
