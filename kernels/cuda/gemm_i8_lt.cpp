// cuBLASLt IMMA descriptors, heuristic and launch (kernels/cuda/gemm_i8_lt.h says what each does and why).
#include "kernels/cuda/gemm_i8_lt.h"

#include "kernels/cuda/gemm_lt.h"

namespace edgevit::gpu {

cublasStatus_t lt_i8_create(int64_t m, int64_t n, int64_t k, bool x_u8, LtI8Gemm* g) {
  g->m = m;
  g->n = n;
  g->k = k;
  g->x_u8 = x_u8;
  cublasStatus_t st = cublasLtMatmulDescCreate(&g->desc, CUBLAS_COMPUTE_32I, CUDA_R_32I);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  if ((st = cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta)) !=
          CUBLAS_STATUS_SUCCESS ||
      (st = cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb)) !=
          CUBLAS_STATUS_SUCCESS)
    return st;
  if ((st = cublasLtMatrixLayoutCreate(&g->a, CUDA_R_8I, k, n, k)) != CUBLAS_STATUS_SUCCESS) return st;
  if ((st = cublasLtMatrixLayoutCreate(&g->b, x_u8 ? CUDA_R_8U : CUDA_R_8I, k, m, k)) != CUBLAS_STATUS_SUCCESS)
    return st;
  return cublasLtMatrixLayoutCreate(&g->c, CUDA_R_32I, n, m, n);
}

void lt_i8_destroy(LtI8Gemm* g) {
  // Teardown ignores errors: there is nobody left to report them to.
  if (g->desc) cublasLtMatmulDescDestroy(g->desc);
  if (g->a) cublasLtMatrixLayoutDestroy(g->a);
  if (g->b) cublasLtMatrixLayoutDestroy(g->b);
  if (g->c) cublasLtMatrixLayoutDestroy(g->c);
  *g = LtI8Gemm{};
}

cublasStatus_t lt_i8_heuristic(cublasLtHandle_t lt, const LtI8Gemm& g, int max_results, size_t workspace_bytes,
                               std::vector<cublasLtMatmulAlgo_t>* out) {
  const cublasStatus_t st = lt_matmul_heuristic(lt, g.desc, g.a, g.b, g.c, max_results, workspace_bytes, out);
  // An unsupported type combination (uint8 B) or shape: no algorithm, which the caller records.
  return st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE ? CUBLAS_STATUS_SUCCESS : st;
}

cublasStatus_t lt_i8_matmul(cublasLtHandle_t lt, const LtI8Gemm& g, const cublasLtMatmulAlgo_t& algo,
                            const int8_t* w, const void* x, int32_t* acc, void* workspace, size_t workspace_bytes,
                            cudaStream_t stream) {
  const int32_t alpha = 1, beta = 0;
  return cublasLtMatmul(lt, g.desc, &alpha, w, g.a, x, g.b, &beta, acc, g.c, acc, g.c, &algo, workspace,
                        workspace_bytes, stream);
}

}  // namespace edgevit::gpu
