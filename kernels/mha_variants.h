// The fused multi-head-attention kernel table, as data (TensorRT's sMhaKernelMetaInfos). Compiles without
// CUDA: the planner reads it to choose and explain attention kernels for boards it cannot query
// (`plan --device orin-nx-16gb` on a CPU-only host); the CUDA launcher (kernels/cuda/mha_fused.cu) reads the
// same rows and static_asserts that each instantiation's traits agree with its row.
//
// Rows are in order of preference; choose_mha() takes the first row that passes every filter and records,
// for each row it skips, why. A row may be limited to a range of grid sizes (blocks per SM, from batch x heads
// x ceil(Sq / q_tile) over the SM count): the rows that win only on large or only on tiny grids come first,
// each with its window, and the general rows follow. The order and the windows come from
// tools/gpu/bench_mha.py on an H100 (the measurements are recorded in docs/journal/mha-history.md, the
// resulting table and its reasons in docs/kernels-mha.md), for D = 64:
//   q16_w4_kv128_s2_ks4 first for launches of at most 16 query rows (the class-token tail's one query per
//     image and head), whatever the grid: one 16-row group whose 4 warps split the keys (the grid-sized rows
//     ran 1 valid row in blocks of 128: 33.5 us for ViT-B/16 batch 64's tail).
//   q64_w4_kv32_s2_qs (16-row warps, Q re-read, 95 registers, 5 blocks = 20 warps per SM) for the middle
//     grids, from half to 3 of its blocks per SM: B8 H12 S197 10.7 vs 11.9 us for q128_w4_kv32_s2_qs, B8 H3
//     7.0 vs 8.0 for the split-KV row; it loses at B1 H12 (0.36 blocks/SM: 6.4 vs 5.3) and from ~3 up
//     (measured over several batches: B2 H12 S1025, 3.09 blocks/SM, 37.3 vs 31.4; B4 H12 S577, 3.64, 24.3 vs 20.7;
//     B64 H12 S197 50.8 vs 48.0). The CUDA backend also times the eligible rows at start-up
//     (EngineOptions::tune_attention), so these windows are the untimed default and the planner's forecast.
//   q128_w4_kv32_s2_qs (32-row warps, Q re-read, 162 registers on sm_90, 3 blocks/SM) from 1 of its blocks
//     per SM up: B64 H12 S197 49.3 vs 60.8 for q64_w4_kv64_s2, B16 H6 S577 47.6 vs 49.9.
//   q32_w8_kv128_s2_ks4 (split-KV: 4 warps per 16 query rows, each a quarter of every K/V tile) below 2 of
//     its blocks per SM: B1 H12 S197 5.8 us vs 8.3 for q64_w4_kv128 and 8.0 for cuDNN.
//   q64_w4_kv128 below 1 block per SM (the tiny grids' row before the split-KV rows), then the general rows,
//     q64_w4_kv64_s2 first: with the grid known, an H100 reaches them only where every window declines.
// Other rows are kept for re-measurement on Orin, whose 8-16 SMs see much larger grids per SM. Other head
// dims follow D = 64's general row (not yet measured).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace edgevit {

enum class MhaDtype { kF16 };

// Shared memory of the fused kernel: Q tile (q_tile rows) plus `stages` buffers of K and V (kv_tile rows
// each), every row padded by 8 halves (16 bytes) so that ldmatrix's 8 row addresses fall in distinct banks.
constexpr int64_t mha_fused_smem_bytes(int head_dim, int q_tile, int kv_tile, int stages) {
  return static_cast<int64_t>(q_tile + 2 * stages * kv_tile) * (head_dim + 8) * 2;
}

struct MhaVariant {
  const char* name;
  int head_dim;
  MhaDtype dtype;
  int min_sm;          // compute capability * 10 + minor (80 = SM80)
  int max_sm;          // inclusive; 0 = no upper bound
  int64_t smem_bytes;  // dynamic shared memory per block
  int threads;         // per block: 32 per warp; each warp owns q_tile / warps rows (16 or 32)
  int q_tile;          // query rows per block
  int kv_tile;         // keys per streamed K/V tile
  int stages;          // K/V buffers in shared memory (2 = cp.async double buffering)
  bool q_smem;         // Q fragments re-read from shared memory every K/V tile instead of held in registers
  int kv_split;        // warps sharing the same query rows, each taking 1/kv_split of every K/V tile's keys
                       // (combined through shared memory at the end); 1 = each warp its own rows, all keys
  double min_blocks_per_sm;  // grid window: the row serves only grids of >= this many blocks per SM (0: any)
  double max_blocks_per_sm;  // ... and < this many (0: no upper bound)
  int max_seq_q = 0;         // the row serves only launches of at most this many query rows (0: any)
};

// Default (opt-in) shared memory a block may use without cudaFuncSetAttribute.
constexpr int64_t kMhaDefaultSmemBytes = 48 * 1024;

#define EDGEVIT_MHA_ROW(D, QT, W, KT, ST)                                                          \
  MhaVariant{"flash_fwd_f16_d" #D "_q" #QT "_w" #W "_kv" #KT "_s" #ST, D, MhaDtype::kF16, 80, 0,    \
             mha_fused_smem_bytes(D, QT, KT, ST), W * 32, QT, KT, ST, false, 1, 0.0, 0.0}
// The same with Q fragments re-read from shared memory (name suffix _qs): ldmatrix traffic rises by
// 1/(kv_tile/8) per MMA, registers fall by 16 per m16 tile, so 32-row warps keep more warps resident.
#define EDGEVIT_MHA_ROW_QS(D, QT, W, KT, ST)                                                               \
  MhaVariant{"flash_fwd_f16_d" #D "_q" #QT "_w" #W "_kv" #KT "_s" #ST "_qs", D, MhaDtype::kF16, 80, 0,    \
             mha_fused_smem_bytes(D, QT, KT, ST), W * 32, QT, KT, ST, true, 1, 0.0, 0.0}
// Split-KV rows (name suffix _ks{KS}): KS warps share each 16 query rows, each taking 1/KS of every K/V tile
// (its slice); their partial (max, sum, O) are combined through shared memory at the end. A warp's chain of
// dependent work is KS times shorter: for grids too small to fill the GPU (ViT at batch 1 on an H100:
// B1 H12 S197 has 48 blocks of 64 rows for 132 SMs), not for grids that fill it.
#define EDGEVIT_MHA_ROW_KS(D, QT, W, KT, ST, KS)                                                               \
  MhaVariant{"flash_fwd_f16_d" #D "_q" #QT "_w" #W "_kv" #KT "_s" #ST "_ks" #KS, D, MhaDtype::kF16, 80, 0,    \
             mha_fused_smem_bytes(D, QT, KT, ST), W * 32, QT, KT, ST, false, KS, 0.0, 0.0}
// A row limited to grids of [MIN, MAX) blocks per SM (0: unbounded).
#define EDGEVIT_MHA_WINDOW(ROW, MIN, MAX) \
  [] {                                      \
    MhaVariant v = ROW;                     \
    v.min_blocks_per_sm = MIN;              \
    v.max_blocks_per_sm = MAX;              \
    return v;                               \
  }()

// A row limited to launches of at most N query rows (the class-token tail: Sq = 1).
#define EDGEVIT_MHA_QUERIES(ROW, N) \
  [] {                              \
    MhaVariant v = ROW;             \
    v.max_seq_q = N;                \
    return v;                       \
  }()

// Rows: (head_dim, q_tile, warps, kv_tile, stages). A warp owns q_tile / warps query rows (16 or 32: two
// m16 tiles share every K/V fragment, halving shared-memory reads per MMA, at the price of registers, so
// only for D <= 64). The last row of each head dim is a single-buffer 64-row tile within the 48 KB default
// (32-key tiles for D = 128, whose padded rows would not fit); the others need the opt-in (<= 99 KB,
// so SM86/89 take them too, except D = 128 with 128-row tiles).
inline constexpr MhaVariant kMhaVariants[] = {
    EDGEVIT_MHA_ROW(32, 64, 4, 64, 2),   EDGEVIT_MHA_ROW(32, 128, 4, 64, 2),  EDGEVIT_MHA_ROW(32, 64, 4, 64, 1),
    EDGEVIT_MHA_QUERIES(EDGEVIT_MHA_ROW_KS(64, 16, 4, 128, 2, 4), 16),
    EDGEVIT_MHA_WINDOW(EDGEVIT_MHA_ROW_QS(64, 64, 4, 32, 2), 0.5, 3.0),
    EDGEVIT_MHA_WINDOW(EDGEVIT_MHA_ROW_QS(64, 128, 4, 32, 2), 1.0, 0.0),
    EDGEVIT_MHA_WINDOW(EDGEVIT_MHA_ROW_KS(64, 32, 8, 128, 2, 4), 0.0, 2.0),
    EDGEVIT_MHA_WINDOW(EDGEVIT_MHA_ROW(64, 64, 4, 128, 2), 0.0, 1.0),
    EDGEVIT_MHA_ROW(64, 64, 4, 64, 2),   EDGEVIT_MHA_ROW(64, 128, 8, 64, 2),  EDGEVIT_MHA_ROW(64, 128, 4, 64, 2),
    EDGEVIT_MHA_ROW(64, 64, 4, 64, 1),   EDGEVIT_MHA_ROW_QS(64, 128, 4, 64, 2), EDGEVIT_MHA_ROW(64, 128, 4, 32, 2),
    EDGEVIT_MHA_ROW_QS(64, 64, 2, 32, 2), EDGEVIT_MHA_ROW_QS(64, 64, 2, 64, 2),
    EDGEVIT_MHA_ROW_KS(64, 16, 4, 256, 1, 4),
    EDGEVIT_MHA_ROW_KS(64, 16, 2, 64, 2, 2),
    EDGEVIT_MHA_ROW(80, 64, 4, 64, 2),   EDGEVIT_MHA_ROW(80, 128, 8, 64, 2),  EDGEVIT_MHA_ROW(80, 64, 4, 64, 1),
    EDGEVIT_MHA_ROW(96, 64, 4, 64, 2),   EDGEVIT_MHA_ROW(96, 128, 8, 64, 2),  EDGEVIT_MHA_ROW(96, 64, 4, 64, 1),
    EDGEVIT_MHA_ROW(128, 64, 4, 64, 2),  EDGEVIT_MHA_ROW(128, 128, 8, 64, 2), EDGEVIT_MHA_ROW(128, 64, 4, 32, 1),
};
#undef EDGEVIT_MHA_ROW
#undef EDGEVIT_MHA_ROW_QS
#undef EDGEVIT_MHA_ROW_KS
#undef EDGEVIT_MHA_WINDOW
#undef EDGEVIT_MHA_QUERIES

// Workspace of the unfused path (kernels/cuda/mha_unfused.cu), one batch element at a time:
// fp32 scores (H, Sq, Skv) then fp16 probabilities (H, Sq, Skv), each 256-byte aligned. Here, not in the
// CUDA code alone, so a CPU-only planner reserves exactly what the launcher will check for.
constexpr int64_t kMhaWorkspaceAlign = 256;
constexpr int64_t mha_unfused_workspace_bytes_for(int heads, int seq_q, int seq_kv) {
  const int64_t n = static_cast<int64_t>(heads) * seq_q * seq_kv;
  const auto align = [](int64_t v) { return (v + kMhaWorkspaceAlign - 1) / kMhaWorkspaceAlign * kMhaWorkspaceAlign; };
  return align(n * 4) + align(n * 2);
}

inline constexpr size_t kNumMhaVariants = sizeof(kMhaVariants) / sizeof(kMhaVariants[0]);

struct MhaChoice {
  bool fused = false;
  const MhaVariant* variant = nullptr;  // a row of kMhaVariants when fused, else nullptr
  std::string reason;                   // one line: the decision and why each skipped row was skipped
};

// The launch a choice is for: grid rows (blocks per SM) are judged from it.
struct MhaGrid {
  int batch = 0;
  int heads = 0;
  int seq_q = 0;
  int sm_count = 0;  // multiprocessors of the device (the profile's sm_count for boards not present)
};
// Blocks per SM a row's grid would put on the device: batch x heads x ceil(seq_q / q_tile) / sm_count.
double mha_blocks_per_sm(const MhaVariant& row, const MhaGrid& grid);

// sm: compute capability * 10 + minor (87 for Orin). smem_optin_bytes: cudaDevAttrMaxSharedMemoryPerBlockOptin
// (0 or less: only the 48 KB default is usable). fp16: activations are fp16 (the fused kernels have no
// fp32 variant). force_unfused: configuration asks for the cuBLAS path. grid: the launch; without it (or with
// sm_count <= 0) rows limited to a grid window are skipped and the general rows decide.
MhaChoice choose_mha(int sm, int64_t smem_optin_bytes, int head_dim, bool fp16, bool force_unfused,
                     const MhaGrid* grid = nullptr);

// Every row that can run on this device at this head_dim, whatever the launch: dtype, SM range and shared
// memory only. Grid windows and query-count limits are the table's forecast of speed, not limits of the
// kernel, so they do not filter here. In table order. The CUDA backend times these at start-up
// (EngineOptions::tune_attention) and keeps choose_mha's row unless another is measurably faster.
std::vector<const MhaVariant*> mha_eligible_rows(int sm, int64_t smem_optin_bytes, int head_dim);

}  // namespace edgevit
