// cuBLASLt GEMM descriptors, candidates and launch (kernels/cuda/gemm_lt.h says what each does and why).
#include "kernels/cuda/gemm_lt.h"

#include <algorithm>
#include <cstring>

#include "kernels/cuda/ops.h"

namespace edgevit::gpu {

namespace {

bool already_in(const std::vector<cublasLtMatmulAlgo_t>& candidates, const cublasLtMatmulAlgo_t& a) {
  for (const cublasLtMatmulAlgo_t& have : candidates)
    if (std::memcmp(&have, &a, sizeof a) == 0) return true;
  return false;
}

// True when cuBLASLt accepts `a` for g within the workspace limit.
bool algo_fits(cublasLtHandle_t lt, const LtGemm& g, const cublasLtMatmulAlgo_t& a, size_t workspace_bytes) {
  cublasLtMatmulHeuristicResult_t r{};
  return cublasLtMatmulAlgoCheck(lt, g.desc, g.a, g.b, g.c, g.c, &a, &r) == CUBLAS_STATUS_SUCCESS &&
         r.workspaceSize <= workspace_bytes;
}

// The split-K schemes of `base` (0 when it cannot split or is split already).
uint32_t split_k_schemes(const cublasLtMatmulAlgo_t& base) {
  int32_t support = 0, splitk = 1;
  uint32_t schemes = 0;
  size_t written = 0;
  if (cublasLtMatmulAlgoCapGetAttribute(&base, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT, &support, sizeof support,
                                        &written) != CUBLAS_STATUS_SUCCESS ||
      support == 0 ||
      cublasLtMatmulAlgoCapGetAttribute(&base, CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK, &schemes, sizeof schemes,
                                        &written) != CUBLAS_STATUS_SUCCESS ||
      cublasLtMatmulAlgoConfigGetAttribute(&base, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof splitk,
                                           &written) != CUBLAS_STATUS_SUCCESS ||
      splitk > 1)
    return 0;
  return schemes;
}

}  // namespace

cublasLtEpilogue_t lt_epilogue(const LtGemmShape& s) {
  if (s.gelu != LtGelu::kNone && s.fp16) return s.bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
  return s.bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
}

cublasStatus_t lt_gemm_create(const LtGemmShape& s, const void* bias, LtGemm* g) {
  g->shape = s;
  const cudaDataType dt = s.fp16 ? CUDA_R_16F : CUDA_R_32F;
  cublasStatus_t st = cublasLtMatmulDescCreate(&g->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  const cublasLtEpilogue_t epi = lt_epilogue(s);
  if ((st = cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta)) !=
          CUBLAS_STATUS_SUCCESS ||
      (st = cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb)) !=
          CUBLAS_STATUS_SUCCESS ||
      (st = cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi)) !=
          CUBLAS_STATUS_SUCCESS)
    return st;
  if (s.bias &&
      (st = cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias)) !=
          CUBLAS_STATUS_SUCCESS)
    return st;
  g->beta = s.accumulate ? 1.f : 0.f;
  g->gelu_after = s.fp16 ? LtGelu::kNone : s.gelu;
  if ((st = cublasLtMatrixLayoutCreate(&g->a, dt, s.k, s.n, s.k)) != CUBLAS_STATUS_SUCCESS) return st;
  if ((st = cublasLtMatrixLayoutCreate(&g->b, dt, s.k, s.m, s.k)) != CUBLAS_STATUS_SUCCESS) return st;
  return cublasLtMatrixLayoutCreate(&g->c, dt, s.n, s.m, s.n);
}

void lt_gemm_destroy(LtGemm* g) {
  // Teardown ignores errors: there is nobody left to report them to.
  if (g->desc) cublasLtMatmulDescDestroy(g->desc);
  if (g->a) cublasLtMatrixLayoutDestroy(g->a);
  if (g->b) cublasLtMatrixLayoutDestroy(g->b);
  if (g->c) cublasLtMatrixLayoutDestroy(g->c);
  *g = LtGemm{};
}

cublasStatus_t lt_gemm_heuristic(cublasLtHandle_t lt, const LtGemm& g, int max_results, size_t workspace_bytes,
                                 std::vector<cublasLtMatmulAlgo_t>* out) {
  return lt_matmul_heuristic(lt, g.desc, g.a, g.b, g.c, max_results, workspace_bytes, out);
}

cublasStatus_t lt_matmul_heuristic(cublasLtHandle_t lt, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
                                   cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, int max_results,
                                   size_t workspace_bytes, std::vector<cublasLtMatmulAlgo_t>* out) {
  cublasLtMatmulPreference_t pref = nullptr;
  cublasStatus_t st = cublasLtMatmulPreferenceCreate(&pref);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  const uint64_t ws = workspace_bytes;
  st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
  std::vector<cublasLtMatmulHeuristicResult_t> results(static_cast<size_t>(std::max(max_results, 1)));
  int found = 0;
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulAlgoGetHeuristic(lt, desc, a, b, c, c, pref, max_results, results.data(), &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  for (int r = 0; r < found; ++r)
    if (results[r].state == CUBLAS_STATUS_SUCCESS && results[r].workspaceSize <= workspace_bytes)
      out->push_back(results[r].algo);
  return CUBLAS_STATUS_SUCCESS;
}

bool lt_small_grid(const LtGemmShape& s, int64_t sm_count) {
  return s.m * s.n <= kLtSmallTilesPerSm * sm_count * 128 * 128;
}

void lt_add_cluster_variants(cublasLtHandle_t lt, const LtGemm& g, size_t workspace_bytes,
                             std::vector<cublasLtMatmulAlgo_t>* candidates) {
#if CUBLAS_VER_MAJOR >= 12
  const size_t heuristic = candidates->size();
  for (size_t i = 0; i < heuristic; ++i) {
    cublasLtMatmulAlgo_t a = (*candidates)[i];
    uint16_t cluster = 0;
    size_t written = 0;
    if (cublasLtMatmulAlgoConfigGetAttribute(&a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cluster, sizeof cluster,
                                             &written) != CUBLAS_STATUS_SUCCESS ||
        cluster == CUBLASLT_CLUSTER_SHAPE_1x1x1)
      continue;
    cluster = CUBLASLT_CLUSTER_SHAPE_1x1x1;
    if (cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cluster, sizeof cluster) !=
            CUBLAS_STATUS_SUCCESS ||
        !algo_fits(lt, g, a, workspace_bytes))
      continue;
    if (!already_in(*candidates, a)) candidates->push_back(a);
  }
#else
  (void)lt;
  (void)g;
  (void)workspace_bytes;
  (void)candidates;
#endif
}

void lt_add_split_k_variants(cublasLtHandle_t lt, const LtGemm& g, size_t workspace_bytes,
                             std::vector<cublasLtMatmulAlgo_t>* candidates) {
  const size_t bases = std::min(candidates->size(), kLtSplitKBases);
  for (size_t i = 0; i < bases; ++i) {
    const cublasLtMatmulAlgo_t base = (*candidates)[i];
    const uint32_t schemes = split_k_schemes(base);
    if (schemes == 0) continue;
    for (const int32_t s : kLtSplitKs) {
      if (g.shape.k / s < kLtSplitKMinK) break;
      for (const uint32_t scheme : {static_cast<uint32_t>(CUBLASLT_REDUCTION_SCHEME_INPLACE),
                                    static_cast<uint32_t>(CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE)}) {
        if ((schemes & scheme) == 0) continue;
        cublasLtMatmulAlgo_t a = base;
        if (cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &s, sizeof s) !=
                CUBLAS_STATUS_SUCCESS ||
            cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme,
                                                 sizeof scheme) != CUBLAS_STATUS_SUCCESS ||
            !algo_fits(lt, g, a, workspace_bytes))
          continue;
        if (!already_in(*candidates, a)) candidates->push_back(a);
        if (candidates->size() >= static_cast<size_t>(kLtMaxCandidates)) return;
      }
    }
  }
}

std::string lt_describe_algo(const cublasLtMatmulAlgo_t& algo) {
  int32_t id = -1, splitk = 1;
  uint32_t tile = 0, stages = 0, reduction = 0, swizzle = 0;
  size_t written = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id, &written);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile, &written);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof stages, &written);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof splitk, &written);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &reduction, sizeof reduction,
                                       &written);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &swizzle, sizeof swizzle,
                                       &written);
  std::string d = "id " + std::to_string(id) + " tile " + std::to_string(tile) + " stages " +
                  std::to_string(stages) + " splitK " + std::to_string(splitk);
  if (splitk > 1) d += " reduction " + std::to_string(reduction);
  if (swizzle != 0) d += " swizzle " + std::to_string(swizzle);
#if CUBLAS_VER_MAJOR >= 12
  uint16_t cluster = 0;  // cublasLtClusterShape_t: 0 = cuBLASLt's choice, 2 = 1x1x1, 3 = 2x1x1, ...
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cluster, sizeof cluster,
                                       &written);
  if (cluster != 0) d += " cluster " + std::to_string(cluster);
#endif
  return d;
}

cublasStatus_t lt_gemm_matmul(cublasLtHandle_t lt, const LtGemm& g, const cublasLtMatmulAlgo_t& algo,
                              const void* w, const void* x, void* y, void* workspace, size_t workspace_bytes,
                              cudaStream_t stream) {
  const float alpha = 1.f;
  return cublasLtMatmul(lt, g.desc, &alpha, w, g.a, x, g.b, &g.beta, y, g.c, y, g.c, &algo, workspace,
                        workspace_bytes, stream);
}

LtRunStatus lt_gemm_run(cublasLtHandle_t lt, const LtGemm& g, const cublasLtMatmulAlgo_t& algo, const void* w,
                        const void* x, void* y, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  LtRunStatus r;
  r.lt = lt_gemm_matmul(lt, g, algo, w, x, y, workspace, workspace_bytes, stream);
  if (r.lt != CUBLAS_STATUS_SUCCESS) return r;
  float* yf = static_cast<float*>(y);
  if (g.gelu_after == LtGelu::kErf) r.cuda = gelu_f32(yf, g.shape.m * g.shape.n, stream);
  if (g.gelu_after == LtGelu::kTanh) r.cuda = gelu_tanh_f32(yf, g.shape.m * g.shape.n, stream);
  return r;
}

const char* lt_status_name(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "cuBLAS status";
  }
}

}  // namespace edgevit::gpu
