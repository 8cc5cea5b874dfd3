// What the CUDA kernels of the op table (runtime/cuda/) see: the stream everything is enqueued on, the
// cuBLASLt handle and workspace, the device's facts, the tuning switches, and the decisions kernels share
// (ops of one GEMM shape share one timing; attention ops of one launch shape share one pinned row).
//
// Owned by the CUDA backend (runtime/cuda/backend_cuda.cpp), which opens it before binding the kernels;
// it owns the stream, the cuBLASLt handle and the tuning events. The workspace is the arena's last
// kCudaLtWorkspaceBytes (runtime/plan.h), owned by the arena.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "kernels/cuda/gemm_lt.h"
#include "runtime/engine.h"
#include "runtime/executor.h"

namespace edgevit {

// One GEMM shape timed (EngineOptions::tune_gemms): what was pinned and its record. Another op of the same
// shape and epilogue at the same batch takes it (ViT's blocks repeat four shapes).
struct GemmTuned {
  gpu::LtGemmShape shape;
  cublasLtMatmulAlgo_t algo{};
  GemmChoice choice;
};

// The attention kernel of one captured batch size and launch shape (seq_q: every token in the full
// blocks, 1 in the class-token tail), shared by every attention op of that shape.
struct AttentionLaunch {
  const Op* op = nullptr;  // the first op of the shape: tuning times on its tensors
  int row = -1;            // pinned row of kMhaVariants (-1: not the fused kernel)
  AttentionChoice choice;  // choice.batch, choice.seq_q: the launch
  bool i8_out = false;     // the launch writes int8 codes (INT8 graphs' attention, Op::int8)
};

struct CudaContext final : ExecContext {
  CudaContext(const Plan& p, Arena& a, const EngineOptions& options);
  ~CudaContext() override;
  CudaContext(const CudaContext&) = delete;
  CudaContext& operator=(const CudaContext&) = delete;

  // Creates the stream, the cuBLASLt handle and (when tuning) the timing events on the current device,
  // reads the device's attributes and zeroes the INT8 split-K workspace.
  Status open();
  // Index of batch n in sizes (n is one of them).
  size_t size_index(int n) const {
    size_t i = 0;
    while (i + 1 < sizes.size() && sizes[i] != n) ++i;
    return i;
  }

  const bool fp16;            // the plan's float tensors are fp16 (fp16 plans; INT8 plans: Graph::int8_rest)
  const bool tune_gemms;      // EngineOptions::tune_gemms
  const bool tune_attention;  // EngineOptions::tune_attention
  const bool force_lt_imma;   // EngineOptions::force_lt_imma
  cudaStream_t stream = nullptr;
  cublasLtHandle_t lt = nullptr;
  uint8_t* workspace = nullptr;  // cuBLASLt workspace: arena.tail(kCudaLtWorkspaceBytes)
  // The INT8 GEMMs' split-K workspace (plan.h), just before cuBLASLt's; zeroed by open(), and every split
  // launch leaves it zeroed (kernels/cuda/gemm_i8.h). nullptr / 0 unless the plan has one.
  uint8_t* i8_workspace = nullptr;
  int64_t i8_workspace_bytes = 0;
  int sm = 0;                    // compute capability x 10 + minor
  int64_t smem_optin = 0;        // cudaDevAttrMaxSharedMemoryPerBlockOptin
  int sm_count = 1;              // multiprocessors
  cudaEvent_t tune_events[2] = {nullptr, nullptr};  // start, stop (null when no tuning is on)
  int64_t flush_bytes = 0;  // GEMM tuning: bytes of the arena swept through L2 before each timed run

  std::vector<GemmTuned> gemm_tuned;       // one per distinct GEMM shape timed
  std::vector<GemmChoice> gemm_choices;    // every linear op's records, per op then per size
  std::vector<AttentionLaunch> attention;  // per launch shape (op order), then per captured size
};

// The attention launch of batch n and `seq_q` query rows, or nullptr.
const AttentionLaunch* find_attention_launch(const CudaContext& ctx, int n, int64_t seq_q);

}  // namespace edgevit
