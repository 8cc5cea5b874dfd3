// CUDA kernels for everything in the ViT forward besides the GEMMs (cuBLASLt, runtime/backend_cuda.cpp)
// and fp16 attention (kernels/cuda/mha.h). Each has a CPU reference of the same meaning in kernels/cpu/
// (*_ref.cpp) and a test in tests/kernels/ops_cuda_test.cu. Host-compilable: includers need only the CUDA
// runtime API header; __half is forward-declared.
//
// Conventions: every pointer is a device pointer, or a host pointer from cudaHostAlloc(cudaHostAllocMapped)
// where noted (the backend's input and output staging; on Jetson this is zero-copy shared DRAM). Every
// function only enqueues work on `stream` (so it can be captured in a CUDA graph) and returns the launch's
// error; the caller keeps ownership of every buffer. Arithmetic is fp32 whatever the storage type: fp16
// values are widened on load and rounded once (round to nearest) on store.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/attn_params.h"

struct __half;

namespace edgevit::gpu {

// dst[i] = src[i] (n elements) with a type change. src may be mapped host memory (input staging), dst too
// (output staging).
cudaError_t cast_f32_to_f16(const float* src, __half* dst, int64_t n, cudaStream_t stream);
cudaError_t cast_f16_to_f32(const __half* src, float* dst, int64_t n, cudaStream_t stream);
cudaError_t copy_f32(const float* src, float* dst, int64_t n, cudaStream_t stream);
// The output casts: as above, and *nonfinite (device-visible, e.g. mapped host memory; the caller zeroes it
// before the forward) grows by the number of NaN/Inf values written. Meaning: count_nonfinite_ref.
cudaError_t cast_f16_to_f32_count_nonfinite(const __half* src, float* dst, int64_t n, unsigned* nonfinite,
                                            cudaStream_t stream);
cudaError_t copy_f32_count_nonfinite(const float* src, float* dst, int64_t n, unsigned* nonfinite,
                                     cudaStream_t stream);

// Patch extraction (meaning of im2col_patches_ref): img (B, C, img_h, img_w) NCHW -> cols (B * P, C * p * p),
// P = (img_h / p) * (img_w / p) patches in row-major grid order, each flattened as (c, ky, kx).
// cudaErrorInvalidValue when a side is not a multiple of the patch.
cudaError_t im2col_patches_f32(const float* img, float* cols, int batch, int chans, int img_h, int img_w,
                               int patch, cudaStream_t stream);
cudaError_t im2col_patches_f32_to_f16(const float* img, __half* cols, int batch, int chans, int img_h, int img_w,
                                      int patch, cudaStream_t stream);
cudaError_t im2col_patches_f16(const __half* img, __half* cols, int batch, int chans, int img_h, int img_w,
                               int patch, cudaStream_t stream);

// Token sequence (meaning of assemble_tokens_ref): x (B, T, E) from patch_tokens (B, P, E), cls (E) or
// nullptr, reg (R, E) or nullptr, pos (P, E) when no_embed_class else (T, E).
cudaError_t assemble_tokens_f32(const float* patch_tokens, const float* cls, const float* reg, int reg_tokens,
                                const float* pos, bool no_embed_class, float* x, int batch, int num_patches,
                                int embed, cudaStream_t stream);
cudaError_t assemble_tokens_f16(const __half* patch_tokens, const __half* cls, const __half* reg, int reg_tokens,
                                const __half* pos, bool no_embed_class, __half* x, int batch, int num_patches,
                                int embed, cudaStream_t stream);

// LayerNorm over the last dim (meaning of layernorm_ref): y (M, C) = (x - mean) / sqrt(var + eps) * gamma +
// beta. Statistics in fp32, two passes (mean, then the mean of squared deviations), so fp16 rows with
// |x| near 6e4 neither overflow (x^2 would, in fp16) nor lose the variance to cancellation. y may alias x.
cudaError_t layernorm_f32(const float* x, const float* gamma, const float* beta, float* y, int m, int c,
                          float eps, cudaStream_t stream);
cudaError_t layernorm_f16(const __half* x, const __half* gamma, const __half* beta, __half* y, int m, int c,
                          float eps, cudaStream_t stream);

// Exact GELU 0.5 x (1 + erf(x / sqrt 2)) in place over n elements (the fp32 path: cuBLASLt's GELU
// epilogue is the tanh approximation, up to 4.7e-4 away, too far for the fp32 end-to-end tolerance).
cudaError_t gelu_f32(float* x, int64_t n, cudaStream_t stream);

// Tanh-approximation GELU (meaning of gelu_tanh_ref; PyTorch's F.gelu(x, approximate='tanh'), SigLIP's
// gelu_pytorch_tanh, timm's gelu_tanh): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), in place over n
// elements, fp32 math (fp16 values widened on load, rounded once on store). gelu_tanh_f32 is the fp32 plans'
// path after a bias-only GEMM epilogue; gelu_tanh_f16 serves a GEMM that runs without a fused epilogue.
// cuBLASLt's CUBLASLT_EPILOGUE_GELU and CUBLASLT_EPILOGUE_GELU_BIAS compute this same tanh form (not the erf
// GELU: hence gelu_f32 above), so for tanh-GELU models the fused cuBLASLt epilogue is the same function; how
// close its own arithmetic comes to gelu_tanh_ref is not measured here.
cudaError_t gelu_tanh_f32(float* x, int64_t n, cudaStream_t stream);
cudaError_t gelu_tanh_f16(__half* x, int64_t n, cudaStream_t stream);

// QuickGELU (meaning of quick_gelu_ref; OpenAI CLIP, timm/HF quick_gelu): x * sigmoid(1.702 x), in place over
// n elements, fp32 math (kernels/cuda/ops_quick_gelu.cu). cuBLASLt has no such epilogue: the linear row runs
// its bias epilogue, then this.
cudaError_t quick_gelu_f32(float* x, int64_t n, cudaStream_t stream);
cudaError_t quick_gelu_f16(__half* x, int64_t n, cudaStream_t stream);

// tanh in place over n elements, fp32 math (kernels/cuda/ops_tanh.cu; meaning of linear_ref's Epilogue::kTanh):
// HF ViTModel's pooler, after a bias-only GEMM epilogue.
cudaError_t tanh_f32(float* x, int64_t n, cudaStream_t stream);
cudaError_t tanh_f16(__half* x, int64_t n, cudaStream_t stream);

// Pooling (meaning of pool_ref): out (B, E) = x[:, 0, :] (avg == false) or the mean of tokens [prefix, T)
// (accumulated in fp32).
cudaError_t pool_f32(const float* x, float* out, int batch, int tokens, int embed, bool avg, int prefix,
                     cudaStream_t stream);
cudaError_t pool_f16(const __half* x, __half* out, int batch, int tokens, int embed, bool avg, int prefix,
                     cudaStream_t stream);

// The first `count` tokens of x (B, T, E) (meaning of pool_prefix_ref; kernels/cuda/ops_families.cu):
// concat == false: their mean, out (B, E), accumulated in fp32; concat == true: out (B, count * E), copied.
cudaError_t pool_prefix_f32(const float* x, float* out, int batch, int tokens, int embed, int count, bool concat,
                            cudaStream_t stream);
cudaError_t pool_prefix_f16(const __half* x, __half* out, int batch, int tokens, int embed, int count, bool concat,
                            cudaStream_t stream);

// qk-norm (meaning of qk_norm_ref; kernels/cuda/ops_families.cu): LayerNorm over head_dim of each head's q and k
// in place on qkv (rows, 3, H, D), v untouched; fp32 statistics, two passes.
cudaError_t qk_norm_f32(float* qkv, const float* q_gamma, const float* q_beta, const float* k_gamma,
                        const float* k_beta, int rows, int heads, int head_dim, float eps, cudaStream_t stream);
cudaError_t qk_norm_f16(__half* qkv, const __half* q_gamma, const __half* q_beta, const __half* k_gamma,
                        const __half* k_beta, int rows, int heads, int head_dim, float eps, cudaStream_t stream);

// fp32 attention for fp32 plans (the fp16 launchers of kernels/cuda/mha.h have no fp32 variant), meaning of
// mha_ref over the strided layouts of AttnParams (key_mask honoured; a row with no valid key yields zeros).
// One block per (b, h, query row) holds the query and its Skv scores in shared memory, so it needs no
// workspace; Skv + head_dim <= kMhaF32MaxSmemFloats (cudaErrorInvalidValue otherwise). Plain fp32 FMAs, no
// tensor cores (no TF32): exact enough for the 1e-5 kernel tolerance; fp32 plans are the accuracy path.
constexpr int kMhaF32MaxSmemFloats = 48 * 1024 / 4;
cudaError_t mha_f32(const AttnParams& p, const float* q, const float* k, const float* v, float* o,
                    cudaStream_t stream);

// *acc ^= the XOR of the 32-bit words of src (bytes a multiple of 16, src 16-byte aligned; otherwise
// cudaErrorInvalidValue). Its use is the reading: the backend streams part of the arena through L2 with it
// before each timed GEMM run, so the GEMM meets the cache state of a forward pass, not its own last run.
cudaError_t xor_fold_u32(const void* src, int64_t bytes, uint32_t* acc, cudaStream_t stream);

}  // namespace edgevit::gpu
