// The CUDA linear kernel: one cuBLASLt GEMM (kernels/cuda/gemm_lt.h) per captured batch size, its algorithm
// chosen at prepare() (heuristic's first, or timed: runtime/cuda/gemm_tuning.h) and pinned, so run() at a
// batch always launches the same algorithm and the outputs are bit-identical run to run.
#include <cuda_fp16.h>

#include <string>
#include <vector>

#include "kernels/cuda/gemm_lt.h"
#include "kernels/cuda/ops.h"
#include "runtime/cuda/cuda_context.h"
#include "runtime/cuda/cuda_status.h"
#include "runtime/cuda/gemm_tuning.h"
#include "runtime/cuda/ops_cuda.h"

namespace edgevit {
namespace {

// Linear op `o` at batch n: shape, epilogue (bias when the op has one; erf GELU for epilogue 1, tanh GELU
// for 3; y += for 2; QuickGELU (4) and tanh (5) run after the GEMM: LinearKernel::run).
gpu::LtGemmShape shape_of(const Op& o, const Graph& g, int n, bool fp16) {
  gpu::LtGemmShape s;
  s.m = o.m / g.batch * n;
  s.n = o.n;
  s.k = o.k;
  s.fp16 = fp16;
  s.bias = o.weights.size() > 1;
  s.gelu = o.epilogue == 1 ? gpu::LtGelu::kErf : o.epilogue == 3 ? gpu::LtGelu::kTanh : gpu::LtGelu::kNone;
  s.accumulate = o.epilogue == 2;
  return s;
}

// Two shapes whose matmuls are the same cuBLASLt problem (fp32 GELU runs after the matmul, outside it), so
// one timing serves both.
bool same_matmul(const gpu::LtGemmShape& a, const gpu::LtGemmShape& b) {
  return a.m == b.m && a.n == b.n && a.k == b.k && a.fp16 == b.fp16 && a.bias == b.bias &&
         a.accumulate == b.accumulate && gpu::lt_epilogue(a) == gpu::lt_epilogue(b);
}

class LinearKernel final : public OpKernel {
 public:
  explicit LinearKernel(const Op& op) : op_(op) {}
  ~LinearKernel() override {
    for (PerSize& p : sizes_) gpu::lt_gemm_destroy(&p.gemm);
  }

  Status prepare(ExecContext& ctx) override {
    CudaContext& c = static_cast<CudaContext&>(ctx);
    ctx_ = &c;
    name_ = cuda_linear_kernel_name(c.fp16, op_.epilogue);
    w_ = c.arena.at(op_.weights[0]);
    x_ = c.arena.at(op_.inputs[0]);
    y_ = c.arena.at(op_.outputs[0]);
    sizes_.reserve(c.sizes.size());
    for (const int n : c.sizes) EV_RETURN_IF_ERROR(prepare_size(c, n));
    return Status::Ok();
  }

  Status run(ExecContext& ctx, int n) override {
    const CudaContext& c = static_cast<const CudaContext&>(ctx);
    const PerSize& p = sizes_[c.size_index(n)];
    const gpu::LtRunStatus r =
        gpu::lt_gemm_run(c.lt, p.gemm, p.algo, w_, x_, y_, c.workspace, kCudaLtWorkspaceBytes, c.stream);
    if (r.lt != CUBLAS_STATUS_SUCCESS) return cublas_error("op '" + op_.name + "'", "cublasLtMatmul", r.lt);
    if (r.cuda != cudaSuccess) return cuda_error("op '" + op_.name + "'", "GELU after the GEMM", r.cuda);
    if (op_.epilogue == 4) {  // cuBLASLt has no QuickGELU epilogue: bias in the GEMM, then one pass over y
      const int64_t n_elems = op_.m / c.plan.graph.batch * n * op_.n;
      const cudaError_t e = c.fp16 ? gpu::quick_gelu_f16(static_cast<__half*>(y_), n_elems, c.stream)
                                   : gpu::quick_gelu_f32(static_cast<float*>(y_), n_elems, c.stream);
      if (e != cudaSuccess) return cuda_error("op '" + op_.name + "'", "QuickGELU after the GEMM", e);
    }
    if (op_.epilogue == 5) {  // the pooler's tanh: bias in the GEMM, then one pass over y (B, E)
      const int64_t n_elems = op_.m / c.plan.graph.batch * n * op_.n;
      const cudaError_t e = c.fp16 ? gpu::tanh_f16(static_cast<__half*>(y_), n_elems, c.stream)
                                   : gpu::tanh_f32(static_cast<float*>(y_), n_elems, c.stream);
      if (e != cudaSuccess) return cuda_error("op '" + op_.name + "'", "tanh after the GEMM", e);
    }
    return Status::Ok();
  }

  // "[algo#k/C]" when timed: the k-th of C candidates, 0 = the heuristic's first (no space: scripts split
  // on spaces).
  std::string resolved(int n) const override {
    if (ctx_ == nullptr || sizes_.empty()) return name_;
    const GemmChoice& c = sizes_[ctx_->size_index(n)].choice;
    if (c.candidates == 0) return name_;
    return name_ + "[algo#" + std::to_string(c.chosen) + "/" + std::to_string(c.candidates) + "]";
  }

  std::vector<TuningRecord> tuning() const override {
    std::vector<TuningRecord> out;
    for (const PerSize& p : sizes_) {
      const GemmChoice& c = p.choice;
      std::string detail = "heuristic's first, untimed";
      if (c.candidates > 0) {
        detail = std::to_string(c.candidates) + " candidates (" + std::to_string(c.heuristic) + " heuristic), chain " +
                 std::to_string(c.chain) + ", first " + std::to_string(c.first_us) + " us, chosen " +
                 std::to_string(c.chosen_us) + " us";
        if (!c.timed_as.empty()) detail += ", timed as '" + c.timed_as + "'";
      }
      out.push_back(TuningRecord{op_.name, c.batch, c.algo, detail});
    }
    return out;
  }

 private:
  struct PerSize {
    gpu::LtGemm gemm;
    cublasLtMatmulAlgo_t algo{};
    GemmChoice choice;
  };

  Status prepare_size(CudaContext& c, int n);
  Status choose(CudaContext& c, const gpu::LtGemmShape& shape, int n, PerSize* p);
  std::vector<const void*> same_shape_weights(const CudaContext& c, const gpu::LtGemmShape& shape, int n) const;

  const Op& op_;
  const CudaContext* ctx_ = nullptr;
  std::string name_;
  const void* w_ = nullptr;  // (N, K)
  const void* x_ = nullptr;  // (M, K)
  void* y_ = nullptr;        // (M, N)
  std::vector<PerSize> sizes_;  // per captured size, ascending
};

Status LinearKernel::prepare_size(CudaContext& c, int n) {
  const std::string where = "op '" + op_.name + "' (batch " + std::to_string(n) + ")";
  const gpu::LtGemmShape shape = shape_of(op_, c.plan.graph, n, c.fp16);
  sizes_.emplace_back();
  PerSize& p = sizes_.back();
  const void* bias = shape.bias ? c.arena.at(op_.weights[1]) : nullptr;
  EV_CUBLAS_CHECK(where, gpu::lt_gemm_create(shape, bias, &p.gemm));
  if (c.tune_gemms) {
    for (const GemmTuned& t : c.gemm_tuned) {
      if (!same_matmul(t.shape, shape)) continue;
      // Timed before for another op of the same shape and epilogue (ViT's blocks repeat 4 GEMM shapes).
      p.algo = t.algo;
      p.choice = t.choice;
      p.choice.op = op_.name;
      p.choice.batch = n;
      p.choice.timed_as = t.choice.op;
      c.gemm_choices.push_back(p.choice);
      return Status::Ok();
    }
  }
  EV_RETURN_IF_ERROR(choose(c, shape, n, &p));
  if (c.tune_gemms) c.gemm_tuned.push_back(GemmTuned{shape, p.algo, p.choice});
  c.gemm_choices.push_back(p.choice);
  return Status::Ok();
}

// The heuristic's first, or (tuning) the fastest of its candidates and their variants.
Status LinearKernel::choose(CudaContext& c, const gpu::LtGemmShape& shape, int n, PerSize* p) {
  const std::string where = "op '" + op_.name + "' (batch " + std::to_string(n) + ")";
  std::vector<cublasLtMatmulAlgo_t> candidates;
  EV_CUBLAS_CHECK(where, gpu::lt_gemm_heuristic(c.lt, p->gemm, c.tune_gemms ? kTuneCandidates : 1,
                                                kCudaLtWorkspaceBytes, &candidates));
  if (candidates.empty())
    return device_error("cuda backend: " + where + ": cuBLASLt has no algorithm for " + std::to_string(shape.m) +
                        "x" + std::to_string(shape.n) + "x" + std::to_string(shape.k) + " " +
                        (c.fp16 ? "fp16" : "fp32") + " with this epilogue");
  GemmChoice& ch = p->choice;
  ch.op = op_.name;
  ch.batch = n;
  p->algo = candidates[0];
  if (c.tune_gemms) {
    ch.heuristic = static_cast<int>(candidates.size());
    std::vector<const void*> chain{w_};
    if (gpu::lt_small_grid(shape, c.sm_count)) {
      gpu::lt_add_cluster_variants(c.lt, p->gemm, kCudaLtWorkspaceBytes, &candidates);
      gpu::lt_add_split_k_variants(c.lt, p->gemm, kCudaLtWorkspaceBytes, &candidates);
      chain = same_shape_weights(c, shape, n);
    }
    ch.chain = static_cast<int>(chain.size());
    EV_RETURN_IF_ERROR(tune_gemm(c, op_.name, p->gemm, candidates, x_, y_, chain, &p->algo, &ch));
  }
  ch.algo = gpu::lt_describe_algo(p->algo);  // pinned: the same algorithm on every run
  return Status::Ok();
}

// The weights of up to kTuneChain linear ops of the graph with the same matmul at batch n, this op's first:
// a small GEMM is timed as a replayed chain of them, each reading its own weights from DRAM after the one
// before, as in the forward, and not alone, where launch and ramp-up do not overlap.
std::vector<const void*> LinearKernel::same_shape_weights(const CudaContext& c, const gpu::LtGemmShape& shape,
                                                          int n) const {
  std::vector<const void*> w{w_};
  for (const Op& other : c.plan.graph.ops) {
    if (w.size() >= static_cast<size_t>(kTuneChain)) break;
    if (other.kind != OpKind::kLinear || other.int8 || other.name == op_.name ||
        !same_matmul(shape_of(other, c.plan.graph, n, c.fp16), shape))
      continue;
    w.push_back(c.arena.at(other.weights[0]));
  }
  return w;
}

}  // namespace

namespace cuda_kernels {
std::unique_ptr<OpKernel> make_linear(const Op& op) { return std::make_unique<LinearKernel>(op); }
}  // namespace cuda_kernels

}  // namespace edgevit
