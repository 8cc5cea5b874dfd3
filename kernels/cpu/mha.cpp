// Attention on the CPU, fp32: mha_fused_f32 (online softmax, no Sq x Skv buffer) and mha_explicit_f32
// (S = scale Q K^T in scratch, row softmax, O = P V with OpenBLAS). With libxsmm built in, the fused
// kernel's two tile GEMMs run libxsmm's JIT kernels (generated at load by mha_fused_prepare).
//
// Fused: one task per (b, h, block of <= kQB queries; blocks of equal height), handed to the team in runs
// of consecutive tasks (up to one head's blocks) by a dynamic schedule. Per task, Q is copied (pre-scaled:
// the scale is applied once, to Q K^T) into a zero-padded (nqp, Dp) tile, Dp = D rounded up to kNR; for
// each block of keys, K^T (Dp, nkp) (and, on the V8 path, V (nk, Dp)) tiles are copied, the score tile is computed, the running max / sum are
// updated (fp32) and the accumulator is rescaled before adding P V. Key blocks of kKB (256), so ViT's
// 197 keys are one block (no rescaling) and a thread's K^T (and V tile) serves all the tasks of its run.
// libxsmm path: the tile GEMMs are JIT kernels; V8 path (no libxsmm: aarch64): kMR x kNR register-blocked
// loops. Tiles live on the running thread's stack (256 KB libxsmm, 384 KB V8), which is why head_dim is
// limited to kMhaFusedMaxHeadDim (the planner picks the explicit kernel above it).
// exp is cpu_math.h's vectorisable polynomial (glibc expf does not vectorise without -ffast-math).
// This file: the entry points, the fused kernel's ISA clones and its libxsmm preparation, and the explicit
// kernel; the fused kernel's tiles and task phases are in mha_tiles.h.
//
// Variants and one current figure each (BM_Mha in tests/kernels/kernels_bench.cpp, fused, 1 thread, on the
// 2-core AMD EPYC dev machine; more in docs/benchmarks.md):
//   libxsmm tiles with AVX-512 row max / exp / sum (x86-64 with EDGEVIT_LIBXSMM): ViT-Ti shape 325 us,
//     ViT-B shape (12 heads) 1338 us
//   V8 vector-extension 4x16 register blocks (builds without libxsmm, e.g. aarch64): ViT-Ti in-model, 12
//     layers, 5.07 ms
//   explicit (OpenBLAS sgemm per (b, h) + vectorised softmax): ViT-Ti shape 0.46 ms per layer
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cassert>
#include <cstdint>
#include <limits>

#include "kernels/cpu/cpu_math.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/mha_tiles.h"

namespace edgevit {
namespace {

EV_TARGET_AVX2 void fused_tasks_avx2(const AttnParams& p, const float* q, const float* k, const float* v,
                                     float* o, int t0, int t1) {
  fused_tasks_body<false, false, kKB, true>(p, q, k, v, o, t0, t1);
}
void fused_tasks_base(const AttnParams& p, const float* q, const float* k, const float* v, float* o, int t0,
                      int t1) {
  fused_tasks_body<false, false, kKB, true>(p, q, k, v, o, t0, t1);
}
#if defined(EDGEVIT_HAVE_LIBXSMM)
// libxsmm needs AVX2 (cpu_packed_gemm_available), so its clones are AVX-512 and AVX2: the softmax and
// copies around the tile GEMMs ran as SSE2 before (0.9 of 1.27 ms per ViT-Ti layer on an AVX-512 EPYC).
EV_TARGET_AVX512 void fused_tasks_xsmm_avx512(const AttnParams& p, const float* q, const float* k, const float* v,
                                              float* o, int t0, int t1) {
  fused_tasks_body<true, true, kKB, false>(p, q, k, v, o, t0, t1);
}
EV_TARGET_AVX2 void fused_tasks_xsmm_avx2(const AttnParams& p, const float* q, const float* k, const float* v,
                                          float* o, int t0, int t1) {
  fused_tasks_body<true, false, kKB, false>(p, q, k, v, o, t0, t1);
}
#endif

// The fused kernel's tile shapes for p: query blocks (nqp) x key blocks (nkp, nk) x dp. Calls
// f(nqp, nkp, nk, dp) once per distinct combination.
template <typename F>
void for_each_fused_tile_shape(const AttnParams& p, F f) {
  const int dp = round_up(p.head_dim, kNR);
  const int rows = query_block_rows(p.seq_q);
  int q_shapes[2] = {std::min(rows, p.seq_q), p.seq_q % rows};
  int k_shapes[2] = {std::min(kKB, p.seq_kv), p.seq_kv % kKB};
  for (int qi = 0; qi < 2; ++qi) {
    if (q_shapes[qi] == 0 || (qi == 1 && round_up(q_shapes[1], kMR) == round_up(q_shapes[0], kMR))) continue;
    for (int ki = 0; ki < 2; ++ki) {
      if (k_shapes[ki] == 0 || (ki == 1 && k_shapes[1] == k_shapes[0])) continue;
      f(round_up(q_shapes[qi], kMR), round_up(k_shapes[ki], kNR), k_shapes[ki], dp);
    }
  }
}

// True when libxsmm generated every tile kernel the fused kernel needs for p (generating them on the
// first call: later calls are lookups, allocation-free).
bool fused_xsmm_ready(const AttnParams& p) {
#if defined(EDGEVIT_HAVE_LIBXSMM)
  if (!cpu_packed_gemm_available()) return false;
  bool ok = true;
  for_each_fused_tile_shape(p, [&](int nqp, int nkp, int nk, int dp) {
    ok = ok && xsmm_rowmajor(nqp, nkp, dp, dp, nkp, nkp, 0.f) != nullptr &&
         xsmm_rowmajor(nqp, p.head_dim, nk, nkp, static_cast<int>(p.v.row), dp, 1.f) != nullptr;
  });
  return ok;
#else
  (void)p;
  return false;
#endif
}

// Softmax over each row of s (rows, n) with the key mask; a fully masked row becomes zeros.
EV_ALWAYS_INLINE void softmax_rows_body(float* s, const uint8_t* mask, int rows, int n) {
  for (int i = 0; i < rows; ++i) {
    float* row = s + static_cast<int64_t>(i) * n;
    const float mx = mask_and_max(row, mask, n);
    if (mx == -std::numeric_limits<float>::infinity()) {
      for (int j = 0; j < n; ++j) row[j] = 0.f;
      continue;
    }
    const float inv = 1.f / exp_and_sum(row, mx, n);
    for (int j = 0; j < n; ++j) row[j] *= inv;
  }
}

EV_TARGET_AVX512 void softmax_rows_avx512(float* s, const uint8_t* mask, int rows, int n) {
  softmax_rows_body(s, mask, rows, n);
}
EV_TARGET_AVX2 void softmax_rows_avx2(float* s, const uint8_t* mask, int rows, int n) {
  softmax_rows_body(s, mask, rows, n);
}
void softmax_rows_base(float* s, const uint8_t* mask, int rows, int n) { softmax_rows_body(s, mask, rows, n); }
void softmax_rows(float* s, const uint8_t* mask, int rows, int n) {
  if (cpu_detail::use_avx512()) {
    softmax_rows_avx512(s, mask, rows, n);
  } else if (cpu_detail::use_avx2()) {
    softmax_rows_avx2(s, mask, rows, n);
  } else {
    softmax_rows_base(s, mask, rows, n);
  }
}

// One (b, h) of the explicit kernel; s is a (Sq, Skv) slice of the scratch.
void explicit_head(const AttnParams& p, const float* q, const float* k, const float* v, float* o, float* s,
                   int b, int h, int softmax_threads) {
  const float* qb = q + b * p.q.batch + h * p.q.head;  // (Sq, D), row stride p.q.row
  const float* kb = k + b * p.k.batch + h * p.k.head;  // (Skv, D), row stride p.k.row
  const float* vb = v + b * p.v.batch + h * p.v.head;  // (Skv, D), row stride p.v.row
  float* ob = o + b * p.o.batch + h * p.o.head;        // (Sq, D), row stride p.o.row
  const uint8_t* mask = p.key_mask != nullptr ? p.key_mask + static_cast<int64_t>(b) * p.seq_kv : nullptr;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, p.seq_q, p.seq_kv, p.head_dim, p.scale, qb,
              static_cast<int>(p.q.row), kb, static_cast<int>(p.k.row), 0.f, s, p.seq_kv);
  if (softmax_threads > 1) {
    const int chunk = (p.seq_q + softmax_threads - 1) / softmax_threads;
#pragma omp parallel for num_threads(softmax_threads) schedule(static)
    for (int c = 0; c < softmax_threads; ++c) {
      const int r0 = c * chunk;
      const int r1 = std::min(p.seq_q, r0 + chunk);
      if (r0 < r1) softmax_rows(s + static_cast<int64_t>(r0) * p.seq_kv, mask, r1 - r0, p.seq_kv);
    }
  } else {
    softmax_rows(s, mask, p.seq_q, p.seq_kv);
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, p.seq_q, p.head_dim, p.seq_kv, 1.f, s, p.seq_kv, vb,
              static_cast<int>(p.v.row), 0.f, ob, static_cast<int>(p.o.row));
}

}  // namespace

void mha_fused_f32(const AttnParams& p, const float* q, const float* k, const float* v, float* o,
                   int threads) {
  if (p.batch <= 0 || p.heads <= 0 || p.seq_q <= 0 || p.head_dim <= 0) return;
  assert(p.head_dim <= kMaxD && "mha_fused_f32: head_dim above kMhaFusedMaxHeadDim (use mha_explicit_f32)");
  if (p.head_dim > kMaxD) {  // release builds: make the misuse visible instead of silently wrong
    for (int b = 0; b < p.batch; ++b)
      for (int h = 0; h < p.heads; ++h)
        for (int i = 0; i < p.seq_q; ++i)
          for (int t = 0; t < p.head_dim; ++t)
            o[b * p.o.batch + i * p.o.row + h * p.o.head + t] = std::numeric_limits<float>::quiet_NaN();
    return;
  }
  const int rows = query_block_rows(p.seq_q);
  const int tasks = p.batch * p.heads * ((p.seq_q + rows - 1) / rows);
  const bool xsmm = fused_xsmm_ready(p);
  const auto run = [&](int t0, int t1) {
#if defined(EDGEVIT_HAVE_LIBXSMM)
    if (xsmm && cpu_detail::use_avx512()) {
      fused_tasks_xsmm_avx512(p, q, k, v, o, t0, t1);
      return;
    }
    if (xsmm) {
      fused_tasks_xsmm_avx2(p, q, k, v, o, t0, t1);
      return;
    }
#endif
    if (cpu_detail::use_avx2()) {
      fused_tasks_avx2(p, q, k, v, o, t0, t1);
    } else {
      fused_tasks_base(p, q, k, v, o, t0, t1);
    }
  };
  (void)xsmm;
  if (threads <= 1 || tasks == 1) {  // no OpenMP region: libgomp allocates a team for every serialised region
    run(0, tasks);
    return;
  }
  // Runs of consecutive tasks (up to one head's query blocks: K^T copied once per run) are handed out
  // dynamically, so a preempted thread delays one run, not a fixed share; the bits of a task do not depend
  // on the thread that runs it. The team is the full `threads`, as in the GEMMs around it, even with fewer
  // tasks than threads: a team of another size makes libgomp resize its pool between the two regions.
  const int qblocks = (p.seq_q + rows - 1) / rows;
  const int chunk = std::max(1, std::min(qblocks, tasks / (2 * threads)));
  const int runs = (tasks + chunk - 1) / chunk;
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (int r = 0; r < runs; ++r) run(r * chunk, std::min(tasks, (r + 1) * chunk));
}

size_t mha_fused_stack_bytes() {
  return std::max(sizeof(FusedScratch<kKB, true>), sizeof(FusedScratch<kKB, false>));
}

bool mha_fused_prepare(const AttnParams& p) {
  if (p.batch <= 0 || p.heads <= 0 || p.seq_q <= 0 || p.head_dim <= 0 || p.head_dim > kMaxD) return false;
  return fused_xsmm_ready(p);
}

size_t mha_explicit_scratch_floats(const AttnParams& p, int threads) {
  return static_cast<size_t>(std::max(1, threads)) * static_cast<size_t>(std::max(0, p.seq_q)) *
         static_cast<size_t>(std::max(0, p.seq_kv));
}

void mha_explicit_f32(const AttnParams& p, const float* q, const float* k, const float* v, float* o,
                      float* scratch, int threads) {
  if (p.batch <= 0 || p.heads <= 0 || p.seq_q <= 0 || p.head_dim <= 0) return;
  const int heads = p.batch * p.heads;
  const size_t slice = static_cast<size_t>(p.seq_q) * p.seq_kv;
  // A multi-threaded OpenBLAS must not be called from several threads at once (its pthread server
  // serialises or oversubscribes): then (b, h) runs in order and OpenBLAS threads each GEMM. With a
  // single-threaded OpenBLAS, (b, h) is spread over `threads`, each thread on its own scratch slice.
  if (threads > 1 && openblas_get_num_threads() == 1 && heads > 1) {
    const int team = std::min(threads, heads);
#pragma omp parallel for num_threads(team) schedule(dynamic, 1)
    for (int t = 0; t < heads; ++t) {
      float* s = scratch + static_cast<size_t>(omp_get_thread_num()) * slice;
      explicit_head(p, q, k, v, o, s, t / p.heads, t % p.heads, 1);
    }
  } else {
    for (int t = 0; t < heads; ++t) explicit_head(p, q, k, v, o, scratch, t / p.heads, t % p.heads, threads);
  }
}

}  // namespace edgevit
