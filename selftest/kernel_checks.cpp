// Kernel checks at a model's real shapes: attention (the kernel a CPU plan of the model runs, then fused and
// explicit each) on the packed qkv layout the runtime uses, LayerNorm, and the GEMM with each epilogue the
// ViT block uses (qkv: none, fc1: GELU, fc2: residual add; the packed libxsmm kernels where the engine runs
// them), each against its float64-accumulating reference in kernels/cpu, normwise bound tol::kFp32Kernel
// (base/tolerances.h). Inputs are fresh for each run (the seed is reported).
#include <cmath>
#include <cstdio>
#include <random>

#include "kernels/cpu/kernels.h"
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

void layernorm_check(const KernelCheckSpec& s, std::vector<CheckResult>* out) {
  const int rows = s.batch * s.arch.num_tokens(), c = s.arch.embed_dim;
  const uint64_t seed = s.seed ^ 0x1a7e;
  Stopwatch w;
  // Offset inputs (mean ~1.5) so that a kernel that does not centre is caught.
  const std::vector<float> x = random_uniform(static_cast<size_t>(rows) * c, seed, -1.f, 4.f);
  const std::vector<float> gamma = random_uniform(c, seed + 1, 0.5f, 1.5f), beta = random_uniform(c, seed + 2, -.5f, .5f);
  std::vector<float> y(x.size(), NAN), ref(x.size());
  const float eps = static_cast<float>(s.arch.layer_norm_eps);
  layernorm_f32(x.data(), gamma.data(), beta.data(), y.data(), rows, c, eps, s.threads);
  layernorm_ref(x.data(), gamma.data(), beta.data(), ref.data(), rows, c, eps, s.threads);
  out->push_back(rel_error_check("kernel.layernorm_vs_ref", s.model, rel_error(y.data(), ref.data(), y.size()),
                                 tol::kFp32Kernel,
                                 "rows=" + std::to_string(rows) + " C=" + std::to_string(c) + " eps " + fmt_g(eps) +
                                     ", " + seed_text(seed),
                                 w.seconds()));
}

void linear_check(const KernelCheckSpec& s, const char* name, int m, int n, int k, Epilogue ep, uint64_t seed,
                  std::vector<CheckResult>* out) {
  Stopwatch w;
  const float wr = 1.0f / std::sqrt(static_cast<float>(k));  // torch Linear's init range: outputs of order 1
  const std::vector<float> x = random_uniform(static_cast<size_t>(m) * k, seed, -1.f, 1.f);
  const std::vector<float> wt = random_uniform(static_cast<size_t>(n) * k, seed + 1, -wr, wr);
  const std::vector<float> bias = random_uniform(n, seed + 2, -wr, wr);
  std::vector<float> y(static_cast<size_t>(m) * n, NAN), ref(y.size());
  if (ep == Epilogue::kResidualAdd) {
    y = random_uniform(y.size(), seed + 3, -1.f, 1.f);  // the residual stream, accumulated into in place
    ref = y;
  }
  linear_ref(x.data(), wt.data(), bias.data(), ref.data(), m, n, k, ep);
  // The GEMM the CPU engine runs for this layer: libxsmm's packed kernels where they serve the shape
  // (runtime/backend_cpu.cpp), else linear_f32.
  std::string kernel = "cpu.linear_f32 (" + std::string(cpu_gemm_library()) + ")";
  PackedLinear packed;
  std::vector<float> wp;
  std::string why = "libxsmm not available";
  if (cpu_packed_gemm_available()) {
    wp = wt;
    why = packed.init(wp.data(), m, n, k, ep);
  }
  if (why.empty()) {
    kernel = "cpu.gemm_libxsmm_packed";
    packed.run(x.data(), bias.data(), y.data(), m);
  } else {
    if (cpu_packed_gemm_available()) kernel += ", libxsmm refused: " + why;
    linear_f32(x.data(), wt.data(), bias.data(), y.data(), m, n, k, ep);
  }
  out->push_back(rel_error_check(name, s.model, rel_error(y.data(), ref.data(), y.size()), tol::kFp32Kernel,
                                 kernel + ", M=" + std::to_string(m) + " N=" + std::to_string(n) +
                                     " K=" + std::to_string(k) + ", " + seed_text(seed),
                                 w.seconds()));
}

}  // namespace

void run_cpu_kernel_checks(const KernelCheckSpec& s, std::vector<CheckResult>* out) {
  attention_checks(s, out);
  layernorm_check(s, out);
  const int m = s.batch * s.arch.num_tokens(), e = s.arch.embed_dim, hidden = s.arch.mlp_hidden();
  linear_check(s, "kernel.linear.qkv_vs_ref", m, 3 * e, e, Epilogue::kNone, s.seed ^ 0x9c1, out);
  linear_check(s, "kernel.linear.fc1_gelu_vs_ref", m, hidden, e, Epilogue::kGelu, s.seed ^ 0x9c2, out);
  linear_check(s, "kernel.linear.fc2_residual_vs_ref", m, e, hidden, Epilogue::kResidualAdd, s.seed ^ 0x9c3, out);
}

}  // namespace edgevit::selftest
