// CPU kernels (fp32). kernels/ computes; it knows nothing of YAML, files or plans.
// Every kernel `foo_f32` has a plain reference `foo_ref` of the same signature in kernels/cpu/*_ref.cpp
// (the simplest correct loop, accumulating in double) and a test in tests/kernels/ comparing them.
// No kernel allocates memory: all scratch is passed in (the planner accounts for it).
// Threading: kernels that parallelise take `threads` (>= 1); GEMMs use OpenBLAS, whose thread count is
// set once by cpu_init_threads() (1 under qemu: threaded OpenBLAS spins forever there).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/attn_params.h"

namespace edgevit {

// Sets OpenBLAS's thread count (and OpenMP's). Call at start-up, not per inference.
void cpu_init_threads(int threads);

// Fills OpenBLAS's per-caller buffer pool for `threads` concurrent GEMM callers (call once at start-up,
// after cpu_init_threads): afterwards infer() maps no new memory.
void cpu_prewarm_blas(int threads);

// OpenBLAS's kernel family for this CPU ("SkylakeX", "Haswell", "Prescott", ...).
const char* cpu_blas_core();
// When OpenBLAS fell back to an old generic kernel on a CPU that has AVX2/AVX-512, the
// OPENBLAS_CORETYPE value that would serve it ("SkylakeX" or "Haswell"); else nullptr. OpenBLAS reads
// that variable only when it is loaded, so the command-line tools re-execute themselves with it set.
const char* cpu_blas_better_coretype();

enum class Epilogue {
  kNone,         // y = x W^T + b
  kGelu,         // y = gelu_erf(x W^T + b)
  kResidualAdd,  // y = y + x W^T + b          (y holds the residual stream on entry; in place)
};

// y (M, N) = epilogue(x (M, K) @ w (N, K)^T + bias (N)). w is torch Linear layout. bias may be nullptr.
// For kResidualAdd y must not alias x.
void linear_f32(const float* x, const float* w, const float* bias, float* y, int m, int n, int k,
                Epilogue ep);
void linear_ref(const float* x, const float* w, const float* bias, float* y, int m, int n, int k,
                Epilogue ep);

// y (M, C) = (x - mean) / sqrt(var + eps) * gamma + beta, statistics in fp32 or better. y may alias x.
void layernorm_f32(const float* x, const float* gamma, const float* beta, float* y, int m, int c,
                   float eps, int threads);
void layernorm_ref(const float* x, const float* gamma, const float* beta, float* y, int m, int c,
                   float eps, int threads);

// Exact GELU: 0.5 x (1 + erf(x / sqrt 2)), in place over n elements.
void gelu_f32(float* x, int64_t n, int threads);
void gelu_ref(float* x, int64_t n, int threads);

// Patch extraction for the patch-embedding GEMM.
// img (B, C, Hi, Wi) NCHW with Hi = Wi = img_size; cols (B * P, C * p * p) with P = (img/p)^2, patches in
// row-major grid order, each patch flattened as (c, ky, kx) to match Conv2d weight (E, C, p, p).
void im2col_patches_f32(const float* img, float* cols, int batch, int chans, int img_size, int patch);
void im2col_patches_ref(const float* img, float* cols, int batch, int chans, int img_size, int patch);

// Builds the token sequence x (B, T, E), T = prefix + P, prefix = cls (0/1) + reg tokens, from
// patch_tokens (B, P, E), cls (E) or nullptr, reg (R, E) or nullptr, pos (L, E):
//   no_embed_class: x = cat(cls, reg, patches + pos)          (L == P)
//   otherwise:      x = cat(cls, reg, patches) + pos          (L == T)
void assemble_tokens_f32(const float* patch_tokens, const float* cls, const float* reg, int reg_tokens,
                         const float* pos, bool no_embed_class, float* x, int batch, int num_patches,
                         int embed);
void assemble_tokens_ref(const float* patch_tokens, const float* cls, const float* reg, int reg_tokens,
                         const float* pos, bool no_embed_class, float* x, int batch, int num_patches,
                         int embed);

// Pooling over x (B, T, E) into out (B, E): avg == false takes token 0; avg == true averages tokens
// [prefix, T).
void pool_f32(const float* x, float* out, int batch, int tokens, int embed, bool avg, int prefix);
void pool_ref(const float* x, float* out, int batch, int tokens, int embed, bool avg, int prefix);

// Attention, fused: tiled over keys with an online (running-max) softmax in fp32; no Sq x Skv buffer.
// Serves head_dim <= kMhaFusedMaxHeadDim (its tiles live on the stack); use the explicit kernel above.
constexpr int kMhaFusedMaxHeadDim = 128;
void mha_fused_f32(const AttnParams& p, const float* q, const float* k, const float* v, float* o,
                   int threads);
// Attention, explicit: S = scale Q K^T into scratch, softmax (fp32 statistics), O = S V.
// scratch holds mha_explicit_scratch_floats(p, threads) floats (the planner reserves it).
size_t mha_explicit_scratch_floats(const AttnParams& p, int threads);
void mha_explicit_f32(const AttnParams& p, const float* q, const float* k, const float* v, float* o,
                      float* scratch, int threads);
// Reference: the simplest loop, double accumulation.
void mha_ref(const AttnParams& p, const float* q, const float* k, const float* v, float* o, int threads);

}  // namespace edgevit
