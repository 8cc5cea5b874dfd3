// The W8A8 block GEMMs through cuBLASLt's IMMA kernels, a candidate of the INT8 GEMM tuning beside the
// mma.sync rows (gemm_i8.h; the runtime times both: runtime/cuda/ops_int8_cuda.cpp):
//   lt_i8_create / lt_i8_heuristic / lt_i8_matmul
//       acc (M, N) int32 = x (M, K) int8 @ w (N, K)^T int8, exact (CUBLAS_COMPUTE_32I, int32 scale and output;
//       cuBLASLt's IMMA needs the TN layout: column-major, it computes acc^T (N, M) = w^T' x^T with A = w
//       transposed, B = x, as gemm_lt.h does for fp16), heuristic algorithms within a workspace limit.
//   gemm_i8_epilogue
//       acc -> y through any GemmI8Epilogue, bit for bit the mma.sync kernel's fused epilogue and the
//       reference's (kernels/cpu/gemm_i8_ref.h; the device arithmetic is shared: gemm_i8_epilogue.cuh).
// Unsigned activations (fc2's uint8 codes, GemmI8Args::x_u8): cuBLASLt's matmul lists int8 A and B only for
// integer compute; lt_i8_create describes B as CUDA_R_8U all the same and lt_i8_heuristic returns what
// cuBLASLt offers for it on this device (none where it has no such kernel: the caller records that).
// Exact integer sums make every algorithm's output the same (split-K reductions included), so which one the
// tuner pins never changes a result. Pointers are device pointers; the caller keeps ownership of every
// buffer, the handle and the workspace. lt_i8_matmul and gemm_i8_epilogue only enqueue work on `stream`
// (capturable in a CUDA graph; nothing is allocated).
// Tested by tests/kernels/gemm_i8_lt_cuda_test.cu against gemm_i8_ref; timed by tools/gpu/bench_gemm_i8.cu
// (--imma); results: docs/benchmarks.md ("INT8 GEMM: cuBLASLt IMMA").
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/cuda/gemm_i8.h"

namespace edgevit::gpu {

// Descriptors of one int8 GEMM shape. Owned: release with lt_i8_destroy (a default-constructed one holds
// nothing).
struct LtI8Gemm {
  int64_t m = 0, n = 0, k = 0;
  bool x_u8 = false;                   // B (x) described as uint8
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr;  // w: (N, K) row-major, int8
  cublasLtMatrixLayout_t b = nullptr;  // x: (M, K) row-major, int8 (uint8 when x_u8)
  cublasLtMatrixLayout_t c = nullptr;  // acc: (M, N) row-major, int32
};

// Fills *g; on failure *g holds what was created so far (lt_i8_destroy releases it).
cublasStatus_t lt_i8_create(int64_t m, int64_t n, int64_t k, bool x_u8, LtI8Gemm* g);
void lt_i8_destroy(LtI8Gemm* g);

// Up to max_results of cuBLASLt's heuristic algorithms for g, in its order, needing at most workspace_bytes,
// appended to *out (none: cuBLASLt has no kernel for this shape or type on this device; not an error).
cublasStatus_t lt_i8_heuristic(cublasLtHandle_t lt, const LtI8Gemm& g, int max_results, size_t workspace_bytes,
                               std::vector<cublasLtMatmulAlgo_t>* out);

// acc (M, N) = x (M, K) @ w (N, K)^T in int32. acc: 16-byte aligned (gemm_i8_epilogue reads it in int4s).
cublasStatus_t lt_i8_matmul(cublasLtHandle_t lt, const LtI8Gemm& g, const cublasLtMatmulAlgo_t& algo,
                            const int8_t* w, const void* x, int32_t* acc, void* workspace, size_t workspace_bytes,
                            cudaStream_t stream);

// Bytes of the int32 output of an M x N GEMM.
inline int64_t lt_i8_acc_bytes(int64_t m, int64_t n) { return m * n * 4; }

// y = the epilogue over acc (M, N) int32 (16-byte aligned): reads args' m, n, sx, sx_per_token, sw, bias,
// epilogue, y and out_scale (x, w, variant, workspace and x_u8 are ignored: acc is already the product). Same
// limits as gemm_i8: N a multiple of 8, y 16-byte aligned (kI8*: 8), out_scale > 0 for kI8*.
// cudaErrorInvalidValue for a bad shape, alignment or missing pointer; else the launch's status.
cudaError_t gemm_i8_epilogue(const GemmI8Args& args, const int32_t* acc, cudaStream_t stream);

}  // namespace edgevit::gpu
