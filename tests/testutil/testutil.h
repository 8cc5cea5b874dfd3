// Helpers shared by the tests: error norms, deterministic random data, repository paths.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "tests/testutil/tolerances.h"

namespace edgevit::testutil {

// ||out - ref||_2 / ||ref||_2 (ref in double). Returns +inf if any out element is NaN/Inf.
double rel_error(const float* out, const double* ref, size_t n);
double rel_error(const float* out, const float* ref, size_t n);
double max_abs_error(const float* out, const float* ref, size_t n);
bool all_finite(const float* x, size_t n);

// Uniform [lo, hi) floats from a seeded engine (fresh seed per test case: pass a distinct seed).
std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.f, float hi = 1.f);

// Absolute path of a file in the repository / in ../shared/testdata/golden.
std::string source_path(const std::string& relative);
std::string golden_path(const std::string& name);
std::string binary_path(const std::string& relative);

// Index of the largest element of each row of x (rows, cols).
std::vector<int> argmax_rows(const float* x, int rows, int cols);

}  // namespace edgevit::testutil
