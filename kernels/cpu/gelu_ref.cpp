// gelu_ref: 0.5 x (1 + erf(x / sqrt 2)) in double, written 0.5 x erfc(-x / sqrt 2): the same function, but
// 1 + erf cancels in the left tail (at x = -8 double keeps one digit), erfc does not.
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

}  // namespace edgevit
