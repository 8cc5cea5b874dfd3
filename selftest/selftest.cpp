// run_selftest: platform report, plan decisions, then the checks of selftest.h for each configured model.
//
//   config dirs ─► detect/choose the device profile ─► per model: plan (decisions, memory.plan_fits)
//               ─► engine on the execution device (the detected one, or the host CPU when this build
//                  cannot run it) ─► kernel.* at the model's shapes ─► e2e.* vs stored outputs ─► memory.*
#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <random>

#include "kernels/cpu/kernels.h"
#include "platform/device_registry.h"
#include "runtime/config.h"
#include "runtime/engine.h"
#include "runtime/safetensors.h"
#include "selftest/alloc_counter.h"
#include "selftest/checks.h"
#include "selftest/memory_checks.h"
#include "base/tolerances.h"

namespace edgevit::selftest {
namespace fs = std::filesystem;

const char* to_string(Outcome o) {
  switch (o) {
    case Outcome::kPass: return "pass";
    case Outcome::kFail: return "fail";
    case Outcome::kSkip: return "skip";
  }
  return "?";
}

int SelftestReport::count(Outcome o) const {
  return static_cast<int>(std::count_if(checks.begin(), checks.end(), [o](const CheckResult& c) { return c.outcome == o; }));
}

Result<Fault> parse_fault(const std::string& name) {
  if (name.empty() || name == "none") return Fault::kNone;
  if (name == "attention-scale") return Fault::kAttentionScale;
  if (name == "corrupt-weight") return Fault::kCorruptWeight;
  if (name == "unplanned-allocation") return Fault::kUnplannedAllocation;
  return invalid_argument("--inject-fault must be attention-scale, corrupt-weight or unplanned-allocation, got '" +
                          name + "'");
}

int64_t unplanned_bytes_bound(int64_t planned) { return std::max<int64_t>(int64_t{1} << 20, planned / 100); }

int64_t unplanned_fault_bytes(const Plan& plan) {
  const int64_t planned = plan.host_total_bytes;
  return (planned + unplanned_bytes_bound(planned) + (1 << 20)) / 2;
}

int selftest_exit_code(const Result<SelftestReport>& result) {
  if (!result.ok()) return 2;
  return result->passed() ? 0 : 1;
}

#ifndef EDGEVIT_HAVE_CUDA
void run_cuda_kernel_checks(const KernelCheckSpec& s, std::vector<CheckResult>* out) {
  for (const char* name : {"kernel.attention.cuda_fused_vs_ref", "kernel.attention.cuda_unfused_vs_ref"}) {
    CheckResult c;
    c.name = name;
    c.model = s.model;
    c.detail = "skipped: this build has no CUDA backend";
    out->push_back(c);
  }
}
#endif

namespace {

const char* fault_name(Fault f) {
  switch (f) {
    case Fault::kNone: return "";
    case Fault::kAttentionScale: return "attention-scale";
    case Fault::kCorruptWeight: return "corrupt-weight";
    case Fault::kUnplannedAllocation: return "unplanned-allocation";
  }
  return "";
}

// Models with stored expected outputs: model name -> file under the testdata directory.
struct ExpectedOutputs {
  const char* model;
  const char* file;
};
constexpr ExpectedOutputs kExpected[] = {
    {"vit-digits", "digits/test_split.safetensors"},  // tests/data/digits (docs/digits.md)
};

const char* expected_file_for(const std::string& model) {
  for (const auto& e : kExpected)
    if (model == e.model) return e.file;
  return nullptr;
}

// Installed: <prefix>/share/edgevit/{config,testdata}; source tree: config/ and tests/data/.
std::vector<std::string> testdata_dirs(const SelftestOptions& o, const std::vector<std::string>& bases) {
  if (!o.testdata_dir.empty()) return {o.testdata_dir};
  std::vector<std::string> dirs;
  std::error_code ec;
  for (const std::string& b : bases)
    for (const char* rel : {"../testdata", "../tests/data"}) {
      const fs::path d = (fs::path(b) / rel).lexically_normal();
      if (fs::is_directory(d, ec)) dirs.push_back(d.string());
    }
  return dirs;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s.empty() ? "(none)" : s;
}

Result<std::string> resolve_model(const std::string& name_or_path, const std::vector<std::string>& model_dirs) {
  std::error_code ec;
  const bool is_path = name_or_path.find('/') != std::string::npos ||
                       (name_or_path.size() > 5 && name_or_path.compare(name_or_path.size() - 5, 5, ".yaml") == 0);
  if (is_path) return name_or_path;
  for (const std::string& d : model_dirs) {
    const fs::path p = fs::path(d) / (name_or_path + ".yaml");
    if (fs::is_regular_file(p, ec)) return p.string();
  }
  return not_found("model '" + name_or_path + "': no " + name_or_path + ".yaml in the model directories (" +
                   join(model_dirs) + ")");
}

ModelDecision make_decision(const ModelSpec& spec, const Plan& plan, const std::string& role) {
  ModelDecision d;
  d.model = spec.name;
  d.config_path = spec.source_path;
  d.device = plan.device.name;
  d.role = role;
  d.precision = to_string(plan.graph.precision);
  d.attention_kernel = plan.attention_kernel;
  d.attention_reason = plan.attention_reason;
  d.attention_fallback = plan.attention_fallback;
  d.batch = plan.graph.batch;
  d.arena_bytes = plan.arena_bytes;
  d.total_bytes = plan.total_bytes;
  d.budget_bytes = plan.budget_bytes;
  d.fits = plan.fits;
  d.plan_hash = plan.hash_hex();
  for (const Op& op : plan.graph.ops) {
    auto it = std::find_if(d.ops.begin(), d.ops.end(), [&](const OpChoice& c) {
      return c.kernel == op.kernel && c.reason == op.reason && c.op_kind == to_string(op.kind);
    });
    if (it != d.ops.end()) {
      ++it->count;
    } else {
      d.ops.push_back(OpChoice{to_string(op.kind), op.kernel, op.reason, 1, op.name});
    }
  }
  return d;
}

CheckResult plan_fits_check(const std::string& model, const Plan& plan) {
  CheckResult c;
  c.name = "memory.plan_fits";
  c.model = model;
  c.outcome = plan.fits ? Outcome::kPass : Outcome::kFail;
  c.measured = std::to_string(plan.total_bytes) + " bytes (arena " + std::to_string(plan.arena_bytes) + ")";
  c.bound = "<= budget " + std::to_string(plan.budget_bytes) + " bytes of " + plan.device.name;
  c.detail = "batch " + std::to_string(plan.graph.batch) + ", plan " + plan.hash_hex();
  return c;
}

CheckResult skipped(const std::string& name, const std::string& model, const std::string& why) {
  CheckResult c;
  c.name = name;
  c.model = model;
  c.detail = why;
  return c;
}

struct ExpectedData {
  std::string path;
  int count = 0;
  std::vector<float> input;        // (N, C, H, W)
  std::vector<float> logits;       // (N, classes)
  std::vector<float> predictions;  // (N)
};

Result<std::vector<float>> read_tensor(const SafetensorsFile& f, const std::string& name, int64_t expect_numel) {
  const TensorInfo* t = f.find(name);
  if (t == nullptr) return checkpoint_error(f.path() + ": no tensor '" + name + "'");
  if (t->numel != expect_numel)
    return checkpoint_error(f.path() + ": tensor '" + name + "' has " + std::to_string(t->numel) +
                            " elements, expected " + std::to_string(expect_numel));
  std::vector<float> v(static_cast<size_t>(t->numel));
  convert_to_f32(*t, f.data(*t), v.data());
  return v;
}

Result<ExpectedData> load_expected(const std::string& path, const ModelSpec& spec) {
  EV_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::open(path));
  const TensorInfo* pred = f.find("predictions");
  if (pred == nullptr || pred->shape.size() != 1)
    return checkpoint_error(path + ": expected a 1-D tensor 'predictions'");
  ExpectedData d;
  d.path = path;
  d.count = static_cast<int>(pred->shape[0]);
  const VitArch& a = spec.arch;
  const int64_t per = static_cast<int64_t>(a.in_chans) * a.img_h * a.img_w;
  const int64_t classes = a.num_classes > 0 ? a.num_classes : a.embed_dim;
  EV_ASSIGN_OR_RETURN(d.input, read_tensor(f, "input", d.count * per));
  EV_ASSIGN_OR_RETURN(d.logits, read_tensor(f, "logits", d.count * classes));
  EV_ASSIGN_OR_RETURN(d.predictions, read_tensor(f, "predictions", d.count));
  return d;
}

int argmax(const float* row, int n) {
  int best = 0;
  for (int i = 1; i < n; ++i)
    if (row[i] > row[best]) best = i;
  return best;
}

// e2e.predictions and e2e.logits over the first `count` stored images.
void e2e_checks(Engine& e, const ExpectedData& x, int count, const std::string& model, std::vector<CheckResult>* out) {
  Stopwatch w;
  const int classes = e.output_dim();
  const int64_t per = e.input_numel_per_image();
  std::vector<float> ours(static_cast<size_t>(count) * classes);
  for (int start = 0; start < count; start += e.max_batch()) {
    const int n = std::min(e.max_batch(), count - start);
    const Status s = e.infer(x.input.data() + per * start, n);
    if (!s.ok()) {
      CheckResult c = skipped("e2e.logits", model, "");
      c.outcome = Outcome::kFail;
      c.measured = "infer failed: " + s.to_string();
      c.bound = "ok";
      out->push_back(c);
      return;
    }
    std::copy(e.logits(), e.logits() + static_cast<size_t>(n) * classes, ours.begin() + static_cast<size_t>(start) * classes);
  }
  int differ = 0, first_diff = -1;
  for (int i = 0; i < count; ++i) {
    if (argmax(ours.data() + static_cast<size_t>(i) * classes, classes) != static_cast<int>(x.predictions[i])) {
      if (first_diff < 0) first_diff = i;
      ++differ;
    }
  }
  const std::string subset = std::to_string(count) + " of " + std::to_string(x.count) + " stored images (" + x.path + ")";
  CheckResult p;
  p.name = "e2e.predictions";
  p.model = model;
  p.outcome = differ == 0 ? Outcome::kPass : Outcome::kFail;
  p.measured = std::to_string(differ) + " differ" + (first_diff >= 0 ? " (first: image " + std::to_string(first_diff) + ")" : "");
  p.bound = "0 differ";
  p.detail = subset;
  p.seconds = w.seconds();
  out->push_back(p);
  const bool fp16 = e.plan().graph.precision == Precision::kFp16;
  const double bound = fp16 ? tol::kFp16EndToEnd : tol::kFp32EndToEnd;
  out->push_back(rel_error_check("e2e.logits", model, rel_error(ours.data(), x.logits.data(), ours.size()), bound,
                                 subset + ", " + to_string(e.plan().graph.precision) + ", max_abs " +
                                     fmt_g(max_abs_error(ours.data(), x.logits.data(), ours.size())),
                                 w.seconds()));
}

// numerics.outputs_finite: one inference of `input` returns ok and every logit and pre_logit is finite.
CheckResult finite_check(Engine& e, const float* input, int n, const std::string& model) {
  Stopwatch w;
  CheckResult c;
  c.name = "numerics.outputs_finite";
  c.model = model;
  c.bound = "infer ok, 0 non-finite";
  c.detail = "batch " + std::to_string(n) + ", logits and pre_logits";
  const Status s = e.infer(input, n);
  if (!s.ok()) {
    c.outcome = Outcome::kFail;
    c.measured = "infer: " + s.to_string();
    c.seconds = w.seconds();
    return c;
  }
  int64_t bad = 0;
  std::string first;
  auto scan = [&](const char* what, const float* x, int per) {
    for (int64_t i = 0; i < static_cast<int64_t>(n) * per; ++i) {
      if (std::isfinite(x[i])) continue;
      if (bad++ == 0)
        first = std::string(what) + "[" + std::to_string(i / per) + "][" + std::to_string(i % per) + "] = " +
                fmt_g(x[i]);
    }
  };
  scan("logits", e.logits(), e.output_dim());
  scan("pre_logits", e.pre_logits(), e.embed_dim());
  c.outcome = bad == 0 ? Outcome::kPass : Outcome::kFail;
  c.measured = std::to_string(bad) + " non-finite" + (bad > 0 ? " (first: " + first + ")" : "");
  c.seconds = w.seconds();
  return c;
}

// Fault::kUnplannedAllocation's memory: one anonymous mapping and one heap block, touched, held until
// run_model returns (the engine's lifetime).
class UnplannedMemory {
 public:
  UnplannedMemory() = default;
  UnplannedMemory(const UnplannedMemory&) = delete;
  UnplannedMemory& operator=(const UnplannedMemory&) = delete;
  ~UnplannedMemory() {
    if (map_ != nullptr) munmap(map_, bytes_);
  }
  void allocate(int64_t bytes) {  // `bytes` mapped and `bytes` on the heap
    bytes_ = static_cast<size_t>(bytes);
    void* m = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m != MAP_FAILED) {
      map_ = m;
      std::memset(map_, 1, bytes_);
    }
    heap_.reset(new char[bytes_]);
    std::memset(heap_.get(), 1, bytes_);
  }

 private:
  size_t bytes_ = 0;
  void* map_ = nullptr;
  std::unique_ptr<char[]> heap_;
};

CheckResult available_now_check(const std::string& model, const Plan& plan, const PlatformInfo& p) {
  if (p.mem_available_bytes <= 0)
    return skipped("memory.available_now", model, "skipped: no MemAvailable in " + p.meminfo_source);
  CheckResult c;
  c.name = "memory.available_now";
  c.model = model;
  c.outcome = plan.total_bytes <= p.mem_available_bytes ? Outcome::kPass : Outcome::kFail;
  c.measured = std::to_string(plan.total_bytes) + " bytes needed";
  c.bound = "<= MemAvailable " + std::to_string(p.mem_available_bytes) + " bytes";
  c.detail = "at start-up, " + p.meminfo_source;
  return c;
}

// The host CPU as a device: what detection would pick with no device tree and no CUDA.
Result<DeviceProfile> host_cpu_profile(const std::vector<std::string>& dev_dirs, const PlatformPaths& paths) {
  DetectOptions o = paths.detect;
  o.device_tree_model = "";
  o.query_cuda = false;
  EV_ASSIGN_OR_RETURN(Detection d, detect_device(dev_dirs, o));
  return d.profile;
}

// The engine on the target, or on the host CPU when this build has no backend for it, and
// memory.arena_single_allocation over its create() and first inference. *e stays null when the model does not
// fit the device: its engine checks are reported as skipped. `unplanned` holds Fault::kUnplannedAllocation's
// memory for the engine's lifetime.
Status create_engine(const ModelSpec& spec, const std::string& path, const SelftestOptions& o,
                     const std::vector<std::string>& dev_dirs, const DeviceProfile& target, int threads,
                     SelftestReport* r, std::unique_ptr<Engine>* e, UnplannedMemory* unplanned) {
  const std::string& model = spec.name;
  EngineOptions eo;
  eo.threads = threads;
  eo.fault = o.fault == Fault::kAttentionScale ? InjectedFault::kWrongAttentionScale
             : o.fault == Fault::kCorruptWeight ? InjectedFault::kCorruptWeightByte
                                                 : InjectedFault::kNone;
  // Everything create() and the first inference allocate is counted (memory.arena_single_allocation).
  std::optional<MemoryWindow> window(std::in_place);
  auto engine = Engine::create(spec, target, eo);
  if (!engine.ok() && engine.status().code() == StatusCode::kUnsupported && target.kind == DeviceKind::kCuda) {
    window.reset();
    EV_ASSIGN_OR_RETURN(const DeviceProfile host, host_cpu_profile(dev_dirs, o.paths));
    r->notes.push_back(model + ": " + target.name + " cannot run in this build (" + engine.status().message() +
                       "); the engine checks run on the host CPU (" + host.name + ")");
    EV_ASSIGN_OR_RETURN(const Plan host_plan, make_plan(spec, host, PlanOptions()));
    r->decisions.push_back(make_decision(spec, host_plan, "execution device (the build cannot run " + target.name + ")"));
    r->checks.push_back(plan_fits_check(model, host_plan));
    window.emplace();
    engine = Engine::create(spec, host, eo);
  }
  const std::vector<std::string> engine_checks = {"e2e.predictions", "e2e.logits", "numerics.outputs_finite",
                                                  "memory.available_now", "memory.arena_single_allocation",
                                                  "memory.zero_allocations", "memory.no_new_mappings",
                                                  "memory.bit_identical"};
  if (engine.ok()) {
    *e = std::move(engine).value();
    Engine& en = **e;
    if (o.fault == Fault::kUnplannedAllocation) unplanned->allocate(unplanned_fault_bytes(en.plan()));
    // The first inference, at the engine's full batch: every activation byte and the kernels' first-use
    // buffers exist after it. Its outputs are not judged here (numerics.outputs_finite does that).
    const int64_t numel = static_cast<int64_t>(en.max_batch()) * en.input_numel_per_image();
    std::fill(en.input_buffer(), en.input_buffer() + numel, 0.f);
    const Status first = en.infer(en.input_buffer(), en.max_batch());
    const MemoryUse use = window->finish();
    r->checks.push_back(arena_check(en, use,
                                    "Engine::create and a first infer of batch " + std::to_string(en.max_batch()) +
                                        (first.ok() ? "" : " (" + first.to_string() + ")"),
                                    model));
  } else if (engine.status().code() == StatusCode::kDoesNotFit) {
    window->finish();
    for (const auto& n : engine_checks) r->checks.push_back(skipped(n, model, "skipped: " + engine.status().message()));
  } else {
    window->finish();
    return engine.status().with_context("model " + path);
  }
  return Status::Ok();
}

// The checks of a created engine: memory.available_now, end to end against stored outputs (whose first
// images also feed the memory checks; random inputs where none are stored), numerics.outputs_finite and the
// repeated-inference memory checks.
Status run_engine_checks(Engine& e, const ModelSpec& spec, const SelftestOptions& o,
                     const std::vector<std::string>& bases, uint64_t seed, SelftestReport* r) {
  const std::string& model = spec.name;
  r->checks.push_back(available_now_check(model, e.plan(), r->platform));
  std::vector<float> input;
  int batch = std::min(e.max_batch(), o.quick ? 8 : e.max_batch());
  if (const char* rel = expected_file_for(model)) {
    const std::vector<std::string> dirs = testdata_dirs(o, bases);
    std::string file;
    std::error_code ec;
    for (const std::string& d : dirs)
      if (file.empty() && fs::is_regular_file(fs::path(d) / rel, ec)) file = (fs::path(d) / rel).string();
    if (file.empty())
      return not_found("expected outputs of " + model + ": no " + rel + " in the testdata directories (" + join(dirs) +
                       "); pass --testdata DIR");
    EV_ASSIGN_OR_RETURN(const ExpectedData x, load_expected(file, spec));
    e2e_checks(e, x, o.quick ? std::min(x.count, e.max_batch()) : x.count, model, &r->checks);
    batch = std::min(batch, x.count);
    input.assign(x.input.begin(), x.input.begin() + batch * e.input_numel_per_image());
  } else {
    r->checks.push_back(skipped("e2e.predictions", model, "skipped: no stored expected outputs for " + model));
    r->checks.push_back(skipped("e2e.logits", model, "skipped: no stored expected outputs for " + model));
    input = random_uniform(static_cast<size_t>(batch) * e.input_numel_per_image(), seed ^ 0x1e2e, -1.f, 1.f);
  }
  r->checks.push_back(finite_check(e, input.data(), batch, model));
  const int runs = o.repeat_runs > 0 ? o.repeat_runs : (o.quick ? 20 : 200);
  memory_checks(e, input.data(), batch, runs, model, &r->checks);
  return Status::Ok();
}

Status run_model(const std::string& model_arg, const SelftestOptions& o, const std::vector<std::string>& bases,
                 const DeviceProfile& target, const std::string& target_role, uint64_t seed, int threads,
                 SelftestReport* r) {
  const std::vector<std::string> dev_dirs = config_subdirs(bases, "devices");
  EV_ASSIGN_OR_RETURN(const std::string path, resolve_model(model_arg, config_subdirs(bases, "models")));
  EV_ASSIGN_OR_RETURN(const ModelSpec spec, load_model_spec(path));
  const std::string& model = spec.name;

  // Decisions and budget on the target device.
  EV_ASSIGN_OR_RETURN(const Plan target_plan, make_plan(spec, target, PlanOptions()));
  r->decisions.push_back(make_decision(spec, target_plan, target_role));
  r->checks.push_back(plan_fits_check(model, target_plan));
  if (target_plan.attention_fallback)
    r->notes.push_back(model + ": attention falls back to " + target_plan.attention_kernel + " on " + target.name +
                       ": " + target_plan.attention_reason);

  // What the CPU kernel checks hold to: the attention kernel a CPU plan of this model runs.
  Plan cpu_plan = target_plan;
  if (target.kind != DeviceKind::kCpu) {
    EV_ASSIGN_OR_RETURN(const DeviceProfile host, host_cpu_profile(dev_dirs, o.paths));
    EV_ASSIGN_OR_RETURN(cpu_plan, make_plan(spec, host, PlanOptions()));
  }

  std::unique_ptr<Engine> e;
  UnplannedMemory unplanned;
  EV_RETURN_IF_ERROR(create_engine(spec, path, o, dev_dirs, target, threads, r, &e, &unplanned));

  // Kernel checks at the model's shapes (quick: one image; full: the engine's batch).
  KernelCheckSpec ks;
  ks.model = model;
  ks.arch = spec.arch;
  ks.cpu_attention_kernel = cpu_plan.attention_kernel;
  ks.cpu_attention_reason = cpu_plan.attention_reason;
  ks.batch = o.quick ? 1 : (e ? e->max_batch() : std::max(1, spec.max_batch));
  ks.seed = seed;
  ks.threads = threads;
  ks.wrong_scale = o.fault == Fault::kAttentionScale;
  run_cpu_kernel_checks(ks, &r->checks);
  run_cuda_kernel_checks(ks, &r->checks);
  if (!e) return Status::Ok();
  return run_engine_checks(*e, spec, o, bases, seed, r);
}

}  // namespace

Result<SelftestReport> run_selftest(const SelftestOptions& o) {
  Stopwatch total;
  SelftestReport r;
  r.quick = o.quick;
  r.fault = fault_name(o.fault);
  r.seed = o.seed;
  if (r.seed == 0) {
    std::random_device rd;
    r.seed = (static_cast<uint64_t>(rd()) << 32 | rd()) | 1;
  }
  if (o.threads < 0) return invalid_argument("threads must be >= 0 (0 = all cores), got " + std::to_string(o.threads));
  const std::vector<std::string> bases = o.config_dirs.empty() ? default_config_dirs(nullptr) : o.config_dirs;
  const std::vector<std::string> dev_dirs = config_subdirs(bases, "devices");
  if (dev_dirs.empty())
    return not_found("no devices/ directory in the config directories (" + join(bases) +
                     "); set EDGEVIT_CONFIG_DIR or pass --config-dir");
  EV_ASSIGN_OR_RETURN(r.platform, read_platform_info(dev_dirs, o.paths));

  DeviceProfile target = r.platform.detected.profile;
  std::string role = "detected device (" + r.platform.detected.source + ")";
  if (!o.device.empty() && o.device != "auto") {
    EV_ASSIGN_OR_RETURN(target, find_device_profile(o.device, dev_dirs));
    role = "requested device (--device " + o.device + ")";
  }
  const int threads = o.threads > 0 ? o.threads : usable_cpu_count();
  cpu_init_threads(threads);

  const std::vector<std::string> models = o.models.empty() ? std::vector<std::string>{"vit-digits"} : o.models;
  for (const std::string& m : models) EV_RETURN_IF_ERROR(run_model(m, o, bases, target, role, r.seed, threads, &r));

  if (o.gpio.chip.empty()) {
    r.checks.push_back(skipped("gpio.loopback", "", "skipped: no GPIO loopback configured (--gpio-loopback CHIP:OUT:IN)"));
  } else {
    r.checks.push_back(run_gpio_loopback(o.gpio));
  }
  r.seconds = total.seconds();
  return r;
}

}  // namespace edgevit::selftest
