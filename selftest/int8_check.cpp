// int8.vs_fp32 (selftest.h): the model at INT8, calibrated in memory on its calibration images (the
// default method and per-tensor scales, as `edgevit calibrate` makes them), against the same model at fp32 on
// those images, on the host CPU: logits within tol::kInt8EndToEnd normwise and top-1 agreement >= 99%.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "base/tolerances.h"
#include "runtime/engine.h"
#include "runtime/inputs.h"
#include "runtime/int8_calibrate.h"
#include "selftest/checks.h"

namespace edgevit::selftest {

namespace {

namespace fs = std::filesystem;

// Models with calibration images: model name -> file under the testdata directory.
struct CalibData {
  const char* model;
  const char* file;
};
constexpr CalibData kCalib[] = {
    {"vit-digits", "digits/calib_split.safetensors"},  // training images (docs/int8.md)
};

Result<std::vector<float>> logits_of(const ModelSpec& spec, Precision p, const DeviceProfile& host, const float* x,
                                     int count, int threads) {
  EngineOptions o;
  o.threads = threads;
  o.plan.precision = p;
  o.plan.batch = std::min(count, 64);
  EV_ASSIGN_OR_RETURN(std::unique_ptr<Engine> e, Engine::create(spec, host, o));
  std::vector<float> out;
  const int64_t per = e->input_numel_per_image();
  for (int i = 0; i < count; i += e->max_batch()) {
    const int n = std::min(e->max_batch(), count - i);
    EV_RETURN_IF_ERROR(e->infer(x + i * per, n));
    out.insert(out.end(), e->logits(), e->logits() + static_cast<int64_t>(n) * e->output_dim());
  }
  return out;
}

Result<CheckResult> compare(const ModelSpec& spec, const DeviceProfile& host, const std::string& file, bool quick,
                            int threads) {
  Stopwatch w;
  EV_ASSIGN_OR_RETURN(InputBatch in, load_input_file(file, spec));
  const int count = quick ? std::min(in.count, 64) : in.count;
  ModelSpec fp32 = spec;
  fp32.precision = Precision::kFp32;
  EV_ASSIGN_OR_RETURN(Int8Scales scales, calibrate_int8(fp32, host, in.data.data(), count, CalibOptions()));
  ModelSpec int8 = fp32;
  int8.precision = Precision::kInt8;
  int8.int8_activations = Int8Activations::kNormPerToken;
  int8.int8_scales_path =
      (fs::temp_directory_path() / ("edgevit-selftest-int8-" + std::to_string(getpid()) + ".safetensors")).string();
  EV_RETURN_IF_ERROR(write_int8_scales(int8.int8_scales_path, scales));
  Result<std::vector<float>> q = logits_of(int8, Precision::kInt8, host, in.data.data(), count, threads);
  std::error_code ec;
  fs::remove(int8.int8_scales_path, ec);
  if (!q.ok()) return q.status();
  EV_ASSIGN_OR_RETURN(std::vector<float> ref, logits_of(fp32, Precision::kFp32, host, in.data.data(), count, threads));
  const size_t dim = ref.size() / static_cast<size_t>(count);
  int agree = 0;
  for (size_t i = 0; i < static_cast<size_t>(count); ++i) {
    const float* a = ref.data() + i * dim;
    const float* b = q->data() + i * dim;
    agree += std::max_element(a, a + dim) - a == std::max_element(b, b + dim) - b;
  }
  const double err = rel_error(q->data(), ref.data(), ref.size());
  const double agreement = static_cast<double>(agree) / count;
  CheckResult c = rel_error_check("int8.vs_fp32", spec.name, err, tol::kInt8EndToEnd, "", w.seconds());
  c.measured += ", top-1 agreement " + std::to_string(agree) + "/" + std::to_string(count);
  c.bound += ", agreement >= " + fmt_g(tol::kInt8Top1Agreement);
  if (agreement < tol::kInt8Top1Agreement) c.outcome = Outcome::kFail;
  c.detail = std::to_string(count) + " calibration images of " + file + " (calibrated on the same, " + scales.method +
             ", per tensor), host CPU " + host.name;
  return c;
}

}  // namespace

CheckResult int8_vs_fp32_check(const ModelSpec& spec, const DeviceProfile& host, const std::vector<std::string>& dirs,
                               bool quick, int threads) {
  const char* rel = nullptr;
  for (const CalibData& d : kCalib)
    if (spec.name == d.model) rel = d.file;
  CheckResult skip;
  skip.name = "int8.vs_fp32";
  skip.model = spec.name;
  skip.outcome = Outcome::kSkip;
  if (rel == nullptr) {
    skip.detail = "skipped: no calibration images for " + spec.name;
    return skip;
  }
  std::string file;
  std::error_code ec;
  for (const std::string& d : dirs)
    if (file.empty() && fs::is_regular_file(fs::path(d) / rel, ec)) file = (fs::path(d) / rel).string();
  if (file.empty()) {
    skip.detail = std::string("skipped: no ") + rel + " in the testdata directories";
    return skip;
  }
  Result<CheckResult> c = compare(spec, host, file, quick, threads);
  if (c.ok()) return *c;
  CheckResult f = skip;
  f.outcome = Outcome::kFail;
  f.measured = "error";
  f.detail = c.status().to_string();
  return f;
}

}  // namespace edgevit::selftest
