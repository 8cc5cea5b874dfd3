// launch_latency: the fixed cost of one dependent kernel inside a CUDA graph on this GPU, with and without
// programmatic dependent launch (PDL, sm_90+), and of one small cuBLASLt GEMM in such a chain.
//
// An experiment, not part of the runtime. It replays graphs of 96 dependent kernels and reports microseconds
// per kernel (median of 200 replays):
//   copy        a LayerNorm-sized kernel (197 x 768 fp16 read and written, 197 blocks of 96 threads)
//   copy+pdl    the same, each launch with cudaLaunchAttributeProgrammaticStreamSerialization; the kernel
//               waits (griddepcontrol.wait) before its first read and lets the next launch early
//               (griddepcontrol.launch_dependents) after it
//   gemm-tiny   cuBLASLt's heuristic first algorithm for ViT-Ti's fc1 shape (197 x 768 x 192, fp16)
//   alternate   gemm-tiny and copy alternating (a GEMM followed by a LayerNorm, as in a ViT block), then the
//               same with the copy launched with PDL after each GEMM
//   build (from the repository root):
//     nvcc -O2 -std=c++17 -I. -arch=sm_90 tools/gpu/launch_latency.cu -lcublasLt -o launch_latency
#include <cublasLt.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "tools/gpu/bench_timing.cuh"

#define LK(x)                                                                          \
  do {                                                                                 \
    cublasStatus_t s_ = (x);                                                           \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                 \
      std::fprintf(stderr, "%s:%d %s: status %d\n", __FILE__, __LINE__, #x, (int)s_); \
      std::exit(2);                                                                    \
    }                                                                                  \
  } while (0)

namespace {

constexpr int kRows = 197, kCols = 768, kChain = 96;

template <bool kPdl>
__global__ void copy_rows(const __half* __restrict__ in, __half* __restrict__ out) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (kPdl) asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  const int row = blockIdx.x;
  const __half2* src = reinterpret_cast<const __half2*>(in + size_t(row) * kCols);
  __half2* dst = reinterpret_cast<__half2*>(out + size_t(row) * kCols);
  float s = 0.f;
  for (int i = threadIdx.x; i < kCols / 2; i += blockDim.x) s += __low2float(src[i]);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (kPdl) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
  for (int i = threadIdx.x; i < kCols / 2; i += blockDim.x) dst[i] = __hadd2(src[i], __float2half2_rn(s * 1e-9f));
}

void launch_copy(bool pdl, const __half* in, __half* out, cudaStream_t s) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(kRows);
  cfg.blockDim = dim3(96);
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1 : 0;
  if (pdl)
    CHECK(cudaLaunchKernelEx(&cfg, copy_rows<true>, in, out));
  else
    CHECK(cudaLaunchKernelEx(&cfg, copy_rows<false>, in, out));
}

template <typename F>
float time_graph(cudaStream_t s, F enqueue) {
  cudaGraph_t g;
  cudaGraphExec_t e;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  enqueue();
  CHECK(cudaStreamEndCapture(s, &g));
  CHECK(cudaGraphInstantiate(&e, g, 0));
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  for (int i = 0; i < 20; ++i) CHECK(cudaGraphLaunch(e, s));
  std::vector<float> t;
  for (int i = 0; i < 200; ++i) {
    CHECK(cudaEventRecord(a, s));
    CHECK(cudaGraphLaunch(e, s));
    CHECK(cudaEventRecord(b, s));
    CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms * 1e3f);
  }
  std::sort(t.begin(), t.end());
  CHECK(cudaGraphExecDestroy(e));
  CHECK(cudaGraphDestroy(g));
  return t[t.size() / 2];
}

}  // namespace

int main() {
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s (sm_%d%d), %d SMs\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount);
  __half *buf[2], *w, *y;
  for (auto& p : buf) {
    CHECK(cudaMalloc(&p, size_t(kRows) * kCols * 2));
    CHECK(cudaMemset(p, 0, size_t(kRows) * kCols * 2));
  }
  CHECK(cudaMalloc(&w, 768 * 192 * 2));
  CHECK(cudaMemset(w, 0, 768 * 192 * 2));
  CHECK(cudaMalloc(&y, size_t(kRows) * 768 * 2));
  CHECK(cudaMemset(y, 0, size_t(kRows) * 768 * 2));
  for (const bool pdl : {false, true}) {
    const float us = time_graph(s, [&] {
      for (int i = 0; i < kChain; ++i) launch_copy(pdl, buf[i & 1], buf[(i + 1) & 1], s);
    });
    std::printf("copy%s: %.1f us for %d kernels = %.2f us per kernel\n", pdl ? "+pdl" : "    ", us, kChain, us / kChain);
  }
  cublasLtHandle_t lt;
  LK(cublasLtCreate(&lt));
  void* ws;
  const size_t wsb = 4u << 20;
  CHECK(cudaMalloc(&ws, wsb));
  cublasLtMatmulDesc_t desc;
  LK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  LK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  LK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  cublasLtMatrixLayout_t la, lb, lc;
  LK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16F, 192, 768, 192));
  LK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16F, 192, kRows, kCols));
  LK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_16F, 768, kRows, 768));
  cublasLtMatmulPreference_t pref;
  LK(cublasLtMatmulPreferenceCreate(&pref));
  LK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb));
  cublasLtMatmulHeuristicResult_t r{};
  int found = 0;
  LK(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, lc, pref, 1, &r, &found));
  const float alpha = 1.f, beta = 0.f;
  auto gemm = [&](const __half* x) {
    LK(cublasLtMatmul(lt, desc, &alpha, w, la, x, lb, &beta, y, lc, y, lc, &r.algo, ws, wsb, s));
  };
  const float g = time_graph(s, [&] {
    for (int i = 0; i < kChain; ++i) gemm(buf[0]);
  });
  std::printf("gemm-tiny: %.1f us for %d kernels = %.2f us per GEMM\n", g, kChain, g / kChain);
  for (const bool pdl : {false, true}) {
    const float us = time_graph(s, [&] {
      for (int i = 0; i < kChain / 2; ++i) {
        gemm(buf[0]);
        launch_copy(pdl, y, buf[1], s);
      }
    });
    std::printf("alternate gemm, copy%s: %.1f us for %d pairs = %.2f us per pair\n", pdl ? "+pdl" : "", us, kChain / 2,
                us / (kChain / 2));
  }
  return 0;
}
