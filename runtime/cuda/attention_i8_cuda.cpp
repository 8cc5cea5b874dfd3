// The INT8 attention row's kernel (cuda.mha_i8->int8, runtime/cuda_rows.cpp; runtime.int8_attention: int8,
// docs/int8.md "INT8 attention"): kernels/cuda/mha_i8.h's mha_i8_fused_i8out over qkv's int8 Q|K
// (B, T, 2, H, D) with their scales per (token, head) (B, T, 2, H) and fp16 V (B, T, H, D), writing proj's int8
// input (B, seq_q, H, D) at proj's calibrated per-tensor scale (the op's weight). The row per captured batch
// size: the table's first int8-output row this device runs (mha_i8_supports), or with attention tuning on
// (EngineOptions::tune_attention) the fastest of them timed at start-up on the arena's own tensors, recorded in
// the plan's tuning records.
#include <cuda_fp16.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/cuda/mha_i8.h"
#include "runtime/cuda/cuda_context.h"
#include "runtime/cuda/cuda_status.h"
#include "runtime/cuda/ops_cuda.h"
#include "runtime/cuda/tuning_timer.h"

namespace edgevit {
namespace {

class AttentionI8Kernel final : public OpKernel {
 public:
  explicit AttentionI8Kernel(const Op& op) : op_(op) {}
  Status prepare(ExecContext& ctx) override;
  Status run(ExecContext& ctx, int n) override {
    const CudaContext& c = static_cast<const CudaContext&>(ctx);
    const PerSize& s = sizes_[c.size_index(n)];
    EV_CUDA_CHECK("op '" + op_.name + "'", launch(c, s.params, s.row));
    return Status::Ok();
  }
  std::string resolved(int n) const override {
    if (ctx_ == nullptr || sizes_.empty()) return "cuda.mha_i8->int8";
    return std::string("cuda.") + kMhaI8Variants[sizes_[ctx_->size_index(n)].row].name + "->int8";
  }
  std::vector<TuningRecord> tuning() const override {
    std::vector<TuningRecord> out;
    for (const PerSize& s : sizes_) {
      std::string detail = "the table's first int8-output row, untimed";
      if (s.candidates > 0)
        detail = std::to_string(s.candidates) + " rows timed, table " + kMhaI8Variants[s.table_row].name + " " +
                 std::to_string(s.table_us) + " us, chosen " + std::to_string(s.chosen_us) + " us";
      out.push_back(TuningRecord{op_.name, s.batch, std::string("cuda.") + kMhaI8Variants[s.row].name + "->int8",
                                 detail});
    }
    return out;
  }

 private:
  struct PerSize {
    int batch = 0;
    AttnParams params;
    int row = -1, table_row = -1;
    int candidates = 0;
    double table_us = 0, chosen_us = 0;
  };
  cudaError_t launch(const CudaContext& c, const AttnParams& p, int row) const {
    const Arena& m = c.arena;
    const int8_t* qk = m.as<int8_t>(op_.inputs[0]);
    return mha_i8_fused_i8out(p, qk, qk + k_offset_, m.as<__half>(op_.inputs[2]), scales_, m.as<int8_t>(op_.outputs[0]),
                              m.as<float>(op_.weights[0]), row, c.stream);
  }
  Status choose_row(const CudaContext& c, PerSize* s) const;

  const Op& op_;
  const CudaContext* ctx_ = nullptr;
  int64_t k_offset_ = 0;  // K within the packed int8 Q|K (B, T, 2, H, D)
  AttnI8Scales scales_;   // Q's and K's (device pointers into the arena)
  std::vector<PerSize> sizes_;
};

Status AttentionI8Kernel::prepare(ExecContext& ctx) {
  CudaContext& c = static_cast<CudaContext&>(ctx);
  const VitArch& a = c.plan.graph.arch;
  if (op_.inputs.size() != 3 || op_.weights.empty() ||
      c.plan.graph.tensors[static_cast<size_t>(op_.outputs[0])].elem_bytes != 1)
    return internal_error("cuda backend: op '" + op_.name + "': the INT8 attention reads int8 Q|K, scales and V "
                          "and writes int8 at its scale weight");
  float scale = 1.0f / std::sqrt(static_cast<float>(a.head_dim()));
  if (c.fault == InjectedFault::kWrongAttentionScale) scale = 1.0f;  // the TensorRT 10.7 bug, on purpose
  k_offset_ = packed_k_offset(a.num_heads, a.head_dim());
  const float* sc = c.arena.as<float>(op_.inputs[1]);
  scales_.q = sc;
  scales_.k = sc + a.num_heads;
  scales_.qs = scales_.ks = attn_i8_scale_strides(a.num_tokens(), a.num_heads);
  sizes_.clear();
  for (const int n : c.sizes.empty() ? std::vector<int>{c.plan.graph.batch} : c.sizes) {
    PerSize s;
    s.batch = n;
    s.params = attn_params_qk_i8(n, a.num_tokens(), a.num_heads, a.head_dim(), scale, static_cast<int>(op_.seq_q));
    EV_RETURN_IF_ERROR(choose_row(c, &s));
    sizes_.push_back(s);
  }
  ctx_ = &c;
  return Status::Ok();
}

// The table's first int8-output row for this device, launched once outside any capture (module load, the
// shared-memory opt-in); with attention tuning, every such row timed and the fastest pinned (the table's
// unless another is kTuneMargin faster).
Status AttentionI8Kernel::choose_row(const CudaContext& c, PerSize* s) const {
  const std::string where = "op '" + op_.name + "'";
  MhaI8Request r;
  r.sm = c.sm;
  r.smem_optin_bytes = c.smem_optin;
  r.head_dim = c.plan.graph.arch.head_dim();
  r.per_key_k_scale = true;
  r.int8_output = true;
  const MhaI8Support table = mha_i8_supports(r);
  if (!table.ok)
    return unsupported("cuda backend: the plan chose the INT8 attention, but this device cannot run it: " +
                       table.reason + " (set runtime.int8_attention: float)");
  s->table_row = s->row = static_cast<int>(table.variant - kMhaI8Variants);
  EV_CUDA_CHECK(where, launch(c, s->params, s->row));
  if (!c.tune_attention) return Status::Ok();
  double best = -1;
  for (size_t i = 0; i < kNumMhaI8Variants; ++i) {
    const MhaI8Variant& v = kMhaI8Variants[i];
    if (v.head_dim != r.head_dim || !mha_i8_row_has_i8out(v) || v.min_sm > c.sm || v.smem_bytes > c.smem_optin)
      continue;
    double ms = -1;
    const int row = static_cast<int>(i);
    EV_RETURN_IF_ERROR(timed_median(
        c, where, [] { return cudaSuccess; }, [&] { return launch(c, s->params, row); }, 1, best, &ms));
    if (ms < 0) continue;
    ++s->candidates;
    if (row == s->table_row) s->table_us = 1e3 * ms;
    if (best < 0 || ms < best * kTuneMargin) {
      best = ms;
      s->row = row;
      s->chosen_us = 1e3 * ms;
    }
  }
  return Status::Ok();
}

}  // namespace

namespace cuda_kernels {
std::unique_ptr<OpKernel> make_mha_i8(const Op& op) { return std::make_unique<AttentionI8Kernel>(op); }
}  // namespace cuda_kernels

}  // namespace edgevit
