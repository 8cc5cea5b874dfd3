// CPU kernels (fp32). kernels/ computes; it knows nothing of YAML, files or plans.
// Every kernel `foo_f32` has a plain reference `foo_ref` of the same signature in kernels/cpu/*_ref.cpp
// (the simplest correct loop, accumulating in double) and a test in tests/kernels/ comparing them.
// No kernel allocates memory: all scratch is passed in (the planner accounts for it).
// Threading: kernels that parallelise take `threads` (>= 1); GEMMs use OpenBLAS, whose thread count is
// set once by cpu_init_threads() (1 under qemu: threaded OpenBLAS spins forever there).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/attn_params.h"

namespace edgevit {

// Sets OpenBLAS's thread count (and OpenMP's). Call at start-up, not per inference.
void cpu_init_threads(int threads);

// Fills OpenBLAS's per-caller buffer pool for `threads` concurrent GEMM callers (call once at start-up,
// after cpu_init_threads): afterwards infer() maps no new memory.
void cpu_prewarm_blas(int threads);

// The most stack any CPU kernel uses on a thread that runs it (the fused attention's tiles live there).
size_t cpu_kernel_stack_bytes();
// Touches `bytes` of stack below the caller's frame, a page at a time, so a kernel that later goes that deep
// neither faults pages in nor, on the process's main thread, whose [stack] mapping grows on demand, maps new
// memory in the middle of inference (the self-test's memory.no_new_mappings saw the main thread's stack grow by
// 120 KB on the first inference in which it ran an attention task itself). One store a page (112 for the
// kernels here): cheap enough for every infer(). With threads > 1, each thread of an OpenMP team of that size does
// the same (start-up).
void cpu_prefault_stack(size_t bytes, int threads = 1);

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
  kGeluTanh,     // y = gelu_tanh(x W^T + b)   (PyTorch's approximate='tanh'; SigLIP, timm gelu_tanh)
  kQuickGelu,    // y = quick_gelu(x W^T + b)  (x * sigmoid(1.702 x): OpenAI CLIP, timm/HF quick_gelu)
  kTanh,         // y = tanh(x W^T + b)        (HF ViTModel's pooler; linear_f32 and linear_ref only, not packed)
};

// y (M, N) = epilogue(x (M, K) @ w (N, K)^T + bias (N)). w is torch Linear layout. bias may be nullptr.
// For kResidualAdd y must not alias x.
void linear_f32(const float* x, const float* w, const float* bias, float* y, int m, int n, int k,
                Epilogue ep);
void linear_ref(const float* x, const float* w, const float* bias, float* y, int m, int n, int k,
                Epilogue ep);
// linear_ref's float64 arithmetic on `threads` threads (row ranges), bit-equal to it: the INT8 twin row
// cpu.linear_f64 (kernels/cpu/twin_f64.cpp, docs/int8.md "fp32 mode").
void linear_f64(const float* x, const float* w, const float* bias, float* y, int m, int n, int k, Epilogue ep,
                int threads);

// Pre-packed linear (kernels/cpu/gemm_packed.cpp): the same y = epilogue(x W^T + b) as linear_f32 through
// libxsmm's JIT kernels, with W re-laid out once at load. Built when EDGEVIT_LIBXSMM is on (x86-64).
// True when built with libxsmm and the CPU has a JIT target for it (AVX2 or newer).
bool cpu_packed_gemm_available();
// The GEMM library that serves linear layers in this build on this CPU, for the user.
const char* cpu_gemm_library();

// PackedLinear's tile geometry (tuning; docs/kernels-cpu-gemm.md). col_block 0 (the default) picks
// PackedLinear::auto_col_block(N); any other must be a multiple of 16 in [16, 128], tile_rows in
// [1, PackedLinear::kMaxTileRows] and k_chunk >= 1, else init() refuses it. A fixed geometry gives the same bits
// on every run, thread count and batch row. Between geometries the bits stay the same where N has no column tail
// (ViT's N are multiples of 48 and of 64): each output is then one K-ordered chain of FMAs. libxsmm's narrow tail
// kernels may use several chains, depending on the tile's height, so tails narrower than
// PackedLinear::kMinRowSafeWidth run row by row (gemm_packed_test: TilingChangesSpeedNotBits,
// RowBitsDoNotDependOnItsPlaceInTheBatch).
struct PackedTiling {
  int col_block = 0;   // output features per column block (the packed layout's unit); 0: auto_col_block(N)
  int tile_rows = 32;  // tokens per tile; halved when N <= 4 x col_block (more tiles for a large team)
  int k_chunk = 256;   // K extent of one kernel call
  // The first row tile of each column block runs libxsmm's AL2 kernels, which prefetch the next block's packed
  // weights into L2 while they compute (when each thread takes whole blocks: serial runs and small teams).
  // Speed only: the same FMAs in the same order.
  bool prefetch_next_block = true;
  // K chunks outermost in serial runs: for each chunk, every column block and row tile, so one K chunk of the
  // input (M x k_chunk) serves all the blocks from L2 where the whole input does not fit (ViT-B's fc2: 197 x 3072,
  // 2.4 MB, re-read from L3 for each of 16 column blocks otherwise), at the price of re-reading the output (M x N,
  // smaller) once per chunk. The first row tile of each (chunk, block) prefetches the next block's chunk (with
  // prefetch_next_block). -1 (auto): where K > N (the MLP's second GEMM), 0: never, 1: always. Speed only: the
  // same kernels and the same K order per output element, so the same bits. Not with lead rows (the class-token
  // tail's qkv runs the usual order). Figures: docs/benchmarks.md, docs/kernels-cpu-gemm.md.
  int k_outer = -1;
};

class PackedLinear {
 public:
  // One tile: 48 output features (three AVX-512 registers per token; 64 where 48 does not divide N) x up to 32
  // tokens (16 when N <= 4 column blocks: ViT-Ti's proj and fc2 then have 52 tiles instead of 28 for a 16-thread
  // team); tiles are the unit of OpenMP work and their bounds depend on the shape only, never on the thread
  // count, so results do not.
  // Why 48: on Sapphire Rapids libxsmm's 48-wide kernel (3 registers x 8 tokens) keeps more of the core's peak
  // than the 64-wide one (4 x 6), whose 64 KB weight chunk does not fit the 48 KB L1 (docs/kernels-cpu-gemm.md).
  // Where 48 does not divide N, 64: 48 could leave a tail narrower than kMinRowSafeWidth (vit-digits' N = 64
  // and 256), which runs row by row.
  static int auto_col_block(int n) { return n % 48 == 0 ? 48 : 64; }
  // Column tails narrower than this run row by row (their multi-row kernels sum K in height-dependent chains).
  static constexpr int kMinRowSafeWidth = 32;
  static constexpr int kTileRows = 32;
  static constexpr int kKChunk = 256;
  static constexpr int kMaxTileRows = 64;

  // Re-lays out w (N, K) in place (same bytes, a blocked layout only run() understands; w is not a
  // torch-layout weight afterwards) and generates the kernels for up to max_rows rows. The caller keeps
  // ownership of w, which must outlive this object. Returns "" on success, else why this GEMM cannot be
  // served (w is then unchanged and the caller uses linear_f32). Allocates; call at load, not per inference.
  std::string init(float* w, int max_rows, int n, int k, Epilogue ep, PackedTiling tiling = PackedTiling());
  bool ready() const { return w_ != nullptr; }
  int col_block() const { return col_block_; }  // the geometry init() chose
  bool k_outer() const { return k_outer_; }      // serial runs take K chunks outermost (PackedTiling::k_outer)
  // y (M, N) = epilogue(x (M, K) @ W^T + bias (N)), M <= max_rows; allocation-free; OpenMP's team.
  // Partial output (the class-token tail's qkv, whose attention reads the query of the first `lead_rows` rows
  // of each image only): with lead_cols > 0, the column blocks wholly below lead_cols are computed for rows
  // [p * period, p * period + lead_rows) of each period p only (lead_rows <= 32, M a multiple of period); the
  // other rows of those columns are left as they were. Every computed element is bit-identical to the full run.
  void run(const float* x, const float* bias, float* y, int m, int lead_cols = 0, int period = 0,
           int lead_rows = 0) const;
  // Multiply-add FLOPs (x2) that run() with the same arguments performs.
  double flops(int m, int lead_cols = 0, int period = 0, int lead_rows = 0) const;

 private:
  float* w_ = nullptr;   // (N, K) packed, not owned
  int n_ = 0, k_ = 0, k_chunk_ = 0, max_rows_ = 0, tile_rows_ = kTileRows, col_block_ = 64;
  bool k_outer_ = false;
  Epilogue ep_ = Epilogue::kNone;
  // Column blocks run() computes on the lead rows only (0: none; see run()).
  int lead_block_count(int m, int lead_cols, int period, int lead_rows) const;
  // JIT entry points: [full | tail column block][full | tail K chunk][first chunk | accumulate][tile rows]
  void* kernels_[2][2][2][kMaxTileRows + 1] = {};
  // The same for a full block, full K chunk and tile_rows_ rows, prefetching the next block's chunk into L2
  // (nullptr: no prefetch; PackedTiling::prefetch_next_block).
  void* prefetch_kernels_[2] = {};
};

static_assert(PackedTiling{}.col_block == 0 && PackedTiling{}.tile_rows == PackedLinear::kTileRows &&
                  PackedTiling{}.k_chunk == PackedLinear::kKChunk,
              "PackedTiling's defaults are PackedLinear's constants");

// y (M, C) = (x - mean) / sqrt(var + eps) * gamma + beta, statistics in fp32 or better. y may alias x.
void layernorm_f32(const float* x, const float* gamma, const float* beta, float* y, int m, int c,
                   float eps, int threads);
void layernorm_ref(const float* x, const float* gamma, const float* beta, float* y, int m, int c,
                   float eps, int threads);

// qk-norm (timm Attention qk_norm=True): LayerNorm over head_dim of every head's q (q_gamma, q_beta) and k (k_gamma,
// k_beta), in place on the packed qkv (rows, 3, H, D); v is left as it is. Statistics in fp32 or better.
void qk_norm_f32(float* qkv, const float* q_gamma, const float* q_beta, const float* k_gamma, const float* k_beta,
                 int rows, int heads, int head_dim, float eps, int threads);
void qk_norm_ref(float* qkv, const float* q_gamma, const float* q_beta, const float* k_gamma, const float* k_beta,
                 int rows, int heads, int head_dim, float eps, int threads);

// Exact GELU: 0.5 x (1 + erf(x / sqrt 2)), in place over n elements.
void gelu_f32(float* x, int64_t n, int threads);
void gelu_ref(float* x, int64_t n, int threads);
// Tanh-approximation GELU, PyTorch's F.gelu(x, approximate='tanh'): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715
// x^3))), in place over n elements. Large |x| saturates without overflow: x for x > 0, -0 for x < 0.
void gelu_tanh_f32(float* x, int64_t n, int threads);
void gelu_tanh_ref(float* x, int64_t n, int threads);
// QuickGELU (OpenAI CLIP): x * sigmoid(1.702 x), in place over n elements.
void quick_gelu_f32(float* x, int64_t n, int threads);
void quick_gelu_ref(float* x, int64_t n, int threads);

// Patch extraction for the patch-embedding GEMM.
// img (B, C, img_h, img_w) NCHW, each side a multiple of patch; cols (B * P, C * p * p) with
// P = (img_h / p) * (img_w / p), patches in row-major grid order (grid_w patches per row), each patch
// flattened as (c, ky, kx) to match Conv2d weight (E, C, p, p).
void im2col_patches_f32(const float* img, float* cols, int batch, int chans, int img_h, int img_w, int patch);
void im2col_patches_ref(const float* img, float* cols, int batch, int chans, int img_h, int img_w, int patch);

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
// The first `count` tokens of x (B, T, E), count <= T: concat == false averages them into out (B, E) (DeiT
// distilled's pre_logits: (x[:, 0] + x[:, 1]) / 2); concat == true copies them into out (B, count * E).
void pool_prefix_f32(const float* x, float* out, int batch, int tokens, int embed, int count, bool concat);
void pool_prefix_ref(const float* x, float* out, int batch, int tokens, int embed, int count, bool concat);

// Resampling of 8-bit images as Pillow's Image.resize does it (kernels/cpu/resample.cpp): the filters and
// their support, the scratch resize_u8 needs, and the resize of an (H, W, C) interleaved image with C in
// 1..4 into (out_h, out_w, C), channels independent (Pillow's L and RGB; Pillow premultiplies RGBA first).
// resize_u8 equals Pillow 12's Image.resize bit for bit (horizontal pass first; Pillow 13 may run the
// vertical one first); resize_u8_ref (double weights, each pass rounded to 8 bits) is within one level of it.
// scratch: resize_u8_scratch_bytes(...) bytes, 8-byte aligned; the caller owns it.
enum class ResampleFilter { kBilinear, kBicubic };
double resample_filter_support(ResampleFilter f);
double resample_filter(ResampleFilter f, double x);
size_t resize_u8_scratch_bytes(int in_w, int in_h, int out_w, int out_h, int chans, ResampleFilter f);
void resize_u8(const uint8_t* src, int in_w, int in_h, int chans, uint8_t* dst, int out_w, int out_h,
               ResampleFilter f, void* scratch);
void resize_u8_ref(const uint8_t* src, int in_w, int in_h, int chans, uint8_t* dst, int out_w, int out_h,
                   ResampleFilter f);

// Position-embedding grid resize as torch's F.interpolate(mode='bicubic', align_corners=False, size=(out_h,
// out_w)) does it, in double, float in and out (load time only):
//   antialias == false (HF DINOv2's interpolate_pos_encoding): per axis source coordinate
//     (dst + 0.5) * in / out - 0.5, Keys cubic a = -0.75 over the 4 nearest samples, indices clamped;
//   antialias == true (timm's resample_abs_pos_embed as checkpoint_filter_fn calls it): Pillow's windows,
//     Keys cubic a = -0.5 widened by max(1, in / out), cut at the border, weights normalised.
// src (in_h * in_w, embed) row-major tokens; dst (out_h * out_w, embed).
void resample_pos_embed_bicubic(const float* src, int in_h, int in_w, int embed, float* dst, int out_h, int out_w,
                                bool antialias);

// Non-finite values (NaN, +-Inf) in x[0, n): how many, and the index of the first (-1: none).
int64_t count_nonfinite_f32(const float* x, int64_t n);
int64_t count_nonfinite_ref(const float* x, int64_t n);
int64_t first_nonfinite_f32(const float* x, int64_t n);

// Attention, fused: tiled over keys with an online (running-max) softmax in fp32; no Sq x Skv buffer.
// Serves head_dim <= kMhaFusedMaxHeadDim (its tiles live on the stack); use the explicit kernel above.
constexpr int kMhaFusedMaxHeadDim = 128;
void mha_fused_f32(const AttnParams& p, const float* q, const float* k, const float* v, float* o,
                   int threads);
// With libxsmm (cpu_packed_gemm_available()), generates the JIT tile kernels mha_fused_f32 uses for p's
// shapes, so that inference only looks them up (call at load: it allocates). Returns true when the
// libxsmm tiles will serve p; false: the portable V8 tiles do (always correct, slower on AVX-512).
bool mha_fused_prepare(const AttnParams& p);
// The stack one thread of mha_fused_f32 uses for its tiles (the largest of its code paths).
size_t mha_fused_stack_bytes();
// Attention, explicit: S = scale Q K^T into scratch, softmax (fp32 statistics), O = S V.
// scratch holds mha_explicit_scratch_floats(p, threads) floats (the planner reserves it).
size_t mha_explicit_scratch_floats(const AttnParams& p, int threads);
void mha_explicit_f32(const AttnParams& p, const float* q, const float* k, const float* v, float* o,
                      float* scratch, int threads);
// Reference: the simplest loop, double accumulation.
void mha_ref(const AttnParams& p, const float* q, const float* k, const float* v, float* o, int threads);
// Reference of the CUDA fused attention's int8 output (kernels/cuda/mha.h mha_fused_f16_i8out): mha_ref, then
// each output element o becomes rne(o / o_scale) saturated to [-127, 127] (gemm_i8_quantize_ref, an IEEE
// division: quantize_i8_ref.h's rule). o: int8 codes at p.o's strides (elements); o_scale > 0.
void mha_i8out_ref(const AttnParams& p, const float* q, const float* k, const float* v, float o_scale, int8_t* o);
// mha_ref's float64 arithmetic on `threads` threads ((image, head) slices), bit-equal to it: the INT8 twin
// row cpu.mha_f64 (kernels/cpu/twin_f64.cpp, docs/int8.md "fp32 mode").
void mha_f64(const AttnParams& p, const float* q, const float* k, const float* v, float* o, int threads);

}  // namespace edgevit
