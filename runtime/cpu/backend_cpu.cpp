// CPU backend (fp32): the host arena, the CPU context and the executor; what it adds is the input copy
// and the per-op wall-clock profile. infer() allocates nothing (tests/runtime/engine_alloc_test.cpp counts).
// The arena's input tensor is also Engine::input_buffer(): a caller that writes its images there saves the
// copy.
#include <chrono>
#include <cstring>

#include "kernels/cpu/kernels.h"
#include "runtime/cpu/ops_cpu.h"
#include "runtime/backend.h"
#include "runtime/weights.h"

namespace edgevit {

namespace {

class CpuBackend final : public Backend, public ExecHooks {
 public:
  CpuBackend(const Plan& plan, int threads, const EngineOptions& options)
      : plan_(plan), threads_(threads), profile_(options.profile_ops), fault_(options.fault) {}

  Status init(WeightSource& weights) {
    EV_ASSIGN_OR_RETURN(arena_, Arena::create(plan_, host_arena_memory()));
    EV_RETURN_IF_ERROR(arena_->load_weights(weights, fault_));
    ctx_ = std::make_unique<CpuContext>(plan_, *arena_, fault_, threads_);
    ctx_->sizes = {plan_.graph.batch};
    executor_ = std::make_unique<Executor>(*ctx_, *this);
    EV_ASSIGN_OR_RETURN(std::vector<const OpRow*> rows, resolve_rows(plan_, &notes_));
    EV_RETURN_IF_ERROR(executor_->bind(rows));
    EV_RETURN_IF_ERROR(executor_->prepare());
    const std::vector<Op>& ops = plan_.graph.ops;
    timings_.resize(ops.size());
    starts_.resize(ops.size());
    for (size_t i = 0; i < ops.size(); ++i) {
      timings_[i].name = ops[i].name;
      timings_[i].kernel = executor_->kernel(i).resolved(plan_.graph.batch);
      timings_[i].flops = static_cast<CpuKernel&>(executor_->kernel(i)).flops();
      timings_[i].bytes = ops[i].bytes;
    }
    return Status::Ok();
  }

  Status infer(const float* input, int n) override {
    // OpenMP's thread count is per calling thread: a daemon worker or any thread other than the one that
    // created the engine would otherwise run every parallel region on all cores.
    cpu_init_threads(threads_);
    // The kernels' stack tiles must not grow the calling thread's stack mid-inference (kernels.h).
    cpu_prefault_stack(cpu_kernel_stack_bytes());
    const Graph& g = plan_.graph;
    float* in = arena_->as<float>(g.input);
    // The input tensor lives for the whole forward and no op writes it, so a caller that filled
    // input_buffer() needs no copy; memmove for one that passes a pointer inside it.
    if (input != in)
      std::memmove(in, input, sizeof(float) * static_cast<size_t>(g.tensors[g.input].numel() / g.batch * n));
    return executor_->walk(n, profile_);
  }

  const float* output(int tensor) const override { return arena_->as<float>(tensor); }
  const std::vector<OpTiming>& op_timings() const override { return timings_; }
  std::vector<std::string> executed_kernels() const override { return executor_->executed(); }
  std::vector<TuningRecord> tuning() const override { return executor_->tuning(); }
  std::vector<std::string> resolve_notes() const override { return notes_; }
  int64_t device_bytes() const override { return static_cast<int64_t>(arena_->bytes()); }
  float* input_buffer() override { return arena_->as<float>(plan_.graph.input); }
  const void* tensor_data(int id) const override { return arena_->at(id); }

 private:
  Status op_begin(size_t op) override {
    starts_[op] = std::chrono::steady_clock::now();
    return Status::Ok();
  }
  Status op_end(size_t op) override {
    timings_[op].seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - starts_[op]).count();
    return Status::Ok();
  }

  const Plan& plan_;
  int threads_;
  bool profile_;
  InjectedFault fault_;
  std::unique_ptr<Arena> arena_;  // owned: the single allocation
  std::unique_ptr<CpuContext> ctx_;
  std::unique_ptr<Executor> executor_;
  std::vector<std::string> notes_;  // rows substituted on this machine (resolve_rows)
  std::vector<OpTiming> timings_;
  std::vector<std::chrono::steady_clock::time_point> starts_;  // profile: per op
};

}  // namespace

Result<std::unique_ptr<Backend>> make_cpu_backend(const Plan& plan, WeightSource& weights, int threads,
                                                  const EngineOptions& options) {
  auto backend = std::make_unique<CpuBackend>(plan, threads, options);
  EV_RETURN_IF_ERROR(backend->init(weights));
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace edgevit
