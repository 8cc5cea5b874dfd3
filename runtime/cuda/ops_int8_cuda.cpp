// The CUDA INT8 rows' kernels (runtime/cuda_rows_int8.cpp, docs/int8.md): LayerNorm -> int8 (gpu::layernorm_i8_f16;
// over an fp32 residual gpu::layernorm_i8_f32_f64, the CPU INT8 path's float64 arithmetic code for code) and the W8A8
// block GEMMs (gpu::gemm_i8, kernels/cuda/gemm_i8.h) with their fused epilogues: qkv -> fp16 or fp32 (kF16Bias, kF32),
// or int8 Q|K per (token, head) + fp16 V for the INT8 attention (kQkHeadI8, runtime.int8_attention: int8; only tile
// rows holding whole heads), proj and fc2 += into the residual (kF16BiasResidual, kF32BiasResidual), fc1 -> GELU +
// shift -> uint8 with fc2's calibrated input scale (kI8BiasGelu; fc2 reads those codes, x_u8, its bias carrying the
// shift: docs/int8.md). The float precision is the graph's Graph::int8_rest (runtime.int8_float), read from the
// tensors' element sizes. proj first quantizes the attention's output into its scratch (gpu::quantize_rows_i8_f16 /
// _f32). Activation scales: per row from the producer (the LayerNorm's row scales, proj's scratch) or, for fc2, its own
// calibrated per-tensor scale (a weight of fc1 and fc2; fc1 does not write mlp.hidden_scale: docs/int8.md). The gemm_i8
// tile row is chosen per captured batch size at prepare(): the table's first row without split-K, or with GEMM tuning
// on (EngineOptions::tune_gemms) the fastest row timed on the arena's own tensors, each run after an L2 sweep
// (tuning_timer.h), split-K rows included where their partial tiles fit the plan's INT8 split-K workspace (plan.h;
// CudaContext::i8_workspace), and cuBLASLt IMMA (kernels/cuda/gemm_i8_lt.h: int32 product into that workspace after the
// tile counters, then gpu::gemm_i8_epilogue) where its product fits and cuBLASLt offers an algorithm, pinned only when
// faster than the fastest row (EngineOptions::force_lt_imma pins it untimed); recorded in the plan's tuning records
// (runtime/int8_gemm_tuning.h; `bench --profile` prints them). Every choice computes the same outputs.
#include <cuda_fp16.h>

#include <string>
#include <vector>

#include "kernels/cuda/gemm_i8.h"
#include "kernels/cuda/gemm_i8_lt.h"
#include "kernels/cuda/layernorm_i8_f64.h"
#include "kernels/cuda/quantize_i8.h"
#include "runtime/cuda/cuda_context.h"
#include "runtime/cuda/cuda_status.h"
#include "runtime/cuda/gemm_tuning.h"
#include "runtime/cuda/ops_cuda.h"
#include "runtime/cuda/tuning_timer.h"
#include "runtime/int8_gemm_tuning.h"
#include "runtime/int8_scales.h"

namespace edgevit {
namespace {

static_assert(kCudaI8SplitCounterBytes == gpu::kGemmI8CounterBytes, "plan.h sizes the split-K tile counters");

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

int weight_named(const Op& op, const Graph& g, const char* suffix) {
  for (int id : op.weights)
    if (ends_with(g.tensors[static_cast<size_t>(id)].name, suffix)) return id;
  return -1;
}

class LayerNormI8Kernel final : public OpKernel {
 public:
  explicit LayerNormI8Kernel(const Op& op) : op_(op) {}
  Status prepare(ExecContext& ctx) override {
    const Graph& g = ctx.plan.graph;
    scale_ = weight_named(op_, g, ".input_scale");
    f32_ = g.tensors[static_cast<size_t>(op_.inputs[0])].elem_bytes == 4;  // runtime.int8_float: fp32
    return Status::Ok();
  }
  Status run(ExecContext& ctx, int n) override {
    const CudaContext& c = static_cast<const CudaContext&>(ctx);
    const Arena& m = c.arena;
    const int rows = static_cast<int>(op_.m / c.plan.graph.batch * n);
    const float* scale = scale_ >= 0 ? m.as<float>(scale_) : nullptr;
    int8_t* q = m.as<int8_t>(op_.outputs[0]);
    float* s = m.as<float>(op_.outputs[1]);
    const int cols = static_cast<int>(op_.n);
    const float eps = static_cast<float>(op_.eps);
    EV_CUDA_CHECK("op '" + op_.name + "'",
                  f32_ ? gpu::layernorm_i8_f32_f64(m.as<float>(op_.inputs[0]), m.as<float>(op_.weights[0]),
                                                   m.as<float>(op_.weights[1]), scale, q, s, rows, cols, eps,
                                                   c.stream)
                       : gpu::layernorm_i8_f16(m.as<__half>(op_.inputs[0]), m.as<__half>(op_.weights[0]),
                                               m.as<__half>(op_.weights[1]), scale, q, s, rows, cols, eps, c.stream));
    return Status::Ok();
  }
  std::string resolved(int) const override {
    return std::string(f32_ ? "cuda.layernorm_f32->int8" : "cuda.layernorm_f16->int8") +
           (scale_ >= 0 ? "" : "+per_token");
  }

 private:
  const Op& op_;
  int scale_ = -1;
  bool f32_ = false;
};

const char* variant_name(int variant) {
  int count = 0;
  const gpu::GemmI8Variant* rows = gpu::gemm_i8_variants(&count);
  return variant >= 0 && variant < count ? rows[variant].name : "?";
}

class GemmI8Kernel final : public OpKernel {
 public:
  explicit GemmI8Kernel(const Op& op) : op_(op) {}
  ~GemmI8Kernel() override { release_lt(); }
  GemmI8Kernel(const GemmI8Kernel&) = delete;
  GemmI8Kernel& operator=(const GemmI8Kernel&) = delete;
  Status prepare(ExecContext& ctx) override;
  Status run(ExecContext& ctx, int n) override;
  std::string resolved(int n) const override {
    const PerSize* p = sizes_.empty() ? nullptr : &sizes_[size_index(n)];
    const std::string name = !p ? "?" : p->t.lt_chosen ? "lt_imma" : variant_name(p->variant);
    return "cuda.gemm_i8_" + name + "+" + gemm_i8_epilogue_name(epilogue_) +
           (quantize_input_ ? "+quantize_input" : "");
  }
  std::vector<TuningRecord> tuning() const override;

 private:
  // The GEMM per captured batch size: the table's first row this device runs without a split-K workspace,
  // or (EngineOptions::tune_gemms) the fastest of the rows and cuBLASLt IMMA timed at that size.
  struct PerSize {
    int batch = 0;
    int variant = -1;
    Int8GemmTiming t;
    gpu::LtI8Gemm lt;                // IMMA's descriptors while it was tried (owned; release_lt)
    cublasLtMatmulAlgo_t lt_algo{};  // t.lt_chosen: the pinned algorithm
  };
  gpu::GemmI8Args args(const CudaContext& c, int n) const;
  size_t size_index(int n) const;
  Status choose_row(CudaContext& c, PerSize* p);
  Status try_lt_imma(CudaContext& c, PerSize* p, double best_row_ms);
  Status run_lt_imma(const CudaContext& c, const gpu::LtI8Gemm& g, const cublasLtMatmulAlgo_t& algo,
                     const gpu::GemmI8Args& a) const;
  void release_lt() {
    for (PerSize& p : sizes_) gpu::lt_i8_destroy(&p.lt);
  }
  const Op& op_;
  GemmI8Epilogue epilogue_ = GemmI8Epilogue::kF16Bias;
  std::vector<PerSize> sizes_;
  int sw_ = -1, bias_ = -1, in_scale_ = -1;  // in_scale_: proj's own input scale, or fc2's (read by fc2)
  float out_scale_ = 1.f;                    // fc1: fc2's input scale (host copy, made at prepare)
  bool quantize_input_ = false;
  bool f32_ = false;   // the float tensors (qkv's output, the residual, proj's input) are fp32
  bool x_u8_ = false;  // fc2: fc1's uint8 codes of GELU + shift (its bias carries the shift)
  bool qk_head_ = false;  // qkv writing int8 Q|K per (token, head) and fp16 V (kQkHeadI8)
  int64_t i8_workspace_bytes_ = 0;  // the plan's INT8 split-K workspace (for the tuning records)
};

Status GemmI8Kernel::prepare(ExecContext& ctx) {
  CudaContext& c = static_cast<CudaContext&>(ctx);
  const Graph& g = c.plan.graph;
  const std::string where = "op '" + op_.name + "'";
  sw_ = weight_named(op_, g, ".weight_scale");
  bias_ = weight_named(op_, g, ".bias");
  quantize_input_ = g.tensors[static_cast<size_t>(op_.inputs[0])].elem_bytes != 1;
  f32_ = g.act_elem_bytes() == 4;
  x_u8_ = int8_tensor_is_u8(g.tensors[static_cast<size_t>(op_.inputs[0])]);
  qk_head_ = op_.outputs.size() == 3;  // runtime.int8_attention: int8 Q|K, their scales, fp16 V (graph.h)
  if (qk_head_ && f32_) return unsupported(where + ": int8 Q/K needs fp16 float ops (runtime.int8_float: fp16)");
  epilogue_ = qk_head_            ? GemmI8Epilogue::kQkHeadI8
              : op_.epilogue == 1 ? GemmI8Epilogue::kI8BiasGelu
              : op_.epilogue == 2 ? (f32_ ? GemmI8Epilogue::kF32BiasResidual : GemmI8Epilogue::kF16BiasResidual)
                                  : (f32_ ? GemmI8Epilogue::kF32 : GemmI8Epilogue::kF16Bias);
  if (op_.epilogue == 1) {  // fc1: its output's scale is fc2's calibrated input scale
    const int id = weight_named(op_, g, ".input_scale");
    if (id < 0) return unsupported(where + ": GELU -> int8 on the GPU needs a per-tensor scale (not per_token)");
    EV_CUDA_CHECK(where, cudaMemcpy(&out_scale_, c.arena.at(id), sizeof out_scale_, cudaMemcpyDeviceToHost));
  } else if (quantize_input_) {
    in_scale_ = weight_named(op_, g, ".input_scale");  // -1: per token
  } else {  // fc2, per tensor: reads fc1's int8 output at its own calibrated scale (fc1 wrote with it)
    in_scale_ = weight_named(op_, g, ".input_scale");
  }
  i8_workspace_bytes_ = c.i8_workspace_bytes;
  release_lt();
  sizes_.clear();
  for (int n : c.sizes.empty() ? std::vector<int>{g.batch} : c.sizes) {
    PerSize p;
    p.batch = n;
    const Status s = choose_row(c, &p);
    if (!s.ok()) {
      gpu::lt_i8_destroy(&p.lt);  // what IMMA's descriptors it had made (sizes_ owns them only once pushed)
      return s;
    }
    sizes_.push_back(p);
  }
  return Status::Ok();
}

size_t GemmI8Kernel::size_index(int n) const {
  for (size_t i = 0; i < sizes_.size(); ++i)
    if (sizes_[i].batch >= n) return i;
  return sizes_.size() - 1;
}

// Candidates: the rows this device runs; a split-K row only with tuning on and where its partial tiles at this
// size fit the plan's INT8 split-K workspace. Every launch here also sets the row's shared-memory attribute,
// outside any capture.
Status GemmI8Kernel::choose_row(CudaContext& c, PerSize* p) {
  const std::string where = "op '" + op_.name + "'";
  int count = 0;
  const gpu::GemmI8Variant* rows = gpu::gemm_i8_variants(&count);
  gpu::GemmI8Args a = args(c, p->batch);
  p->t.batch = p->batch;
  p->t.x_u8 = x_u8_;
  double best = -1;
  for (int i = 0; i < count; ++i) {
    if (rows[i].min_sm > c.sm || rows[i].smem_bytes > c.smem_optin) continue;
    if (qk_head_ && !gpu::gemm_i8_variant_serves_qk_head(rows[i], a.head_dim, a.qk_cols, a.n)) continue;
    a.variant = i;
    const bool split = rows[i].split_k > 1;
    if (split && (p->variant < 0 || !c.tune_gemms)) continue;
    if (split && static_cast<int64_t>(gpu::gemm_i8_workspace_bytes(a)) > c.i8_workspace_bytes) {
      ++p->t.split_skipped;
      continue;
    }
    if (p->variant < 0) {
      p->variant = i;
      p->t.row = rows[i].name;
      EV_CUDA_CHECK(where, gpu::gemm_i8(a, c.stream));
      if (!c.tune_gemms) break;
    }
    double ms = -1;
    EV_RETURN_IF_ERROR(timed_median(
        c, where, [&] { return l2_sweep(c, a.y); }, [&] { return gpu::gemm_i8(a, c.stream); }, 1, best, &ms));
    if (ms < 0) continue;
    ++p->t.rows_timed;
    p->t.split_timed += split;
    if (i == p->variant) p->t.first_us = 1e3 * ms;
    if (best < 0 || ms < best * kTuneMargin) {
      best = ms;
      p->variant = i;
      p->t.row = rows[i].name;
      p->t.row_us = 1e3 * ms;
    }
  }
  if (p->variant < 0)
    return unsupported(where + ": no gemm_i8 variant runs on compute capability " + std::to_string(c.sm));
  // IMMA's standalone epilogue has no kQkHeadI8 (the heads' amax is the fused store's): not a candidate for it.
  if ((c.tune_gemms || c.force_lt_imma) && !qk_head_) return try_lt_imma(c, p, best);
  return Status::Ok();
}

// cuBLASLt IMMA: where its int32 product fits the INT8 workspace after the counters and cuBLASLt offers
// algorithms, each (up to kTuneCandidates) is timed as matmul + epilogue against the fastest row; forced
// (EngineOptions::force_lt_imma), the heuristic's first runs once, untimed. The product's region is the
// split-K rows' partial tiles, which hold nothing between launches; the counters before it are not touched.
Status GemmI8Kernel::try_lt_imma(CudaContext& c, PerSize* p, double best_row_ms) {
  const std::string where = "op '" + op_.name + "' (cuBLASLt IMMA)";
  gpu::GemmI8Args a = args(c, p->batch);
  a.variant = p->variant;
  p->t.lt_acc_bytes = gpu::lt_i8_acc_bytes(a.m, a.n);
  if (!lt_imma_fits(a.m, a.n, c.i8_workspace_bytes)) {
    p->t.lt = LtImmaState::kNoRoom;
    return Status::Ok();
  }
  EV_CUBLAS_CHECK(where, gpu::lt_i8_create(a.m, a.n, a.k, x_u8_, &p->lt));
  std::vector<cublasLtMatmulAlgo_t> algos;
  EV_CUBLAS_CHECK(where, gpu::lt_i8_heuristic(c.lt, p->lt, c.force_lt_imma ? 1 : kTuneCandidates,
                                              static_cast<size_t>(kCudaLtWorkspaceBytes), &algos));
  p->t.lt = algos.empty() ? LtImmaState::kNoAlgorithm : c.force_lt_imma ? LtImmaState::kForced : LtImmaState::kTimed;
  double best = -1;
  for (const cublasLtMatmulAlgo_t& algo : algos) {
    auto launch = [&] {  // an algorithm cuBLASLt refuses at launch is not a candidate
      return run_lt_imma(c, p->lt, algo, a).ok() ? cudaSuccess : cudaErrorNotSupported;
    };
    if (c.force_lt_imma) {
      EV_RETURN_IF_ERROR(run_lt_imma(c, p->lt, algo, a));
      best = 0;
      p->lt_algo = algo;
      break;
    }
    double ms = -1;
    EV_RETURN_IF_ERROR(timed_median(c, where, [&] { return l2_sweep(c, a.y); }, launch, 1, best, &ms));
    if (ms < 0) continue;
    ++p->t.lt_timed;
    if (best < 0 || ms < best) {
      best = ms;
      p->lt_algo = algo;
      p->t.lt_us = 1e3 * ms;
    }
  }
  if (best >= 0) p->t.lt_algo = gpu::lt_describe_algo(p->lt_algo);
  p->t.lt_chosen = best >= 0 && (c.force_lt_imma || lt_imma_wins(best, best_row_ms, kTuneMargin));
  if (!p->t.lt_chosen) gpu::lt_i8_destroy(&p->lt);
  return Status::Ok();
}

// The product into the workspace after the counters, then the epilogue over it (a: the GEMM's arguments).
Status GemmI8Kernel::run_lt_imma(const CudaContext& c, const gpu::LtI8Gemm& g, const cublasLtMatmulAlgo_t& algo,
                                 const gpu::GemmI8Args& a) const {
  int32_t* acc = reinterpret_cast<int32_t*>(c.i8_workspace + kCudaI8SplitCounterBytes);
  EV_CUBLAS_CHECK("op '" + op_.name + "'", gpu::lt_i8_matmul(c.lt, g, algo, a.w, a.x, acc, c.workspace,
                                                             static_cast<size_t>(kCudaLtWorkspaceBytes), c.stream));
  EV_CUDA_CHECK("op '" + op_.name + "'", gpu::gemm_i8_epilogue(a, acc, c.stream));
  return Status::Ok();
}

std::vector<TuningRecord> GemmI8Kernel::tuning() const {
  std::vector<TuningRecord> out;
  for (const PerSize& p : sizes_)
    out.push_back(TuningRecord{op_.name, p.batch, int8_gemm_choice(p.t), int8_gemm_detail(p.t, i8_workspace_bytes_)});
  return out;
}

gpu::GemmI8Args GemmI8Kernel::args(const CudaContext& c, int n) const {
  const Arena& m = c.arena;
  gpu::GemmI8Args a;
  a.m = op_.m / c.plan.graph.batch * n;
  a.n = op_.n;
  a.k = op_.k;
  a.w = m.as<int8_t>(op_.weights[0]);
  a.sw = m.as<float>(sw_);
  a.bias = bias_ >= 0 ? m.as<float>(bias_) : nullptr;
  a.epilogue = epilogue_;
  a.out_scale = out_scale_;
  a.variant = sizes_.empty() ? -1 : sizes_[size_index(n)].variant;
  a.y = m.at(op_.outputs[0]);
  a.x_u8 = x_u8_;
  if (qk_head_) {  // int8 Q|K (M, 2E), their scales (M, 2H), fp16 V (M, E)
    const VitArch& arch = c.plan.graph.arch;
    a.head_dim = arch.head_dim();
    a.qk_cols = 2 * int64_t{arch.embed_dim};
    a.qk_scales = m.as<float>(op_.outputs[1]);
    a.y_v = m.at(op_.outputs[2]);
  }
  a.workspace = c.i8_workspace;  // read by split-K rows only
  if (quantize_input_) {  // proj: the scratch holds the quantized input and its row scales (runtime/graph.h)
    a.x = m.as<int8_t>(op_.scratch);
    a.sx = reinterpret_cast<const float*>(m.at(op_.scratch) + int8_scratch_scales_offset(op_.m, op_.k));
    a.sx_per_token = true;
  } else if (in_scale_ >= 0) {  // fc2: fc1's uint8 output at fc2's calibrated scale
    a.x = m.as<int8_t>(op_.inputs[0]);
    a.sx = m.as<float>(in_scale_);
    a.sx_per_token = false;
  } else {  // qkv, fc1: the LayerNorm's int8 rows and their scales
    a.x = m.as<int8_t>(op_.inputs[0]);
    a.sx = m.as<float>(op_.inputs[1]);
    a.sx_per_token = true;
  }
  return a;
}

Status GemmI8Kernel::run(ExecContext& ctx, int n) {
  const CudaContext& c = static_cast<const CudaContext&>(ctx);
  const gpu::GemmI8Args a = args(c, n);
  // The error message is built only on failure (EV_CUDA_CHECK evaluates `where` then): run() allocates nothing.
  if (quantize_input_) {
    const float* scale = in_scale_ >= 0 ? c.arena.as<float>(in_scale_) : nullptr;
    int8_t* q = const_cast<int8_t*>(a.x);
    float* s = const_cast<float*>(a.sx);
    const int rows = static_cast<int>(a.m), cols = static_cast<int>(a.k);
    EV_CUDA_CHECK("op '" + op_.name + "'",
                  f32_ ? gpu::quantize_rows_i8_f32(c.arena.as<float>(op_.inputs[0]), scale, q, s, rows, cols, c.stream)
                       : gpu::quantize_rows_i8_f16(c.arena.as<__half>(op_.inputs[0]), scale, q, s, rows, cols,
                                                   c.stream));
  }
  const PerSize& p = sizes_[size_index(n)];
  if (p.t.lt_chosen) return run_lt_imma(c, p.lt, p.lt_algo, a);
  EV_CUDA_CHECK("op '" + op_.name + "'", gpu::gemm_i8(a, c.stream));
  return Status::Ok();
}

}  // namespace

namespace cuda_kernels {
std::unique_ptr<OpKernel> make_layernorm_i8(const Op& op) { return std::make_unique<LayerNormI8Kernel>(op); }
std::unique_ptr<OpKernel> make_gemm_i8(const Op& op) { return std::make_unique<GemmI8Kernel>(op); }
}  // namespace cuda_kernels

}  // namespace edgevit
