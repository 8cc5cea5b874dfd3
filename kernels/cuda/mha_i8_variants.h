// The INT8 fused-attention kernel table, as data, and its support predicate. Compiles without CUDA (no CUDA
// header), so a planner on a CPU-only host can ask whether a launch has an INT8 row and, if not, why, and fall
// back to the fp16 fused kernel (kernels/mha_variants.h) with that reason. The launcher is kernels/cuda/mha_i8.h;
// the design, the arithmetic and the error analysis are in docs/kernels-mha-i8.md.
//
// Inputs: Q and K int8 (symmetric, [-127, 127]) with fp32 scales, V fp16; output fp16.
//   logit(i, j) = scale * sq(i) * sk(j) * sum_d Q8[i, d] K8[j, d]     (the int32 sum is exact)
// Scales are addressed like the tensors (AttnI8Scales below): per (token, head) when their row stride is set,
// per (batch, head) or per tensor when it is 0. A per-key K scale costs one FADD and one FMUL per score; a K
// scale shared by every key of a (batch, head) costs nothing (it folds into the row's multiplier).
//
// Rows: flash_fwd_i8_d{D}_q{rows}_w{warps}_kv{keys}_s{stages}[_smax]. The _smax rows are TensorRT's
// use_int8_scale_max softmax: a fixed offset 127^2 * scale * sq(i) * sk (the logit of one maximal int8
// product) instead of the running row max. It saves the max and the rescaling, but the exponentials can
// overflow fp16 (a logit more than 16 log2 units, 11.1 natural, above the offset: the row becomes NaN/Inf)
// or underflow (every logit of a row more than 24 log2 units, 16.6 natural, below it: the row becomes
// zeros; precision degrades from 14 below); it needs a K scale shared by the row's keys.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/attn_params.h"

namespace edgevit {

enum class MhaI8Softmax {
  kRowMax,    // online softmax with the running row max (exact up to rounding for any logits)
  kScaleMax,  // fixed offset 127^2 * scale * sq * sk (TensorRT's use_int8_scale_max)
};

// Scales of the int8 Q and K: element (b, s, h) at q[b*qs.batch + s*qs.row + h*qs.head] (likewise k with ks,
// s < Skv). Device pointers for the CUDA launcher, host pointers for the reference. Each scale must be finite
// and >= 0 (the quantiser writes amax / 127); ks.row == 0 means one K scale per (batch, head) (all strides 0:
// one per tensor).
struct AttnI8Scales {
  const float* q = nullptr;
  AttnStrides qs;
  const float* k = nullptr;
  AttnStrides ks;
};

// Shared memory of an INT8 row: during the loop the int8 Q tile and `stages` int8 K tiles (rows of D + 16
// bytes, so that ldmatrix's 8 row addresses fall in distinct banks), `stages` fp16 V tiles (rows of D + 8
// halves) and `stages` tiles of per-key K scales (fp32); after it, the same memory stages the fp16 output tile
// (q_tile rows of D + 8 halves).
constexpr int64_t mha_i8_smem_bytes(int head_dim, int q_tile, int kv_tile, int stages) {
  const int64_t loop = static_cast<int64_t>(q_tile + stages * kv_tile) * (head_dim + 16) +
                       static_cast<int64_t>(stages) * kv_tile * ((head_dim + 8) * 2 + 4);
  const int64_t out = static_cast<int64_t>(q_tile) * (head_dim + 8) * 2;
  return loop > out ? loop : out;
}

struct MhaI8Variant {
  const char* name;
  int head_dim;
  MhaI8Softmax softmax;
  int min_sm;          // compute capability * 10 + minor (mma.sync m16n8k32 s8, ldmatrix, cp.async: SM80)
  int64_t smem_bytes;  // dynamic shared memory per block
  int threads;         // 32 per warp; each warp owns q_tile / warps query rows (16 or 32)
  int q_tile;          // query rows per block
  int kv_tile;         // keys per streamed K/V tile
  int stages;          // K/V buffers (2: cp.async double buffering)
};

#define EDGEVIT_MHA_I8_ROW(D, QT, W, KT, ST)                                                            \
  MhaI8Variant{"flash_fwd_i8_d" #D "_q" #QT "_w" #W "_kv" #KT "_s" #ST, D, MhaI8Softmax::kRowMax, 80, \
               mha_i8_smem_bytes(D, QT, KT, ST), W * 32, QT, KT, ST}
#define EDGEVIT_MHA_I8_ROW_SMAX(D, QT, W, KT, ST)                                                                \
  MhaI8Variant{"flash_fwd_i8_d" #D "_q" #QT "_w" #W "_kv" #KT "_s" #ST "_smax", D, MhaI8Softmax::kScaleMax, 80, \
               mha_i8_smem_bytes(D, QT, KT, ST), W * 32, QT, KT, ST}

// In order of preference per (head_dim, softmax): mha_i8_supports takes the first row that fits. The order is
// the fastest row at the largest grid measured per head dim with tools/gpu/bench_mha_i8.cu on an H100
// (docs/benchmarks.md, "INT8 fused attention"; docs/kernels-mha-i8.md): D = 64 B64 H12 S197 and S577..1370,
// D = 32 B64 H12 S197, D = 128 B32 H12 S197. On small grids (B1 H12 S197, B8 H3 S197, the Sq = 1 tail) the
// 16-row rows q64_w4_kv64 / q64_w4_kv32 were 5-25% faster than the first row: a caller that can time the rows
// at start-up (as the fp16 rows are tuned) should. Rows are kept for measurement on Orin.
inline constexpr MhaI8Variant kMhaI8Variants[] = {
    EDGEVIT_MHA_I8_ROW(64, 128, 4, 32, 2),       EDGEVIT_MHA_I8_ROW(64, 64, 4, 64, 2),
    EDGEVIT_MHA_I8_ROW(64, 64, 4, 32, 2),        EDGEVIT_MHA_I8_ROW(64, 64, 2, 32, 2),
    EDGEVIT_MHA_I8_ROW_SMAX(64, 128, 4, 32, 2),  EDGEVIT_MHA_I8_ROW_SMAX(64, 64, 4, 32, 2),
    EDGEVIT_MHA_I8_ROW_SMAX(64, 64, 4, 64, 2),
    EDGEVIT_MHA_I8_ROW(32, 128, 4, 32, 2),       EDGEVIT_MHA_I8_ROW(32, 64, 4, 32, 2),
    EDGEVIT_MHA_I8_ROW(32, 64, 4, 64, 2),        EDGEVIT_MHA_I8_ROW_SMAX(32, 64, 4, 32, 2),
    EDGEVIT_MHA_I8_ROW_SMAX(32, 64, 4, 64, 2),
    EDGEVIT_MHA_I8_ROW(128, 64, 4, 32, 2),       EDGEVIT_MHA_I8_ROW(128, 64, 4, 64, 2),
    EDGEVIT_MHA_I8_ROW_SMAX(128, 64, 4, 32, 2),  EDGEVIT_MHA_I8_ROW_SMAX(128, 64, 4, 64, 2),
};
#undef EDGEVIT_MHA_I8_ROW
#undef EDGEVIT_MHA_I8_ROW_SMAX

inline constexpr size_t kNumMhaI8Variants = sizeof(kMhaI8Variants) / sizeof(kMhaI8Variants[0]);

// Rows whose int8-output kernel is built (mha_i8_fused_i8out, with per-key K scales: the runtime's INT8 attention
// writing proj's int8 input): the row-max rows (the runtime does not use the scale-max softmax, which needs one
// K scale per (batch, head)).
constexpr bool mha_i8_row_has_i8out(const MhaI8Variant& v) { return v.softmax == MhaI8Softmax::kRowMax; }

// What a launch asks of the INT8 kernel.
struct MhaI8Request {
  int sm = 0;                    // compute capability * 10 + minor (87 for Orin)
  int64_t smem_optin_bytes = 0;  // cudaDevAttrMaxSharedMemoryPerBlockOptin (<= 0: the 48 KB default)
  int head_dim = 0;
  MhaI8Softmax softmax = MhaI8Softmax::kRowMax;
  bool per_key_k_scale = false;  // the K scale changes from key to key (AttnI8Scales::ks.row != 0)
  bool int8_output = false;      // mha_i8_fused_i8out: only rows with mha_i8_row_has_i8out (and per-key K scales)
};

struct MhaI8Support {
  bool ok = false;
  const MhaI8Variant* variant = nullptr;  // the row to launch when ok
  std::string reason;                     // one line: the row chosen, or why none (the fp16 fallback's reason)
};

// The first row of kMhaI8Variants that serves the request, or why none does. Any Sq and Skv are served.
inline MhaI8Support mha_i8_supports(const MhaI8Request& r) {
  MhaI8Support s;
  const char* mode = r.softmax == MhaI8Softmax::kScaleMax ? "int8 attention (scale-max softmax)"
                     : r.int8_output                     ? "int8 attention (int8 output)"
                                                         : "int8 attention";
  if (r.int8_output && (r.softmax != MhaI8Softmax::kRowMax || !r.per_key_k_scale)) {
    s.reason = std::string(mode) + ": built for the row-max softmax with per-key K scales only";
    return s;
  }
  if (r.softmax == MhaI8Softmax::kScaleMax && r.per_key_k_scale) {
    s.reason = std::string(mode) + ": the fixed softmax offset needs one K scale per (batch, head), got per-key K scales";
    return s;
  }
  const int64_t smem_limit = r.smem_optin_bytes > 0 ? r.smem_optin_bytes : 48 * 1024;
  bool dim_known = false;
  std::string why;
  for (const MhaI8Variant& v : kMhaI8Variants) {
    if (v.head_dim != r.head_dim || v.softmax != r.softmax || (r.int8_output && !mha_i8_row_has_i8out(v))) continue;
    dim_known = true;
    if (r.sm < v.min_sm) {
      why = "sm " + std::to_string(r.sm) + " < " + std::to_string(v.min_sm) + " (mma.sync m16n8k32 s8)";
      continue;
    }
    if (v.smem_bytes > smem_limit) {
      why = std::string(v.name) + " needs " + std::to_string(v.smem_bytes) + " B of shared memory > " +
            std::to_string(smem_limit);
      continue;
    }
    s.ok = true;
    s.variant = &v;
    s.reason = std::string(mode) + ": " + v.name;
    return s;
  }
  s.reason = std::string(mode) + ": " +
             (dim_known ? why
                        : "no row for head_dim " + std::to_string(r.head_dim) +
                              " (rows: 32, 64, 128)");
  return s;
}

}  // namespace edgevit
