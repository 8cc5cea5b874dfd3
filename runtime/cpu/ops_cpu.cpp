// The CPU op table (fp32). Rows in order of preference per op kind:
//   im2col            cpu.im2col
//   linear            cpu.gemm_libxsmm_packed (x86-64 + AVX2 builds with libxsmm: weights re-laid out once
//                     at load, JIT kernels), cpu.sgemm_openblas (everywhere)
//   assemble_tokens   cpu.assemble_tokens
//   layernorm         cpu.layernorm_f32 (fp32 statistics)
//   qk_norm           cpu.qk_norm_f32 (timm qk_norm: LayerNorm per head on q and k, in place; fp32 statistics)
//   attention         cpu.mha_fused_f32 (online softmax, head_dim <= kMhaFusedMaxHeadDim),
//                     cpu.mha_explicit_f32 (S x S scratch per image and head)
//   pool              cpu.pool
//   INT8 (docs/int8.md): cpu.layernorm_f32->int8, cpu.gemm_i8_ref (runtime/cpu/ops_cpu_int8.cpp); an INT8
//   graph's other ops take the twin rows cpu.linear_f64, cpu.layernorm_f64, cpu.qk_norm_f64, cpu.mha_f64 first
//   (float64 rounded once: runtime/cpu/ops_cpu_twin.cpp, OpRow::int8_twin; fp32 graphs never see them), else the
//   fp32 rows
#include <cmath>

#include "kernels/cpu/kernels.h"
#include "runtime/cpu/ops_cpu.h"

namespace edgevit {

namespace {

Support serves(std::string reason) { return Support{true, std::move(reason), "", false}; }
Support always(const Op&, const Graph&, const DeviceProfile&) { return serves(""); }


// ---- im2col, assemble, pool, layernorm ------------------------------------------------------------------

class Im2col final : public CpuKernel {
 public:
  using CpuKernel::CpuKernel;
  Status run(ExecContext& c, int n) override {
    auto& ctx = static_cast<CpuContext&>(c);
    const VitArch& a = ctx.plan.graph.arch;
    im2col_patches_f32(ctx.f32(op_.inputs[0]), ctx.f32(op_.outputs[0]), n, a.in_chans, a.img_h, a.img_w, a.patch_size);
    return Status::Ok();
  }
  std::string resolved(int) const override { return planned_; }
};

class Assemble final : public CpuKernel {
 public:
  using CpuKernel::CpuKernel;
  Status prepare(ExecContext& c) override {
    const Graph& g = c.plan.graph;
    for (int id : op_.weights) {
      const std::string& name = g.tensors[static_cast<size_t>(id)].name;
      if (name == "cls_token") cls_ = id;
      if (name == "reg_token" || name == "dist_token") reg_ = id;  // the tokens after the class token
      if (name == "pos_embed") pos_ = id;
    }
    return Status::Ok();
  }
  Status run(ExecContext& c, int n) override {
    auto& ctx = static_cast<CpuContext&>(c);
    const VitArch& a = ctx.plan.graph.arch;
    assemble_tokens_f32(ctx.f32(op_.inputs[0]), cls_ >= 0 ? ctx.f32(cls_) : nullptr,
                        reg_ >= 0 ? ctx.f32(reg_) : nullptr, a.extra_prefix_tokens(), pos_ >= 0 ? ctx.f32(pos_) : nullptr,
                        a.no_embed_class, ctx.f32(op_.outputs[0]), n, a.num_patches(), a.embed_dim);
    return Status::Ok();
  }
  std::string resolved(int) const override { return planned_; }

 private:
  int cls_ = -1, reg_ = -1, pos_ = -1;
};

class Pool final : public CpuKernel {
 public:
  using CpuKernel::CpuKernel;
  Status run(ExecContext& c, int n) override {
    auto& ctx = static_cast<CpuContext&>(c);
    const VitArch& a = ctx.plan.graph.arch;
    if (op_.pool_count > 0) {
      pool_prefix_f32(ctx.f32(op_.inputs[0]), ctx.f32(op_.outputs[0]), n, a.num_tokens(), a.embed_dim,
                      op_.pool_count, op_.pool_concat);
      return Status::Ok();
    }
    pool_f32(ctx.f32(op_.inputs[0]), ctx.f32(op_.outputs[0]), n, a.num_tokens(), a.embed_dim, op_.avg_pool,
             a.num_prefix_tokens());
    return Status::Ok();
  }
  std::string resolved(int) const override { return planned_; }
};

using LayerNorm = CpuLayerNormKernel<layernorm_f32, true>;
using QkNorm = CpuQkNormKernel<qk_norm_f32, true>;

Support layernorm_supports(const Op&, const Graph&, const DeviceProfile&) { return serves("statistics in fp32"); }

}  // namespace

// Linear and attention rows: runtime/cpu/ops_cpu_linear.cpp, runtime/cpu/ops_cpu_attention.cpp.
void append_cpu_linear_rows(std::vector<OpRow>* rows);
void append_cpu_attention_rows(std::vector<OpRow>* rows);
void append_cpu_int8_rows(std::vector<OpRow>* rows);  // runtime/cpu/ops_cpu_int8.cpp (precision int8)
void append_cpu_twin_rows(std::vector<OpRow>* rows);  // runtime/cpu/ops_cpu_twin.cpp (INT8 graphs' float ops)

const std::vector<OpRow>& cpu_op_table() {
  static const std::vector<OpRow> table = [] {
    std::vector<OpRow> t;
    append_cpu_twin_rows(&t);  // first: where they serve (INT8 graphs), before the fp32 rows
    t.push_back({OpKind::kIm2col, Precision::kFp32, "cpu.im2col", always, cpu_row_runs_everywhere, bind_cpu_kernel<Im2col>});
    append_cpu_linear_rows(&t);
    t.push_back({OpKind::kAssembleTokens, Precision::kFp32, "cpu.assemble_tokens", always, cpu_row_runs_everywhere,
                 bind_cpu_kernel<Assemble>});
    t.push_back({OpKind::kLayerNorm, Precision::kFp32, "cpu.layernorm_f32", layernorm_supports, cpu_row_runs_everywhere,
                 bind_cpu_kernel<LayerNorm>});
    t.push_back({OpKind::kQkNorm, Precision::kFp32, "cpu.qk_norm_f32", layernorm_supports, cpu_row_runs_everywhere,
                 bind_cpu_kernel<QkNorm>});
    append_cpu_attention_rows(&t);
    t.push_back({OpKind::kPool, Precision::kFp32, "cpu.pool", always, cpu_row_runs_everywhere, bind_cpu_kernel<Pool>});
    append_cpu_int8_rows(&t);
    return t;
  }();
  return table;
}

}  // namespace edgevit
