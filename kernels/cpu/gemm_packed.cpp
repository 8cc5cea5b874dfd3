// PackedLinear: y = epilogue(x W^T + b) through libxsmm's JIT GEMM kernels over weights re-laid out once
// at load (they never change), the way ONNX Runtime's MLAS packs its weights. linear_f32 (OpenBLAS) stays
// the default wherever libxsmm is not built in (EDGEVIT_LIBXSMM, x86-64 only) or cannot serve a shape.
//
// Layout: W (N, K) row-major becomes column blocks of col_block output features (auto_col_block: 48 or 64);
// block b (features [c0, c0 + w), w = col_block or the tail N % col_block) is stored as (K, w), i.e. W[c0:c0+w, :]^T, at
// the same byte range the block occupied before (c0 * K floats from the start): the packed weights fill
// exactly the planned weight slot, so the plan is the same with or without libxsmm.
// In libxsmm's column-major terms one tile computes C (w x mt) = A (w x K) B (K x mt) with A the packed
// block (lda = w), B = x rows [r0, r0 + mt) (ldb = K) and C = y[r0:r0+mt, c0:c0+w] (ldc = N).
//
// Variants and what they measured (tools/bench/gemm_bench.cpp, 16-core lent host, us per GEMM, 1 / 16
// threads; full table and caveats in docs/kernels-cpu-gemm.md):
//   ViT-Ti qkv 197x576x192: OpenBLAS tiles (linear_f32) 345 / 125, this (kept) 307 / 53,
//     oneDNN matmul with packed weights 401 / 52 (allocates 7x per execute: unusable in infer()),
//     BLIS 0.9 618 / 103
//   ViT-B fc2 197x768x3072: OpenBLAS 6996 / 1324, this 6265 / 1100 (K chunk 256; unchunked 6776 / 916)
// Serial runs of GEMMs with K > N (fc2) take the K chunks outermost (PackedTiling::k_outer), so each input
// chunk is read from L2 for every column block: on the 16-core host, one core, xsmm_tile_bench's whole fc2
// reaches 92.2% of the FMA peak with weights from L3 and 87.6% from DRAM with AL2 prefetch
// (docs/kernels-cpu-gemm.md).
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_math.h"
#include "kernels/cpu/kernels.h"

#if defined(EDGEVIT_HAVE_LIBXSMM)
#include <libxsmm.h>
#endif

namespace edgevit {

#if defined(EDGEVIT_HAVE_LIBXSMM)

namespace {

using SmmKernel = libxsmm_smmfunction;

// prefetch: LIBXSMM_GEMM_PREFETCH_AL2 gives a kernel called as f(a, b, c, pa, pb, pc) that prefetches pa (laid
// out like a) into L2 while it computes; its arithmetic is the plain kernel's.
SmmKernel dispatch(int w, int rows, int kk, int ldb_k, int ldc_n, float beta,
                   int prefetch = LIBXSMM_GEMM_PREFETCH_NONE) {
  const libxsmm_blasint lda = w, ldb = ldb_k, ldc = ldc_n;
  const float alpha = 1.f;
  const int flags = LIBXSMM_GEMM_FLAG_NONE;
  return libxsmm_smmdispatch(w, rows, kk, &lda, &ldb, &ldc, &alpha, &beta, &flags, &prefetch);
}

// The tile epilogue: y (h, bw; row stride ldy) += bias (bw), then GELU (erf or tanh form) as `ep` says. One call
// per tile, compiled for AVX-512 and AVX2+FMA (libxsmm needs AVX2): the bias add ran as baseline SSE2 before.
EV_ALWAYS_INLINE void tile_epilogue_body(float* y, int64_t ldy, const float* bias, int h, int bw, Epilogue ep) {
  for (int i = 0; i < h; ++i) {
    float* row = y + i * ldy;  // (bw)
    if (ep == Epilogue::kGelu) {
      cpu_detail::bias_gelu_body(row, bias, bw);
    } else if (ep == Epilogue::kGeluTanh) {
      cpu_detail::bias_gelu_tanh_body(row, bias, bw);
    } else if (ep == Epilogue::kQuickGelu) {
      cpu_detail::bias_quick_gelu(row, bias, bw);
    } else {
      for (int j = 0; j < bw; ++j) row[j] += bias[j];
    }
  }
}
EV_TARGET_AVX512 void tile_epilogue_avx512(float* y, int64_t ldy, const float* bias, int h, int bw, Epilogue ep) {
  if (ep == Epilogue::kGelu) {
    for (int i = 0; i < h; ++i) cpu_detail::bias_gelu_avx512(y + i * ldy, bias, bw);
  } else if (ep == Epilogue::kGeluTanh) {
    for (int i = 0; i < h; ++i) cpu_detail::bias_gelu_tanh_avx512(y + i * ldy, bias, bw);
  } else {
    tile_epilogue_body(y, ldy, bias, h, bw, ep);
  }
}
EV_TARGET_AVX2 void tile_epilogue_avx2(float* y, int64_t ldy, const float* bias, int h, int bw, Epilogue ep) {
  tile_epilogue_body(y, ldy, bias, h, bw, ep);
}

bool libxsmm_cpu_ok() {
  libxsmm_init();  // idempotent; detects the CPU
  return libxsmm_get_target_archid() >= LIBXSMM_X86_AVX2;
}

}  // namespace

bool cpu_packed_gemm_available() {
  static const bool ok = libxsmm_cpu_ok();
  return ok;
}

const char* cpu_gemm_library() {
  return cpu_packed_gemm_available() ? "libxsmm (JIT kernels, weights pre-packed at load)"
                                     : "OpenBLAS (libxsmm built in, but this CPU has no AVX2)";
}

std::string PackedLinear::init(float* w, int max_rows, int n, int k, Epilogue ep, PackedTiling tiling) {
  *this = PackedLinear();
  if (!cpu_packed_gemm_available()) return "libxsmm has no JIT target for this CPU (needs AVX2)";
  if (n <= 0 || k <= 0 || max_rows <= 0) return "empty GEMM (n, k or rows is 0)";
  if (tiling.col_block == 0) tiling.col_block = auto_col_block(n);
  if (tiling.col_block < 16 || tiling.col_block > 128 || tiling.col_block % 16 != 0 || tiling.tile_rows < 1 ||
      tiling.tile_rows > kMaxTileRows || tiling.k_chunk < 1)
    return "bad tiling (col_block " + std::to_string(tiling.col_block) + ", tile_rows " +
           std::to_string(tiling.tile_rows) + ", k_chunk " + std::to_string(tiling.k_chunk) + ")";
  col_block_ = tiling.col_block;
  const int k_chunk = tiling.k_chunk;
  const int kc = std::min(k, k_chunk), tail_k = k > kc ? k % kc : 0;
  const float first_beta = ep == Epilogue::kResidualAdd ? 1.f : 0.f;
  const int widths[2] = {n >= col_block_ ? col_block_ : 0, n % col_block_};
  const int chunks[2] = {kc, tail_k};
  const int tile_rows = n <= 4 * col_block_ ? std::max(1, tiling.tile_rows / 2) : tiling.tile_rows;
  // Every tile height 1..tile_rows, for the full and tail column width, the full and tail K chunk, the
  // first chunk's beta and the accumulating one: any row count up to max_rows (smaller batches too) then
  // runs without a JIT call in infer().
  for (int wi = 0; wi < 2; ++wi)
    for (int ci = 0; ci < 2; ++ci)
      for (int bi = 0; bi < 2; ++bi)
        for (int h = 1; h <= tile_rows; ++h) {
          if (widths[wi] == 0 || chunks[ci] == 0) continue;
          const SmmKernel f = dispatch(widths[wi], h, chunks[ci], k, n, bi == 0 ? first_beta : 1.f);
          if (f == nullptr)
            return "libxsmm could not generate a kernel for " + std::to_string(widths[wi]) + "x" + std::to_string(h) +
                   "x" + std::to_string(chunks[ci]);
          kernels_[wi][ci][bi][h] = reinterpret_cast<void*>(f);
        }
  // Only where a full block has a successor of the same layout and a full K chunk exists.
  if (tiling.prefetch_next_block && n >= 2 * col_block_ && k >= kc)
    for (int bi = 0; bi < 2; ++bi) {
      const SmmKernel f = dispatch(col_block_, tile_rows, kc, k, n, bi == 0 ? first_beta : 1.f,
                                   LIBXSMM_GEMM_PREFETCH_AL2);
      if (f == nullptr) return "libxsmm could not generate a prefetching kernel for " + std::to_string(col_block_) +
                               "x" + std::to_string(tile_rows) + "x" + std::to_string(kc);
      prefetch_kernels_[bi] = reinterpret_cast<void*>(f);
    }
  // Re-lay out each column block in place: it keeps its byte range, so one block of scratch suffices.
  std::vector<float> block(static_cast<size_t>(std::min(n, col_block_)) * k);  // load time, not infer()
  for (int c0 = 0; c0 < n; c0 += col_block_) {
    const int bw = std::min(col_block_, n - c0);
    float* dst = w + static_cast<int64_t>(c0) * k;  // (bw, K) row-major on entry, (K, bw) on exit
    std::memcpy(block.data(), dst, sizeof(float) * static_cast<size_t>(bw) * k);
    for (int i = 0; i < bw; ++i)
      for (int j = 0; j < k; ++j) dst[static_cast<int64_t>(j) * bw + i] = block[static_cast<size_t>(i) * k + j];
  }
  w_ = w;
  n_ = n;
  k_ = k;
  k_chunk_ = kc;
  max_rows_ = max_rows;
  tile_rows_ = tile_rows;
  k_outer_ = tiling.k_outer < 0 ? k > n : tiling.k_outer != 0;
  ep_ = ep;
  return "";
}

namespace {

// One run() call's tiles: the packed weights and JIT kernels (from the PackedLinear) and the call's operands
// and schedule. The functions are run()'s tile steps, unchanged; a tile's bits do not depend on the thread
// that runs it (one thread, fixed K order per tile).
struct PackedRun {
  const float* w;                                                 // packed weights
  void* const (*kernels)[2][2][PackedLinear::kMaxTileRows + 1];  // [wi][ci][bi][h], as PackedLinear::kernels_
  void* const* prefetch_kernels;                                  // [bi], as PackedLinear::prefetch_kernels_
  const float* x;                                                 // (M, K)
  const float* bias;                                              // (N) or nullptr
  float* y;                                                       // (M, N)
  int m, n, k, k_chunk, col_block, tr;
  int period, lead_rows, lead_blocks, periods, lead_tiles, row_tiles;
  bool prefetch, avx512, gelu;
  Epilogue tile_ep;

  // The first row tile of a block whose successor is a full block prefetches that successor's chunks into L2
  // (prefetch_next_block): the weights stream from L3 / DRAM once per inference, and without it each block's
  // first tile waits on them (~10% of the GEMM on Sapphire Rapids; docs/kernels-cpu-gemm.md).
  bool prefetches_next(int c0, int h) const {
    return prefetch && h == tr && c0 + 2 * col_block <= n && col_block >= PackedLinear::kMinRowSafeWidth;
  }
  // K chunk [k0, k0 + k_chunk) of the tile y[r0:r0+h, c0:c0+bw] (packed A chunk and x chunk stay in L1/L2): the
  // first chunk writes (or, for the residual epilogue, accumulates into) y, later chunks accumulate. pf: through
  // the AL2 kernel, prefetching the next block's same chunk (arithmetic of the plain kernel).
  void tile_chunk(int c0, int bw, int r0, int h, int k0, bool pf) const {
    const int wi = bw == col_block ? 0 : 1, ci = k - k0 >= k_chunk ? 0 : 1, bi = k0 == 0 ? 0 : 1;
    const float* a = w + static_cast<int64_t>(c0) * k + static_cast<int64_t>(k0) * bw;  // (kc, bw) packed chunk
    const float* xt = x + static_cast<int64_t>(r0) * k + k0;                              // (h, kc), row stride K
    float* yt = y + static_cast<int64_t>(r0) * n + c0;                                    // (h, bw), row stride N
    if (pf && ci == 0) {
      reinterpret_cast<SmmKernel>(prefetch_kernels[bi])(a, xt, yt, a + static_cast<int64_t>(col_block) * k, xt, yt);
    } else if (bw < PackedLinear::kMinRowSafeWidth && h > 1) {
      // A narrow column tail: libxsmm's kernels for 2..11 rows of one vector sum K in other chains than its
      // 1-row kernel, so a row's bits would depend on the tile it falls in (its place in the batch). Such a
      // tile runs row by row through the 1-row kernel (gemm_packed_test: RowBitsDoNotDependOnItsPlaceInTheBatch).
      const auto row_kernel = reinterpret_cast<SmmKernel>(kernels[wi][ci][bi][1]);
      for (int i = 0; i < h; ++i) row_kernel(a, xt + static_cast<int64_t>(i) * k, yt + static_cast<int64_t>(i) * n);
    } else {
      reinterpret_cast<SmmKernel>(kernels[wi][ci][bi][h])(a, xt, yt);
    }
  }
  // After a tile's last chunk: bias, then GELU where the epilogue says so (the residual epilogue's sum is
  // already in y: it adds the bias like kNone).
  void tile_epilogue(int c0, int bw, int r0, int h) const {
    if (!gelu && bias == nullptr) return;
    float* yt = y + static_cast<int64_t>(r0) * n + c0;
    if (avx512) {
      tile_epilogue_avx512(yt, n, bias ? bias + c0 : nullptr, h, bw, tile_ep);
    } else {
      tile_epilogue_avx2(yt, n, bias ? bias + c0 : nullptr, h, bw, tile_ep);
    }
  }
  // Tile t: the lead tiles first, then column block lead_blocks + t' / row_tiles, row tile t' % row_tiles.
  void tile(int t) const {
    int cb, r0, h;
    if (t < lead_tiles) {
      cb = t / periods;
      r0 = (t % periods) * period;
      h = lead_rows;
    } else {
      cb = lead_blocks + (t - lead_tiles) / row_tiles;
      const int rt = (t - lead_tiles) % row_tiles;
      r0 = rt * tr;
      h = std::min(tr, m - r0);
    }
    const int c0 = cb * col_block, bw = std::min(col_block, n - c0);
    const bool pf = t >= lead_tiles && r0 == 0 && prefetches_next(c0, h);
    for (int k0 = 0; k0 < k; k0 += k_chunk) tile_chunk(c0, bw, r0, h, k0, pf);  // fixed K order: deterministic
    tile_epilogue(c0, bw, r0, h);
  }
  // PackedTiling::k_outer: chunk-major order; each tile's K chunks still run first to last through the same
  // kernels, so its bits are those of tile(t). The epilogue follows a tile's last chunk. (No lead tiles.)
  void chunk_major() const {
    const int col_blocks = (n + col_block - 1) / col_block;
    for (int k0 = 0; k0 < k; k0 += k_chunk)
      for (int cb = 0; cb < col_blocks; ++cb) {
        const int c0 = cb * col_block, bw = std::min(col_block, n - c0);
        for (int rt = 0; rt < row_tiles; ++rt) {
          const int r0 = rt * tr, h = std::min(tr, m - r0);
          tile_chunk(c0, bw, r0, h, k0, r0 == 0 && prefetches_next(c0, h));
          if (k0 + k_chunk >= k) tile_epilogue(c0, bw, r0, h);
        }
      }
  }
};

}  // namespace

void PackedLinear::run(const float* x,     // (M, K)
                       const float* bias,  // (N) or nullptr
                       float* y,           // (M, N)
                       int m, int lead_cols, int period, int lead_rows) const {
  if (m <= 0 || w_ == nullptr) return;
  const int n = n_;
  const int col_blocks = (n + col_block_ - 1) / col_block_;
  const int tr = tile_rows_;
  const int row_tiles = (m + tr - 1) / tr;
  // Leading column blocks computed on the lead rows of each period only (see the header).
  const int lead_blocks = lead_block_count(m, lead_cols, period, lead_rows);
  const int periods = lead_blocks > 0 ? m / period : 0;
  const int lead_tiles = lead_blocks * periods;
  const int tiles = lead_tiles + (col_blocks - lead_blocks) * row_tiles;
  // Tile t (past the lead tiles): column block lead_blocks + t / row_tiles, row tile t % row_tiles. Chunks of
  // consecutive tiles give each thread runs mostly of one column block: its packed weights stay in cache.
  const bool avx512 = cpu_detail::use_avx512();
  // Tiles are handed out dynamically, in chunks of about a quarter of each thread's share: a thread that
  // the OS preempts (a shared host, a busy board) delays its current chunk only, not a fixed half of the GEMM.
  const int threads = omp_get_max_threads();
  const bool serial = threads <= 1 || tiles <= 1 || flops(m, lead_cols, period, lead_rows) < 2e6;
  const int chunk = std::max(1, tiles / (4 * threads));
  // Prefetching the next block pays when the thread that starts a block goes on to the next one: a chunk
  // spans at least a whole block. In a large team it would fill other threads' L2 with weights they skip.
  const bool prefetch = prefetch_kernels_[0] != nullptr && (serial || chunk >= row_tiles);
  const bool gelu = ep_ == Epilogue::kGelu || ep_ == Epilogue::kGeluTanh || ep_ == Epilogue::kQuickGelu;
  const PackedRun r{w_,     kernels_,  prefetch_kernels_, x,          bias,      y,
                    m,      n,         k_,                k_chunk_,   col_block_, tr,
                    period, lead_rows, lead_blocks,       periods,    lead_tiles, row_tiles,
                    prefetch, avx512,  gelu,              gelu ? ep_ : Epilogue::kNone};
  if (serial && k_outer_ && lead_tiles == 0) {
    r.chunk_major();
    return;
  }
  if (serial) {
    for (int t = 0; t < tiles; ++t) r.tile(t);
    return;
  }
  // Which thread computes a tile does not change its bits (one thread, fixed K order per tile).
#pragma omp parallel for schedule(dynamic, chunk)
  for (int t = 0; t < tiles; ++t) r.tile(t);
}

int PackedLinear::lead_block_count(int m, int lead_cols, int period, int lead_rows) const {
  const bool partial = lead_cols > 0 && period > 0 && lead_rows > 0 && lead_rows <= tile_rows_ && m % period == 0;
  return partial ? std::min(lead_cols, n_) / col_block_ : 0;
}

double PackedLinear::flops(int m, int lead_cols, int period, int lead_rows) const {
  const int lb = lead_block_count(m, lead_cols, period, lead_rows);
  const double lead_rows_run = lb > 0 ? static_cast<double>(m / period) * lead_rows : 0.0;
  return 2.0 * k_ * (lead_rows_run * lb * col_block_ + static_cast<double>(m) * (n_ - lb * col_block_));
}

#else  // !EDGEVIT_HAVE_LIBXSMM

bool cpu_packed_gemm_available() { return false; }
const char* cpu_gemm_library() { return "OpenBLAS"; }
std::string PackedLinear::init(float*, int, int, int, Epilogue, PackedTiling) {
  *this = PackedLinear();
  return "built without libxsmm";
}
void PackedLinear::run(const float*, const float*, float*, int, int, int, int) const {}
int PackedLinear::lead_block_count(int, int, int, int) const { return 0; }
double PackedLinear::flops(int, int, int, int) const { return 0.0; }

#endif

}  // namespace edgevit
