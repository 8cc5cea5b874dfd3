// CUDA backend (fp16 or fp32 plans): the executor walks the plan's ops through the CUDA op table
// (runtime/cuda_rows.cpp, kernels in runtime/cuda/) over one device arena, and the walk is captured as
// CUDA graphs that infer() replays.
//
//   init   the arena (runtime/arena.h: one cudaMalloc of plan.arena_bytes; every tensor is base +
//          plan.offsets[id], the cuBLASLt workspace is the last kCudaLtWorkspaceBytes; weights converted from
//          the mmap'd checkpoint into one reusable pinned staging buffer and copied in, so no second full
//          host copy of the weights exists: Jetson's DRAM is shared); pinned host buffers, mapped into the
//          device's address space, for the fp32 input and one per output tensor of the plan (fp32); the
//          kernels bound to the rows the plan names (resolve_rows) and prepared for every captured batch
//          size n = 1, 2, 4, ... and max_batch (GEMM descriptors and algorithms: runtime/cuda/gemm_tuning.h;
//          attention rows: runtime/cuda/attention_cuda.h); then per size one warm-up walk (lazy module loading, the
//          attention kernels' shared-memory opt-in, a check that each launch is valid, and finite
//          activations for attention tuning, which follows), and two captures: with the input cast from
//          the mapped host buffer first (infer) and without it (infer_device).
//   infer  memcpy the input into the pinned staging buffer (skipped when the caller wrote it there:
//          Engine::input_buffer() is that buffer), replay the smallest captured graph with n' >= n rows
//          (rows are independent in a ViT: padded rows are computed and ignored), synchronize.
//          No allocation, host or device (tests/runtime/cuda_engine_test.cu counts both).
//   infer_device  the caller's images are already in the arena's input tensor (Engine::device_input(), in the
//          plan's precision): replay the graph without the input cast, synchronize. Same outputs bit for bit.
//
// Graph contents: input cast (mapped fp32 -> arena input, fp16 or fp32) | im2col | patch GEMM | assemble |
// per block: LN, qkv GEMM (+bias), attention, proj GEMM (+bias, += residual: beta = 1, C == D in place),
// LN, fc1 GEMM (+bias, GELU), fc2 GEMM (+bias, += residual) | head LN, pool (or pool, LN) | head GEMM |
// every output tensor (pre_logits, logits; tokens and the pooler's embedding when the plan has them) cast into
// its mapped fp32 output buffer, counting non-finite values.
// EngineOptions::profile_ops walks the ops without a graph and times each with CUDA events.
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cuda/ops.h"
#include "runtime/arena.h"
#include "runtime/cuda/attention_cuda.h"
#include "runtime/cuda/cuda_context.h"
#include "runtime/cuda/cuda_status.h"
#include "runtime/backend.h"
#include "runtime/executor.h"
#include "runtime/weights.h"

namespace edgevit {

namespace {

class CudaBackend final : public Backend, private ExecHooks {
 public:
  // `plan` must outlive the backend (the Engine owns both); the backend owns every CUDA resource it makes.
  CudaBackend(const Plan& plan, const EngineOptions& options) : plan_(plan), options_(options) {}
  ~CudaBackend() override;

  Status init(WeightSource& weights);

  Status infer(const float* input, int n) override {
    EV_RETURN_IF_ERROR(check_batch(n));
    // memmove: a caller may pass a pointer inside the staging buffer itself.
    if (input != host_in_) std::memmove(host_in_, input, sizeof(float) * static_cast<size_t>(in_per_image_ * n));
    return run_forward(n, true);
  }
  Status infer_device(int n) override {
    EV_RETURN_IF_ERROR(check_batch(n));
    return run_forward(n, false);
  }
  void* device_input() override { return arena_->at(plan_.graph.input); }
  const float* output(int tensor) const override {
    for (const Staged& o : outputs_)
      if (o.tensor == tensor) return o.host;
    return nullptr;
  }
  int64_t device_nonfinite_count() const override { return *host_nonfinite_; }
  std::vector<std::string> executed_kernels() const override { return executor_->executed(); }
  const std::vector<OpTiming>& op_timings() const override { return timings_; }
  int64_t device_bytes() const override { return plan_.arena_bytes; }
  float* input_buffer() override { return host_in_; }
  const std::vector<GemmChoice>& gemm_choices() const override { return gemm_choices_; }
  const std::vector<AttentionChoice>& attention_choices() const override { return attention_choices_; }
  std::vector<TuningRecord> tuning() const override { return executor_->tuning(); }
  std::vector<std::string> resolve_notes() const override { return notes_; }

 private:
  // Around the executor's walk.
  Status before_ops(int n) override;
  Status after_ops(int n) override;
  Status op_begin(size_t op) override;
  Status op_end(size_t op) override;
  Status begin_capture() override;
  Status end_capture(int n) override;

  Status check_batch(int n) const {
    if (n < 1 || n > plan_.graph.batch)
      return invalid_argument("cuda backend: batch " + std::to_string(n) + " outside [1, " +
                              std::to_string(plan_.graph.batch) + "]");
    return Status::Ok();
  }
  Status open_staging();
  Status host_alloc(float** host, float** device, size_t floats);
  Status bind_kernels();
  Status warm_up_and_capture();
  Status capture(size_t si, bool from_host);
  Status run_forward(int n, bool from_host);
  void collect_records();

  const Plan& plan_;
  const EngineOptions options_;
  std::unique_ptr<Arena> arena_;         // the single device allocation
  std::unique_ptr<CudaContext> ctx_;     // stream, cuBLASLt handle, shared decisions (reads arena_)
  std::unique_ptr<Executor> executor_;   // the kernels, one per op (reads ctx_)
  std::vector<std::string> notes_;       // resolve_rows: rows substituted on this build and machine
  int64_t in_per_image_ = 0;             // C * H * W
  float* host_in_ = nullptr;      // owned, pinned + mapped: (max_batch, C, H, W) fp32
  float* dev_in_ = nullptr;       // device alias of host_in_
  // One per kOutput tensor of the graph, in tensor order: the fp32 copy the forward's last kernels write.
  struct Staged {
    int tensor = -1;
    int64_t per_image = 0;  // elements per image
    float* host = nullptr;  // owned, pinned + mapped: (max_batch, per_image) fp32
    float* dev = nullptr;   // its device alias
  };
  std::vector<Staged> outputs_;
  volatile unsigned* host_nonfinite_ = nullptr;  // owned, pinned + mapped: non-finite outputs of the last forward
  unsigned* dev_nonfinite_ = nullptr;             // its device address (the output casts add to it)
  bool from_host_ = true;   // the walk being run or captured starts with the input cast from host_in_
  size_t capture_si_ = 0;   // the size index being captured
  std::vector<cudaGraphExec_t> execs_;         // [size index]: input cast from the mapped host buffer, forward
  std::vector<cudaGraphExec_t> execs_device_;  // [size index]: the forward from the arena's input tensor
  std::vector<cudaEvent_t> events_;            // profile: one before the first op, one after each op
  std::vector<OpTiming> timings_;
  std::vector<GemmChoice> gemm_choices_;            // per captured size (ascending), then per linear op
  std::vector<AttentionChoice> attention_choices_;  // per captured size (ascending), then per launch shape
};

CudaBackend::~CudaBackend() {
  // Teardown ignores errors: there is nobody left to report them to. The executor, the context and the
  // arena go after this body, in that order (members in reverse).
  for (cudaGraphExec_t e : execs_)
    if (e != nullptr) cudaGraphExecDestroy(e);
  for (cudaGraphExec_t e : execs_device_)
    if (e != nullptr) cudaGraphExecDestroy(e);
  for (cudaEvent_t ev : events_)
    if (ev != nullptr) cudaEventDestroy(ev);
  if (host_in_ != nullptr) cudaFreeHost(host_in_);
  for (const Staged& o : outputs_)
    if (o.host != nullptr) cudaFreeHost(o.host);
  if (host_nonfinite_ != nullptr) cudaFreeHost(const_cast<unsigned*>(host_nonfinite_));
}

Status CudaBackend::init(WeightSource& weights) {
  const Graph& g = plan_.graph;
  if (plan_.device.kind != DeviceKind::kCuda)
    return internal_error("cuda backend: plan for device '" + plan_.device.name + "' is not a CUDA plan");
  int dev = 0;
  EV_CUDA_CHECK("init", cudaGetDevice(&dev));
  int can_map = 0;
  EV_CUDA_CHECK("init", cudaDeviceGetAttribute(&can_map, cudaDevAttrCanMapHostMemory, dev));
  if (!can_map) return unsupported("cuda backend: device " + std::to_string(dev) + " cannot map host memory");
  EV_ASSIGN_OR_RETURN(arena_, Arena::create(plan_, cuda_arena_memory()));
  ctx_ = std::make_unique<CudaContext>(plan_, *arena_, options_);
  EV_RETURN_IF_ERROR(ctx_->open());
  EV_RETURN_IF_ERROR(open_staging());
  EV_RETURN_IF_ERROR(arena_->load_weights(weights, options_.fault));
  // Captured batch sizes: powers of two below max_batch, and max_batch.
  for (int s = 1; s < g.batch; s *= 2) ctx_->sizes.push_back(s);
  ctx_->sizes.push_back(g.batch);
  EV_RETURN_IF_ERROR(bind_kernels());
  if (options_.profile_ops) {
    events_.assign(g.ops.size() + 1, nullptr);
    for (cudaEvent_t& ev : events_) EV_CUDA_CHECK("init", cudaEventCreate(&ev));
  }
  EV_RETURN_IF_ERROR(warm_up_and_capture());
  collect_records();
  return Status::Ok();
}

// Pinned, mapped host staging: fp32 input (max batch), fp32 outputs, the non-finite counter.
Status CudaBackend::open_staging() {
  const Graph& g = plan_.graph;
  const VitArch& a = g.arch;
  in_per_image_ = int64_t{a.in_chans} * a.img_h * a.img_w;
  EV_RETURN_IF_ERROR(host_alloc(&host_in_, &dev_in_, static_cast<size_t>(in_per_image_ * g.batch)));
  std::memset(host_in_, 0, sizeof(float) * static_cast<size_t>(in_per_image_ * g.batch));
  for (const TensorDesc& t : g.tensors) {
    if (t.kind != TensorKind::kOutput) continue;
    Staged o;
    o.tensor = t.id;
    o.per_image = t.numel() / g.batch;
    outputs_.push_back(o);  // owned from here: the destructor frees what host_alloc made
    EV_RETURN_IF_ERROR(host_alloc(&outputs_.back().host, &outputs_.back().dev, static_cast<size_t>(t.numel())));
  }
  unsigned* counter = nullptr;
  EV_CUDA_CHECK("init", cudaHostAlloc(reinterpret_cast<void**>(&counter), sizeof(unsigned), cudaHostAllocMapped));
  host_nonfinite_ = counter;
  *counter = 0;
  EV_CUDA_CHECK("init", cudaHostGetDevicePointer(reinterpret_cast<void**>(&dev_nonfinite_), counter, 0));
  return Status::Ok();
}

Status CudaBackend::host_alloc(float** host, float** device, size_t floats) {
  EV_CUDA_CHECK("init", cudaHostAlloc(reinterpret_cast<void**>(host), std::max<size_t>(floats, 1) * sizeof(float),
                                      cudaHostAllocMapped));
  EV_CUDA_CHECK("init", cudaHostGetDevicePointer(reinterpret_cast<void**>(device), *host, 0));
  return Status::Ok();
}

// One kernel per op from the row the plan names (or its substitute on this build), prepared for every
// captured size.
Status CudaBackend::bind_kernels() {
  EV_ASSIGN_OR_RETURN(const std::vector<const OpRow*> rows, resolve_rows(plan_, &notes_));
  ExecHooks& hooks = *this;
  executor_ = std::make_unique<Executor>(*ctx_, hooks);
  EV_RETURN_IF_ERROR(executor_->bind(rows));
  return executor_->prepare();
}

// Every size runs once outside capture, then (after its attention tuning) is captured twice. Profiling
// replays no graph.
Status CudaBackend::warm_up_and_capture() {
  const std::vector<int>& sizes = ctx_->sizes;
  execs_.assign(sizes.size(), nullptr);
  execs_device_.assign(sizes.size(), nullptr);
  for (size_t si = 0; si < sizes.size(); ++si) {
    from_host_ = true;
    EV_RETURN_IF_ERROR(executor_->walk(sizes[si], false));
    EV_CUDA_CHECK("warm-up forward, batch " + std::to_string(sizes[si]), cudaStreamSynchronize(ctx_->stream));
    if (ctx_->tune_attention) EV_RETURN_IF_ERROR(tune_attention_launches(*ctx_, sizes[si]));
    if (options_.profile_ops) continue;
    EV_RETURN_IF_ERROR(capture(si, true));
    EV_RETURN_IF_ERROR(capture(si, false));
  }
  return Status::Ok();
}

Status CudaBackend::capture(size_t si, bool from_host) {
  from_host_ = from_host;
  capture_si_ = si;
  const Status s = executor_->capture(ctx_->sizes[si]);
  cudaStreamCaptureStatus state = cudaStreamCaptureStatusNone;
  if (!s.ok() && cudaStreamIsCapturing(ctx_->stream, &state) == cudaSuccess &&
      state != cudaStreamCaptureStatusNone) {
    cudaGraph_t graph = nullptr;  // a failed walk leaves a capture open: end it and drop what it holds
    cudaStreamEndCapture(ctx_->stream, &graph);
    if (graph != nullptr) cudaGraphDestroy(graph);
    cudaGetLastError();
  }
  return s;
}

Status CudaBackend::begin_capture() {
  EV_CUDA_CHECK("graph capture, batch " + std::to_string(ctx_->sizes[capture_si_]),
                cudaStreamBeginCapture(ctx_->stream, cudaStreamCaptureModeThreadLocal));
  return Status::Ok();
}

Status CudaBackend::end_capture(int n) {
  const std::string where =
      std::string("graph capture (input from ") + (from_host_ ? "host" : "device") + "), batch " + std::to_string(n);
  cudaGraph_t graph = nullptr;
  EV_CUDA_CHECK(where, cudaStreamEndCapture(ctx_->stream, &graph));
  cudaGraphExec_t* exec = from_host_ ? &execs_[capture_si_] : &execs_device_[capture_si_];
  // (WithFlags: CUDA 11.4's cudaGraphInstantiate takes an error node and a log buffer instead.)
  const cudaError_t ie = cudaGraphInstantiateWithFlags(exec, graph, 0);
  cudaGraphDestroy(graph);
  if (ie != cudaSuccess) {
    *exec = nullptr;
    return cuda_error(where, "cudaGraphInstantiateWithFlags", ie);
  }
  EV_CUDA_CHECK(where, cudaGraphUpload(*exec, ctx_->stream));
  EV_CUDA_CHECK(where, cudaStreamSynchronize(ctx_->stream));
  return Status::Ok();
}

// With from_host_, the cast of the mapped host input into the arena's input tensor.
Status CudaBackend::before_ops(int n) {
  if (!from_host_) return Status::Ok();
  const int64_t elems = in_per_image_ * n;
  const int input = plan_.graph.input;
  EV_CUDA_CHECK("input", ctx_->fp16 ? gpu::cast_f32_to_f16(dev_in_, arena_->as<__half>(input), elems, ctx_->stream)
                                    : gpu::copy_f32(dev_in_, arena_->as<float>(input), elems, ctx_->stream));
  return Status::Ok();
}

// Every output tensor into its mapped fp32 buffer, counting non-finite values.
Status CudaBackend::after_ops(int n) {
  const Graph& g = plan_.graph;
  const Arena& m = *arena_;
  const cudaStream_t s = ctx_->stream;
  for (const Staged& o : outputs_) {
    const int64_t elems = o.per_image * n;
    EV_CUDA_CHECK("output " + g.tensors[static_cast<size_t>(o.tensor)].name,
                  ctx_->fp16
                      ? gpu::cast_f16_to_f32_count_nonfinite(m.as<__half>(o.tensor), o.dev, elems, dev_nonfinite_, s)
                      : gpu::copy_f32_count_nonfinite(m.as<float>(o.tensor), o.dev, elems, dev_nonfinite_, s));
  }
  return Status::Ok();
}

Status CudaBackend::op_begin(size_t op) {
  if (op == 0) EV_CUDA_CHECK("profile", cudaEventRecord(events_[0], ctx_->stream));
  return Status::Ok();
}

Status CudaBackend::op_end(size_t op) {
  EV_CUDA_CHECK("profile", cudaEventRecord(events_[op + 1], ctx_->stream));
  return Status::Ok();
}

// Replays the smallest captured size >= n: from the host staging buffer (the input cast first) or from the
// arena's input tensor as it is (device_input()).
Status CudaBackend::run_forward(int n, bool from_host) {
  const std::vector<int>& sizes = ctx_->sizes;
  size_t si = 0;
  while (sizes[si] < n) ++si;
  // Zeroed before the launch that reads it (mapped memory: the launch orders this store before the kernels).
  *host_nonfinite_ = 0;
  if (options_.profile_ops) {
    from_host_ = from_host;
    EV_RETURN_IF_ERROR(executor_->walk(sizes[si], true));
  } else {
    EV_CUDA_CHECK("infer", cudaGraphLaunch(from_host ? execs_[si] : execs_device_[si], ctx_->stream));
  }
  EV_CUDA_CHECK("infer", cudaStreamSynchronize(ctx_->stream));
  if (options_.profile_ops) {
    for (size_t i = 0; i < timings_.size(); ++i) {
      float ms = 0.f;
      EV_CUDA_CHECK("infer", cudaEventElapsedTime(&ms, events_[i], events_[i + 1]));
      timings_[i].seconds = ms * 1e-3;
    }
  }
  return Status::Ok();
}

// The records the engine reports, in the order of the sizes (ascending), then the ops; the profile names
// what runs at max_batch (the size bench profiles).
void CudaBackend::collect_records() {
  const Graph& g = plan_.graph;
  gemm_choices_ = ctx_->gemm_choices;
  std::stable_sort(gemm_choices_.begin(), gemm_choices_.end(),
                   [](const GemmChoice& a, const GemmChoice& b) { return a.batch < b.batch; });
  for (const int n : ctx_->sizes)
    for (const AttentionLaunch& l : ctx_->attention)
      if (l.choice.batch == n) attention_choices_.push_back(l.choice);
  timings_.resize(g.ops.size());
  for (size_t i = 0; i < g.ops.size(); ++i) {
    timings_[i].name = g.ops[i].name;
    timings_[i].kernel = executor_->kernel(i).resolved(g.batch);
    timings_[i].flops = g.ops[i].flops;
    timings_[i].bytes = g.ops[i].bytes;
  }
}

}  // namespace

Result<std::unique_ptr<Backend>> make_cuda_backend(const Plan& plan, WeightSource& weights,
                                                   const EngineOptions& options) {
  auto backend = std::make_unique<CudaBackend>(plan, options);
  EV_RETURN_IF_ERROR(backend->init(weights));
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace edgevit
