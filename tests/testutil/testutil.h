// Helpers shared by the tests: error norms, deterministic random data, repository paths.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "base/tolerances.h"

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

// A directory of this test process's own (GoogleTest's TempDir(), i.e. $TEST_TMPDIR or /tmp, then
// edgevit_test.<pid>/, with the trailing slash): tests that write files under fixed names put them here, so
// test runs side by side (two build trees, CI beside a developer's run) never write the same file. Made on
// first use, removed with its contents when the process exits.
std::string temp_dir();

// Index of the largest element of each row of x (rows, cols).
std::vector<int> argmax_rows(const float* x, int rows, int cols);

// Cross builds run their tests under qemu-aarch64 (toolchain/aarch64-linux-gnu.cmake sets
// EDGEVIT_TEST_EMULATOR for every test). Emulated code runs 10-50x slower, so wall-clock bounds are
// multiplied by emulation_time_scale() (1 natively), and the few cases that take minutes there (float64
// references at large shapes, ViT-Ti end to end, multi-client daemon loads) call EDGEVIT_SKIP_IF_EMULATED();
// they run natively in every CI run.
bool under_emulator();
double emulation_time_scale();

// A program of this build run to completion through the shell (popen), prefixed by EDGEVIT_TEST_EMULATOR
// when a cross build sets it: its exit code (128 + the signal when killed), stdout, and stderr kept apart
// (kSeparate, through a temporary file), appended to out (kMerged: the shell's 2>&1), or dropped.
enum class Stderr { kSeparate, kMerged, kDropped };
struct ProgramRun {
  int code = -1;
  std::string out;
  std::string err;  // kSeparate only
};
ProgramRun run_program(const std::string& binary_relative, const std::string& args, Stderr mode);
// Any shell command line, the same way (no emulator prefix: the caller's command says what runs).
ProgramRun run_command(const std::string& command, Stderr mode);

}  // namespace edgevit::testutil

// In a TEST body (needs <gtest/gtest.h>): skips the case under an emulator, saying why.
#define EDGEVIT_SKIP_IF_EMULATED()                                                                      \
  do {                                                                                                  \
    if (::edgevit::testutil::under_emulator()) {                                                        \
      GTEST_SKIP() << "too slow under emulation; runs in the native test suite";                        \
    }                                                                                                   \
  } while (0)
