// CPU linear rows: y (M, N) = epilogue(x (M, K) W^T + b) with the epilogue fused (GELU, residual add).
//   cpu.gemm_libxsmm_packed   libxsmm's JIT kernels over W re-laid out once at load in its own arena slot
//                             (kernels/cpu/gemm_packed.cpp): no byte outside the plan. A shape libxsmm
//                             refuses keeps its torch-layout weight and OpenBLAS, and its name says FALLBACK.
//   cpu.sgemm_openblas        linear_f32 over OpenBLAS, everywhere.
// The class-token tail's qkv GEMM: its attention reads the queries of the first seq_q tokens of each image
// only, so the packed kernel computes its Q columns (the first embed_dim of the (3, H, D) row) for those
// rows alone, K and V for every token. The other Q rows of that tensor are never read.
#include "kernels/cpu/kernels.h"
#include "runtime/cpu/ops_cpu.h"
#include "runtime/epilogue.h"

namespace edgevit {

namespace {

const char* epilogue_suffix(const Op& o) {
  switch (o.epilogue) {
    case 1: return "+bias_gelu";
    case 2: return "+bias_residual";
    case 3: return "+bias_gelu_tanh";
    case 4: return "+bias_quick_gelu";
    case 5: return "+bias_tanh";
    default: return "+bias";
  }
}
const char* epilogue_reason(const Op& o) {
  switch (o.epilogue) {
    case 1: return "GELU fused into the GEMM epilogue";
    case 2: return "residual add fused as GEMM accumulate (in place)";
    case 3: return "tanh-approximation GELU fused into the GEMM epilogue";
    case 4: return "QuickGELU (x sigmoid(1.702 x)) fused into the GEMM epilogue";
    case 5: return "tanh fused into the GEMM epilogue (HF ViTModel's pooler)";
    default: return "bias fused into the GEMM epilogue";
  }
}

class OpenblasLinear final : public CpuKernel {
 public:
  using CpuKernel::CpuKernel;
  Status run(ExecContext& c, int n) override {
    auto& ctx = static_cast<CpuContext&>(c);
    const int rows = static_cast<int>(op_.m / ctx.plan.graph.batch * n);
    linear_f32(ctx.f32(op_.inputs[0]), ctx.f32(op_.weights[0]), op_.weights.size() > 1 ? ctx.f32(op_.weights[1]) : nullptr,
               ctx.f32(op_.outputs[0]), rows, static_cast<int>(op_.n), static_cast<int>(op_.k),
               epilogue_of(op_.epilogue));
    return Status::Ok();
  }
  std::string resolved(int) const override { return std::string("cpu.sgemm_openblas") + epilogue_suffix(op_); }
};

class PackedGemm final : public CpuKernel {
 public:
  using CpuKernel::CpuKernel;
  Status prepare(ExecContext& c) override {
    auto& ctx = static_cast<CpuContext&>(c);
    const Graph& g = ctx.plan.graph;
    cpu_init_threads(ctx.threads);  // the JIT kernels run on the calling thread's OpenMP team
    for (const Op& att : g.ops)
      if (att.kind == OpKind::kAttention && att.seq_q < g.arch.num_tokens() && att.inputs[0] == op_.outputs[0])
        lead_rows_ = static_cast<int>(att.seq_q);
    why_ = packed_.init(ctx.f32(op_.weights[0]), static_cast<int>(op_.m), static_cast<int>(op_.n),
                        static_cast<int>(op_.k), epilogue_of(op_.epilogue));
    if (why_.empty() && lead_rows_ > 0)
      flops_ = packed_.flops(static_cast<int>(op_.m), g.arch.embed_dim, g.arch.num_tokens(), lead_rows_);
    return Status::Ok();
  }
  Status run(ExecContext& c, int n) override {
    auto& ctx = static_cast<CpuContext&>(c);
    const Graph& g = ctx.plan.graph;
    const int rows = static_cast<int>(op_.m / g.batch * n);
    const float* bias = op_.weights.size() > 1 ? ctx.f32(op_.weights[1]) : nullptr;
    if (!packed_.ready()) {
      linear_f32(ctx.f32(op_.inputs[0]), ctx.f32(op_.weights[0]), bias, ctx.f32(op_.outputs[0]), rows,
                 static_cast<int>(op_.n), static_cast<int>(op_.k), epilogue_of(op_.epilogue));
    } else if (lead_rows_ > 0) {
      packed_.run(ctx.f32(op_.inputs[0]), bias, ctx.f32(op_.outputs[0]), rows, g.arch.embed_dim, g.arch.num_tokens(),
                  lead_rows_);
    } else {
      packed_.run(ctx.f32(op_.inputs[0]), bias, ctx.f32(op_.outputs[0]), rows);
    }
    return Status::Ok();
  }
  std::string resolved(int) const override {
    if (!why_.empty())
      return std::string("cpu.sgemm_openblas") + epilogue_suffix(op_) + " (FALLBACK from libxsmm: " + why_ + ")";
    return std::string("cpu.gemm_libxsmm_packed") + epilogue_suffix(op_) + (lead_rows_ > 0 ? "+lead_rows" : "");
  }
  double flops() const override { return flops_ > 0 ? flops_ : op_.flops; }

 private:
  PackedLinear packed_;
  std::string why_;    // non-empty: libxsmm refused the shape, OpenBLAS serves
  int lead_rows_ = 0;  // > 0 for the class-token tail's qkv (Q computed for these first rows of each image)
  double flops_ = 0;
};

Support packed_supports(const Op& o, const Graph&, const DeviceProfile&) {
  if (o.epilogue == 5)
    return Support{false, "the packed tiles have no tanh epilogue (one (B, E) GEMM: OpenBLAS)", "", false};
  return Support{true, std::string(epilogue_reason(o)) + "; libxsmm JIT kernels on x86-64 with AVX2 (OpenBLAS elsewhere)",
                 std::string("cpu.gemm_libxsmm_packed") + epilogue_suffix(o), false};
}
Support openblas_supports(const Op& o, const Graph&, const DeviceProfile&) {
  return Support{true, epilogue_reason(o), std::string("cpu.sgemm_openblas") + epilogue_suffix(o), false};
}
std::string packed_available() {
  return cpu_packed_gemm_available() ? "" : "libxsmm not built in or no AVX2 on this CPU";
}


}  // namespace

void append_cpu_linear_rows(std::vector<OpRow>* rows) {
  rows->push_back({OpKind::kLinear, Precision::kFp32, "cpu.gemm_libxsmm_packed", packed_supports, packed_available,
                   bind_cpu_kernel<PackedGemm>});
  rows->push_back({OpKind::kLinear, Precision::kFp32, "cpu.sgemm_openblas", openblas_supports, cpu_row_runs_everywhere,
                   bind_cpu_kernel<OpenblasLinear>});
}

}  // namespace edgevit
