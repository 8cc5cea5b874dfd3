// Unfused multi-head attention for any head_dim (the fallback when kernels/mha_variants.h has no fused row):
//   1. S = scale Q K^T      cuBLASLt strided-batched GEMM over the H heads of one batch element,
//                           fp16 inputs, fp32 accumulation, fp32 S (H, Sq, Skv) in the workspace
//   2. P = softmax(S)       one warp per row: key mask, fp32 max and sum, fp16 P (H, Sq, Skv)
//   3. O = P V              cuBLASLt strided-batched GEMM, fp16 out
// cuBLAS is column-major: a row-major (rows, cols) matrix with row stride ld is its column-major transpose
// with leading dimension ld, and the per-head batch stride is AttnStrides::head, so packed qkv needs no copy.
// Batch elements run one after another (B GEMM pairs) so the workspace stays H x Sq x Skv.
#include <cublasLt.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/mha.h"
#include "kernels/mha_variants.h"

namespace edgevit {
namespace {

constexpr size_t kWorkspaceAlign = 256;
size_t align_up(size_t n) { return (n + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign; }

size_t scores_bytes(const AttnParams& p) {
  return align_up(static_cast<size_t>(p.heads) * p.seq_q * p.seq_kv * sizeof(float));
}

// P[r, :] = softmax(S[r, :]) over Skv keys, masked keys excluded; rows with no valid key become zeros.
// One warp per row of the (rows, Skv) matrices.
__global__ void softmax_rows_kernel(const float* __restrict__ s,  // (rows, Skv)
                                    __half* __restrict__ p,       // (rows, Skv)
                                    const uint8_t* __restrict__ key_mask,  // (Skv) or nullptr
                                    int64_t rows, int seq_kv) {
  const int64_t row = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const float* sr = s + row * seq_kv;
  __half* pr = p + row * seq_kv;
  float m = -INFINITY;
  for (int j = lane; j < seq_kv; j += 32)
    if (key_mask == nullptr || key_mask[j] != 0) m = fmaxf(m, sr[j]);
  for (int off = 16; off > 0; off /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
  float sum = 0.f;
  if (m != -INFINITY) {
    for (int j = lane; j < seq_kv; j += 32)
      if (key_mask == nullptr || key_mask[j] != 0) sum += __expf(sr[j] - m);
  }
  for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  const float inv = sum > 0.f ? 1.f / sum : 0.f;
  for (int j = lane; j < seq_kv; j += 32) {
    const bool ok = m != -INFINITY && (key_mask == nullptr || key_mask[j] != 0);
    pr[j] = __float2half_rn(ok ? __expf(sr[j] - m) * inv : 0.f);
  }
}

// Column-major batched matrix layout; destroyed with the object.
class Layout {
 public:
  Layout(cudaDataType type, int64_t rows, int64_t cols, int64_t ld, int batch, int64_t batch_stride) {
    status_ = cublasLtMatrixLayoutCreate(&layout_, type, rows, cols, ld);
    if (status_ != CUBLAS_STATUS_SUCCESS) return;
    status_ = cublasLtMatrixLayoutSetAttribute(layout_, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof(batch));
    if (status_ != CUBLAS_STATUS_SUCCESS) return;
    status_ = cublasLtMatrixLayoutSetAttribute(layout_, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &batch_stride,
                                               sizeof(batch_stride));
  }
  ~Layout() {
    if (layout_ != nullptr) cublasLtMatrixLayoutDestroy(layout_);
  }
  Layout(const Layout&) = delete;
  Layout& operator=(const Layout&) = delete;
  cublasLtMatrixLayout_t get() const { return layout_; }
  cublasStatus_t status() const { return status_; }

 private:
  cublasLtMatrixLayout_t layout_ = nullptr;
  cublasStatus_t status_ = CUBLAS_STATUS_SUCCESS;
};

class MatmulDesc {
 public:
  MatmulDesc(cublasOperation_t op_a, cublasOperation_t op_b) {
    status_ = cublasLtMatmulDescCreate(&desc_, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    if (status_ != CUBLAS_STATUS_SUCCESS) return;
    status_ = cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a));
    if (status_ != CUBLAS_STATUS_SUCCESS) return;
    status_ = cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b));
  }
  ~MatmulDesc() {
    if (desc_ != nullptr) cublasLtMatmulDescDestroy(desc_);
  }
  MatmulDesc(const MatmulDesc&) = delete;
  MatmulDesc& operator=(const MatmulDesc&) = delete;
  cublasLtMatmulDesc_t get() const { return desc_; }
  cublasStatus_t status() const { return status_; }

 private:
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasStatus_t status_ = CUBLAS_STATUS_SUCCESS;
};

cudaError_t to_cuda_error(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return cudaSuccess;
    case CUBLAS_STATUS_NOT_SUPPORTED: return cudaErrorNotSupported;
    case CUBLAS_STATUS_INVALID_VALUE: return cudaErrorInvalidValue;
    case CUBLAS_STATUS_ALLOC_FAILED: return cudaErrorMemoryAllocation;
    case CUBLAS_STATUS_NOT_INITIALIZED: return cudaErrorInitializationError;
    default: return cudaErrorUnknown;
  }
}

}  // namespace

size_t mha_unfused_workspace_bytes(const AttnParams& p) {
  const size_t bytes = scores_bytes(p) +
                       align_up(static_cast<size_t>(p.heads) * p.seq_q * p.seq_kv * sizeof(__half));
  return bytes;
}
static_assert(mha_unfused_workspace_bytes_for(12, 197, 197) ==
                  (12 * 197 * 197 * 4 + 255) / 256 * 256 + (12 * 197 * 197 * 2 + 255) / 256 * 256,
              "keep kernels/mha_variants.h's formula in step with this file");

cudaError_t mha_unfused_f16(const AttnParams& p, const __half* q, const __half* k, const __half* v, __half* o,
                            void* workspace, size_t workspace_bytes, cublasLtHandle_t handle,
                            cudaStream_t stream) {
  if (p.batch < 0 || p.heads < 0 || p.seq_q < 0 || p.seq_kv < 0 || p.head_dim <= 0)
    return cudaErrorInvalidValue;
  if (p.batch == 0 || p.heads == 0 || p.seq_q == 0) return cudaSuccess;
  if (workspace_bytes < mha_unfused_workspace_bytes(p) || workspace == nullptr) return cudaErrorInvalidValue;
  if (p.seq_kv == 0) {
    // No keys: every row is zeros (one 2D memset per head and batch element would also do; rows are few).
    for (int b = 0; b < p.batch; ++b)
      for (int h = 0; h < p.heads; ++h) {
        cudaError_t err = cudaMemset2DAsync(o + b * p.o.batch + h * p.o.head, p.o.row * sizeof(__half), 0,
                                            p.head_dim * sizeof(__half), p.seq_q, stream);
        if (err != cudaSuccess) return err;
      }
    return cudaSuccess;
  }
  float* scores = static_cast<float*>(workspace);                                              // (H, Sq, Skv)
  __half* probs = reinterpret_cast<__half*>(static_cast<char*>(workspace) + scores_bytes(p));  // (H, Sq, Skv)
  const int64_t plane = static_cast<int64_t>(p.seq_q) * p.seq_kv;

  // S^T (Skv x Sq, col-major, ld Skv) = (K^T)^T Q^T : A = K^T stored (D x Skv, ld k.row), op T;
  // B = Q^T stored (D x Sq, ld q.row), op N.
  MatmulDesc qk(CUBLAS_OP_T, CUBLAS_OP_N);
  Layout a_k(CUDA_R_16F, p.head_dim, p.seq_kv, p.k.row, p.heads, p.k.head);
  Layout b_q(CUDA_R_16F, p.head_dim, p.seq_q, p.q.row, p.heads, p.q.head);
  Layout c_s(CUDA_R_32F, p.seq_kv, p.seq_q, p.seq_kv, p.heads, plane);
  // O^T (D x Sq, ld o.row) = V^T P^T : A = V^T stored (D x Skv, ld v.row), op N; B = P^T (Skv x Sq, ld Skv).
  MatmulDesc pv(CUBLAS_OP_N, CUBLAS_OP_N);
  Layout a_v(CUDA_R_16F, p.head_dim, p.seq_kv, p.v.row, p.heads, p.v.head);
  Layout b_p(CUDA_R_16F, p.seq_kv, p.seq_q, p.seq_kv, p.heads, plane);
  Layout c_o(CUDA_R_16F, p.head_dim, p.seq_q, p.o.row, p.heads, p.o.head);
  for (cublasStatus_t s : {qk.status(), pv.status(), a_k.status(), b_q.status(), c_s.status(), a_v.status(),
                           b_p.status(), c_o.status()})
    if (s != CUBLAS_STATUS_SUCCESS) return to_cuda_error(s);

  const float alpha_qk = p.scale, alpha_pv = 1.f, beta = 0.f;
  const int64_t rows = static_cast<int64_t>(p.heads) * p.seq_q;
  constexpr int kSoftmaxThreads = 256;
  const int64_t blocks = (rows * 32 + kSoftmaxThreads - 1) / kSoftmaxThreads;
  for (int b = 0; b < p.batch; ++b) {
    const __half* qb = q + b * p.q.batch;
    const __half* kb = k + b * p.k.batch;
    const __half* vb = v + b * p.v.batch;
    __half* ob = o + b * p.o.batch;
    cublasStatus_t st = cublasLtMatmul(handle, qk.get(), &alpha_qk, kb, a_k.get(), qb, b_q.get(), &beta, scores,
                                       c_s.get(), scores, c_s.get(), nullptr, nullptr, 0, stream);
    if (st != CUBLAS_STATUS_SUCCESS) return to_cuda_error(st);
    const uint8_t* mask = p.key_mask != nullptr ? p.key_mask + static_cast<int64_t>(b) * p.seq_kv : nullptr;
    softmax_rows_kernel<<<static_cast<unsigned>(blocks), kSoftmaxThreads, 0, stream>>>(scores, probs, mask, rows,
                                                                                      p.seq_kv);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
    st = cublasLtMatmul(handle, pv.get(), &alpha_pv, vb, a_v.get(), probs, b_p.get(), &beta, ob, c_o.get(), ob,
                        c_o.get(), nullptr, nullptr, 0, stream);
    if (st != CUBLAS_STATUS_SUCCESS) return to_cuda_error(st);
  }
  return cudaSuccess;
}

}  // namespace edgevit
