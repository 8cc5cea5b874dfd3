// The CUDA INT8 twin rows' kernels (runtime/cuda_rows.cpp; docs/int8.md "fp32 mode"): an INT8 graph's float GEMMs,
// LayerNorms and qk-norms in float64 rounded once, as the CPU INT8 path computes them (runtime/cpu/ops_cpu_twin.cpp).
// The attention twin is runtime/cuda/attention_cuda.cpp's float64 path (cuda.mha_f64).
#include <string>

#include "kernels/cuda/layernorm_i8_f64.h"
#include "kernels/cuda/twin_f64.h"
#include "runtime/cuda/cuda_context.h"
#include "runtime/cuda/cuda_status.h"
#include "runtime/cuda/ops_cuda.h"
#include "runtime/epilogue.h"

namespace edgevit {
namespace {

class LinearF64Kernel final : public OpKernel {
 public:
  explicit LinearF64Kernel(const Op& op) : op_(op) {}
  Status run(ExecContext& ctx, int n) override {
    const CudaContext& c = static_cast<const CudaContext&>(ctx);
    const Arena& m = c.arena;
    const int rows = static_cast<int>(op_.m / c.plan.graph.batch * n);
    const float* bias = op_.weights.size() > 1 ? m.as<float>(op_.weights[1]) : nullptr;
    EV_CUDA_CHECK("op '" + op_.name + "'",
                  gpu::linear_f64(m.as<float>(op_.inputs[0]), m.as<float>(op_.weights[0]), bias,
                                  m.as<float>(op_.outputs[0]), rows, static_cast<int>(op_.n), static_cast<int>(op_.k),
                                  epilogue_of(op_.epilogue), c.stream));
    return Status::Ok();
  }
  std::string resolved(int) const override { return "cuda.linear_f64"; }

 private:
  const Op& op_;
};

class LayerNormF64Kernel final : public OpKernel {
 public:
  explicit LayerNormF64Kernel(const Op& op) : op_(op) {}
  Status run(ExecContext& ctx, int n) override {
    const CudaContext& c = static_cast<const CudaContext&>(ctx);
    const Arena& m = c.arena;
    const int rows = static_cast<int>(op_.m / c.plan.graph.batch * n);
    EV_CUDA_CHECK("op '" + op_.name + "'",
                  gpu::layernorm_f32_f64(m.as<float>(op_.inputs[0]), m.as<float>(op_.weights[0]),
                                         m.as<float>(op_.weights[1]), m.as<float>(op_.outputs[0]), rows,
                                         static_cast<int>(op_.n), static_cast<float>(op_.eps), c.stream));
    return Status::Ok();
  }
  std::string resolved(int) const override { return "cuda.layernorm_f64"; }

 private:
  const Op& op_;
};

class QkNormF64Kernel final : public OpKernel {
 public:
  explicit QkNormF64Kernel(const Op& op) : op_(op) {}
  Status run(ExecContext& ctx, int n) override {
    const CudaContext& c = static_cast<const CudaContext&>(ctx);
    const Arena& m = c.arena;
    const VitArch& a = c.plan.graph.arch;
    const int rows = static_cast<int>(op_.m / c.plan.graph.batch * n);
    EV_CUDA_CHECK("op '" + op_.name + "'",
                  gpu::qk_norm_f32_f64(m.as<float>(op_.outputs[0]), m.as<float>(op_.weights[0]),
                                       m.as<float>(op_.weights[1]), m.as<float>(op_.weights[2]),
                                       m.as<float>(op_.weights[3]), rows, a.num_heads, a.head_dim(),
                                       static_cast<float>(op_.eps), c.stream));
    return Status::Ok();
  }
  std::string resolved(int) const override { return "cuda.qk_norm_f64"; }

 private:
  const Op& op_;
};

}  // namespace

namespace cuda_kernels {
std::unique_ptr<OpKernel> make_linear_f64(const Op& op) { return std::make_unique<LinearF64Kernel>(op); }
std::unique_ptr<OpKernel> make_layernorm_f64(const Op& op) { return std::make_unique<LayerNormF64Kernel>(op); }
std::unique_ptr<OpKernel> make_qk_norm_f64(const Op& op) { return std::make_unique<QkNormF64Kernel>(op); }
}  // namespace cuda_kernels

}  // namespace edgevit
