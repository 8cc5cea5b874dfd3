// layernorm_ref: two-pass mean / variance in double.
#include <cmath>
#include <cstdint>

#include "kernels/cpu/kernels.h"

namespace edgevit {

void layernorm_ref(const float* x,      // (M, C)
                   const float* gamma,  // (C)
                   const float* beta,   // (C)
                   float* y,            // (M, C), may alias x
                   int m, int c, float eps, int /*threads*/) {
  for (int i = 0; i < m; ++i) {
    const float* xr = x + static_cast<int64_t>(i) * c;
    float* yr = y + static_cast<int64_t>(i) * c;
    double mean = 0;
    for (int j = 0; j < c; ++j) mean += xr[j];
    mean /= c;
    double var = 0;
    for (int j = 0; j < c; ++j) var += (xr[j] - mean) * (xr[j] - mean);
    var /= c;
    const double rstd = 1.0 / std::sqrt(var + static_cast<double>(eps));
    for (int j = 0; j < c; ++j) yr[j] = static_cast<float>((xr[j] - mean) * rstd * gamma[j] + beta[j]);
  }
}

}  // namespace edgevit
