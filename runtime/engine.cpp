#include "runtime/engine.h"

#include <sched.h>

#include <fstream>
#include <thread>

#include "kernels/cpu/kernels.h"
#include "runtime/weights.h"

namespace edgevit {

namespace {

int available_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  const unsigned hc = std::thread::hardware_concurrency();
  return hc > 0 ? static_cast<int>(hc) : 1;
}

}  // namespace

const std::vector<GemmChoice>& Backend::gemm_choices() const {
  static const std::vector<GemmChoice> kNone;
  return kNone;
}

const std::vector<AttentionChoice>& Backend::attention_choices() const {
  static const std::vector<AttentionChoice> kNone;
  return kNone;
}

Status Backend::infer_device(int) {
  return unsupported("infer_device: this backend has no device-resident input (the CPU backend reads host memory: "
                     "use infer())");
}

Result<std::unique_ptr<Engine>> Engine::create(const ModelSpec& spec, const DeviceProfile& device,
                                               const EngineOptions& options) {
  std::unique_ptr<Engine> e(new Engine());
  e->spec_ = spec;
  EV_ASSIGN_OR_RETURN(e->plan_, make_plan(spec, device, options.plan));
  // Refuse before any allocation.
  if (!e->plan_.fits) return does_not_fit(does_not_fit_message(e->plan_));

  if (options.threads < 0) return invalid_argument("threads must be >= 0 (0 = all cores), got " + std::to_string(options.threads));
  e->threads_ = options.threads > 0 ? options.threads : available_cores();

  if (spec.weights_path.empty())
    return config_error(spec.source_path + ": weights.path: no checkpoint given for model '" + spec.name + "'");
  EV_ASSIGN_OR_RETURN(WeightSource weights, WeightSource::open(spec.weights_path, spec.weights_naming));
  EV_RETURN_IF_ERROR(weights.check(spec.arch));

  if (device.kind == DeviceKind::kCpu) {
    cpu_init_threads(e->threads_);
    cpu_prewarm_blas(e->threads_);
    cpu_prefault_stack(cpu_kernel_stack_bytes(), e->threads_);
    EV_ASSIGN_OR_RETURN(e->backend_, make_cpu_backend(e->plan_, weights, e->threads_, options));
  } else {
    EV_ASSIGN_OR_RETURN(e->backend_, make_cuda_backend(e->plan_, weights, options));
  }
  return e;
}

int64_t Engine::input_numel_per_image() const {
  const VitArch& a = spec_.arch;
  return int64_t{a.in_chans} * a.img_size * a.img_size;
}

int Engine::output_dim() const { return spec_.arch.num_classes > 0 ? spec_.arch.num_classes : spec_.arch.embed_dim; }

Status Engine::infer(const float* input, int n) {
  if (n < 1 || n > max_batch())
    return invalid_argument("batch of " + std::to_string(n) + " images outside the planned range [1, " +
                            std::to_string(max_batch()) + "]");
  return backend_->infer(input, n);
}

Status Engine::infer_device(int n) {
  if (n < 1 || n > max_batch())
    return invalid_argument("batch of " + std::to_string(n) + " images outside the planned range [1, " +
                            std::to_string(max_batch()) + "]");
  return backend_->infer_device(n);
}

Result<std::vector<std::string>> load_labels(const std::string& path) {
  std::ifstream in(path);
  if (!in) return not_found(path + ": cannot open labels file");
  std::vector<std::string> labels;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    labels.push_back(line);
    if (labels.size() > 1000000) return config_error(path + ": labels file has more than 1,000,000 lines");
  }
  return labels;
}

}  // namespace edgevit
