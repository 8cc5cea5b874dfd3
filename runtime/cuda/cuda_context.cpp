#include "runtime/cuda/cuda_context.h"

#include <algorithm>

#include "runtime/cuda/cuda_status.h"

namespace edgevit {

CudaContext::CudaContext(const Plan& p, Arena& a, const EngineOptions& options)
    : ExecContext(p, a, options.fault),
      fp16(p.graph.act_elem_bytes() == 2),  // fp16 plans, and INT8 plans' other ops on CUDA
      tune_gemms(options.tune_gemms),
      tune_attention(options.tune_attention),
      force_lt_imma(options.force_lt_imma) {}

CudaContext::~CudaContext() {
  // Teardown ignores errors: there is nobody left to report them to.
  for (cudaEvent_t ev : tune_events)
    if (ev != nullptr) cudaEventDestroy(ev);
  if (lt != nullptr) cublasLtDestroy(lt);
  if (stream != nullptr) cudaStreamDestroy(stream);
}

Status CudaContext::open() {
  int dev = 0;
  EV_CUDA_CHECK("init", cudaGetDevice(&dev));
  EV_CUDA_CHECK("init", cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  EV_CUBLAS_CHECK("init", cublasLtCreate(&lt));
  int major = 0, minor = 0, optin = 0, sms = 0;
  EV_CUDA_CHECK("init", cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  EV_CUDA_CHECK("init", cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  EV_CUDA_CHECK("init", cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  EV_CUDA_CHECK("init", cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  sm = major * 10 + minor;
  smem_optin = optin;
  sm_count = std::max(sms, 1);
  if (tune_gemms || tune_attention)
    for (cudaEvent_t& ev : tune_events) EV_CUDA_CHECK("init", cudaEventCreate(&ev));
  if (tune_gemms) {
    int l2 = 0;
    EV_CUDA_CHECK("init", cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
    flush_bytes = std::min<int64_t>(2 * int64_t{l2}, plan.arena_bytes - kCudaLtWorkspaceBytes) / 16 * 16;
  }
  workspace = arena.tail(kCudaLtWorkspaceBytes);
  i8_workspace_bytes = plan.int8_split_workspace_bytes;
  if (i8_workspace_bytes > 0) {
    i8_workspace = arena.tail(kCudaLtWorkspaceBytes + i8_workspace_bytes);
    EV_CUDA_CHECK("init", cudaMemsetAsync(i8_workspace, 0, static_cast<size_t>(i8_workspace_bytes), stream));
    EV_CUDA_CHECK("init", cudaStreamSynchronize(stream));
  }
  return Status::Ok();
}

const AttentionLaunch* find_attention_launch(const CudaContext& ctx, int n, int64_t seq_q) {
  for (const AttentionLaunch& l : ctx.attention)
    if (l.choice.batch == n && l.choice.seq_q == seq_q) return &l;
  return nullptr;
}

}  // namespace edgevit
