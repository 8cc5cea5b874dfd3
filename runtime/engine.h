// Engine: plan + arena + backend for one model on one device. Everything is planned and allocated in
// create(); infer() performs no heap allocation and no device allocation (tested).
//
//   ModelSpec + DeviceProfile -> make_plan -> arena (one allocation) -> weights read from the mmap'd
//   checkpoint straight into the arena -> infer(input) walks the op list -> output(kind): logits, embedding,
//   pre_logits, tokens (runtime/outputs.h; the plan's PlanOptions::outputs says which exist)
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "platform/device_profile.h"
#include "runtime/fault.h"
#include "runtime/model_spec.h"
#include "runtime/labels.h"  // load_labels, for the programs that print class names
#include "runtime/plan.h"
#include "base/status.h"

namespace edgevit {


struct EngineOptions {
  PlanOptions plan;
  int threads = 0;  // CPU threads for kernels and OpenBLAS; 0 = all available cores
  bool profile_ops = false;  // record per-op wall time in infer() (bench --profile)
  // CUDA: at create(), time up to 8 cuBLASLt heuristic algorithms (and split-K variants of them where the
  // output has few tiles per SM) per GEMM shape and captured batch size on the arena's own tensors and pin
  // the fastest (the heuristic's first unless another is >= 3% faster by median).
  // Off: the heuristic's first, untimed. Either way the choice is pinned for the engine's lifetime, so its
  // outputs are bit-identical run to run; another process (or engine) may time differently and pin another
  // algorithm, whose outputs can differ in the last bits (within the fp16 tolerance). CPU backend: ignored.
  bool tune_gemms = true;
  // CUDA, fp16 fused attention: at create(), for each captured batch size and each attention launch shape
  // (the full blocks, the class-token tail), time every fused-kernel row the device can run
  // (mha_eligible_rows) on the arena's own tensors and pin the fastest; the table's row (choose_mha) stays
  // unless another is >= 3% faster by median. Off: the table's row, untimed. Pinned for the engine's
  // lifetime like the GEMMs (same bit-identity statement). CPU backend: ignored.
  bool tune_attention = true;
  // CUDA INT8 GEMMs, for tests and benchmarks: cuBLASLt IMMA (its heuristic's first algorithm, untimed) wherever
  // its int32 product fits the plan's INT8 workspace and cuBLASLt offers an algorithm, the tuned choice
  // elsewhere. Off (the default): IMMA is one more candidate of tune_gemms, pinned only when faster. The
  // outputs are the same either way (runtime/int8_gemm_tuning.h). CPU backend: ignored.
  bool force_lt_imma = false;
  InjectedFault fault = InjectedFault::kNone;
};

struct OpTiming {
  std::string name;
  std::string kernel;
  double flops = 0;
  double bytes = 0;
  double seconds = 0;  // last infer()
};

// CUDA backend: the cuBLASLt algorithm pinned for one GEMM at one captured batch size, and the timings
// that chose it (EngineOptions::tune_gemms).
struct GemmChoice {
  std::string op;         // op name, e.g. "blocks.0.attn.qkv"
  int batch = 0;          // captured batch size
  int candidates = 0;     // algorithms timed: 0 when tuning is off (the heuristic's first pinned, untimed)
  int heuristic = 0;      // how many of them are cuBLASLt heuristic results (the rest: split-K variants)
  int chosen = 0;         // index of the pinned one: < heuristic = its heuristic rank (0 = the first choice),
                          // >= heuristic = a cluster-1 or split-K variant of a heuristic result
  int chain = 0;          // GEMMs per timed run: 1 = timed alone; > 1 = a replayed chain of the model's GEMMs of
                          // this shape (small grids, where launch and ramp-up overlap inside the graph)
  double first_us = 0;    // median time of the heuristic's first choice (0 when not timed)
  double chosen_us = 0;   // median time of the pinned one
  std::string algo;       // the pinned algorithm's configuration, e.g. "id 21 tile 18 stages 8 splitK 1"
  std::string timed_as;   // the op whose timing this choice reuses (same shape and epilogue), or empty
};

// CUDA: the attention kernel the launcher runs at one captured batch size on this device (the plan names
// the choice for the plan's batch on the profile's SM count; smaller captured sizes may take another row).
// One record per captured size and attention launch shape: the full blocks' (seq_q = every token) first,
// then the class-token tail's (seq_q = 1) where the graph has one.
struct AttentionChoice {
  int batch = 0;
  int seq_q = 0;       // query rows per image and head of the launch
  std::string kernel;  // what runs, e.g. "cuda.flash_fwd_f16_d64_q32_w8_kv128_s2_ks4", "cuda.mha_unfused_cublas"
  std::string reason;  // choose_mha's line: the table's row, its grid on this device, the rows skipped and why
  std::string table_kernel;  // the table's row (choose_mha); == kernel unless tuning pinned another
  int candidates = 0;        // fused rows timed (EngineOptions::tune_attention); 0 = untimed
  double table_us = 0;       // median time of the table's row (0 when untimed)
  double chosen_us = 0;      // median time of the pinned row (0 when untimed)
};

class Backend;  // runtime/backend.h: what differs per device (internal)

class Engine {
 public:
  // Plans, refuses a plan that does not fit the budget (kDoesNotFit, before any allocation), allocates
  // the arena once and loads the weights into it. The Engine owns the arena; `spec` and `device` are
  // copied.
  static Result<std::unique_ptr<Engine>> create(const ModelSpec& spec, const DeviceProfile& device,
                                                const EngineOptions& options);

  const Plan& plan() const { return plan_; }
  const ModelSpec& spec() const { return spec_; }
  int max_batch() const { return plan_.graph.batch; }
  int64_t input_numel_per_image() const;   // C * H * W
  int output_dim() const;                  // num_classes, or embed_dim when num_classes == 0
  int embed_dim() const { return spec_.arch.embed_dim; }
  int threads() const { return threads_; }

  // input: (n, C, H, W) float32, already normalized; 1 <= n <= max_batch. Any host pointer; infer() first
  // copies it into the backend's input buffer unless input == input_buffer().
  // Every output is checked last: a NaN or Inf anywhere in any output the engine produces (outputs()) for
  // the n images makes infer() return kNonFinite (naming the output, image and element) instead of an answer.
  Status infer(const float* input, int n);
  // The backend's own input buffer, (max_batch, C, H, W) float32 host memory: write the images there and
  // call infer(input_buffer(), n) to save the copy (on CUDA it is pinned and mapped, and the forward's first
  // kernel reads it directly; for ViT-B/16 at batch 64 the copy is 38.5 MB). Valid for the engine's
  // lifetime; infer(input_buffer(), n) reads it and never writes it, so its contents stay for the next call
  // (a pointer inside it, input_buffer() + k images, is moved to its start first).
  float* input_buffer();
  // CUDA engines: the arena's own input tensor, (max_batch, C, H, W) in the plan's precision (fp16 for
  // fp16 plans, fp32 for fp32 plans; already normalized), in device memory, for images that are on the GPU
  // already (a decoder or camera pipeline, the caller's own preprocessing kernels). Write it with any
  // stream or kernel and finish that work before infer_device(): the engine's stream is non-blocking and
  // does not wait for other streams (cudaMemcpy from pageable memory can return before its DMA lands:
  // cudaDeviceSynchronize() or synchronize the stream used). Do not touch it while an infer runs. nullptr on the CPU backend. Valid for the engine's lifetime; no op of the forward writes
  // it (the plan keeps the input tensor live for the whole graph), so it holds the last images given.
  // infer(input, n) also writes it (the cast of the host images is the forward's first kernel).
  void* device_input();
  // The forward over the first n images already in device_input(): no host copy, no cast, no PCIe read
  // (a replay of a captured graph without the input kernel). Same outputs, bit for bit, as infer() of the
  // same images. kUnsupported on the CPU backend.
  Status infer_device(int n);  // outputs checked as in infer()
  // CUDA: the cuBLASLt algorithm pinned per GEMM and captured batch size (EngineOptions::tune_gemms);
  // empty on the CPU backend.
  const std::vector<GemmChoice>& gemm_choices() const;
  // CUDA: the attention kernel per captured batch size on this device, as its launcher chooses it; empty on
  // the CPU backend (one kernel, the plan's).
  const std::vector<AttentionChoice>& attention_choices() const;
  const float* logits() const;      // (n, output_dim): the head's output, or pre_logits without a head
  const float* pre_logits() const;  // (n, embed_dim)
  // The named outputs (runtime/outputs.h) this engine produces: PlanOptions::outputs, else the model config's
  // runtime.outputs, else default_outputs(arch).
  OutputSet outputs() const { return plan_.graph.outputs; }
  // Host fp32 values of output `k` after the last infer(n): (n, output_dims(k)...), image-major; owned by the
  // engine and valid until the next infer. nullptr when the engine does not produce `k`.
  const float* output(OutputKind k) const;
  const float* output(const std::string& name) const;  // by name ("logits", ...); nullptr for an unknown name
  // Per-image dimensions of output `k`: {classes}, {dim}, {embed} or {tokens, embed}; empty when absent.
  std::vector<int64_t> output_dims(OutputKind k) const;
  int64_t output_numel_per_image(OutputKind k) const;  // product of output_dims(k); 0 when absent
  const float* embedding() const { return output(OutputKind::kEmbedding); }  // (n, dim) or nullptr
  const float* tokens() const { return output(OutputKind::kTokens); }        // (n, tokens, embed) or nullptr
  const std::vector<OpTiming>& op_timings() const;
  std::vector<std::string> executed_kernels() const;
  int64_t device_bytes() const;  // the arena allocation (self-test)
  // The bytes of tensor `tensor_id` of plan().graph in host memory (element type per its TensorDesc), or
  // nullptr on a backend whose tensors live on a device. An activation holds its value from the last
  // infer() only until its arena bytes are reused, unless PlanOptions::keep_activations planned it its own
  // (calibration and `compare`, docs/int8.md).
  const void* tensor_data(int tensor_id) const;

 ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

 private:
  Engine() = default;
  Status check_outputs(int n) const;
  ModelSpec spec_;
  Plan plan_;
  int threads_ = 1;
  std::unique_ptr<Backend> backend_;
};

}  // namespace edgevit
