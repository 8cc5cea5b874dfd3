// Reference for count_nonfinite_f32: the plain library test, one value at a time.
#include <cmath>

#include "kernels/cpu/kernels.h"

namespace edgevit {

int64_t count_nonfinite_ref(const float* x, int64_t n) {
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i) bad += std::isfinite(x[i]) ? 0 : 1;
  return bad;
}

}  // namespace edgevit
