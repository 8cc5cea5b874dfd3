// Internal to edgevit_selftest: the kernel checks (kernel_checks.cpp, cuda_checks.cpp) and helpers shared
// by the check files.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "platform/device_profile.h"
#include "runtime/model_spec.h"
#include "selftest/selftest.h"

namespace edgevit::selftest {

// The shapes and settings the kernel checks run at.
struct KernelCheckSpec {
  std::string model;
  VitArch arch;
  int batch = 1;            // images (rows = batch * tokens)
  uint64_t seed = 0;        // fresh inputs per model; reported in each check's detail
  int threads = 1;
  bool wrong_scale = false; // Fault::kAttentionScale: kernels under test get scale 1 instead of 1/sqrt(D)
  // What a CPU plan of this model runs for attention (Plan::attention_kernel, e.g. "cpu.mha_fused_f32") and
  // why: kernel.attention.planned_vs_ref checks that kernel, whatever the head_dim.
  std::string cpu_attention_kernel;
  std::string cpu_attention_reason;
};

// CPU fp32 kernels vs their float64 references (kernels/cpu/kernels.h).
void run_cpu_kernel_checks(const KernelCheckSpec& spec, std::vector<CheckResult>* out);
// CUDA fp16 attention launchers (kernels/cuda/mha.h) vs the reference; skipped without CUDA or a GPU.
void run_cuda_kernel_checks(const KernelCheckSpec& spec, std::vector<CheckResult>* out);

// int8.vs_fp32 (int8_check.cpp): the model calibrated and run at INT8 on its calibration images against fp32,
// on the host CPU; skipped (saying so) for a model without calibration images. `dirs`: the testdata dirs.
CheckResult int8_vs_fp32_check(const ModelSpec& spec, const DeviceProfile& host, const std::vector<std::string>& dirs,
                               bool quick, int threads);

// gpio.loopback on the libgpiod backend (gpio_check.cpp).
CheckResult run_gpio_loopback(const GpioLoopback& g);

// "%.3g".
std::string fmt_g(double v);

class Stopwatch {
 public:
  double seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count(); }

 private:
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
};

// Uniform [lo, hi) floats from a 64-bit seed.
std::vector<float> random_uniform(size_t n, uint64_t seed, float lo, float hi);

// ||out - ref|| / ||ref|| in double; +inf if out has a NaN/Inf.
double rel_error(const float* out, const float* ref, size_t n);
double max_abs_error(const float* out, const float* ref, size_t n);

// A pass/fail check of "rel_err <= bound".
CheckResult rel_error_check(const std::string& name, const std::string& model, double err, double bound,
                            const std::string& detail, double seconds);

}  // namespace edgevit::selftest
