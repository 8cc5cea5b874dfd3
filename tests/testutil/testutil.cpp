#include "tests/testutil/testutil.h"

#include <cmath>
#include <cstdlib>

namespace edgevit::testutil {

bool all_finite(const float* x, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (!std::isfinite(x[i])) return false;
  return true;
}

double rel_error(const float* out, const double* ref, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(out[i])) return INFINITY;
    const double d = static_cast<double>(out[i]) - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
  }
  if (den == 0) return num == 0 ? 0 : INFINITY;
  return std::sqrt(num / den);
}

double rel_error(const float* out, const float* ref, size_t n) {
  std::vector<double> r(ref, ref + n);
  return rel_error(out, r.data(), n);
}

double max_abs_error(const float* out, const float* ref, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(out[i])) return INFINITY;
    m = std::fmax(m, std::fabs(static_cast<double>(out[i]) - ref[i]));
  }
  return m;
}

std::vector<float> random_floats(size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

std::string source_path(const std::string& relative) { return std::string(EDGEVIT_SOURCE_DIR) + "/" + relative; }
std::string golden_path(const std::string& name) { return std::string(EDGEVIT_GOLDEN_DIR) + "/" + name; }
std::string binary_path(const std::string& relative) { return std::string(EDGEVIT_BINARY_DIR) + "/" + relative; }

std::vector<int> argmax_rows(const float* x, int rows, int cols) {
  std::vector<int> out(rows);
  for (int r = 0; r < rows; ++r) {
    int best = 0;
    for (int c = 1; c < cols; ++c)
      if (x[r * cols + c] > x[r * cols + best]) best = c;
    out[r] = best;
  }
  return out;
}

bool under_emulator() {
  const char* emu = std::getenv("EDGEVIT_TEST_EMULATOR");
  return emu != nullptr && emu[0] != '\0';
}

double emulation_time_scale() { return under_emulator() ? 20.0 : 1.0; }

}  // namespace edgevit::testutil
