// gelu_ref: 0.5 x (1 + erf(x / sqrt 2)) in double, written 0.5 x erfc(-x / sqrt 2): the same function, but
// 1 + erf cancels in the left tail (at x = -8 double keeps one digit), erfc does not.
// gelu_tanh_ref: 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3) (PyTorch's approximate='tanh'), in
// double, written x / (1 + e^-2u): the same function (1 + tanh u = 2 / (1 + e^-2u)), but 1 + tanh(u) cancels
// in the left tail (5 digits left at x = -6, none below u ~ -19, x ~ -7.2), this form does not. e^-2u overflows to +inf for
// very negative x: x / inf = -0, the limit.
#include <cmath>
#include <cstdint>

#include "kernels/cpu/kernels.h"

namespace edgevit {

void gelu_ref(float* x, int64_t n, int /*threads*/) {  // x (n)
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    x[i] = static_cast<float>(0.5 * v * std::erfc(-v / std::sqrt(2.0)));
  }
}

void gelu_tanh_ref(float* x, int64_t n, int /*threads*/) {  // x (n)
  const double k = std::sqrt(2.0 / 3.14159265358979323846);
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    const double u = k * (v + 0.044715 * v * v * v);
    x[i] = static_cast<float>(v / (1.0 + std::exp(-2.0 * u)));
  }
}

// quick_gelu_ref: x * sigmoid(1.702 x) = x / (1 + e^(-1.702 x)) in double (e^ overflows to +inf for very negative x:
// x / inf = -0, the limit).
void quick_gelu_ref(float* x, int64_t n, int /*threads*/) {  // x (n)
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    x[i] = static_cast<float>(v / (1.0 + std::exp(-1.702 * v)));
  }
}

}  // namespace edgevit
