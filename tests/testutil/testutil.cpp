#include "tests/testutil/testutil.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <gtest/gtest.h>

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

std::string temp_dir() {
  static const std::string dir = [] {
    const std::string d = ::testing::TempDir() + "edgevit_test." + std::to_string(getpid()) + "/";
    std::filesystem::create_directories(d);
    return d;
  }();
  static const struct Remover {  // destroyed before `dir` (constructed after it)
    ~Remover() {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  } remover;
  return dir;
}

ProgramRun run_program(const std::string& binary_relative, const std::string& args, Stderr mode) {
  const char* emu = std::getenv("EDGEVIT_TEST_EMULATOR");
  return run_command(std::string(emu != nullptr ? emu : "") + " " + binary_path(binary_relative) + " " + args, mode);
}

ProgramRun run_command(const std::string& command, Stderr mode) {
  const std::string err_path = std::string(std::getenv("TMPDIR") != nullptr ? std::getenv("TMPDIR") : "/tmp") +
                               "/edgevit_test_stderr." + std::to_string(getpid());
  const std::string redirect = mode == Stderr::kMerged ? " 2>&1" : mode == Stderr::kDropped ? " 2>/dev/null"
                                                                                             : " 2>" + err_path;
  const std::string cmd = command + redirect;
  ProgramRun r;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int st = pclose(p);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  if (mode == Stderr::kSeparate) {
    std::ifstream in(err_path);
    r.err.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    std::remove(err_path.c_str());
  }
  return r;
}

}  // namespace edgevit::testutil
