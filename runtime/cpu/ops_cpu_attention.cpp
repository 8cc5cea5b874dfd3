// CPU attention rows over the packed qkv tensor (B, T, 3, H, D) -> ctx (B, seq_q, E):
//   cpu.mha_fused_f32     tiled over keys with an online softmax in fp32; no S x S buffer; head_dim <=
//                         kMhaFusedMaxHeadDim (its tiles live on the stack). With libxsmm, its tile kernels
//                         are generated at prepare() ("+libxsmm_tiles"), else portable tiles serve.
//   cpu.mha_explicit_f32  S = scale Q K^T into an S x S scratch per image and head, softmax, S V.
#include <algorithm>
#include <cmath>

#include "kernels/cpu/kernels.h"
#include "runtime/cpu/ops_cpu.h"

namespace edgevit {

AttnParams cpu_attention_params(const CpuContext& ctx, const Op& op, int n) {
  const VitArch& a = ctx.plan.graph.arch;
  float scale = 1.0f / std::sqrt(static_cast<float>(a.head_dim()));
  if (ctx.fault == InjectedFault::kWrongAttentionScale) scale = 1.0f;  // TensorRT 10.7's bug, on purpose
  return attn_params_packed_qkv(n, a.num_tokens(), a.num_heads, a.head_dim(), scale, static_cast<int>(op.seq_q));
}

namespace {

class FusedAttention final : public CpuKernel {
 public:
  using CpuKernel::CpuKernel;
  Status prepare(ExecContext& c) override {
    auto& ctx = static_cast<CpuContext&>(c);
    const Graph& g = ctx.plan.graph;
    if (!cpu_packed_gemm_available()) return Status::Ok();
    cpu_init_threads(ctx.threads);
    const VitArch& a = g.arch;
    tiles_ = mha_fused_prepare(
        attn_params_packed_qkv(g.batch, a.num_tokens(), a.num_heads, a.head_dim(), 1.f, static_cast<int>(op_.seq_q)));
    return Status::Ok();
  }
  Status run(ExecContext& c, int n) override {
    auto& ctx = static_cast<CpuContext&>(c);
    const VitArch& a = ctx.plan.graph.arch;
    const float* qkv = ctx.f32(op_.inputs[0]);
    mha_fused_f32(cpu_attention_params(ctx, op_, n), qkv, qkv + packed_k_offset(a.num_heads, a.head_dim()),
                  qkv + packed_v_offset(a.num_heads, a.head_dim()), ctx.f32(op_.outputs[0]), ctx.threads);
    return Status::Ok();
  }
  std::string resolved(int) const override { return planned_ + (tiles_ ? "+libxsmm_tiles" : ""); }

 private:
  bool tiles_ = false;
};

class ExplicitAttention final : public CpuKernel {
 public:
  using CpuKernel::CpuKernel;
  Status run(ExecContext& c, int n) override {
    auto& ctx = static_cast<CpuContext&>(c);
    const VitArch& a = ctx.plan.graph.arch;
    const float* qkv = ctx.f32(op_.inputs[0]);
    // The plan reserved B*H score matrices; use no more threads than that.
    const int t = std::min(ctx.threads, n * a.num_heads);
    mha_explicit_f32(cpu_attention_params(ctx, op_, n), qkv, qkv + packed_k_offset(a.num_heads, a.head_dim()),
                     qkv + packed_v_offset(a.num_heads, a.head_dim()), ctx.f32(op_.outputs[0]), ctx.f32(op_.scratch), t);
    return Status::Ok();
  }
  std::string resolved(int) const override { return planned_; }
};

Support fused_supports(const Op&, const Graph& g, const DeviceProfile&) {
  const int d = g.arch.head_dim();
  if (g.attention_request == AttentionImpl::kExplicit)
    return Support{false, "explicit attention forced by config/flag", "", true};
  if (d > kMhaFusedMaxHeadDim)
    return Support{false,
                   "fused kernel serves head_dim <= " + std::to_string(kMhaFusedMaxHeadDim) +
                       " (its tiles live on the stack), this model has head_dim " + std::to_string(d),
                   "", false};
  return Support{true,
                 "cpu: tiled online-softmax kernel serves head_dim <= " + std::to_string(kMhaFusedMaxHeadDim) +
                     " (here " + std::to_string(d) + "); no S x S buffer",
                 "", false};
}
Support explicit_supports(const Op&, const Graph&, const DeviceProfile&) {
  return Support{true, "cpu: Q K^T -> softmax -> V with an S x S scratch per image and head", "", false};
}
// The full (B, H, S, S) fp32 score matrix: the kernel uses one S x S slice per thread, at most B*H of them.
int64_t explicit_scratch(const Graph& g, const DeviceProfile&) {
  const int64_t s = g.arch.num_tokens();
  return int64_t{g.batch} * g.arch.num_heads * s * s * 4;
}


}  // namespace

void append_cpu_attention_rows(std::vector<OpRow>* rows) {
  rows->push_back({OpKind::kAttention, Precision::kFp32, "cpu.mha_fused_f32", fused_supports, cpu_row_runs_everywhere,
                   bind_cpu_kernel<FusedAttention>});
  rows->push_back({OpKind::kAttention, Precision::kFp32, "cpu.mha_explicit_f32", explicit_supports, cpu_row_runs_everywhere,
                   bind_cpu_kernel<ExplicitAttention>, explicit_scratch});
}

}  // namespace edgevit
