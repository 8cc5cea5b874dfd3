#include "runtime/engine.h"
#include "runtime/backend.h"

#include <sched.h>

#include <thread>

#include "kernels/cpu/kernels.h"
#include "runtime/labels.h"
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

int64_t Backend::device_nonfinite_count() const { return -1; }

Status Backend::infer_device(int) {
  return unsupported("infer_device: this backend has no device-resident input (the CPU backend reads host memory: "
                     "use infer())");
}

Result<std::unique_ptr<Engine>> Engine::create(const ModelSpec& spec, const DeviceProfile& device,
                                               const EngineOptions& options) {
  std::unique_ptr<Engine> e(new Engine());
  e->spec_ = spec;
  if (options.threads < 0) return invalid_argument("threads must be >= 0 (0 = all cores), got " + std::to_string(options.threads));
  e->threads_ = options.threads > 0 ? options.threads : available_cores();
  PlanOptions plan_options = options.plan;
  plan_options.threads = e->threads_;  // the plan counts the threads that will run
  EV_ASSIGN_OR_RETURN(e->plan_, make_plan(spec, device, plan_options));
  // Refuse before any allocation.
  if (!e->plan_.fits) return does_not_fit(does_not_fit_message(e->plan_));

  if (spec.weights_path.empty())
    return config_error(spec.source_path + ": weights.path: no checkpoint given for model '" + spec.name + "'");
  EV_ASSIGN_OR_RETURN(WeightSource weights, WeightSource::open(spec.weights_path, spec.weights_naming));
  EV_RETURN_IF_ERROR(weights.fit_pos_embed(spec.arch));  // the model's grid, when not the checkpoint's
  EV_RETURN_IF_ERROR(weights.check(spec.arch));

  if (device.kind == DeviceKind::kCpu) {
    cpu_init_threads(e->threads_);
    cpu_prewarm_blas(e->threads_);
    cpu_prefault_stack(cpu_kernel_stack_bytes(), e->threads_);
    EV_ASSIGN_OR_RETURN(e->backend_, make_cpu_backend(e->plan_, weights, e->threads_, options));
  } else {
    EV_ASSIGN_OR_RETURN(e->backend_, make_cuda_backend(e->plan_, weights, options));
  }
  // The plan names what this engine runs from here on (the backend's choices at load and start-up tuning).
  std::vector<std::string> kernels;
  for (const OpTiming& t : e->backend_->op_timings()) kernels.push_back(t.kernel);
  resolve_kernels(&e->plan_, kernels, e->backend_->tuning(), e->backend_->resolve_notes());
  return e;
}

int64_t Engine::input_numel_per_image() const {
  const VitArch& a = spec_.arch;
  return int64_t{a.in_chans} * a.img_h * a.img_w;
}

int Engine::output_dim() const { return spec_.arch.num_classes > 0 ? spec_.arch.num_classes : spec_.arch.embed_dim; }

Status Engine::infer(const float* input, int n) {
  if (n < 1 || n > max_batch())
    return invalid_argument("batch of " + std::to_string(n) + " images outside the planned range [1, " +
                            std::to_string(max_batch()) + "]");
  EV_RETURN_IF_ERROR(backend_->infer(input, n));
  return check_outputs(n);
}

Status Engine::infer_device(int n) {
  if (n < 1 || n > max_batch())
    return invalid_argument("batch of " + std::to_string(n) + " images outside the planned range [1, " +
                            std::to_string(max_batch()) + "]");
  EV_RETURN_IF_ERROR(backend_->infer_device(n));
  return check_outputs(n);
}

// The backend's count (CUDA: taken by the output casts on the GPU) answers the common case; a scan of the
// host copies answers it on the CPU and names the first bad value in either case.
Status Engine::check_outputs(int n) const {
  const int64_t counted = backend_->device_nonfinite_count();
  if (counted == 0) return Status::Ok();
  for (int i = 0; i < kOutputKinds; ++i) {  // not OutputSet::kinds(): infer() allocates nothing
    const OutputKind k = static_cast<OutputKind>(i);
    if (!outputs().has(k)) continue;
    const float* data = output(k);
    const int64_t dim = output_numel_per_image(k);
    const int64_t numel = n * dim;
    const int64_t first = first_nonfinite_f32(data, numel);
    if (first < 0) continue;
    const float v = data[first];
    return non_finite("model '" + spec_.name + "': output '" + to_string(k) + "' of image " +
                      std::to_string(first / dim) + " holds " + (v != v ? "NaN" : v > 0 ? "+Inf" : "-Inf") +
                      " at element " + std::to_string(first % dim) + " (" +
                      std::to_string(count_nonfinite_f32(data, numel)) + " of " + std::to_string(numel) +
                      " values non-finite); no answer is reported. Usual causes: a checkpoint holding Inf/NaN "
                      "weights, non-finite input values, or an fp16 overflow (try --precision fp32)");
  }
  if (counted < 0) return Status::Ok();
  return internal_error("model '" + spec_.name + "': the device counted " + std::to_string(counted) +
                        " non-finite output values that its host copies do not hold");
}

Engine::~Engine() = default;
float* Engine::input_buffer() { return backend_->input_buffer(); }
void* Engine::device_input() { return backend_->device_input(); }
const std::vector<GemmChoice>& Engine::gemm_choices() const { return backend_->gemm_choices(); }
const std::vector<AttentionChoice>& Engine::attention_choices() const { return backend_->attention_choices(); }
const float* Engine::logits() const { return backend_->output(plan_.graph.logits); }
const float* Engine::pre_logits() const { return backend_->output(plan_.graph.pre_logits); }

const float* Engine::output(OutputKind k) const {
  const int id = output_tensor(plan_.graph, k);
  return id < 0 ? nullptr : backend_->output(id);
}

const float* Engine::output(const std::string& name) const {
  OutputKind k;
  return parse_output_kind(name, &k) ? output(k) : nullptr;
}

std::vector<int64_t> Engine::output_dims(OutputKind k) const {
  const int id = output_tensor(plan_.graph, k);
  if (id < 0) return {};
  const std::vector<int64_t>& shape = plan_.graph.tensors[static_cast<size_t>(id)].shape;
  return std::vector<int64_t>(shape.begin() + 1, shape.end());  // shape[0] is the batch
}

int64_t Engine::output_numel_per_image(OutputKind k) const {
  const int id = output_tensor(plan_.graph, k);
  return id < 0 ? 0 : plan_.graph.tensors[static_cast<size_t>(id)].numel() / plan_.graph.batch;
}
const std::vector<OpTiming>& Engine::op_timings() const { return backend_->op_timings(); }
std::vector<std::string> Engine::executed_kernels() const { return backend_->executed_kernels(); }
int64_t Engine::device_bytes() const { return backend_->device_bytes(); }
const void* Engine::tensor_data(int tensor_id) const { return backend_->tensor_data(tensor_id); }

}  // namespace edgevit
