#include "runtime/cuda/gemm_tuning.h"

#include "kernels/cuda/ops.h"
#include "runtime/cuda/cuda_status.h"
#include "runtime/cuda/tuning_timer.h"

namespace edgevit {

namespace {

// One GEMM's operands for the timing runs.
struct Operands {
  const gpu::LtGemm& g;
  const void* x;
  void* y;
  const std::vector<const void*>& chain;
};

// The chain of time_gemm as an instantiated graph in *exec; *refused when cuBLASLt refuses `algo`.
Status capture_chain(const CudaContext& ctx, const std::string& where, const Operands& o,
                     const cublasLtMatmulAlgo_t& algo, cudaGraphExec_t* exec, bool* refused) {
  EV_CUDA_CHECK(where, cudaStreamBeginCapture(ctx.stream, cudaStreamCaptureModeThreadLocal));
  for (const void* w : o.chain)
    *refused = *refused || gpu::lt_gemm_matmul(ctx.lt, o.g, algo, w, o.x, o.y, ctx.workspace,
                                               kCudaLtWorkspaceBytes, ctx.stream) != CUBLAS_STATUS_SUCCESS;
  cudaGraph_t graph = nullptr;
  const cudaError_t e = cudaStreamEndCapture(ctx.stream, &graph);
  if (e != cudaSuccess || *refused) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    if (*refused) {
      cudaGetLastError();  // a refused launch inside the capture leaves nothing to keep
      return Status::Ok();
    }
    return cuda_error(where, "cudaStreamEndCapture", e);
  }
  // (WithFlags: CUDA 11.4's cudaGraphInstantiate takes an error node and a log buffer instead.)
  const cudaError_t ie = cudaGraphInstantiateWithFlags(exec, graph, 0);
  const cudaError_t de = cudaGraphDestroy(graph);
  if (ie != cudaSuccess) return cuda_error(where, "cudaGraphInstantiateWithFlags", ie);
  if (de != cudaSuccess) return cuda_error(where, "cudaGraphDestroy", de);
  return Status::Ok();
}

// Median milliseconds of one GEMM with `algo` (timed_median's rule), each run after an L2 sweep. With one
// weight in the chain a run is the GEMM alone; with more, a run replays a captured chain of the GEMM over
// each of those weights (same input and output) and counts 1/size of it. -1 when cuBLASLt refuses the
// algorithm at launch, or when it cannot beat best_ms.
Status time_gemm(const CudaContext& ctx, const std::string& op_name, const Operands& o,
                 const cublasLtMatmulAlgo_t& algo, double best_ms, double* median_ms) {
  const std::string where = "gemm tuning: op '" + op_name + "'";
  *median_ms = -1.0;
  cudaGraphExec_t exec = nullptr;
  if (o.chain.size() > 1) {
    bool refused = false;
    EV_RETURN_IF_ERROR(capture_chain(ctx, where + " (chain)", o, algo, &exec, &refused));
    if (refused) return Status::Ok();
  }
  const auto sweep = [&] { return l2_sweep(ctx, o.y); };
  const auto launch = [&] {
    if (exec != nullptr) return cudaGraphLaunch(exec, ctx.stream);
    return gpu::lt_gemm_matmul(ctx.lt, o.g, algo, o.chain[0], o.x, o.y, ctx.workspace, kCudaLtWorkspaceBytes,
                               ctx.stream) == CUBLAS_STATUS_SUCCESS
               ? cudaSuccess
               : cudaErrorNotSupported;
  };
  const Status s =
      timed_median(ctx, where, sweep, launch, static_cast<int>(o.chain.size()), best_ms, median_ms);
  if (exec != nullptr) {
    const cudaError_t e = cudaGraphExecDestroy(exec);
    if (s.ok() && e != cudaSuccess) return cuda_error(where, "cudaGraphExecDestroy", e);
  }
  return s;
}

}  // namespace

Status tune_gemm(const CudaContext& ctx, const std::string& op_name, const gpu::LtGemm& g,
                 const std::vector<cublasLtMatmulAlgo_t>& candidates, const void* x, void* y,
                 const std::vector<const void*>& chain, cublasLtMatmulAlgo_t* pinned, GemmChoice* c) {
  const Operands o{g, x, y, chain};
  std::vector<double> median(candidates.size(), -1.0);
  double best = -1.0;
  size_t best_i = 0;
  for (size_t i = 0; i < candidates.size(); ++i) {
    EV_RETURN_IF_ERROR(time_gemm(ctx, op_name, o, candidates[i], best, &median[i]));
    if (median[i] >= 0 && (best < 0 || median[i] < best)) {
      best = median[i];
      best_i = i;
    }
  }
  if (best < 0)
    return device_error("cuda backend: gemm tuning: op '" + op_name + "': cuBLASLt refused all " +
                        std::to_string(candidates.size()) + " of its heuristic's algorithms at launch");
  if (best_i != 0 && median[0] >= 0 && best > kTuneMargin * median[0]) best_i = 0;
  *pinned = candidates[best_i];
  c->candidates = static_cast<int>(candidates.size());
  c->chosen = static_cast<int>(best_i);
  c->first_us = median[0] >= 0 ? median[0] * 1e3 : 0.0;
  c->chosen_us = median[best_i] * 1e3;
  return Status::Ok();
}

}  // namespace edgevit
