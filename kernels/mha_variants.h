// The fused multi-head-attention kernel table, as data (TensorRT's sMhaKernelMetaInfos). Compiles without
// CUDA: the planner reads it to choose and explain attention kernels for boards it cannot query
// (`plan --device orin-nx-16gb` on a CPU-only host); the CUDA launcher (kernels/cuda/mha_fused.cu) reads the
// same rows and static_asserts that each instantiation's traits agree with its row.
//
// Rows are in order of preference; choose_mha() takes the first row that passes every filter and records,
// for each row it skips, why.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

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
  int threads;         // per block: 32 per warp, each warp owns 16 query rows
  int q_tile;          // query rows per block
  int kv_tile;         // keys per streamed K/V tile
  int stages;          // K/V buffers in shared memory (2 = cp.async double buffering)
};

// Default (opt-in) shared memory a block may use without cudaFuncSetAttribute.
constexpr int64_t kMhaDefaultSmemBytes = 48 * 1024;

#define EDGEVIT_MHA_ROW(D, QT, KT, ST)                                                              \
  MhaVariant{"flash_fwd_f16_d" #D "_q" #QT "_kv" #KT "_s" #ST, D, MhaDtype::kF16, 80, 0,           \
             mha_fused_smem_bytes(D, QT, KT, ST), (QT / 16) * 32, QT, KT, ST}

// Per head dim: 128-row tiles (8 warps; halves K/V shared-memory traffic per query; D = 128 needs the
// 163 KB opt-in of SM80/87/90), 64-row double-buffered tiles (<= 99 KB: SM86/89), and a single-buffer
// 64-row tile within the 48 KB default (32-key tiles for D = 128, whose padded rows would not fit).
inline constexpr MhaVariant kMhaVariants[] = {
    EDGEVIT_MHA_ROW(32, 128, 64, 2),  EDGEVIT_MHA_ROW(32, 64, 64, 2),  EDGEVIT_MHA_ROW(32, 64, 64, 1),
    EDGEVIT_MHA_ROW(64, 128, 64, 2),  EDGEVIT_MHA_ROW(64, 64, 64, 2),  EDGEVIT_MHA_ROW(64, 64, 64, 1),
    EDGEVIT_MHA_ROW(80, 128, 64, 2),  EDGEVIT_MHA_ROW(80, 64, 64, 2),  EDGEVIT_MHA_ROW(80, 64, 64, 1),
    EDGEVIT_MHA_ROW(96, 128, 64, 2),  EDGEVIT_MHA_ROW(96, 64, 64, 2),  EDGEVIT_MHA_ROW(96, 64, 64, 1),
    EDGEVIT_MHA_ROW(128, 128, 64, 2), EDGEVIT_MHA_ROW(128, 64, 64, 2), EDGEVIT_MHA_ROW(128, 64, 32, 1),
};
#undef EDGEVIT_MHA_ROW

inline constexpr size_t kNumMhaVariants = sizeof(kMhaVariants) / sizeof(kMhaVariants[0]);

struct MhaChoice {
  bool fused = false;
  const MhaVariant* variant = nullptr;  // a row of kMhaVariants when fused, else nullptr
  std::string reason;                   // one line: the decision and why each skipped row was skipped
};

// sm: compute capability * 10 + minor (87 for Orin). smem_optin_bytes: cudaDevAttrMaxSharedMemoryPerBlockOptin
// (0 or less: only the 48 KB default is usable). fp16: activations are fp16 (the fused kernels have no
// fp32 variant). force_unfused: configuration asks for the cuBLAS path.
MhaChoice choose_mha(int sm, int64_t smem_optin_bytes, int head_dim, bool fp16, bool force_unfused);

}  // namespace edgevit
