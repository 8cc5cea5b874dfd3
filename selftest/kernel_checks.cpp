// Kernel checks at a model's real shapes:
//   kernel.attention.*  the attention kernel a CPU plan of the model runs, then fused and explicit each, on
//                       the packed qkv layout the runtime uses (the attention-scale fault makes them fail);
//   kernel.op.*         the shared op-case list (runtime/op_check.h) at the model's shapes: every op of its
//                       stem, first block and head on every CPU op-table row this build can run;
// each against its float64-accumulating reference in kernels/cpu, normwise bound tol::kFp32Kernel
// (base/tolerances.h). Inputs are fresh for each run (the seed is reported).
#include <cmath>
#include <cstdio>
#include <random>

#include "kernels/cpu/kernels.h"
#include "runtime/op_check.h"
#include "selftest/checks.h"
#include "base/tolerances.h"

namespace edgevit::selftest {

std::string fmt_g(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

std::vector<float> random_uniform(size_t n, uint64_t seed, float lo, float hi) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

double rel_error(const float* out, const float* ref, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(out[i])) return INFINITY;
    const double d = static_cast<double>(out[i]) - ref[i];
    num += d * d;
    den += static_cast<double>(ref[i]) * ref[i];
  }
  if (den == 0) return num == 0 ? 0 : INFINITY;
  return std::sqrt(num / den);
}

double max_abs_error(const float* out, const float* ref, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(out[i])) return INFINITY;
    m = std::fmax(m, std::fabs(static_cast<double>(out[i]) - ref[i]));
  }
  return m;
}

CheckResult rel_error_check(const std::string& name, const std::string& model, double err, double bound,
                            const std::string& detail, double seconds) {
  CheckResult c;
  c.name = name;
  c.model = model;
  c.outcome = err <= bound ? Outcome::kPass : Outcome::kFail;  // NaN/Inf compare false: fail
  c.measured = "rel_err " + fmt_g(err);
  c.bound = "<= " + fmt_g(bound);
  c.detail = detail;
  c.seconds = seconds;
  return c;
}

namespace {

std::string seed_text(uint64_t seed) { return "seed " + std::to_string(seed); }

void attention_checks(const KernelCheckSpec& s, std::vector<CheckResult>* out) {
  const VitArch& a = s.arch;
  const int B = s.batch, T = a.num_tokens(), H = a.num_heads, D = a.head_dim(), E = a.embed_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const AttnParams ref_p = attn_params_packed_qkv(B, T, H, D, scale);
  AttnParams test_p = ref_p;
  if (s.wrong_scale) test_p.scale = 1.0f;
  const uint64_t seed = s.seed ^ 0xa77e;
  const std::vector<float> qkv = random_uniform(static_cast<size_t>(B) * T * 3 * E, seed, -2.f, 2.f);
  const float* q = qkv.data();
  const float* k = q + packed_k_offset(H, D);
  const float* v = q + packed_v_offset(H, D);
  const size_t n = static_cast<size_t>(B) * T * E;
  const std::string shape = "B=" + std::to_string(B) + " S=" + std::to_string(T) + " H=" + std::to_string(H) +
                            " D=" + std::to_string(D) + " packed qkv, " + seed_text(seed);
  std::vector<float> ref(n);
  mha_ref(ref_p, q, k, v, ref.data(), s.threads);

  const std::string kFused = "cpu.mha_fused_f32", kExplicit = "cpu.mha_explicit_f32";
  // Runs one CPU attention kernel at this shape (output poisoned with NaN first) and compares it with the
  // float64 reference.
  auto check_kernel = [&](const std::string& name, const std::string& kernel, const std::string& note) {
    if (kernel == kFused && D > kMhaFusedMaxHeadDim) {
      // Not run: the kernel asserts (debug) or fills NaN (release) there. A plan that chose it fails here.
      CheckResult c;
      c.name = name;
      c.model = s.model;
      c.outcome = Outcome::kFail;
      c.measured = kernel + " at head_dim " + std::to_string(D);
      c.bound = "head_dim <= kMhaFusedMaxHeadDim " + std::to_string(kMhaFusedMaxHeadDim);
      c.detail = shape + note;
      return c;
    }
    Stopwatch w;
    std::vector<float> o(n, NAN);
    if (kernel == kFused) {
      mha_fused_f32(test_p, q, k, v, o.data(), s.threads);
    } else {
      std::vector<float> scratch(mha_explicit_scratch_floats(test_p, s.threads));
      mha_explicit_f32(test_p, q, k, v, o.data(), scratch.data(), s.threads);
    }
    return rel_error_check(name, s.model, rel_error(o.data(), ref.data(), n), tol::kFp32Kernel,
                           kernel + ", " + shape + ", max_abs " + fmt_g(max_abs_error(o.data(), ref.data(), n)) + note,
                           w.seconds());
  };

  // The kernel the plan runs, at the model's own head_dim and sequence length: never skipped.
  if (s.cpu_attention_kernel == kFused || s.cpu_attention_kernel == kExplicit) {
    out->push_back(check_kernel("kernel.attention.planned_vs_ref", s.cpu_attention_kernel,
                                "; the plan's choice: " + s.cpu_attention_reason));
  } else {
    CheckResult c;
    c.name = "kernel.attention.planned_vs_ref";
    c.model = s.model;
    c.outcome = Outcome::kFail;
    c.measured = "the CPU plan names attention kernel '" + s.cpu_attention_kernel + "'";
    c.bound = kFused + " or " + kExplicit;
    c.detail = shape;
    out->push_back(c);
  }
  // The fused kernel wherever the plan runs it or it claims the head_dim (a plan that chose it beyond its
  // limit fails here and above, rather than skipping).
  if (s.cpu_attention_kernel == kFused || D <= kMhaFusedMaxHeadDim) {
    out->push_back(check_kernel("kernel.attention.fused_vs_ref", kFused, ""));
  } else {
    CheckResult c;
    c.name = "kernel.attention.fused_vs_ref";
    c.model = s.model;
    c.detail = "skipped: head_dim " + std::to_string(D) + " > kMhaFusedMaxHeadDim " +
               std::to_string(kMhaFusedMaxHeadDim) + " and the plan runs " + s.cpu_attention_kernel +
               " (checked by kernel.attention.planned_vs_ref)";
    out->push_back(c);
  }
  out->push_back(check_kernel("kernel.attention.explicit_vs_ref", kExplicit, ""));
}

// The op-case list at the model's shapes, every available CPU row: one check per (op, row).
void op_case_checks(const KernelCheckSpec& s, std::vector<CheckResult>* out) {
  ModelSpec spec;
  spec.name = s.model;
  spec.arch = s.arch;
  DeviceProfile host;
  host.name = "host";
  host.kind = DeviceKind::kCpu;
  host.cpu_cores = s.threads;
  auto device = cpu_op_case_device();
  uint32_t seed = static_cast<uint32_t>(s.seed ^ 0x0c5e);
  for (const OpCase& c : model_op_cases(spec, s.batch, Precision::kFp32)) {
    Stopwatch w;
    auto results = run_op_case(c, host, *device, ++seed);
    if (!results.ok()) {
      CheckResult r;
      r.name = "kernel.op." + c.op;
      r.model = s.model;
      r.outcome = Outcome::kFail;
      r.measured = "could not run";
      r.detail = results.status().to_string();
      out->push_back(r);
      continue;
    }
    for (const OpCaseResult& r : *results)
      out->push_back(rel_error_check("kernel.op." + c.op + "[" + r.row + "]", s.model, r.error, r.bound,
                                     r.kernel + ", batch " + std::to_string(s.batch) + ", " + seed_text(seed),
                                     w.seconds()));
  }
}

}  // namespace

void run_cpu_kernel_checks(const KernelCheckSpec& s, std::vector<CheckResult>* out) {
  attention_checks(s, out);
  op_case_checks(s, out);
}

}  // namespace edgevit::selftest
