// The backend interface: what differs between devices once the plan, the op table, the arena and the
// executor are shared (runtime/executor.h): the input and output staging, device-resident input, where
// non-finite outputs are counted, the profile timers, and the records of start-up tuning. Internal to
// runtime/ (the engine owns one); the installed API is runtime/engine.h.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/engine.h"

namespace edgevit {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Status infer(const float* input, int n) = 0;
  // Host fp32 copy of the output tensor `tensor` (a kOutput tensor id of the plan's graph) after the last
  // forward: (n, per-image shape); owned by the backend.
  virtual const float* output(int tensor) const = 0;
  virtual const std::vector<OpTiming>& op_timings() const = 0;
  virtual int64_t device_bytes() const = 0;     // bytes of the single arena allocation
  // Host memory for (max_batch, C, H, W) fp32 that infer() reads its input from; infer(input_buffer(), n)
  // skips the copy. Owned by the backend, valid for its lifetime, never written by infer().
  virtual float* input_buffer() = 0;
  virtual const std::vector<GemmChoice>& gemm_choices() const;  // empty unless the backend has cuBLASLt GEMMs
  virtual const std::vector<AttentionChoice>& attention_choices() const;  // empty on the CPU backend
  // Device memory holding the plan's input tensor, or nullptr (CPU); see Engine::device_input().
  virtual void* device_input() { return nullptr; }
  virtual Status infer_device(int n);  // the forward on device_input()'s first n images; CPU: kUnsupported
  // Non-finite values the last forward wrote to its outputs, counted where it ran (CUDA: in the output
  // casts), or -1 when the backend does not count (the engine scans the host outputs itself).
  virtual int64_t device_nonfinite_count() const;
  // Per op, the kernel the forward dispatched, recorded where it dispatches (CPU: the branch each op took in
  // the last infer(); CUDA: what was captured into the graph of the largest batch). A test compares it with
  // the resolved plan (the plan is the program).
  virtual std::vector<std::string> executed_kernels() const = 0;
  // The decisions the backend's kernels made at start-up (Plan::tuning), and the op-table rows it had to
  // substitute on this machine (resolve_rows' notes).
  virtual std::vector<TuningRecord> tuning() const { return {}; }
  virtual std::vector<std::string> resolve_notes() const { return {}; }
  // Host memory holding tensor `id` of the plan (CPU: its arena bytes), or nullptr where tensors live on a
  // device (see Engine::tensor_data).
  virtual const void* tensor_data(int id) const {
    (void)id;
    return nullptr;
  }
};

// Backend factories (runtime/cpu/backend_cpu.cpp, runtime/cuda/backend_cuda.cpp).
class WeightSource;
Result<std::unique_ptr<Backend>> make_cpu_backend(const Plan& plan, WeightSource& weights, int threads,
                                                  const EngineOptions& options);
Result<std::unique_ptr<Backend>> make_cuda_backend(const Plan& plan, WeightSource& weights,
                                                   const EngineOptions& options);

}  // namespace edgevit
