// The CUDA kernels of the op table for everything besides the GEMMs and attention: patch extraction, token
// assembly, LayerNorm and pooling (kernels/cuda/ops.h), in the plan's precision.
#include <cuda_fp16.h>

#include <string>

#include "kernels/cuda/ops.h"
#include "runtime/cuda/cuda_context.h"
#include "runtime/cuda/cuda_status.h"
#include "runtime/cuda/ops_cuda.h"

namespace edgevit {
namespace {

// What the small kernels share: the op, the kernel name, and the context's precision.
class SmallKernel : public OpKernel {
 public:
  SmallKernel(const Op& op, const char* name) : op_(op), name_(name) {}
  std::string resolved(int n) const override {
    (void)n;
    return name_;
  }

 protected:
  std::string where() const { return "op '" + op_.name + "'"; }
  const Op& op_;
  const char* name_;
};

class Im2colKernel final : public SmallKernel {
 public:
  explicit Im2colKernel(const Op& op) : SmallKernel(op, "cuda.im2col") {}
  Status run(ExecContext& ctx, int n) override {
    const CudaContext& c = static_cast<const CudaContext&>(ctx);
    const VitArch& a = c.plan.graph.arch;
    const Arena& m = c.arena;
    EV_CUDA_CHECK(where(), c.fp16 ? gpu::im2col_patches_f16(m.as<__half>(op_.inputs[0]), m.as<__half>(op_.outputs[0]),
                                                            n, a.in_chans, a.img_h, a.img_w, a.patch_size, c.stream)
                                  : gpu::im2col_patches_f32(m.as<float>(op_.inputs[0]), m.as<float>(op_.outputs[0]),
                                                            n, a.in_chans, a.img_h, a.img_w, a.patch_size, c.stream));
    return Status::Ok();
  }
};

// The tensor `id` of the arena, or nullptr when the model has none (id -1).
template <typename T>
T* optional(const Arena& m, int id) {
  return id >= 0 ? m.as<T>(id) : nullptr;
}

class AssembleTokensKernel final : public SmallKernel {
 public:
  explicit AssembleTokensKernel(const Op& op) : SmallKernel(op, "cuda.assemble_tokens") {}
  Status prepare(ExecContext& ctx) override {
    const Graph& g = ctx.plan.graph;
    for (const int id : op_.weights) {
      const std::string& name = g.tensors[static_cast<size_t>(id)].name;
      if (name == "cls_token") cls_ = id;
      if (name == "reg_token" || name == "dist_token") reg_ = id;  // the tokens after the class token
      if (name == "pos_embed") pos_ = id;
    }
    if (pos_ < 0) return internal_error("cuda backend: op '" + op_.name + "' has no pos_embed weight");
    return Status::Ok();
  }
  Status run(ExecContext& ctx, int n) override {
    const CudaContext& c = static_cast<const CudaContext&>(ctx);
    const VitArch& a = c.plan.graph.arch;
    const Arena& m = c.arena;
    if (c.fp16) {
      EV_CUDA_CHECK(where(), gpu::assemble_tokens_f16(m.as<__half>(op_.inputs[0]), optional<__half>(m, cls_),
                                                      optional<__half>(m, reg_), a.extra_prefix_tokens(), m.as<__half>(pos_),
                                                      a.no_embed_class, m.as<__half>(op_.outputs[0]), n,
                                                      a.num_patches(), a.embed_dim, c.stream));
    } else {
      EV_CUDA_CHECK(where(), gpu::assemble_tokens_f32(m.as<float>(op_.inputs[0]), optional<float>(m, cls_),
                                                      optional<float>(m, reg_), a.extra_prefix_tokens(), m.as<float>(pos_),
                                                      a.no_embed_class, m.as<float>(op_.outputs[0]), n,
                                                      a.num_patches(), a.embed_dim, c.stream));
    }
    return Status::Ok();
  }

 private:
  int cls_ = -1, reg_ = -1, pos_ = -1;  // weight tensor ids (-1: the model has none)
};

class LayerNormKernel final : public SmallKernel {
 public:
  explicit LayerNormKernel(const Op& op) : SmallKernel(op, "cuda.layernorm_fp32stats") {}
  Status run(ExecContext& ctx, int n) override {
    const CudaContext& c = static_cast<const CudaContext&>(ctx);
    const Arena& m = c.arena;
    const int rows = static_cast<int>(op_.m / c.plan.graph.batch * n);
    const int cols = static_cast<int>(op_.n);
    const float eps = static_cast<float>(op_.eps);
    EV_CUDA_CHECK(where(), c.fp16 ? gpu::layernorm_f16(m.as<__half>(op_.inputs[0]), m.as<__half>(op_.weights[0]),
                                                       m.as<__half>(op_.weights[1]), m.as<__half>(op_.outputs[0]),
                                                       rows, cols, eps, c.stream)
                                  : gpu::layernorm_f32(m.as<float>(op_.inputs[0]), m.as<float>(op_.weights[0]),
                                                       m.as<float>(op_.weights[1]), m.as<float>(op_.outputs[0]),
                                                       rows, cols, eps, c.stream));
    return Status::Ok();
  }
};

class PoolKernel final : public SmallKernel {
 public:
  explicit PoolKernel(const Op& op) : SmallKernel(op, "cuda.pool") {}
  Status run(ExecContext& ctx, int n) override {
    const CudaContext& c = static_cast<const CudaContext&>(ctx);
    const VitArch& a = c.plan.graph.arch;
    const Arena& m = c.arena;
    if (op_.pool_count > 0) {
      EV_CUDA_CHECK(where(), c.fp16 ? gpu::pool_prefix_f16(m.as<__half>(op_.inputs[0]), m.as<__half>(op_.outputs[0]),
                                                           n, a.num_tokens(), a.embed_dim, op_.pool_count,
                                                           op_.pool_concat, c.stream)
                                    : gpu::pool_prefix_f32(m.as<float>(op_.inputs[0]), m.as<float>(op_.outputs[0]),
                                                           n, a.num_tokens(), a.embed_dim, op_.pool_count,
                                                           op_.pool_concat, c.stream));
      return Status::Ok();
    }
    EV_CUDA_CHECK(where(), c.fp16 ? gpu::pool_f16(m.as<__half>(op_.inputs[0]), m.as<__half>(op_.outputs[0]), n,
                                                  a.num_tokens(), a.embed_dim, op_.avg_pool, a.num_prefix_tokens(),
                                                  c.stream)
                                  : gpu::pool_f32(m.as<float>(op_.inputs[0]), m.as<float>(op_.outputs[0]), n,
                                                  a.num_tokens(), a.embed_dim, op_.avg_pool, a.num_prefix_tokens(),
                                                  c.stream));
    return Status::Ok();
  }
};

class QkNormKernel final : public SmallKernel {
 public:
  explicit QkNormKernel(const Op& op) : SmallKernel(op, "cuda.qk_norm_fp32stats") {}
  Status run(ExecContext& ctx, int n) override {
    const CudaContext& c = static_cast<const CudaContext&>(ctx);
    const VitArch& a = c.plan.graph.arch;
    const Arena& m = c.arena;
    const int rows = static_cast<int>(op_.m / c.plan.graph.batch * n);
    const float eps = static_cast<float>(op_.eps);
    const auto& w = op_.weights;
    EV_CUDA_CHECK(where(), c.fp16 ? gpu::qk_norm_f16(m.as<__half>(op_.outputs[0]), m.as<__half>(w[0]), m.as<__half>(w[1]),
                                                     m.as<__half>(w[2]), m.as<__half>(w[3]), rows, a.num_heads,
                                                     a.head_dim(), eps, c.stream)
                                  : gpu::qk_norm_f32(m.as<float>(op_.outputs[0]), m.as<float>(w[0]), m.as<float>(w[1]),
                                                     m.as<float>(w[2]), m.as<float>(w[3]), rows, a.num_heads,
                                                     a.head_dim(), eps, c.stream));
    return Status::Ok();
  }
};

}  // namespace

namespace cuda_kernels {
std::unique_ptr<OpKernel> make_im2col(const Op& op) { return std::make_unique<Im2colKernel>(op); }
std::unique_ptr<OpKernel> make_assemble_tokens(const Op& op) { return std::make_unique<AssembleTokensKernel>(op); }
std::unique_ptr<OpKernel> make_layernorm(const Op& op) { return std::make_unique<LayerNormKernel>(op); }
std::unique_ptr<OpKernel> make_pool(const Op& op) { return std::make_unique<PoolKernel>(op); }
std::unique_ptr<OpKernel> make_qk_norm(const Op& op) { return std::make_unique<QkNormKernel>(op); }
}  // namespace cuda_kernels

}  // namespace edgevit
