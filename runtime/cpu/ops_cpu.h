// The CPU backend's op table rows (fp32) and what its kernels read.
#pragma once

#include <memory>
#include <string>

#include "kernels/attn_params.h"
#include "runtime/executor.h"

namespace edgevit {

struct CpuContext : ExecContext {
  CpuContext(const Plan& p, Arena& a, InjectedFault f, int t) : ExecContext(p, a, f), threads(t) {}
  int threads;  // the OpenMP team of every kernel (and OpenBLAS's)
  float* f32(int tensor_id) const { return arena.as<float>(tensor_id); }
};

// Every CPU kernel: an OpKernel that also says the FLOPs it performs (the profile's figures).
class CpuKernel : public OpKernel {
 public:
  explicit CpuKernel(const Op& op) : op_(op), planned_(op.kernel) {}
  virtual double flops() const { return op_.flops; }

 protected:
  const Op& op_;
  const std::string planned_;  // the plan's kernel name at bind (resolve_kernels rewrites op_.kernel later)
};

// Row helpers shared by the CPU table's files: a row every CPU can run, and a row's bind() for kernel K.
inline std::string cpu_row_runs_everywhere() { return ""; }
template <typename K>
std::unique_ptr<OpKernel> bind_cpu_kernel(const Op& op) {
  return std::make_unique<K>(op);
}

// Row kernels shared by the fp32 rows (ops_cpu.cpp) and the INT8 twin rows (ops_cpu_twin.cpp), which pass the
// same tensors to another function of the same signature: kFn on the thread team (kTeam) or on one thread.
// LayerNorm: inputs[0] (rows, n) -> outputs[0], weights gamma, beta.
using CpuLayerNormFn = void (*)(const float*, const float*, const float*, float*, int, int, float, int);
template <CpuLayerNormFn kFn, bool kTeam>
class CpuLayerNormKernel final : public CpuKernel {
 public:
  using CpuKernel::CpuKernel;
  Status run(ExecContext& c, int n) override {
    auto& ctx = static_cast<CpuContext&>(c);
    const int rows = static_cast<int>(op_.m / ctx.plan.graph.batch * n);
    kFn(ctx.f32(op_.inputs[0]), ctx.f32(op_.weights[0]), ctx.f32(op_.weights[1]), ctx.f32(op_.outputs[0]), rows,
        static_cast<int>(op_.n), static_cast<float>(op_.eps), kTeam ? ctx.threads : 1);
    return Status::Ok();
  }
  std::string resolved(int) const override { return planned_; }
};

// qk-norm in place on the packed qkv outputs[0] (rows, 3, H, D); weights q_gamma, q_beta, k_gamma, k_beta.
using CpuQkNormFn = void (*)(float*, const float*, const float*, const float*, const float*, int, int, int, float, int);
template <CpuQkNormFn kFn, bool kTeam>
class CpuQkNormKernel final : public CpuKernel {
 public:
  using CpuKernel::CpuKernel;
  Status run(ExecContext& c, int n) override {
    auto& ctx = static_cast<CpuContext&>(c);
    const VitArch& a = ctx.plan.graph.arch;
    const int rows = static_cast<int>(op_.m / ctx.plan.graph.batch * n);
    kFn(ctx.f32(op_.outputs[0]), ctx.f32(op_.weights[0]), ctx.f32(op_.weights[1]), ctx.f32(op_.weights[2]),
        ctx.f32(op_.weights[3]), rows, a.num_heads, a.head_dim(), static_cast<float>(op_.eps), kTeam ? ctx.threads : 1);
    return Status::Ok();
  }
  std::string resolved(int) const override { return planned_; }
};

// The attention rows' parameters over the packed qkv (B, T, 3, H, D) for n images: scale 1/sqrt(D), or 1 under
// the injected fault kWrongAttentionScale (runtime/fault.h). In ops_cpu_attention.cpp.
AttnParams cpu_attention_params(const CpuContext& ctx, const Op& op, int n);

}  // namespace edgevit
