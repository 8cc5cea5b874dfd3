// CUDA backend (fp16 or fp32 plans): walks the plan's op list over one device arena, then replays that
// walk as a CUDA graph.
//
//   init   one cudaMalloc (plan.arena_bytes; every tensor is base + plan.offsets[id], the cuBLASLt workspace
//          is the last kCudaLtWorkspaceBytes); pinned host buffers, mapped into the device's address space,
//          for the fp32 input and the fp32 outputs; weights converted by WeightSource straight from the
//          mmap'd checkpoint into ONE reusable pinned staging buffer (the largest weight tensor) and copied
//          into the arena, so no second full host copy of the weights exists (Jetson's DRAM is shared);
//          one cuBLASLt algorithm chosen per GEMM and captured batch size, then pinned (below); the forward
//          captured as CUDA graphs for n = 1, 2, 4, ... and max_batch, twice: with the input cast from the
//          mapped host buffer first (infer) and without it (infer_device).
//   infer  memcpy the input into the pinned staging buffer (skipped when the caller wrote it there:
//          Engine::input_buffer() is that buffer), replay the smallest captured graph with n' >= n rows
//          (rows are independent in a ViT: padded rows are computed and ignored), synchronize.
//          No allocation, host or device (tests/runtime/cuda_engine_test.cu counts both).
//   infer_device  the caller's images are already in the arena's input tensor (Engine::device_input(), in the
//          plan's precision): replay the graph without the input cast, synchronize. Same outputs bit for bit.
//
// GEMM algorithms (EngineOptions::tune_gemms, on by default; `--no-gemm-tuning` turns it off): cuBLASLt's
// heuristic ranks algorithms by a model, and its first pick at M = 197 (batch 1) leaves most of an H100's 132
// SMs idle. So init asks for up to kTuneCandidates results (same 4 MiB workspace limit, the arena's), adds
// cluster-1 and split-K variants of them when the output has few tiles for the SMs (add_cluster_variants;
// add_split_k_variants: fixed-order reductions only), times each on the GEMM's own arena tensors (CUDA
// events, kTuneWarmup warm-ups, median of kTuneRuns; each run after a pass of xor_fold_u32 over up to 2x the
// L2 size of the arena, so weights that do not fit in L2 come from DRAM as in a forward pass; for those
// small grids a run is a captured chain of the GEMM over the weights of up to kTuneChain same-shape ops,
// because inside the forward's graph one GEMM's launch and ramp-up overlap the previous one's tail, which a
// GEMM timed alone does not show) and pins the fastest; the heuristic's first
// stays unless another is at least 3% faster by median, so noise does not flip the choice. A GEMM of the
// same shape and epilogue as one already timed (ViT's blocks repeat four shapes) takes its choice
// (GemmChoice::timed_as). The timing runs write only the GEMM's output tensor (the residual GEMMs, beta = 1
// with C == D, accumulate into it again and again): activations, which the warm-up forward that follows
// rewrites before anything reads them; weights, biases and the staging buffers are only read. Cost, once
// at start-up: up to kTuneMaxCandidates x 9 GEMM runs and as many L2 sweeps per distinct shape and captured
// size (slower candidates are dropped after their warm-ups).
// The choice is pinned for the engine's lifetime, so one engine's outputs are bit-identical run to run;
// another process may measure differently and pin another algorithm, whose outputs can differ in the last
// bits (within the fp16 tolerance). gemm_choices() and the profile's kernel names ("[algo#k/C]": the k-th
// of C timed heuristic results, 0 = the heuristic's first) say what was pinned; `run -v` and `bench -v` print
// it.
//
// Attention rows (EngineOptions::tune_attention, on by default; `--no-attention-tuning` turns it off): the
// kernel table's windows (kernels/mha_variants.h) were measured on an H100, and where a grid's last wave is
// nearly empty the row they pick can lose by 15-20% to another (docs/kernels-mha.md, start-up tuning). So for each
// captured size and each attention launch shape (full blocks; the class-token tail), after that size's
// warm-up forward has left finite activations in the arena, init times every row the device can run
// (mha_eligible_rows) as a captured chain of up to kAttnChain launches (as many as fit in kAttnChainMs, from
// one timed launch) on the op's own qkv and output tensors
// (kTuneWarmup + kTuneRuns replays, median; a row whose last warm-up is 1.5x the best so far is dropped)
// and pins the fastest; the table's row stays unless another is >= 3% faster. The runs write only the
// attention output, an activation the forward rewrites. attention_choices() records both rows and times.
//
// Graph contents: input cast (mapped fp32 -> arena input, fp16 or fp32) | im2col | patch GEMM | assemble |
// per block: LN, qkv GEMM (+bias), attention, proj GEMM (+bias, += residual: beta = 1, C == D in place),
// LN, fc1 GEMM (+bias, GELU), fc2 GEMM (+bias, += residual) | head LN, pool (or pool, LN) | head GEMM |
// pre_logits and logits cast into the mapped fp32 output buffers.
// GEMMs: fp16 in/out, fp32 accumulation (CUBLAS_COMPUTE_32F) for fp16 plans; plain fp32 for fp32 plans
// (CUBLAS_COMPUTE_32F without TF32: the fp32 path must meet 1e-4 end to end). fc1's GELU is cuBLASLt's
// GELU_BIAS epilogue (the tanh form, within 4.7e-4 of erf GELU: below fp16's own rounding of the hidden
// activations) on fp16 plans, and a separate exact erf GELU kernel on fp32 plans.
// EngineOptions::profile_ops runs the op list without the graph and times each op with CUDA events.
#ifdef EDGEVIT_HAVE_CUDA
#include <cublasLt.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cuda/mha.h"
#include "kernels/mha_variants.h"
#include "kernels/cuda/ops.h"
#include "runtime/engine.h"
#include "runtime/weights.h"

namespace edgevit {

namespace {

Status cuda_error(const std::string& where, const char* call, cudaError_t e) {
  return device_error("cuda backend: " + where + ": " + call + ": " + cudaGetErrorName(e) + ": " +
                      cudaGetErrorString(e));
}

const char* cublas_status_name(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "cuBLAS status";
  }
}

Status cublas_error(const std::string& where, const char* call, cublasStatus_t s) {
  return device_error("cuda backend: " + where + ": " + call + ": " + cublas_status_name(s) + " (" +
                      std::to_string(static_cast<int>(s)) + ")");
}

#define EV_CUDA_CHECK(where, call)                                       \
  do {                                                                   \
    const cudaError_t ev_e_ = (call);                                    \
    if (ev_e_ != cudaSuccess) return cuda_error((where), #call, ev_e_);  \
  } while (0)
#define EV_CUBLAS_CHECK(where, call)                                              \
  do {                                                                            \
    const cublasStatus_t ev_s_ = (call);                                          \
    if (ev_s_ != CUBLAS_STATUS_SUCCESS) return cublas_error((where), #call, ev_s_); \
  } while (0)

// One GEMM at one captured batch size: y (M, N) = x (M, K) @ w (N, K)^T + b [gelu | + y]. cuBLASLt is
// column-major, so it computes y^T (N, M) = w (K, N col-major, transposed) x^T (K, M): A = w, B = x.
struct Gemm {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  float beta = 0.f;
  bool exact_gelu_after = false;  // fp32 plans: bias epilogue, then gpu::gelu_f32
  int64_t out_elems = 0;
  int choice = -1;                 // index into CudaBackend::choices_
};

// GEMM tuning (see the header comment).
constexpr int kTuneCandidates = 8;      // heuristic results asked for and timed
constexpr int kTuneMaxCandidates = 48;  // with their split-K variants
constexpr size_t kSplitKBases = 3;      // split-K variants of the heuristic's first 3 results only
constexpr int32_t kSplitKs[] = {2, 3, 4, 6, 8};
constexpr int64_t kSplitKMinK = 128;          // K per split at least this
constexpr int64_t kSplitKMaxTilesPerSm = 4;   // "small" GEMMs: below this many 128 x 128 tiles per SM they get
                                              // cluster-1 and split-K variants and are timed in a chain
constexpr int kTuneChain = 12;  // small grids: timed as a replayed chain of up to this many same-shape GEMMs

// A GEMM's shape and epilogue: what its tuning depends on (pointers do not matter).
struct TuneKey {
  int64_t m = 0, n = 0, k = 0;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  bool bias = false;
  float beta = 0.f;
  bool operator==(const TuneKey& o) const {
    return m == o.m && n == o.n && k == o.k && epilogue == o.epilogue && bias == o.bias && beta == o.beta;
  }
};
constexpr int kTuneWarmup = 2;
constexpr int kTuneRuns = 7;         // timed runs per candidate; the median decides
constexpr int kTuneRunsLong = 3;     // when one run takes over kTuneLongMs (large GEMMs on Orin)
constexpr float kTuneLongMs = 2.f;
constexpr double kTuneMargin = 0.97;  // another algorithm replaces the first only when >= 3% faster
constexpr int kAttnChain = 8;         // attention tuning: launches per timed graph replay, at most ...
constexpr float kAttnChainMs = 0.1f;  // ... about this long (long launches, e.g. large batches on Orin: fewer)

class CudaBackend final : public Backend {
 public:
  // `plan` must outlive the backend (the Engine owns both); the backend owns every CUDA resource it makes.
  CudaBackend(const Plan& plan, const EngineOptions& options)
      : plan_(plan),
        fp16_(plan.graph.precision == Precision::kFp16),
        profile_(options.profile_ops),
        tune_(options.tune_gemms),
        tune_attn_(options.tune_attention),
        fault_(options.fault) {}

  ~CudaBackend() override {
    // Teardown ignores errors: there is nobody left to report them to.
    for (cudaGraphExec_t e : execs_)
      if (e != nullptr) cudaGraphExecDestroy(e);
    for (cudaGraphExec_t e : execs_device_)
      if (e != nullptr) cudaGraphExecDestroy(e);
    for (auto& per_size : gemms_)
      for (Gemm& g : per_size) {
        if (g.desc) cublasLtMatmulDescDestroy(g.desc);
        if (g.a) cublasLtMatrixLayoutDestroy(g.a);
        if (g.b) cublasLtMatrixLayoutDestroy(g.b);
        if (g.c) cublasLtMatrixLayoutDestroy(g.c);
      }
    for (cudaEvent_t ev : events_)
      if (ev != nullptr) cudaEventDestroy(ev);
    for (cudaEvent_t ev : tune_events_)
      if (ev != nullptr) cudaEventDestroy(ev);
    if (lt_ != nullptr) cublasLtDestroy(lt_);
    if (host_in_ != nullptr) cudaFreeHost(host_in_);
    if (host_pre_ != nullptr) cudaFreeHost(host_pre_);
    if (host_logits_ != nullptr) cudaFreeHost(host_logits_);
    if (host_nonfinite_ != nullptr) cudaFreeHost(const_cast<unsigned*>(host_nonfinite_));
    if (arena_ != nullptr) cudaFree(arena_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  Status init(WeightSource& weights) {
    const Graph& g = plan_.graph;
    const VitArch& a = g.arch;
    if (plan_.device.kind != DeviceKind::kCuda)
      return internal_error("cuda backend: plan for device '" + plan_.device.name + "' is not a CUDA plan");
    int dev = 0;
    EV_CUDA_CHECK("init", cudaGetDevice(&dev));
    int can_map = 0;
    EV_CUDA_CHECK("init", cudaDeviceGetAttribute(&can_map, cudaDevAttrCanMapHostMemory, dev));
    if (!can_map) return unsupported("cuda backend: device " + std::to_string(dev) + " cannot map host memory");
    EV_CUDA_CHECK("init", cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));

    // The single device allocation.
    const cudaError_t me = cudaMalloc(reinterpret_cast<void**>(&arena_), static_cast<size_t>(plan_.arena_bytes));
    if (me != cudaSuccess) {
      arena_ = nullptr;
      return does_not_fit("cuda backend: cannot allocate the " + std::to_string(plan_.arena_bytes) +
                          "-byte arena on device " + std::to_string(dev) + ": " + cudaGetErrorString(me));
    }
    workspace_ = arena_ + plan_.arena_bytes - kCudaLtWorkspaceBytes;

    // Pinned, mapped host staging: fp32 input (max batch) and fp32 outputs.
    in_per_image_ = int64_t{a.in_chans} * a.img_size * a.img_size;
    out_dim_ = a.num_classes > 0 ? a.num_classes : a.embed_dim;
    EV_RETURN_IF_ERROR(host_alloc(&host_in_, &dev_in_, static_cast<size_t>(in_per_image_ * g.batch)));
    std::memset(host_in_, 0, sizeof(float) * static_cast<size_t>(in_per_image_ * g.batch));
    EV_RETURN_IF_ERROR(host_alloc(&host_pre_, &dev_pre_, static_cast<size_t>(int64_t{a.embed_dim} * g.batch)));
    if (g.logits != g.pre_logits)
      EV_RETURN_IF_ERROR(host_alloc(&host_logits_, &dev_logits_, static_cast<size_t>(int64_t{out_dim_} * g.batch)));
    unsigned* counter = nullptr;
    EV_CUDA_CHECK("init", cudaHostAlloc(reinterpret_cast<void**>(&counter), sizeof(unsigned), cudaHostAllocMapped));
    host_nonfinite_ = counter;
    *counter = 0;
    EV_CUDA_CHECK("init", cudaHostGetDevicePointer(reinterpret_cast<void**>(&dev_nonfinite_), counter, 0));

    EV_RETURN_IF_ERROR(load_weights(weights));
    EV_CUBLAS_CHECK("init", cublasLtCreate(&lt_));
    if (tune_ || tune_attn_)
      for (cudaEvent_t& ev : tune_events_) EV_CUDA_CHECK("init", cudaEventCreate(&ev));
    if (tune_) {
      int l2 = 0;
      EV_CUDA_CHECK("init", cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
      flush_bytes_ = std::min<int64_t>(2 * int64_t{l2}, plan_.arena_bytes - kCudaLtWorkspaceBytes) / 16 * 16;
      int sms = 0;
      EV_CUDA_CHECK("init", cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
      sm_count_ = std::max(sms, 1);
    }

    // Captured batch sizes: powers of two below max_batch, and max_batch.
    for (int s = 1; s < g.batch; s *= 2) sizes_.push_back(s);
    sizes_.push_back(g.batch);
    gemms_.resize(sizes_.size());
    for (size_t si = 0; si < sizes_.size(); ++si) EV_RETURN_IF_ERROR(plan_gemms(si));
    EV_RETURN_IF_ERROR(check_attention_workspace());

    timings_.resize(g.ops.size());
    ran_.assign(g.ops.size(), "(not captured)");
    for (size_t i = 0; i < g.ops.size(); ++i) {
      timings_[i].name = g.ops[i].name;
      timings_[i].kernel = g.ops[i].kernel;
      timings_[i].flops = g.ops[i].flops;
      timings_[i].bytes = g.ops[i].bytes;
      // The profile runs max_batch (bench): name the algorithm pinned for that size.
      const Gemm& gm = gemms_.back()[i];
      if (g.ops[i].kind == OpKind::kLinear && gm.choice >= 0 && choices_[gm.choice].candidates > 0)
        timings_[i].kernel += "[algo#" + std::to_string(choices_[gm.choice].chosen) + "/" +
                              std::to_string(choices_[gm.choice].candidates) + "]";  // no space: scripts split on them
    }
    EV_RETURN_IF_ERROR(table_attention_choices(dev));
    if (profile_) {
      events_.assign(g.ops.size() + 1, nullptr);
      for (cudaEvent_t& ev : events_) EV_CUDA_CHECK("init", cudaEventCreate(&ev));
    }

    // Every size runs once outside capture (lazy module loading, attention kernels' smem opt-in, and a
    // check that each launch is valid), then is captured. Profiling replays no graph.
    execs_.assign(sizes_.size(), nullptr);
    execs_device_.assign(sizes_.size(), nullptr);
    for (size_t si = 0; si < sizes_.size(); ++si) {
      EV_RETURN_IF_ERROR(enqueue_forward(si, false, true));
      EV_CUDA_CHECK("warm-up forward, batch " + std::to_string(sizes_[si]), cudaStreamSynchronize(stream_));
      if (tune_attn_) EV_RETURN_IF_ERROR(tune_attention(si));
      if (profile_) continue;
      EV_RETURN_IF_ERROR(capture(si, true, &execs_[si]));
      EV_RETURN_IF_ERROR(capture(si, false, &execs_device_[si]));
    }
    name_attention_ops();
    return Status::Ok();
  }

  Status infer(const float* input, int n) override {
    const Graph& g = plan_.graph;
    if (n < 1 || n > g.batch)
      return invalid_argument("cuda backend: batch " + std::to_string(n) + " outside [1, " +
                              std::to_string(g.batch) + "]");
    // memmove: a caller may pass a pointer inside the staging buffer itself.
    if (input != host_in_) std::memmove(host_in_, input, sizeof(float) * static_cast<size_t>(in_per_image_ * n));
    return run_forward(n, true);
  }

  Status infer_device(int n) override {
    const Graph& g = plan_.graph;
    if (n < 1 || n > g.batch)
      return invalid_argument("cuda backend: batch " + std::to_string(n) + " outside [1, " +
                              std::to_string(g.batch) + "]");
    return run_forward(n, false);
  }

  void* device_input() override { return at(plan_.graph.input); }

  const float* logits() const override { return host_logits_ != nullptr ? host_logits_ : host_pre_; }
  const float* pre_logits() const override { return host_pre_; }
  int64_t device_nonfinite_count() const override { return *host_nonfinite_; }
  std::vector<std::string> executed_kernels() const override { return ran_; }
  const std::vector<OpTiming>& op_timings() const override { return timings_; }
  int64_t device_bytes() const override { return plan_.arena_bytes; }
  float* input_buffer() override { return host_in_; }
  const std::vector<GemmChoice>& gemm_choices() const override { return choices_; }
  const std::vector<AttentionChoice>& attention_choices() const override { return attention_choices_; }

 private:
  // Replays the smallest captured size >= n: from the host staging buffer (the input cast first) or from
  // the arena's input tensor as it is (device_input()).
  Status run_forward(int n, bool from_host) {
    size_t si = 0;
    while (sizes_[si] < n) ++si;
    // Zeroed before the launch that reads it (mapped memory: the launch orders this store before the kernels).
    *host_nonfinite_ = 0;
    if (profile_) {
      EV_RETURN_IF_ERROR(enqueue_forward(si, true, from_host));
    } else {
      EV_CUDA_CHECK("infer", cudaGraphLaunch(from_host ? execs_[si] : execs_device_[si], stream_));
    }
    EV_CUDA_CHECK("infer", cudaStreamSynchronize(stream_));
    if (profile_) {
      for (size_t i = 0; i < timings_.size(); ++i) {
        float ms = 0.f;
        EV_CUDA_CHECK("infer", cudaEventElapsedTime(&ms, events_[i], events_[i + 1]));
        timings_[i].seconds = ms * 1e-3;
      }
    }
    return Status::Ok();
  }

  uint8_t* at(int tensor_id) const { return arena_ + plan_.offsets[tensor_id]; }
  template <typename T>
  T* ptr(int tensor_id) const { return reinterpret_cast<T*>(at(tensor_id)); }
  __half* h16(int tensor_id) const { return ptr<__half>(tensor_id); }
  float* f32(int tensor_id) const { return ptr<float>(tensor_id); }
  int weight_named(const Op& o, const char* name) const {
    for (int id : o.weights)
      if (plan_.graph.tensors[id].name == name) return id;
    return -1;
  }

  Status host_alloc(float** host, float** device, size_t floats) {
    EV_CUDA_CHECK("init", cudaHostAlloc(reinterpret_cast<void**>(host), std::max<size_t>(floats, 1) * sizeof(float),
                                        cudaHostAllocMapped));
    EV_CUDA_CHECK("init", cudaHostGetDevicePointer(reinterpret_cast<void**>(device), *host, 0));
    return Status::Ok();
  }

  // Weights: converted from the mmap straight into one pinned staging buffer, one tensor at a time.
  Status load_weights(WeightSource& weights) {
    const Graph& g = plan_.graph;
    int64_t largest = 0;
    for (const TensorDesc& t : g.tensors)
      if (t.kind == TensorKind::kWeight) largest = std::max(largest, t.bytes());
    void* staging = nullptr;
    EV_CUDA_CHECK("weights", cudaHostAlloc(&staging, static_cast<size_t>(std::max<int64_t>(largest, 1)), 0));
    Status s = Status::Ok();
    for (const TensorDesc& t : g.tensors) {
      if (t.kind != TensorKind::kWeight) continue;
      const size_t count = static_cast<size_t>(t.numel());
      s = fp16_ ? weights.read_f16(t.name, static_cast<uint16_t*>(staging), count)
                : weights.read_f32(t.name, static_cast<float*>(staging), count);
      if (!s.ok()) break;
      if (fault_ == InjectedFault::kCorruptWeightByte && t.name == "blocks.0.attn.qkv.weight") {
        // Flip the exponent's top bit of element 0 (byte 1 of an fp16, byte 3 of an fp32; little endian).
        static_cast<uint8_t*>(staging)[fp16_ ? 1 : 3] ^= 0x40;
      }
      const cudaError_t e = cudaMemcpy(at(t.id), staging, static_cast<size_t>(t.bytes()), cudaMemcpyHostToDevice);
      if (e != cudaSuccess) {
        s = cuda_error("weights: tensor '" + t.name + "'", "cudaMemcpy", e);
        break;
      }
    }
    const cudaError_t fe = cudaFreeHost(staging);
    if (s.ok() && fe != cudaSuccess) return cuda_error("weights", "cudaFreeHost", fe);
    return s;
  }

  Status plan_gemms(size_t si) {
    const Graph& g = plan_.graph;
    const int n = sizes_[si];
    gemms_[si].resize(g.ops.size());
    cublasLtMatmulPreference_t pref = nullptr;
    EV_CUBLAS_CHECK("gemm plan", cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws = kCudaLtWorkspaceBytes;
    Status s = Status::Ok();
    const cublasStatus_t ps =
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    if (ps != CUBLAS_STATUS_SUCCESS) s = cublas_error("gemm plan", "cublasLtMatmulPreferenceSetAttribute", ps);
    for (size_t i = 0; s.ok() && i < g.ops.size(); ++i) {
      const Op& o = g.ops[i];
      if (o.kind != OpKind::kLinear) continue;
      s = plan_gemm(o, n, pref, &gemms_[si][i]);
    }
    cublasLtMatmulPreferenceDestroy(pref);
    return s;
  }

  // Linear op `o` at batch n: shape, cuBLASLt epilogue (fp16 plans fuse GELU; fp32 plans run an exact erf
  // GELU kernel after a bias epilogue) and beta (1 for the residual epilogue: y += x w^T + b).
  TuneKey tune_key(const Op& o, int n) const {
    TuneKey key;
    key.m = o.m / plan_.graph.batch * n;
    key.n = o.n;
    key.k = o.k;
    key.bias = o.weights.size() > 1;
    key.epilogue = key.bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    if (o.epilogue == 1 && fp16_) key.epilogue = key.bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
    key.beta = o.epilogue == 2 ? 1.f : 0.f;
    return key;
  }

  Status plan_gemm(const Op& o, int n, cublasLtMatmulPreference_t pref, Gemm* out) {
    const Graph& g = plan_.graph;
    const std::string where = "op '" + o.name + "' (batch " + std::to_string(n) + ")";
    const int64_t m = o.m / g.batch * n, nn = o.n, k = o.k;
    const cudaDataType dt = fp16_ ? CUDA_R_16F : CUDA_R_32F;
    EV_CUBLAS_CHECK(where, cublasLtMatmulDescCreate(&out->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    EV_CUBLAS_CHECK(where, cublasLtMatmulDescSetAttribute(out->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    EV_CUBLAS_CHECK(where, cublasLtMatmulDescSetAttribute(out->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    const TuneKey key = tune_key(o, n);
    const cublasLtEpilogue_t epi = key.epilogue;
    out->exact_gelu_after = o.epilogue == 1 && !fp16_;
    EV_CUBLAS_CHECK(where, cublasLtMatmulDescSetAttribute(out->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    if (key.bias) {
      const void* bias = at(o.weights[1]);
      EV_CUBLAS_CHECK(where,
                      cublasLtMatmulDescSetAttribute(out->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    }
    out->beta = key.beta;
    out->out_elems = m * nn;
    EV_CUBLAS_CHECK(where, cublasLtMatrixLayoutCreate(&out->a, dt, k, nn, k));   // w: (N, K) row-major
    EV_CUBLAS_CHECK(where, cublasLtMatrixLayoutCreate(&out->b, dt, k, m, k));    // x: (M, K) row-major
    EV_CUBLAS_CHECK(where, cublasLtMatrixLayoutCreate(&out->c, dt, nn, m, nn));  // y: (M, N) row-major
    if (tune_) {
      for (const TunedShape& t : tuned_) {
        if (!(t.key == key)) continue;
        // Timed before for another op of the same shape and epilogue (ViT's blocks repeat 4 GEMM shapes).
        out->algo = t.algo;
        GemmChoice c = t.choice;
        c.op = o.name;
        c.batch = n;
        c.timed_as = t.choice.op;
        out->choice = static_cast<int>(choices_.size());
        choices_.push_back(std::move(c));
        return Status::Ok();
      }
    }
    cublasLtMatmulHeuristicResult_t results[kTuneCandidates] = {};
    int found = 0;
    EV_CUBLAS_CHECK(where, cublasLtMatmulAlgoGetHeuristic(lt_, out->desc, out->a, out->b, out->c, out->c, pref,
                                                          tune_ ? kTuneCandidates : 1, results, &found));
    std::vector<cublasLtMatmulAlgo_t> candidates;
    for (int r = 0; r < found; ++r)
      if (results[r].state == CUBLAS_STATUS_SUCCESS && results[r].workspaceSize <= kCudaLtWorkspaceBytes)
        candidates.push_back(results[r].algo);
    if (candidates.empty())
      return device_error("cuda backend: " + where + ": cuBLASLt has no algorithm for " + std::to_string(m) + "x" +
                          std::to_string(nn) + "x" + std::to_string(k) + " " + (fp16_ ? "fp16" : "fp32") +
                          " with this epilogue");
    GemmChoice c;
    c.op = o.name;
    c.batch = n;
    out->algo = candidates[0];
    if (tune_) {
      c.heuristic = static_cast<int>(candidates.size());
      const bool small = m * nn <= kSplitKMaxTilesPerSm * sm_count_ * 128 * 128;
      std::vector<const void*> chain{at(o.weights[0])};
      if (small) {
        add_cluster_variants(*out, &candidates);
        add_split_k_variants(*out, k, &candidates);
        chain = same_shape_weights(o, key, n);
      }
      c.chain = static_cast<int>(chain.size());
      EV_RETURN_IF_ERROR(tune_gemm(o, candidates, chain, out, &c));
    }
    c.algo = describe_algo(out->algo);  // pinned: the same algorithm on every run, so outputs are bit-identical
    if (tune_) tuned_.push_back(TunedShape{key, out->algo, c});
    out->choice = static_cast<int>(choices_.size());
    choices_.push_back(std::move(c));
    return Status::Ok();
  }

  // Hopper: each heuristic result again with thread-block clusters of 1 (CUBLASLT_CLUSTER_SHAPE_1x1x1),
  // appended to `candidates`, for GEMMs with few output tiles. cuBLASLt's sm90 kernels come with clusters of
  // 2-8 blocks that share operand loads; at M = 197 a GEMM is ~5 us of launch, ramp and drain inside the
  // graph, and a 1x1 cluster starts sooner. Measured on an H100 (2026-11-23, tools/gpu/lt_search.cu): timed
  // alone they never win; timed in a chain of ViT-B's 12 same-shape GEMMs they took qkv from 5.25 to 4.71 us
  // per GEMM and the 48 batch-1 GEMMs of the model from 22.9 to 21.9 us per block. Devices without clusters
  // (Orin's sm_87) and cuBLASLt before 12 (no such attribute) add nothing: cublasLtMatmulAlgoCheck refuses.
  void add_cluster_variants(const Gemm& g, std::vector<cublasLtMatmulAlgo_t>* candidates) const {
#if CUBLAS_VER_MAJOR >= 12
    const size_t heuristic = candidates->size();
    for (size_t i = 0; i < heuristic; ++i) {
      cublasLtMatmulAlgo_t a = (*candidates)[i];
      uint16_t cluster = 0;
      size_t written = 0;
      if (cublasLtMatmulAlgoConfigGetAttribute(&a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cluster, sizeof cluster,
                                               &written) != CUBLAS_STATUS_SUCCESS ||
          cluster == CUBLASLT_CLUSTER_SHAPE_1x1x1)
        continue;
      cluster = CUBLASLT_CLUSTER_SHAPE_1x1x1;
      cublasLtMatmulHeuristicResult_t r{};
      if (cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cluster, sizeof cluster) !=
              CUBLAS_STATUS_SUCCESS ||
          cublasLtMatmulAlgoCheck(lt_, g.desc, g.a, g.b, g.c, g.c, &a, &r) != CUBLAS_STATUS_SUCCESS ||
          r.workspaceSize > static_cast<size_t>(kCudaLtWorkspaceBytes))
        continue;
      bool seen = false;
      for (const cublasLtMatmulAlgo_t& have : *candidates) seen = seen || std::memcmp(&have, &a, sizeof a) == 0;
      if (!seen) candidates->push_back(a);
    }
#else
    (void)g;
    (void)candidates;
#endif
  }

  // The weights of up to kTuneChain linear ops of the graph with `key`'s shape and epilogue at batch n, `o`'s
  // first: a small GEMM is timed as a replayed chain of them (time_gemm), each reading its own weights from
  // DRAM after the one before, as in the forward, and not alone, where launch and ramp-up do not overlap.
  std::vector<const void*> same_shape_weights(const Op& o, const TuneKey& key, int n) const {
    std::vector<const void*> w{at(o.weights[0])};
    for (const Op& other : plan_.graph.ops) {
      if (w.size() >= static_cast<size_t>(kTuneChain)) break;
      if (other.kind != OpKind::kLinear || &other == &o || !(tune_key(other, n) == key)) continue;
      w.push_back(at(other.weights[0]));
    }
    return w;
  }

  // Split-K variants of the heuristic's first kSplitKBases results, appended to `candidates`, for GEMMs whose
  // M x N has few output tiles for the SMs: at M = 197 (batch 1) ViT-B's fc2 has ~24 tiles of 128 x 128 for
  // an H100's 132 SMs, each looping over K = 3072 alone; on Orin NX's 8 SMs 12 such tiles leave a half-empty
  // second wave. The heuristic seldom offers split-K. Measured on an H100 (2026-11-22): no variant beat the
  // heuristic's sm90 kernels for ViT-Ti/B at batch 1 (one fp32 GEMM of the avgpool test model took one);
  // kept because the timing, not a guess, decides per device (on the H100 the whole cuda_engine_test suite,
  // tuning included, ran in ~4 s; start-up on an Orin is not measured). Algorithms say whether they
  // take it (CUBLASLT_ALGO_CAP_SPLITK_SUPPORT) and with which reductions. Only reductions of a fixed order
  // are used, so outputs stay bit-identical run to run: INPLACE (counters in the workspace serialize the
  // partial sums) and COMPUTE_TYPE (fp32 partials in the workspace, summed by a second kernel). Every output
  // tile splits K alike, so a row's result does not depend on its position in the batch.
  // cublasLtMatmulAlgoCheck drops what this shape, epilogue or the 4 MiB workspace cannot take.
  void add_split_k_variants(const Gemm& g, int64_t k, std::vector<cublasLtMatmulAlgo_t>* candidates) const {
    const size_t bases = std::min(candidates->size(), kSplitKBases);
    for (size_t i = 0; i < bases; ++i) {
      const cublasLtMatmulAlgo_t base = (*candidates)[i];
      int32_t support = 0, splitk = 1;
      uint32_t schemes = 0;
      size_t written = 0;
      if (cublasLtMatmulAlgoCapGetAttribute(&base, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT, &support, sizeof support,
                                            &written) != CUBLAS_STATUS_SUCCESS ||
          support == 0 ||
          cublasLtMatmulAlgoCapGetAttribute(&base, CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK, &schemes,
                                            sizeof schemes, &written) != CUBLAS_STATUS_SUCCESS ||
          cublasLtMatmulAlgoConfigGetAttribute(&base, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof splitk,
                                               &written) != CUBLAS_STATUS_SUCCESS ||
          splitk > 1)
        continue;
      for (const int32_t s : kSplitKs) {
        if (k / s < kSplitKMinK) break;
        for (const uint32_t scheme : {static_cast<uint32_t>(CUBLASLT_REDUCTION_SCHEME_INPLACE),
                                      static_cast<uint32_t>(CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE)}) {
          if ((schemes & scheme) == 0) continue;
          cublasLtMatmulAlgo_t a = base;
          if (cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &s, sizeof s) !=
                  CUBLAS_STATUS_SUCCESS ||
              cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme,
                                                   sizeof scheme) != CUBLAS_STATUS_SUCCESS)
            continue;
          cublasLtMatmulHeuristicResult_t r{};
          if (cublasLtMatmulAlgoCheck(lt_, g.desc, g.a, g.b, g.c, g.c, &a, &r) != CUBLAS_STATUS_SUCCESS ||
              r.workspaceSize > static_cast<size_t>(kCudaLtWorkspaceBytes))
            continue;
          bool seen = false;
          for (const cublasLtMatmulAlgo_t& have : *candidates) seen = seen || std::memcmp(&have, &a, sizeof a) == 0;
          if (!seen) candidates->push_back(a);
          if (candidates->size() >= static_cast<size_t>(kTuneMaxCandidates)) return;
        }
      }
    }
  }

  // Times every candidate on the op's own tensors and pins the fastest into g->algo (the first unless
  // another is kTuneMargin faster); see the header comment for what the runs may write.
  Status tune_gemm(const Op& o, const std::vector<cublasLtMatmulAlgo_t>& candidates,
                   const std::vector<const void*>& chain, Gemm* g, GemmChoice* c) {
    std::vector<double> median(candidates.size(), -1.0);
    double best = -1.0;
    size_t best_i = 0;
    for (size_t i = 0; i < candidates.size(); ++i) {
      EV_RETURN_IF_ERROR(time_gemm(o, *g, candidates[i], chain, best, &median[i]));
      if (median[i] >= 0 && (best < 0 || median[i] < best)) {
        best = median[i];
        best_i = i;
      }
    }
    if (best < 0)
      return device_error("cuda backend: gemm tuning: op '" + o.name + "': cuBLASLt refused all " +
                          std::to_string(candidates.size()) + " of its heuristic's algorithms at launch");
    if (best_i != 0 && median[0] >= 0 && best > kTuneMargin * median[0]) best_i = 0;
    g->algo = candidates[best_i];
    c->candidates = static_cast<int>(candidates.size());
    c->chosen = static_cast<int>(best_i);
    c->first_us = median[0] >= 0 ? median[0] * 1e3 : 0.0;
    c->chosen_us = median[best_i] * 1e3;
    return Status::Ok();
  }

  // Median milliseconds of one GEMM with `algo` over kTuneRuns timed runs (kTuneRunsLong when a warm-up
  // takes over kTuneLongMs), each after an L2 sweep and timed with events. With one weight in `chain` a run
  // is the GEMM alone; with more, a run replays a captured chain of the GEMM over each of those weights
  // (same input and output) and counts 1/size of it. -1 when cuBLASLt refuses the algorithm at launch, or
  // when its last warm-up is already 1.5x slower than `best_ms` (it cannot win).
  Status time_gemm(const Op& o, const Gemm& g, const cublasLtMatmulAlgo_t& algo, const std::vector<const void*>& chain,
                   double best_ms, double* median_ms) {
    const std::string where = "gemm tuning: op '" + o.name + "'";
    *median_ms = -1.0;
    cudaGraphExec_t exec = nullptr;
    if (chain.size() > 1) {
      bool refused = false;
      EV_RETURN_IF_ERROR(capture_chain(o, g, algo, chain, &exec, &refused));
      if (refused) return Status::Ok();
    }
    const Status s = time_runs(o, g, algo, exec, static_cast<int>(chain.size()), best_ms, median_ms);
    if (exec != nullptr) {
      const cudaError_t e = cudaGraphExecDestroy(exec);
      if (s.ok() && e != cudaSuccess) return cuda_error(where, "cudaGraphExecDestroy", e);
    }
    return s;
  }

  // The chain of time_gemm as an instantiated graph in *exec; *refused when cuBLASLt refuses `algo`.
  Status capture_chain(const Op& o, const Gemm& g, const cublasLtMatmulAlgo_t& algo,
                       const std::vector<const void*>& chain, cudaGraphExec_t* exec, bool* refused) {
    const std::string where = "gemm tuning: op '" + o.name + "' (chain)";
    EV_CUDA_CHECK(where, cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    const float alpha = 1.f;
    void* y = at(o.outputs[0]);
    for (const void* w : chain)
      *refused = *refused || cublasLtMatmul(lt_, g.desc, &alpha, w, g.a, at(o.inputs[0]), g.b, &g.beta, y, g.c, y,
                                            g.c, &algo, workspace_, kCudaLtWorkspaceBytes,
                                            stream_) != CUBLAS_STATUS_SUCCESS;
    cudaGraph_t graph = nullptr;
    const cudaError_t e = cudaStreamEndCapture(stream_, &graph);
    if (e != cudaSuccess || *refused) {
      if (graph != nullptr) cudaGraphDestroy(graph);
      if (*refused) {
        cudaGetLastError();  // a refused launch inside the capture leaves nothing to keep
        return Status::Ok();
      }
      return cuda_error(where, "cudaStreamEndCapture", e);
    }
    // (WithFlags: CUDA 11.4's cudaGraphInstantiate takes an error node and a log buffer instead.)
    const cudaError_t ie = cudaGraphInstantiateWithFlags(exec, graph, 0);
    const cudaError_t de = cudaGraphDestroy(graph);
    if (ie != cudaSuccess) return cuda_error(where, "cudaGraphInstantiateWithFlags", ie);
    if (de != cudaSuccess) return cuda_error(where, "cudaGraphDestroy", de);
    return Status::Ok();
  }

  // time_gemm's runs: the GEMM alone (exec null) or the chain graph `exec` of `per_run` GEMMs, each after the
  // L2 sweep.
  Status time_runs(const Op& o, const Gemm& g, const cublasLtMatmulAlgo_t& algo, cudaGraphExec_t exec, int per_run,
                   double best_ms, double* median_ms) {
    const std::string where = "gemm tuning: op '" + o.name + "'";
    const auto sweep = [&] {
      return flush_bytes_ > 0 ? gpu::xor_fold_u32(arena_, flush_bytes_,
                                                  static_cast<uint32_t*>(static_cast<void*>(at(o.outputs[0]))), stream_)
                              : cudaSuccess;
    };
    const auto launch = [&] {
      if (exec != nullptr) return cudaGraphLaunch(exec, stream_);
      return launch_gemm(o, g, algo) == CUBLAS_STATUS_SUCCESS ? cudaSuccess : cudaErrorNotSupported;
    };
    return timed_median(where, sweep, launch, per_run, best_ms, median_ms);
  }

  // The timing rule of both tuners: `launch` runs kTuneWarmup + kTuneRuns times (kTuneRunsLong when a
  // warm-up's time per launch is over kTuneLongMs), each between two events and after `before` (outside
  // them); *median_ms is the median of the timed runs divided by per_run. -1 when `launch` refuses
  // (cudaErrorNotSupported: not a candidate) or when the last warm-up is already 1.5x best_ms (it cannot win).
  template <class Before, class Launch>
  Status timed_median(const std::string& where, Before before, Launch launch, int per_run, double best_ms,
                      double* median_ms) {
    *median_ms = -1.0;
    float ms[kTuneWarmup + kTuneRuns] = {};
    int runs = kTuneWarmup + kTuneRuns;
    for (int r = 0; r < runs; ++r) {
      EV_CUDA_CHECK(where, before());
      EV_CUDA_CHECK(where, cudaEventRecord(tune_events_[0], stream_));
      const cudaError_t le = launch();
      if (le == cudaErrorNotSupported) return Status::Ok();  // refused: not a candidate
      if (le != cudaSuccess) return cuda_error(where, "timed launch", le);
      EV_CUDA_CHECK(where, cudaEventRecord(tune_events_[1], stream_));
      EV_CUDA_CHECK(where, cudaEventSynchronize(tune_events_[1]));
      EV_CUDA_CHECK(where, cudaEventElapsedTime(&ms[r], tune_events_[0], tune_events_[1]));
      ms[r] /= static_cast<float>(per_run);
      if (r == kTuneWarmup - 1) {
        if (best_ms > 0 && ms[r] > 1.5 * best_ms) return Status::Ok();
        if (ms[r] > kTuneLongMs) runs = kTuneWarmup + kTuneRunsLong;
      }
    }
    // Insertion sort of the timed runs (a handful; std::sort on this array trips GCC 12's -Warray-bounds).
    float* t = ms + kTuneWarmup;
    const int nt = runs - kTuneWarmup;
    for (int i = 1; i < nt; ++i)
      for (int j = i; j > 0 && t[j] < t[j - 1]; --j) std::swap(t[j], t[j - 1]);
    *median_ms = t[nt / 2];
    return Status::Ok();
  }

  // y = x w^T (+ bias, GELU, += y) with `algo`, enqueued on stream_ (also inside a capture).
  cublasStatus_t launch_gemm(const Op& o, const Gemm& g, const cublasLtMatmulAlgo_t& algo) const {
    const float alpha = 1.f;
    void* y = at(o.outputs[0]);
    return cublasLtMatmul(lt_, g.desc, &alpha, at(o.weights[0]), g.a, at(o.inputs[0]), g.b, &g.beta, y, g.c, y, g.c,
                          &algo, workspace_, kCudaLtWorkspaceBytes, stream_);
  }

  static std::string describe_algo(const cublasLtMatmulAlgo_t& algo) {
    int32_t id = -1, splitk = 1;
    uint32_t tile = 0, stages = 0, reduction = 0, swizzle = 0;
    size_t written = 0;
    cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id, &written);
    cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile, &written);
    cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof stages, &written);
    cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof splitk, &written);
    cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &reduction, sizeof reduction,
                                         &written);
    cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &swizzle, sizeof swizzle,
                                         &written);
    std::string d = "id " + std::to_string(id) + " tile " + std::to_string(tile) + " stages " +
                    std::to_string(stages) + " splitK " + std::to_string(splitk);
    if (splitk > 1) d += " reduction " + std::to_string(reduction);
    if (swizzle != 0) d += " swizzle " + std::to_string(swizzle);
#if CUBLAS_VER_MAJOR >= 12
    uint16_t cluster = 0;  // cublasLtClusterShape_t: 0 = cuBLASLt's choice, 2 = 1x1x1, 3 = 2x1x1, ...
    cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cluster, sizeof cluster,
                                         &written);
    if (cluster != 0) d += " cluster " + std::to_string(cluster);
#endif
    return d;
  }

  // The table's attention row (choose_mha, as the launcher would pick it on this device) for each captured size
  // and launch shape: the full blocks first, then the class-token tail where the graph has one. tune_attention
  // may replace the rows later; name_attention_ops() names the max-batch ones in the profile.
  Status table_attention_choices(int dev) {
    const Graph& g = plan_.graph;
    const VitArch& a = g.arch;
    int major = 0, minor = 0, optin = 0, sms = 0;
    EV_CUDA_CHECK("init", cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    EV_CUDA_CHECK("init", cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
    EV_CUDA_CHECK("init", cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    EV_CUDA_CHECK("init", cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    sm_ = major * 10 + minor;
    smem_optin_ = optin;
    std::vector<int> shapes;  // distinct seq_q of the attention ops, in op order (full blocks first)
    for (const Op& o : g.ops)
      if (o.kind == OpKind::kAttention && std::find(shapes.begin(), shapes.end(), o.seq_q) == shapes.end())
        shapes.push_back(static_cast<int>(o.seq_q));
    attn_launches_.assign(sizes_.size(), {});
    for (size_t si = 0; si < sizes_.size(); ++si) {
      const int n = sizes_[si];
      for (const int seq_q : shapes) {
        AttentionChoice c;
        c.batch = n;
        c.seq_q = seq_q;
        int row = -1;
        if (!fp16_) {
          c.kernel = "cuda.mha_f32";
          c.reason = "fp32 plan: gpu::mha_f32 (one block per query row, fp32 FMAs, no tensor cores; the fused "
                     "kernels are fp16 only, and the plan's name for this path is cuda.mha_unfused_cublas)";
        } else if (g.attention != AttentionPath::kFused) {
          c.kernel = "cuda.mha_unfused_cublas";
          c.reason = "the plan's unfused path: " + plan_.attention_reason;
        } else {
          const MhaGrid grid{n, a.num_heads, seq_q, sms};
          const MhaChoice m = choose_mha(sm_, smem_optin_, a.head_dim(), true, false, &grid);
          if (!m.fused)
            return unsupported("cuda backend: the plan chose fused attention for '" + plan_.device.name +
                               "', but this device cannot run it at batch " + std::to_string(n) + ": " + m.reason +
                               " (plan with --device auto, or --attention explicit)");
          c.kernel = std::string("cuda.") + m.variant->name;
          c.reason = m.reason;
          row = static_cast<int>(m.variant - kMhaVariants);
        }
        c.table_kernel = c.kernel;
        attn_launches_[si].push_back(AttnLaunch{seq_q, row, attention_choices_.size()});
        attention_choices_.push_back(std::move(c));
      }
    }
    return Status::Ok();
  }

  // The profile names, for each attention op, the row pinned for the largest captured size.
  void name_attention_ops() {
    const Graph& g = plan_.graph;
    for (size_t i = 0; i < g.ops.size(); ++i) {
      if (g.ops[i].kind != OpKind::kAttention) continue;
      for (const AttnLaunch& l : attn_launches_.back())
        if (l.seq_q == g.ops[i].seq_q) timings_[i].kernel = attention_choices_[l.choice].kernel;
    }
  }

  // The fused row pinned for an attention op at captured size si (-1: not fused).
  int attention_row(size_t si, const Op& o) const {
    for (const AttnLaunch& l : attn_launches_[si])
      if (l.seq_q == o.seq_q) return l.row;
    return -1;
  }

  // See the header comment: times every eligible row for each fused launch shape at size si and pins the
  // fastest (the table's unless another is kTuneMargin faster).
  Status tune_attention(size_t si) {
    const Graph& g = plan_.graph;
    const VitArch& a = g.arch;
    const std::vector<const MhaVariant*> rows = mha_eligible_rows(sm_, smem_optin_, a.head_dim());
    for (AttnLaunch& l : attn_launches_[si]) {
      if (l.row < 0) continue;
      const Op* op = nullptr;
      for (const Op& o : g.ops)
        if (o.kind == OpKind::kAttention && o.seq_q == l.seq_q) {
          op = &o;
          break;
        }
      if (op == nullptr) continue;
      const int table = l.row;
      double table_ms = -1.0;
      EV_RETURN_IF_ERROR(time_attention(*op, si, table, -1.0, &table_ms));
      if (table_ms < 0)
        return device_error("cuda backend: attention tuning: op '" + op->name + "': the table's row " +
                            kMhaVariants[table].name + " failed to launch");
      double best_ms = table_ms;
      int best = table;
      int timed = 1;
      for (const MhaVariant* r : rows) {
        const int idx = static_cast<int>(r - kMhaVariants);
        if (idx == table) continue;
        double ms = -1.0;
        EV_RETURN_IF_ERROR(time_attention(*op, si, idx, best_ms, &ms));
        ++timed;
        if (ms >= 0 && ms < best_ms) {
          best_ms = ms;
          best = idx;
        }
      }
      if (best != table && best_ms > kTuneMargin * table_ms) best = table;
      l.row = best;
      AttentionChoice& c = attention_choices_[l.choice];
      c.kernel = std::string("cuda.") + kMhaVariants[best].name;
      c.candidates = timed;
      c.table_us = table_ms * 1e3;
      c.chosen_us = (best == table ? table_ms : best_ms) * 1e3;
    }
    return Status::Ok();
  }

  // Median milliseconds of one launch of fused row `row` for attention op `o` at size si, from replays of a
  // captured chain of up to kAttnChain launches; -1 when the row refuses the launch, or when its last warm-up is
  // already 1.5x `best_ms` (it cannot win).
  Status time_attention(const Op& o, size_t si, int row, double best_ms, double* median_ms) {
    const Graph& g = plan_.graph;
    const VitArch& a = g.arch;
    const std::string where = "attention tuning: op '" + o.name + "', " + kMhaVariants[row].name;
    *median_ms = -1.0;
    const AttnParams p = attn_params_packed_qkv(sizes_[si], a.num_tokens(), a.num_heads, a.head_dim(),
                                                1.0f / std::sqrt(static_cast<float>(a.head_dim())),
                                                static_cast<int>(o.seq_q));
    const int64_t ko = packed_k_offset(a.num_heads, a.head_dim()), vo = packed_v_offset(a.num_heads, a.head_dim());
    const __half* q = h16(o.inputs[0]);
    __half* out = h16(o.outputs[0]);
    // Once outside capture: module load and shared-memory opt-in, and a row that refuses is no candidate.
    if (mha_fused_f16_variant(p, q, q + ko, q + vo, out, row, stream_) != cudaSuccess) {
      cudaGetLastError();
      return Status::Ok();
    }
    // Once more, timed: the chain holds as many launches as fit in kAttnChainMs (1 to kAttnChain).
    float one_ms = 0.f;
    EV_CUDA_CHECK(where, cudaEventRecord(tune_events_[0], stream_));
    EV_CUDA_CHECK(where, mha_fused_f16_variant(p, q, q + ko, q + vo, out, row, stream_));
    EV_CUDA_CHECK(where, cudaEventRecord(tune_events_[1], stream_));
    EV_CUDA_CHECK(where, cudaEventSynchronize(tune_events_[1]));
    EV_CUDA_CHECK(where, cudaEventElapsedTime(&one_ms, tune_events_[0], tune_events_[1]));
    const int chain = std::max(1, std::min(kAttnChain, static_cast<int>(kAttnChainMs / std::max(one_ms, 1e-4f))));
    EV_CUDA_CHECK(where, cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    cudaError_t le = cudaSuccess;
    for (int i = 0; i < chain && le == cudaSuccess; ++i)
      le = mha_fused_f16_variant(p, q, q + ko, q + vo, out, row, stream_);
    cudaGraph_t graph = nullptr;
    const cudaError_t ce = cudaStreamEndCapture(stream_, &graph);
    if (le != cudaSuccess || ce != cudaSuccess) {
      if (graph != nullptr) cudaGraphDestroy(graph);
      return cuda_error(where, le != cudaSuccess ? "launch in capture" : "cudaStreamEndCapture",
                        le != cudaSuccess ? le : ce);
    }
    cudaGraphExec_t exec = nullptr;
    const cudaError_t ie = cudaGraphInstantiateWithFlags(&exec, graph, 0);
    cudaGraphDestroy(graph);
    if (ie != cudaSuccess) return cuda_error(where, "cudaGraphInstantiateWithFlags", ie);
    const Status st = timed_median(
        where, [] { return cudaSuccess; }, [&] { return cudaGraphLaunch(exec, stream_); }, chain, best_ms, median_ms);
    const cudaError_t de = cudaGraphExecDestroy(exec);
    if (st.ok() && de != cudaSuccess) return cuda_error(where, "cudaGraphExecDestroy", de);
    return st;
  }

  Status check_attention_workspace() {
    const Graph& g = plan_.graph;
    const VitArch& a = g.arch;
    for (const Op& o : g.ops) {
      if (o.kind != OpKind::kAttention) continue;
      if (!fp16_) {
        if (int64_t{a.head_dim()} + a.num_tokens() > gpu::kMhaF32MaxSmemFloats)
          return unsupported("cuda backend: op '" + o.name + "': fp32 attention over " +
                             std::to_string(a.num_tokens()) + " tokens exceeds its shared memory; use fp16");
        continue;
      }
      if (g.attention != AttentionPath::kExplicit) continue;
      const AttnParams p = attn_params_packed_qkv(g.batch, a.num_tokens(), a.num_heads, a.head_dim(), 1.f);
      const size_t need = mha_unfused_workspace_bytes(p);
      const size_t have = o.scratch >= 0 ? static_cast<size_t>(g.tensors[o.scratch].bytes()) : 0;
      if (need > have)
        return internal_error("cuda backend: op '" + o.name + "': unfused attention needs " + std::to_string(need) +
                              " bytes of workspace, the plan reserved " + std::to_string(have));
    }
    return Status::Ok();
  }

  // Enqueues the whole forward for captured size sizes_[si] on stream_ (also inside a capture); with
  // `from_host`, first the cast of the mapped host input into the arena's input tensor.
  Status enqueue_forward(size_t si, bool timed, bool from_host) {
    const Graph& g = plan_.graph;
    const int n = sizes_[si];
    const int64_t in_elems = in_per_image_ * n;
    if (from_host)
      EV_CUDA_CHECK("input", fp16_ ? gpu::cast_f32_to_f16(dev_in_, h16(g.input), in_elems, stream_)
                                   : gpu::copy_f32(dev_in_, f32(g.input), in_elems, stream_));
    if (timed) EV_CUDA_CHECK("profile", cudaEventRecord(events_[0], stream_));
    for (size_t i = 0; i < g.ops.size(); ++i) {
      EV_RETURN_IF_ERROR(run_op(g.ops[i], gemms_[si][i], n, si));
      if (timed) EV_CUDA_CHECK("profile", cudaEventRecord(events_[i + 1], stream_));
      if (!timed && si + 1 == sizes_.size()) ran_[i] = dispatched_name(g.ops[i], gemms_[si][i], si);
    }
    const int64_t pre = int64_t{g.arch.embed_dim} * n;
    EV_CUDA_CHECK("output pre_logits",
                  fp16_ ? gpu::cast_f16_to_f32_count_nonfinite(h16(g.pre_logits), dev_pre_, pre, dev_nonfinite_, stream_)
                        : gpu::copy_f32_count_nonfinite(f32(g.pre_logits), dev_pre_, pre, dev_nonfinite_, stream_));
    if (host_logits_ != nullptr) {
      const int64_t lg = int64_t{out_dim_} * n;
      EV_CUDA_CHECK("output logits",
                    fp16_ ? gpu::cast_f16_to_f32_count_nonfinite(h16(g.logits), dev_logits_, lg, dev_nonfinite_, stream_)
                          : gpu::copy_f32_count_nonfinite(f32(g.logits), dev_logits_, lg, dev_nonfinite_, stream_));
    }
    return Status::Ok();
  }

  // The name of what run_op launches for `o` at captured size si, from the same state it launches from.
  std::string dispatched_name(const Op& o, const Gemm& gemm, size_t si) const {
    if (o.kind == OpKind::kLinear) {
      if (gemm.choice < 0 || choices_[gemm.choice].candidates == 0) return o.kernel;
      return o.kernel + "[algo#" + std::to_string(choices_[gemm.choice].chosen) + "/" +
             std::to_string(choices_[gemm.choice].candidates) + "]";
    }
    if (o.kind != OpKind::kAttention) return o.kernel;
    if (!fp16_) return "cuda.mha_f32";
    if (plan_.graph.attention != AttentionPath::kFused) return "cuda.mha_unfused_cublas";
    const int row = attention_row(si, o);
    return row >= 0 ? std::string("cuda.") + kMhaVariants[row].name : "(fused, no row pinned)";
  }

  Status run_op(const Op& o, const Gemm& gemm, int n, size_t si) {
    const Graph& g = plan_.graph;
    const VitArch& a = g.arch;
    const std::string where = "op '" + o.name + "'";
    const int rows = static_cast<int>(o.m / g.batch * n);
    switch (o.kind) {
      case OpKind::kIm2col:
        EV_CUDA_CHECK(where, fp16_ ? gpu::im2col_patches_f16(h16(o.inputs[0]), h16(o.outputs[0]), n, a.in_chans,
                                                             a.img_size, a.patch_size, stream_)
                                   : gpu::im2col_patches_f32(f32(o.inputs[0]), f32(o.outputs[0]), n, a.in_chans,
                                                             a.img_size, a.patch_size, stream_));
        break;
      case OpKind::kLinear: {
        EV_CUBLAS_CHECK(where, launch_gemm(o, gemm, gemm.algo));
        if (gemm.exact_gelu_after)
          EV_CUDA_CHECK(where, gpu::gelu_f32(static_cast<float*>(static_cast<void*>(at(o.outputs[0]))),
                                             gemm.out_elems, stream_));
        break;
      }
      case OpKind::kAssembleTokens: {
        const int cls = weight_named(o, "cls_token"), reg = weight_named(o, "reg_token"),
                  pos = weight_named(o, "pos_embed");
        if (fp16_) {
          EV_CUDA_CHECK(where, gpu::assemble_tokens_f16(h16(o.inputs[0]), cls >= 0 ? h16(cls) : nullptr,
                                                        reg >= 0 ? h16(reg) : nullptr, a.reg_tokens, h16(pos),
                                                        a.no_embed_class, h16(o.outputs[0]), n, a.num_patches(),
                                                        a.embed_dim, stream_));
        } else {
          EV_CUDA_CHECK(where, gpu::assemble_tokens_f32(f32(o.inputs[0]), cls >= 0 ? f32(cls) : nullptr,
                                                        reg >= 0 ? f32(reg) : nullptr, a.reg_tokens, f32(pos),
                                                        a.no_embed_class, f32(o.outputs[0]), n, a.num_patches(),
                                                        a.embed_dim, stream_));
        }
        break;
      }
      case OpKind::kLayerNorm: {
        const float eps = static_cast<float>(o.eps);
        const int c = static_cast<int>(o.n);
        EV_CUDA_CHECK(where, fp16_ ? gpu::layernorm_f16(h16(o.inputs[0]), h16(o.weights[0]), h16(o.weights[1]),
                                                        h16(o.outputs[0]), rows, c, eps, stream_)
                                   : gpu::layernorm_f32(f32(o.inputs[0]), f32(o.weights[0]), f32(o.weights[1]),
                                                        f32(o.outputs[0]), rows, c, eps, stream_));
        break;
      }
      case OpKind::kAttention: {
        float scale = 1.0f / std::sqrt(static_cast<float>(a.head_dim()));
        if (fault_ == InjectedFault::kWrongAttentionScale) scale = 1.0f;  // the TensorRT 10.7 bug, on purpose
        const AttnParams p = attn_params_packed_qkv(n, a.num_tokens(), a.num_heads, a.head_dim(), scale,
                                                    static_cast<int>(o.seq_q));
        const int64_t ko = packed_k_offset(a.num_heads, a.head_dim()), vo = packed_v_offset(a.num_heads, a.head_dim());
        if (!fp16_) {
          const float* q = f32(o.inputs[0]);
          EV_CUDA_CHECK(where, gpu::mha_f32(p, q, q + ko, q + vo, f32(o.outputs[0]), stream_));
        } else if (g.attention == AttentionPath::kFused) {
          const __half* q = h16(o.inputs[0]);
          EV_CUDA_CHECK(where, mha_fused_f16_variant(p, q, q + ko, q + vo, h16(o.outputs[0]), attention_row(si, o),
                                                     stream_));
        } else {
          const __half* q = h16(o.inputs[0]);
          EV_CUDA_CHECK(where, mha_unfused_f16(p, q, q + ko, q + vo, h16(o.outputs[0]), at(o.scratch),
                                               static_cast<size_t>(g.tensors[o.scratch].bytes()), lt_, stream_));
        }
        break;
      }
      case OpKind::kPool:
        EV_CUDA_CHECK(where, fp16_ ? gpu::pool_f16(h16(o.inputs[0]), h16(o.outputs[0]), n, a.num_tokens(),
                                                   a.embed_dim, o.avg_pool, a.num_prefix_tokens(), stream_)
                                   : gpu::pool_f32(f32(o.inputs[0]), f32(o.outputs[0]), n, a.num_tokens(),
                                                   a.embed_dim, o.avg_pool, a.num_prefix_tokens(), stream_));
        break;
    }
    return Status::Ok();
  }

  Status capture(size_t si, bool from_host, cudaGraphExec_t* exec) {
    const std::string where = std::string("graph capture (input from ") + (from_host ? "host" : "device") +
                              "), batch " + std::to_string(sizes_[si]);
    EV_CUDA_CHECK(where, cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    const Status s = enqueue_forward(si, false, from_host);
    cudaGraph_t graph = nullptr;
    const cudaError_t e = cudaStreamEndCapture(stream_, &graph);
    if (!s.ok()) {
      if (graph != nullptr) cudaGraphDestroy(graph);
      return s;
    }
    if (e != cudaSuccess) return cuda_error(where, "cudaStreamEndCapture", e);
    const cudaError_t ie = cudaGraphInstantiateWithFlags(exec, graph, 0);
    cudaGraphDestroy(graph);
    if (ie != cudaSuccess) {
      *exec = nullptr;
      return cuda_error(where, "cudaGraphInstantiateWithFlags", ie);
    }
    EV_CUDA_CHECK(where, cudaGraphUpload(*exec, stream_));
    EV_CUDA_CHECK(where, cudaStreamSynchronize(stream_));
    return Status::Ok();
  }

  const Plan& plan_;
  const bool fp16_;
  const bool profile_;
  const bool tune_;
  const bool tune_attn_;
  const InjectedFault fault_;
  cudaStream_t stream_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  uint8_t* arena_ = nullptr;      // owned: the single device allocation
  uint8_t* workspace_ = nullptr;  // cuBLASLt workspace: the arena's last kCudaLtWorkspaceBytes
  int64_t in_per_image_ = 0;      // C * H * W
  int out_dim_ = 0;
  float* host_in_ = nullptr;      // owned, pinned + mapped: (max_batch, C, H, W) fp32
  float* dev_in_ = nullptr;       // device alias of host_in_
  float* host_pre_ = nullptr;     // owned, pinned + mapped: (max_batch, E) fp32
  float* dev_pre_ = nullptr;
  volatile unsigned* host_nonfinite_ = nullptr;  // owned, pinned + mapped: non-finite outputs of the last forward
  unsigned* dev_nonfinite_ = nullptr;             // its device address (the output casts add to it)
  float* host_logits_ = nullptr;  // owned, pinned + mapped: (max_batch, classes) fp32; null when classes == 0
  float* dev_logits_ = nullptr;
  std::vector<int> sizes_;                  // captured batch sizes, ascending
  std::vector<std::vector<Gemm>> gemms_;    // [size index][op index] (kLinear ops only)
  std::vector<cudaGraphExec_t> execs_;      // [size index]: input cast from the mapped host buffer, forward
  std::vector<cudaGraphExec_t> execs_device_;  // [size index]: the forward from the arena's input tensor
  std::vector<cudaEvent_t> events_;         // profile: one before each op, one after the last
  std::vector<OpTiming> timings_;
  std::vector<std::string> ran_;  // per op: what the largest size's forward launched (dispatched_name)
  std::vector<GemmChoice> choices_;         // one per (size, kLinear op), in planning order
  std::vector<AttentionChoice> attention_choices_;  // per captured size (ascending) and launch shape
  struct AttnLaunch {
    int64_t seq_q;  // the launch shape: query rows per image and head
    int row;        // pinned row of kMhaVariants (-1: not the fused path)
    size_t choice;  // its record in attention_choices_
  };
  std::vector<std::vector<AttnLaunch>> attn_launches_;  // [size index]: one per launch shape
  int sm_ = 0;              // compute capability x 10 + minor
  int64_t smem_optin_ = 0;  // cudaDevAttrMaxSharedMemoryPerBlockOptin
  struct TunedShape {
    TuneKey key;
    cublasLtMatmulAlgo_t algo;
    GemmChoice choice;
  };
  std::vector<TunedShape> tuned_;           // GEMM tuning: one per distinct shape and epilogue timed
  int64_t sm_count_ = 1;                    // the device's SMs (split-K variants only for small grids)
  cudaEvent_t tune_events_[2] = {nullptr, nullptr};  // GEMM tuning: start, stop (null when tuning is off)
  int64_t flush_bytes_ = 0;                 // GEMM tuning: bytes of the arena swept through L2 before each run
};

}  // namespace

Result<std::unique_ptr<Backend>> make_cuda_backend(const Plan& plan, WeightSource& weights,
                                                   const EngineOptions& options) {
  auto backend = std::make_unique<CudaBackend>(plan, options);
  EV_RETURN_IF_ERROR(backend->init(weights));
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace edgevit
#endif  // EDGEVIT_HAVE_CUDA
