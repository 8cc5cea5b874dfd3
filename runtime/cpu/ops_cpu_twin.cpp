// The CPU INT8 twin rows (docs/int8.md "fp32 mode"): an INT8 graph's float ops whose fp32 outputs reach an int8
// rounding downstream, in float64 rounded once to fp32, so that CUDA's runtime.int8_float: fp32 (the rows of
// runtime/cuda_rows.cpp with the same names' cuda. twins) computes the same fp32 values whatever its summation
// order. They serve INT8 graphs only (OpRow::int8_twin), before the fp32 rows:
//   linear     cpu.linear_f64     linear_f64 (linear_ref's arithmetic on the team): the patch embedding, the
//                                 head and the other non-INT8 GEMMs, every epilogue
//   layernorm  cpu.layernorm_f64  layernorm_ref (float64 statistics and affine): norm_pre, the final norm,
//                                 the heads' norms (the block norms are the INT8 rows' LayerNorm -> int8)
//   qk_norm    cpu.qk_norm_f64    qk_norm_ref (timm qk_norm: LayerNorm per head on q and k, in place), float64
//   attention  cpu.mha_f64        mha_f64 (mha_ref's arithmetic on the team): QK^T, softmax with exp in
//                                 float64, PV, one rounding; any head_dim, masks, the class-token tail; no scratch

#include "kernels/cpu/kernels.h"
#include "runtime/cpu/ops_cpu.h"
#include "runtime/epilogue.h"

namespace edgevit {

namespace {

class LinearF64 final : public CpuKernel {
 public:
  using CpuKernel::CpuKernel;
  Status run(ExecContext& c, int n) override {
    auto& ctx = static_cast<CpuContext&>(c);
    const int rows = static_cast<int>(op_.m / ctx.plan.graph.batch * n);
    const float* bias = op_.weights.size() > 1 ? ctx.f32(op_.weights[1]) : nullptr;
    linear_f64(ctx.f32(op_.inputs[0]), ctx.f32(op_.weights[0]), bias, ctx.f32(op_.outputs[0]), rows,
               static_cast<int>(op_.n), static_cast<int>(op_.k), epilogue_of(op_.epilogue), ctx.threads);
    return Status::Ok();
  }
  std::string resolved(int) const override { return planned_; }
};

using LayerNormF64 = CpuLayerNormKernel<layernorm_ref, false>;
using QkNormF64 = CpuQkNormKernel<qk_norm_ref, false>;

class AttentionF64 final : public CpuKernel {
 public:
  using CpuKernel::CpuKernel;
  Status run(ExecContext& c, int n) override {
    auto& ctx = static_cast<CpuContext&>(c);
    const VitArch& a = ctx.plan.graph.arch;
    const AttnParams p = cpu_attention_params(ctx, op_, n);
    const float* qkv = ctx.f32(op_.inputs[0]);
    mha_f64(p, qkv, qkv + packed_k_offset(a.num_heads, a.head_dim()), qkv + packed_v_offset(a.num_heads, a.head_dim()),
            ctx.f32(op_.outputs[0]), ctx.threads);
    return Status::Ok();
  }
  std::string resolved(int) const override { return planned_; }
};

Support twin(const char* what) { return Support{true, what, "", false}; }
Support linear_supports(const Op&, const Graph&, const DeviceProfile&) {
  return twin("INT8 twin: linear_ref's float64 dot product and epilogue, rounded once (docs/int8.md \"fp32 mode\")");
}
Support layernorm_supports(const Op&, const Graph&, const DeviceProfile&) {
  return twin("INT8 twin: float64 statistics and affine, rounded once (docs/int8.md \"fp32 mode\")");
}
Support qk_norm_supports(const Op&, const Graph&, const DeviceProfile&) {
  return twin("INT8 twin: LayerNorm per head on q and k in float64, rounded once (docs/int8.md \"fp32 mode\")");
}
Support attention_supports(const Op&, const Graph&, const DeviceProfile&) {
  return twin("INT8 twin: QK^T, softmax (exp in float64) and PV in float64, rounded once; the fused/explicit "
              "choice is the fp32 graphs' (docs/int8.md \"fp32 mode\")");
}

}  // namespace

void append_cpu_twin_rows(std::vector<OpRow>* rows) {
  rows->push_back({OpKind::kLinear, Precision::kFp32, "cpu.linear_f64", linear_supports, cpu_row_runs_everywhere,
                   bind_cpu_kernel<LinearF64>, nullptr, true});
  rows->push_back({OpKind::kLayerNorm, Precision::kFp32, "cpu.layernorm_f64", layernorm_supports,
                   cpu_row_runs_everywhere, bind_cpu_kernel<LayerNormF64>, nullptr, true});
  rows->push_back({OpKind::kQkNorm, Precision::kFp32, "cpu.qk_norm_f64", qk_norm_supports, cpu_row_runs_everywhere,
                   bind_cpu_kernel<QkNormF64>, nullptr, true});
  rows->push_back({OpKind::kAttention, Precision::kFp32, "cpu.mha_f64", attention_supports, cpu_row_runs_everywhere,
                   bind_cpu_kernel<AttentionF64>, nullptr, true});
}

}  // namespace edgevit
