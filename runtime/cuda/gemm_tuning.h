// GEMM algorithm tuning (EngineOptions::tune_gemms, on by default; `--no-gemm-tuning` turns it off).
//
// cuBLASLt's heuristic ranks algorithms by a model, and its first pick at M = 197 (batch 1) leaves most of an
// H100's 132 SMs idle. So for each GEMM shape and captured batch size the linear kernel
// (runtime/cuda/gemm_cuda.cpp) asks for up to kTuneCandidates results (the arena's 4 MiB workspace limit),
// adds cluster-1 and split-K variants when the output has few tiles for the SMs (kernels/cuda/gemm_lt.h),
// and tune_gemm times each on the GEMM's own arena tensors: CUDA events, kTuneWarmup warm-ups, median of
// kTuneRuns, each run after a pass of gpu::xor_fold_u32 over up to 2x the L2 size of the arena, so weights
// that do not fit in L2 come from DRAM as in a forward pass. For small grids a run is a captured chain of
// the GEMM over the weights of up to kTuneChain same-shape ops, because inside the forward's graph one
// GEMM's launch and ramp-up overlap the previous one's tail, which a GEMM timed alone does not show. The
// heuristic's first stays unless another is at least 3% faster by median, so noise does not flip the choice.
//
// The timing runs write only the GEMM's output tensor (the residual GEMMs, beta = 1 with C == D, accumulate
// into it again and again): an activation, which the warm-up forward that follows rewrites before anything
// reads it; weights and biases are only read. Cost, once at start-up: up to kLtMaxCandidates x 9 GEMM runs and
// as many L2 sweeps per distinct shape and captured size (slower candidates are dropped after their warm-ups).
// The choice is pinned for the engine's lifetime, so one engine's outputs are bit-identical run to run;
// another process may measure differently and pin another algorithm, whose outputs can differ in the last
// bits (within the fp16 tolerance).
#pragma once

#include <string>
#include <vector>

#include "kernels/cuda/gemm_lt.h"
#include "runtime/cuda/cuda_context.h"

namespace edgevit {

constexpr int kTuneCandidates = 8;  // heuristic results asked for and timed
constexpr int kTuneChain = 12;      // small grids: timed as a replayed chain of up to this many GEMMs

// Times every candidate for GEMM g (x: its input, y: its output, chain: the weights one run multiplies
// with, its own first) and pins the fastest into *pinned (the first unless another is kTuneMargin faster);
// fills c's candidates, chosen, first_us and chosen_us.
Status tune_gemm(const CudaContext& ctx, const std::string& op_name, const gpu::LtGemm& g,
                 const std::vector<cublasLtMatmulAlgo_t>& candidates, const void* x, void* y,
                 const std::vector<const void*>& chain, cublasLtMatmulAlgo_t* pinned, GemmChoice* c);

}  // namespace edgevit
