// The CUDA attention kernels and their start-up tuning (runtime/cuda/attention_cuda.h).
#include "runtime/cuda/attention_cuda.h"

#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/cuda/mha.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/quantize_i8.h"
#include "kernels/cuda/twin_f64.h"
#include "kernels/mha_variants.h"
#include "runtime/cuda/cuda_status.h"
#include "runtime/cuda/ops_cuda.h"
#include "runtime/cuda/tuning_timer.h"

namespace edgevit {

static_assert(kCudaMhaF32MaxSmemFloats == gpu::kMhaF32MaxSmemFloats,
              "the op table's fp32 attention limit must be the kernel's");
static_assert(kCudaMhaF64MaxSmemDoubles == gpu::kMhaF64MaxSmemDoubles,
              "the op table's float64 attention limit must be the kernel's");

namespace {

constexpr int kAttnChain = 8;         // attention tuning: launches per timed graph replay, at most ...
constexpr float kAttnChainMs = 0.1f;  // ... about this long (long launches, e.g. large batches on Orin: fewer)

enum class AttnPath { kFused, kUnfused, kF32, kF64 };  // kF64: the INT8 twin (gpu::mha_f64)

// The record of a launch the path runs with no choice to make (unfused, fp32).
AttentionChoice fixed_choice(AttnPath path, const Plan& plan, int n, int seq_q, bool i8_out) {
  AttentionChoice c;
  c.batch = n;
  c.seq_q = seq_q;
  if (path == AttnPath::kF32) {
    c.kernel = "cuda.mha_f32";
    c.reason = "fp32 plan: gpu::mha_f32 (one block per query row, fp32 FMAs, no tensor cores; the fused kernels "
               "are fp16 only)";
  } else if (path == AttnPath::kF64) {
    c.kernel = "cuda.mha_f64";
    c.reason = "INT8 twin: gpu::mha_f64 (float64, rounded once: the CPU INT8 path's arithmetic)";
  } else {
    c.kernel = i8_out ? "cuda.mha_unfused_cublas->int8" : "cuda.mha_unfused_cublas";
    c.reason = "the plan's unfused path: " + plan.attention_reason;
  }
  c.table_kernel = c.kernel;
  return c;
}

class AttentionKernel final : public OpKernel {
 public:
  AttentionKernel(const Op& op, AttnPath path) : op_(op), path_(path) {}

  Status prepare(ExecContext& ctx) override;

  Status run(ExecContext& ctx, int n) override {
    const CudaContext& c = static_cast<const CudaContext&>(ctx);
    const size_t si = c.size_index(n);
    const AttnParams& p = params_[si];
    if (path_ == AttnPath::kF32 || path_ == AttnPath::kF64) {
      const float* q = c.arena.as<float>(op_.inputs[0]);
      float* o = c.arena.as<float>(op_.outputs[0]);
      EV_CUDA_CHECK("op '" + op_.name + "'", path_ == AttnPath::kF32
                                                 ? gpu::mha_f32(p, q, q + k_offset_, q + v_offset_, o, c.stream)
                                                 : gpu::mha_f64(p, q, q + k_offset_, q + v_offset_, o, c.stream));
      return Status::Ok();
    }
    const __half* q = c.arena.as<__half>(op_.inputs[0]);
    if (i8_out_) return run_i8(c, p, c.attention[launch_[si]].row, n);
    __half* o = c.arena.as<__half>(op_.outputs[0]);
    if (path_ == AttnPath::kFused) {
      EV_CUDA_CHECK("op '" + op_.name + "'", mha_fused_f16(p, q, q + k_offset_, q + v_offset_, o,
                                                           c.attention[launch_[si]].row, c.stream));
    } else {
      EV_CUDA_CHECK("op '" + op_.name + "'",
                    mha_unfused_f16(p, q, q + k_offset_, q + v_offset_, o, c.arena.at(op_.scratch),
                                    static_cast<size_t>(c.plan.graph.tensors[op_.scratch].bytes()), c.lt, c.stream));
    }
    return Status::Ok();
  }

  std::string resolved(int n) const override {
    if (ctx_ == nullptr)
      return path_ == AttnPath::kF32 ? "cuda.mha_f32" : path_ == AttnPath::kF64 ? "cuda.mha_f64" : "(not prepared)";
    return ctx_->attention[launch_[ctx_->size_index(n)]].choice.kernel;
  }

  std::vector<TuningRecord> tuning() const override {
    std::vector<TuningRecord> out;
    if (ctx_ == nullptr) return out;
    for (const size_t li : launch_) {
      const AttentionLaunch& l = ctx_->attention[li];
      std::string detail = "the table's row, untimed";
      if (path_ != AttnPath::kFused) detail = "no choice to make";
      if (l.choice.candidates > 0)
        detail = std::to_string(l.choice.candidates) + " rows timed on '" + l.op->name + "', table " +
                 l.choice.table_kernel + " " + std::to_string(l.choice.table_us) + " us, chosen " +
                 std::to_string(l.choice.chosen_us) + " us";
      out.push_back(TuningRecord{op_.name, l.choice.batch, l.choice.kernel, detail});
    }
    return out;
  }

 private:
  Status check_workspace(const CudaContext& c) const;
  Status run_i8(const CudaContext& c, const AttnParams& p, int row, int n) const;
  Status register_launch(CudaContext& c, int n, size_t* index) const;

  const Op& op_;
  const AttnPath path_;
  bool i8_out_ = false;  // INT8 graphs (Op::int8): int8 `attn.out` at the per-tensor scale weights[0]
  const CudaContext* ctx_ = nullptr;
  int64_t k_offset_ = 0, v_offset_ = 0;  // K and V within the packed qkv (B, T, 3, H, D)
  std::vector<AttnParams> params_;       // per captured size
  std::vector<size_t> launch_;           // per captured size: its record in CudaContext::attention
};

Status AttentionKernel::prepare(ExecContext& ctx) {
  CudaContext& c = static_cast<CudaContext&>(ctx);
  const VitArch& a = c.plan.graph.arch;
  i8_out_ = op_.int8;
  if (i8_out_ && ((path_ != AttnPath::kFused && path_ != AttnPath::kUnfused) || op_.weights.empty()))
    return internal_error("cuda backend: op '" + op_.name + "': int8 output needs the fp16 path and its scale");
  EV_RETURN_IF_ERROR(check_workspace(c));
  float scale = 1.0f / std::sqrt(static_cast<float>(a.head_dim()));
  if (c.fault == InjectedFault::kWrongAttentionScale) scale = 1.0f;  // the TensorRT 10.7 bug, on purpose
  k_offset_ = packed_k_offset(a.num_heads, a.head_dim());
  v_offset_ = packed_v_offset(a.num_heads, a.head_dim());
  for (const int n : c.sizes) {
    params_.push_back(attn_params_packed_qkv(n, a.num_tokens(), a.num_heads, a.head_dim(), scale,
                                             static_cast<int>(op_.seq_q)));
    size_t index = 0;
    EV_RETURN_IF_ERROR(register_launch(c, n, &index));
    launch_.push_back(index);
  }
  ctx_ = &c;
  return Status::Ok();
}

// What the plan's shapes need that the kernels cannot grow into: the unfused path's scratch, the fp32
// kernel's shared memory.
Status AttentionKernel::check_workspace(const CudaContext& c) const {
  const Graph& g = c.plan.graph;
  const VitArch& a = g.arch;
  if (path_ == AttnPath::kF32) {
    if (int64_t{a.head_dim()} + a.num_tokens() > gpu::kMhaF32MaxSmemFloats)
      return unsupported("cuda backend: op '" + op_.name + "': fp32 attention over " +
                         std::to_string(a.num_tokens()) + " tokens exceeds its shared memory; use fp16");
    return Status::Ok();
  }
  if (path_ == AttnPath::kF64) {
    if (int64_t{a.head_dim()} + a.num_tokens() > gpu::kMhaF64MaxSmemDoubles)
      return unsupported("cuda backend: op '" + op_.name + "': float64 attention over " +
                         std::to_string(a.num_tokens()) + " tokens exceeds its shared memory");
    return Status::Ok();
  }
  if (path_ != AttnPath::kUnfused) return Status::Ok();
  const AttnParams p = attn_params_packed_qkv(g.batch, a.num_tokens(), a.num_heads, a.head_dim(), 1.f);
  const size_t ws = mha_unfused_workspace_bytes(p);
  const int64_t rows = static_cast<int64_t>(g.batch) * a.num_tokens();
  const size_t need =
      i8_out_ ? static_cast<size_t>(attn_i8_unfused_scratch(static_cast<int64_t>(ws), rows, a.embed_dim).bytes) : ws;
  const size_t have = op_.scratch >= 0 ? static_cast<size_t>(g.tensors[op_.scratch].bytes()) : 0;
  if (need > have)
    return internal_error("cuda backend: op '" + op_.name + "': unfused attention needs " + std::to_string(need) +
                          " bytes of workspace, the plan reserved " + std::to_string(have));
  return Status::Ok();
}

// INT8 graphs: the fused row writes the int8 codes itself; the unfused path writes fp16 O into the scratch
// after its workspace and quantizes it there (its separate pass; row scales to the scratch, unused).
Status AttentionKernel::run_i8(const CudaContext& c, const AttnParams& p, int row, int n) const {
  const std::string where = "op '" + op_.name + "'";
  const __half* q = c.arena.as<__half>(op_.inputs[0]);
  int8_t* o = c.arena.as<int8_t>(op_.outputs[0]);
  const float* scale = c.arena.as<float>(op_.weights[0]);
  if (path_ == AttnPath::kFused) {
    EV_CUDA_CHECK(where, mha_fused_f16_i8out(p, q, q + k_offset_, q + v_offset_, o, scale, row, c.stream));
    return Status::Ok();
  }
  const Graph& g = c.plan.graph;
  const int64_t rows = static_cast<int64_t>(g.batch) * g.arch.num_tokens();
  const size_t ws = mha_unfused_workspace_bytes(attn_params_packed_qkv(g.batch, g.arch.num_tokens(), g.arch.num_heads,
                                                                       g.arch.head_dim(), 1.f));
  const AttnI8Scratch at = attn_i8_unfused_scratch(static_cast<int64_t>(ws), rows, g.arch.embed_dim);
  unsigned char* scratch = c.arena.at(op_.scratch);
  __half* o16 = reinterpret_cast<__half*>(scratch + at.o_offset);  // (n, Sq, H, D), dense
  EV_CUDA_CHECK(where, mha_unfused_f16(p, q, q + k_offset_, q + v_offset_, o16, scratch, ws, c.lt, c.stream));
  const int o_rows = n * p.seq_q, cols = p.heads * p.head_dim;
  EV_CUDA_CHECK(where, gpu::quantize_rows_i8_f16(o16, scale, o, reinterpret_cast<float*>(scratch + at.scales_offset),
                                                 o_rows, cols, c.stream));
  return Status::Ok();
}

// The record of this op's launch at batch n: an earlier op's of the same shape, or a new one (the fused
// path: the table's row for this device and grid).
Status AttentionKernel::register_launch(CudaContext& c, int n, size_t* index) const {
  for (size_t i = 0; i < c.attention.size(); ++i) {
    const AttentionChoice& have = c.attention[i].choice;
    if (have.batch == n && have.seq_q == op_.seq_q && c.attention[i].i8_out == i8_out_) {
      *index = i;
      return Status::Ok();
    }
  }
  const VitArch& a = c.plan.graph.arch;
  const int seq_q = static_cast<int>(op_.seq_q);
  AttentionLaunch l;
  l.op = &op_;
  l.i8_out = i8_out_;
  if (path_ != AttnPath::kFused) {
    l.choice = fixed_choice(path_, c.plan, n, seq_q, i8_out_);
  } else {
    const MhaGrid grid{n, a.num_heads, seq_q, c.sm_count};
    const MhaChoice m = choose_mha(c.sm, c.smem_optin, a.head_dim(), true, false, &grid);
    if (!m.fused)
      return unsupported("cuda backend: the plan chose fused attention for '" + c.plan.device.name +
                         "', but this device cannot run it at batch " + std::to_string(n) + ": " + m.reason +
                         " (plan with --device auto, or --attention explicit)");
    l.row = static_cast<int>(m.variant - kMhaVariants);
    l.choice.batch = n;
    l.choice.seq_q = seq_q;
    l.choice.kernel = std::string("cuda.") + m.variant->name + (i8_out_ ? "->int8" : "");
    l.choice.reason = m.reason;
    l.choice.table_kernel = l.choice.kernel;
  }
  *index = c.attention.size();
  c.attention.push_back(std::move(l));
  return Status::Ok();
}

// Median milliseconds of one launch of fused row `row` for attention op `o` at batch n, from replays of a
// captured chain of up to kAttnChain launches; -1 when the row refuses the launch, or when its last warm-up
// is already 1.5x `best_ms` (it cannot win).
Status time_attention(const CudaContext& c, const Op& o, int n, int row, double best_ms, double* median_ms) {
  const VitArch& a = c.plan.graph.arch;
  const std::string where = "attention tuning: op '" + o.name + "', " + kMhaVariants[row].name;
  *median_ms = -1.0;
  const AttnParams p = attn_params_packed_qkv(n, a.num_tokens(), a.num_heads, a.head_dim(),
                                              1.0f / std::sqrt(static_cast<float>(a.head_dim())),
                                              static_cast<int>(o.seq_q));
  const int64_t ko = packed_k_offset(a.num_heads, a.head_dim()), vo = packed_v_offset(a.num_heads, a.head_dim());
  const __half* q = c.arena.as<__half>(o.inputs[0]);
  // The op's own output: fp16, or (INT8 graphs) int8 codes at its scale weights[0].
  const auto launch = [&]() {
    if (o.int8)
      return mha_fused_f16_i8out(p, q, q + ko, q + vo, c.arena.as<int8_t>(o.outputs[0]), c.arena.as<float>(o.weights[0]),
                                 row, c.stream);
    return mha_fused_f16(p, q, q + ko, q + vo, c.arena.as<__half>(o.outputs[0]), row, c.stream);
  };
  // Once outside capture: module load and shared-memory opt-in, and a row that refuses is no candidate.
  if (launch() != cudaSuccess) {
    cudaGetLastError();
    return Status::Ok();
  }
  // Once more, timed: the chain holds as many launches as fit in kAttnChainMs (1 to kAttnChain).
  float one_ms = 0.f;
  EV_CUDA_CHECK(where, cudaEventRecord(c.tune_events[0], c.stream));
  EV_CUDA_CHECK(where, launch());
  EV_CUDA_CHECK(where, cudaEventRecord(c.tune_events[1], c.stream));
  EV_CUDA_CHECK(where, cudaEventSynchronize(c.tune_events[1]));
  EV_CUDA_CHECK(where, cudaEventElapsedTime(&one_ms, c.tune_events[0], c.tune_events[1]));
  const int chain = std::max(1, std::min(kAttnChain, static_cast<int>(kAttnChainMs / std::max(one_ms, 1e-4f))));
  EV_CUDA_CHECK(where, cudaStreamBeginCapture(c.stream, cudaStreamCaptureModeThreadLocal));
  cudaError_t le = cudaSuccess;
  for (int i = 0; i < chain && le == cudaSuccess; ++i) le = launch();
  cudaGraph_t graph = nullptr;
  const cudaError_t ce = cudaStreamEndCapture(c.stream, &graph);
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
      c, where, [] { return cudaSuccess; }, [&] { return cudaGraphLaunch(exec, c.stream); }, chain, best_ms,
      median_ms);
  const cudaError_t de = cudaGraphExecDestroy(exec);
  if (st.ok() && de != cudaSuccess) return cuda_error(where, "cudaGraphExecDestroy", de);
  return st;
}

// Times every eligible row for launch l and pins the fastest (the table's unless another is kTuneMargin
// faster).
Status tune_launch(const CudaContext& c, const std::vector<const MhaVariant*>& rows, AttentionLaunch* l) {
  const int n = l->choice.batch;
  const int table = l->row;
  double table_ms = -1.0;
  EV_RETURN_IF_ERROR(time_attention(c, *l->op, n, table, -1.0, &table_ms));
  if (table_ms < 0)
    return device_error("cuda backend: attention tuning: op '" + l->op->name + "': the table's row " +
                        kMhaVariants[table].name + " failed to launch");
  double best_ms = table_ms;
  int best = table;
  int timed = 1;
  for (const MhaVariant* r : rows) {
    const int idx = static_cast<int>(r - kMhaVariants);
    if (idx == table) continue;
    double ms = -1.0;
    EV_RETURN_IF_ERROR(time_attention(c, *l->op, n, idx, best_ms, &ms));
    ++timed;
    if (ms >= 0 && ms < best_ms) {
      best_ms = ms;
      best = idx;
    }
  }
  if (best != table && best_ms > kTuneMargin * table_ms) best = table;
  l->row = best;
  l->choice.kernel = std::string("cuda.") + kMhaVariants[best].name + (l->i8_out ? "->int8" : "");
  l->choice.candidates = timed;
  l->choice.table_us = table_ms * 1e3;
  l->choice.chosen_us = (best == table ? table_ms : best_ms) * 1e3;
  return Status::Ok();
}

}  // namespace

Status tune_attention_launches(CudaContext& c, int n) {
  const std::vector<const MhaVariant*> rows = mha_eligible_rows(c.sm, c.smem_optin, c.plan.graph.arch.head_dim());
  for (AttentionLaunch& l : c.attention)
    if (l.choice.batch == n && l.row >= 0) EV_RETURN_IF_ERROR(tune_launch(c, rows, &l));
  return Status::Ok();
}

namespace cuda_kernels {
std::unique_ptr<OpKernel> make_mha_fused(const Op& op) {
  return std::make_unique<AttentionKernel>(op, AttnPath::kFused);
}
std::unique_ptr<OpKernel> make_mha_unfused(const Op& op) {
  return std::make_unique<AttentionKernel>(op, AttnPath::kUnfused);
}
std::unique_ptr<OpKernel> make_mha_f32(const Op& op) { return std::make_unique<AttentionKernel>(op, AttnPath::kF32); }
std::unique_ptr<OpKernel> make_mha_f64(const Op& op) { return std::make_unique<AttentionKernel>(op, AttnPath::kF64); }
}  // namespace cuda_kernels

}  // namespace edgevit
