// libedgevit_mha_bench.so: C entry points over the attention launchers of kernels/cuda/mha.h for
// tools/gpu/bench_mha.py (ctypes; device pointers come from torch tensors). Built by tools/gpu/make_bundle.sh.
// Tensors are (B, H, S, D) contiguous fp16, the layout torch's scaled_dot_product_attention prefers.
#include <cublasLt.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/mha.h"
#include "kernels/mha_variants.h"

namespace {

edgevit::AttnParams bhsd_params(int batch, int heads, int seq_q, int seq_kv, int head_dim, float scale) {
  edgevit::AttnParams p;
  p.batch = batch; p.heads = heads; p.seq_q = seq_q; p.seq_kv = seq_kv; p.head_dim = head_dim; p.scale = scale;
  auto bhsd = [&](int seq) {
    return edgevit::AttnStrides{static_cast<int64_t>(heads) * seq * head_dim, head_dim,
                                static_cast<int64_t>(seq) * head_dim};
  };
  p.q = p.o = bhsd(seq_q);
  p.k = p.v = bhsd(seq_kv);
  return p;
}

}  // namespace

extern "C" {

int edgevit_mha_variant_count() { return static_cast<int>(edgevit::kNumMhaVariants); }
const char* edgevit_mha_variant_name(int i) { return edgevit::kMhaVariants[i].name; }
int edgevit_mha_variant_head_dim(int i) { return edgevit::kMhaVariants[i].head_dim; }

// Resident blocks per SM of row i on the current device (occupancy calculator); -1 on error.
int edgevit_mha_variant_resident(int i) {
  int blocks = 0;
  return edgevit::mha_fused_resident_blocks(i, &blocks) == cudaSuccess ? blocks : -1;
}

// choose_mha's decision for the current device and this launch, written into buf (NUL-terminated, truncated
// to len).
int edgevit_mha_choice(int batch, int heads, int seq_q, int head_dim, char* buf, int len) {
  int device = 0, major = 0, minor = 0, optin = 0, sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return -1;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  const edgevit::MhaGrid grid{batch, heads, seq_q, sms};
  const edgevit::MhaChoice c = edgevit::choose_mha(major * 10 + minor, optin, head_dim, true, false, &grid);
  int n = 0;
  for (; n + 1 < len && c.reason[n] != '\0'; ++n) buf[n] = c.reason[n];
  if (len > 0) buf[n] = '\0';
  return c.fused ? static_cast<int>(c.variant - edgevit::kMhaVariants) : -1;
}

// Returns a cudaError_t value (0 = success). variant -1: the table's row (edgevit_mha_choice).
int edgevit_mha_fused_bhsd(int batch, int heads, int seq_q, int seq_kv, int head_dim, float scale, const void* q,
                           const void* k, const void* v, void* o, int variant, void* stream) {
  const edgevit::AttnParams p = bhsd_params(batch, heads, seq_q, seq_kv, head_dim, scale);
  if (variant < 0) variant = edgevit_mha_choice(batch, heads, seq_q, head_dim, nullptr, 0);
  if (variant < 0) return cudaErrorNotSupported;
  return edgevit::mha_fused_f16(p, static_cast<const __half*>(q), static_cast<const __half*>(k),
                                        static_cast<const __half*>(v), static_cast<__half*>(o), variant,
                                        static_cast<cudaStream_t>(stream));
}

int64_t edgevit_mha_unfused_workspace_bytes(int batch, int heads, int seq_q, int seq_kv, int head_dim) {
  return static_cast<int64_t>(
      edgevit::mha_unfused_workspace_bytes(bhsd_params(batch, heads, seq_q, seq_kv, head_dim, 1.f)));
}

// The cuBLASLt handle is created on first use and lives until the process ends.
int edgevit_mha_unfused_bhsd(int batch, int heads, int seq_q, int seq_kv, int head_dim, float scale, const void* q,
                             const void* k, const void* v, void* o, void* workspace, int64_t workspace_bytes,
                             void* stream) {
  static cublasLtHandle_t handle = nullptr;
  if (handle == nullptr && cublasLtCreate(&handle) != CUBLAS_STATUS_SUCCESS) return cudaErrorInitializationError;
  const edgevit::AttnParams p = bhsd_params(batch, heads, seq_q, seq_kv, head_dim, scale);
  return edgevit::mha_unfused_f16(p, static_cast<const __half*>(q), static_cast<const __half*>(k),
                                  static_cast<const __half*>(v), static_cast<__half*>(o), workspace,
                                  static_cast<size_t>(workspace_bytes), handle, static_cast<cudaStream_t>(stream));
}

}  // extern "C"
