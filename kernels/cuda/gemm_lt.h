// The ViT's linear layers through cuBLASLt: y (M, N) = x (M, K) w (N, K)^T [+ bias (N)] [GELU] [+= y].
// Host-compilable: includers need the CUDA runtime and cuBLASLt headers only.
//
//   lt_gemm_create     descriptors for one shape and epilogue (fp16 plans: fp16 in/out, fp32 accumulation,
//                      GELU fused as cuBLASLt's GELU_BIAS epilogue, the tanh form: for erf-GELU models within
//                      4.7e-4 of erf GELU, below fp16's own rounding of the hidden activations; fp32 plans:
//                      plain fp32 without TF32, so the fp32 path meets 1e-4 end to end, and the GELU as a
//                      separate kernel after a bias epilogue: gpu::gelu_f32 (erf) or gpu::gelu_tanh_f32)
//   lt_gemm_heuristic  cuBLASLt's ranked algorithms for it within a workspace limit
//   lt_add_cluster_variants, lt_add_split_k_variants
//                      more candidates for GEMMs with few output tiles (lt_small_grid), each checked by
//                      cublasLtMatmulAlgoCheck; the runtime times the candidates and pins one
//                      (runtime/cuda/gemm_tuning.cpp)
//   lt_gemm_run        the GEMM with one algorithm (and gpu::gelu_f32 after it when the shape asks)
//
// cuBLASLt is column-major, so it computes y^T (N, M) = w (K, N col-major, transposed) x^T (K, M): A = w,
// B = x, C = D = y. Pointers are device pointers; the caller keeps ownership of every buffer, the handle
// and the workspace. lt_gemm_run only enqueues work on `stream` (it can be captured in a CUDA graph).
// Tested by tests/kernels/gemm_lt_cuda_test.cu against a float64 reference.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace edgevit::gpu {

// The GELU after the bias: none, erf (0.5 x (1 + erf(x / sqrt 2))) or its tanh approximation.
enum class LtGelu { kNone, kErf, kTanh };

// A GEMM's shape and epilogue: everything its descriptors and its algorithm choice depend on (the
// pointers do not).
struct LtGemmShape {
  int64_t m = 0, n = 0, k = 0;
  bool fp16 = true;         // fp16 storage with fp32 accumulation; false: fp32 throughout (no TF32)
  bool bias = false;        // + bias (N), in the epilogue
  LtGelu gelu = LtGelu::kNone;  // GELU after the bias
  bool accumulate = false;  // y += x w^T (+ bias): beta = 1 with C == D, in place
  bool operator==(const LtGemmShape& o) const {
    return m == o.m && n == o.n && k == o.k && fp16 == o.fp16 && bias == o.bias && gelu == o.gelu &&
           accumulate == o.accumulate;
  }
};

// Descriptors of one GEMM. Owned: release them with lt_gemm_destroy (a default-constructed LtGemm holds
// nothing).
struct LtGemm {
  LtGemmShape shape;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr;  // w: (N, K) row-major
  cublasLtMatrixLayout_t b = nullptr;  // x: (M, K) row-major
  cublasLtMatrixLayout_t c = nullptr;  // y: (M, N) row-major (C and D)
  float beta = 0.f;                    // 1 when shape.accumulate
  LtGelu gelu_after = LtGelu::kNone;   // fp32 GELU: gpu::gelu_f32 or gelu_tanh_f32 over y after the matmul
};

// Variant constants (lt_add_cluster_variants, lt_add_split_k_variants, lt_small_grid).
constexpr int kLtMaxCandidates = 48;         // heuristic results and their variants, at most
constexpr size_t kLtSplitKBases = 3;         // split-K variants of the heuristic's first 3 results only
constexpr int32_t kLtSplitKs[] = {2, 3, 4, 6, 8};
constexpr int64_t kLtSplitKMinK = 128;       // K per split at least this
constexpr int64_t kLtSmallTilesPerSm = 4;    // "small" GEMMs: below this many 128 x 128 output tiles per SM

// The epilogue the descriptors carry for `shape` (fp32 GELU is not one of them: LtGemm::gelu_after).
// fp16: either GELU is cuBLASLt's GELU epilogue (the tanh form).
cublasLtEpilogue_t lt_epilogue(const LtGemmShape& shape);

// Fills *g for `shape`; bias: device pointer (N) when shape.bias, else ignored. On failure *g holds what
// was created so far (lt_gemm_destroy releases it).
cublasStatus_t lt_gemm_create(const LtGemmShape& shape, const void* bias, LtGemm* g);
void lt_gemm_destroy(LtGemm* g);

// Up to max_results of cuBLASLt's heuristic algorithms for g, in its order, that need at most
// workspace_bytes, appended to *out.
cublasStatus_t lt_gemm_heuristic(cublasLtHandle_t lt, const LtGemm& g, int max_results, size_t workspace_bytes,
                                 std::vector<cublasLtMatmulAlgo_t>* out);
// The same for any descriptors (a, b, c: A, B and C = D), e.g. the int8 ones of gemm_i8_lt.h.
cublasStatus_t lt_matmul_heuristic(cublasLtHandle_t lt, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
                                   cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, int max_results,
                                   size_t workspace_bytes, std::vector<cublasLtMatmulAlgo_t>* out);

// True when the output has fewer than kLtSmallTilesPerSm 128 x 128 tiles per SM: such GEMMs get cluster-1
// and split-K variants, and the runtime times them in a chain (launch and ramp-up overlap in a forward).
bool lt_small_grid(const LtGemmShape& shape, int64_t sm_count);

// Hopper: each candidate again with thread-block clusters of 1 (CUBLASLT_CLUSTER_SHAPE_1x1x1), appended.
// cuBLASLt's sm90 kernels come with clusters of 2-8 blocks that share operand loads; at M = 197 a GEMM is
// ~5 us of launch, ramp and drain inside the graph, and a 1x1 cluster starts sooner. H100, ViT-B batch 1,
// timed in a chain of the model's 12 same-shape GEMMs: qkv 5.25 -> 4.71 us (tools/gpu/lt_search.cu).
// Devices without clusters (Orin's sm_87) and cuBLASLt before 12 add nothing.
void lt_add_cluster_variants(cublasLtHandle_t lt, const LtGemm& g, size_t workspace_bytes,
                             std::vector<cublasLtMatmulAlgo_t>* candidates);

// Split-K variants (kLtSplitKs, K per split >= kLtSplitKMinK) of the first kLtSplitKBases candidates,
// appended, up to kLtMaxCandidates in all. At M = 197 ViT-B's fc2 has ~24 tiles of 128 x 128 for an H100's
// 132 SMs, each looping over K = 3072 alone; on Orin NX's 8 SMs 12 such tiles leave a half-empty second
// wave, and the heuristic seldom offers split-K. Only reductions of a fixed order (INPLACE, COMPUTE_TYPE),
// so outputs stay bit-identical run to run; every output tile splits K alike, so a row's result does not
// depend on its position in the batch.
void lt_add_split_k_variants(cublasLtHandle_t lt, const LtGemm& g, size_t workspace_bytes,
                             std::vector<cublasLtMatmulAlgo_t>* candidates);

// "id 21 tile 18 stages 8 splitK 1" (+ " reduction R" when split, " swizzle S", " cluster C" when set).
std::string lt_describe_algo(const cublasLtMatmulAlgo_t& algo);

// The matmul alone: y (M, N) = x (M, K) w (N, K)^T [+ bias] [GELU epilogue] [+ y]; w: (N, K), x: (M, K).
cublasStatus_t lt_gemm_matmul(cublasLtHandle_t lt, const LtGemm& g, const cublasLtMatmulAlgo_t& algo,
                              const void* w, const void* x, void* y, void* workspace, size_t workspace_bytes,
                              cudaStream_t stream);

// What lt_gemm_run reports: the matmul's status, then the GELU launch's.
struct LtRunStatus {
  cublasStatus_t lt = CUBLAS_STATUS_SUCCESS;
  cudaError_t cuda = cudaSuccess;
  bool ok() const { return lt == CUBLAS_STATUS_SUCCESS && cuda == cudaSuccess; }
};

// The whole linear layer: lt_gemm_matmul, then g.gelu_after's GELU kernel over y (fp32).
LtRunStatus lt_gemm_run(cublasLtHandle_t lt, const LtGemm& g, const cublasLtMatmulAlgo_t& algo, const void* w,
                        const void* x, void* y, void* workspace, size_t workspace_bytes, cudaStream_t stream);

// "CUBLAS_STATUS_NOT_SUPPORTED" etc.
const char* lt_status_name(cublasStatus_t s);

}  // namespace edgevit::gpu
