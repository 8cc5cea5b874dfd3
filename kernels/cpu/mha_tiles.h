// Private to kernels/cpu/mha.cpp (internal linkage; include it from that file only): the fused CPU attention
// kernel's tile machinery. Tile sizes, the V8 register-blocked tile GEMMs, the row softmax pieces (also used
// by the explicit kernel), the AVX-512 transposes and row reductions, one thread's scratch tiles, and one
// task's phases: load Q, copy K^T (and V), S = Q K^T, the online softmax over the score rows, O += P V,
// normalise and store. The design and the variants are described at the top of mha.cpp.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>

#include "kernels/cpu/cpu_math.h"
#include "kernels/cpu/kernels.h"

#if defined(EDGEVIT_HAVE_LIBXSMM)
#include <libxsmm.h>
#endif

namespace edgevit {
namespace {

constexpr int kQB = 64;     // queries per task
constexpr int kKB = 256;    // keys per tile (one pass for up to 256 keys)
constexpr int kMR = 4;      // register block rows
constexpr int kNR = 16;     // register block columns
constexpr int kMaxD = kMhaFusedMaxHeadDim;

inline int round_up(int x, int m) { return (x + m - 1) / m * m; }

#if defined(EDGEVIT_HAVE_LIBXSMM)
// Row-major C (rows, cols) = A (rows, kk) B (kk, cols) + beta C through a libxsmm JIT kernel (column
// major: C^T = B^T A^T, so the kernel is called as f(B, A, C)). Leading dimensions are row-major strides.
// A registry lookup once generated (mha_fused_prepare generates them at load); nullptr if libxsmm cannot.
libxsmm_smmfunction xsmm_rowmajor(int rows, int cols, int kk, int lda_rm, int ldb_rm, int ldc_rm, float beta) {
  const libxsmm_blasint lda = ldb_rm, ldb = lda_rm, ldc = ldc_rm;
  const float alpha = 1.f;
  const int flags = LIBXSMM_GEMM_FLAG_NONE;
  const int prefetch = LIBXSMM_GEMM_PREFETCH_NONE;
  return libxsmm_smmdispatch(cols, rows, kk, &lda, &ldb, &ldc, &alpha, &beta, &flags, &prefetch);
}
#endif

// 8 floats in GCC/clang's generic vector extension: one ymm with AVX2, two xmm (SSE2) or q registers
// (NEON) otherwise; this gives the register blocking without intrinsics.
typedef float V8 __attribute__((vector_size(32)));
// (Passed by reference: a V8 by value trips GCC's -Wpsabi note in the baseline clone.)
EV_ALWAYS_INLINE void load8(V8& v, const float* p) { std::memcpy(&v, p, sizeof v); }
EV_ALWAYS_INLINE void store8(float* p, const V8& v) { std::memcpy(p, &v, sizeof v); }

// s (rows, ncols) = q (rows, dp) @ kt (dp, ncols); rows % kMR == 0, ncols % kNR == 0.
EV_ALWAYS_INLINE void tile_qk(const float* __restrict q, const float* __restrict kt, float* __restrict s,
                              int rows, int dp, int ncols) {
  static_assert(kNR == 16, "two V8 per register-block row");
  for (int i = 0; i < rows; i += kMR)
    for (int j = 0; j < ncols; j += kNR) {
      V8 acc[kMR][2] = {};
      for (int d = 0; d < dp; ++d) {
        V8 k0, k1;
        load8(k0, kt + d * ncols + j);
        load8(k1, kt + d * ncols + j + 8);
        for (int r = 0; r < kMR; ++r) {
          const float a = q[(i + r) * dp + d];
          acc[r][0] += a * k0;
          acc[r][1] += a * k1;
        }
      }
      for (int r = 0; r < kMR; ++r) {
        store8(s + (i + r) * ncols + j, acc[r][0]);
        store8(s + (i + r) * ncols + j + 8, acc[r][1]);
      }
    }
}

// o (rows, dp) += p (rows, pstride)[:, :nk] @ v (nk, dp); rows % kMR == 0, dp % kNR == 0.
EV_ALWAYS_INLINE void tile_pv(const float* __restrict p, int pstride, const float* __restrict v,
                              float* __restrict o, int rows, int nk, int dp) {
  for (int i = 0; i < rows; i += kMR)
    for (int d0 = 0; d0 < dp; d0 += kNR) {
      V8 acc[kMR][2];
      for (int r = 0; r < kMR; ++r) {
        load8(acc[r][0], o + (i + r) * dp + d0);
        load8(acc[r][1], o + (i + r) * dp + d0 + 8);
      }
      for (int j = 0; j < nk; ++j) {
        V8 v0, v1;
        load8(v0, v + j * dp + d0);
        load8(v1, v + j * dp + d0 + 8);
        for (int r = 0; r < kMR; ++r) {
          const float a = p[(i + r) * pstride + j];
          acc[r][0] += a * v0;
          acc[r][1] += a * v1;
        }
      }
      for (int r = 0; r < kMR; ++r) {
        store8(o + (i + r) * dp + d0, acc[r][0]);
        store8(o + (i + r) * dp + d0 + 8, acc[r][1]);
      }
    }
}

// Masks row (n) in place (mask (n) bytes or nullptr: 0 -> -inf).
EV_ALWAYS_INLINE void apply_mask(float* __restrict row, const uint8_t* __restrict mask, int n) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  if (mask != nullptr)
    for (int j = 0; j < n; ++j) row[j] = mask[j] != 0 ? row[j] : neg_inf;
}

// Max of row (n). kNR independent running maxima, so the loop vectorises (a single max chain over the row
// stays scalar and costs about a third of the fused kernel's own time).
EV_ALWAYS_INLINE float max_of(const float* __restrict row, int n) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  float lane[kNR];
  for (int c = 0; c < kNR; ++c) lane[c] = neg_inf;
  const int body = n / kNR * kNR;
  for (int j = 0; j < body; j += kNR)
    for (int c = 0; c < kNR; ++c) lane[c] = row[j + c] > lane[c] ? row[j + c] : lane[c];
  float mx = neg_inf;
  for (int j = body; j < n; ++j) mx = row[j] > mx ? row[j] : mx;
  for (int c = 0; c < kNR; ++c) mx = lane[c] > mx ? lane[c] : mx;
  return mx;
}

// Masks row (n) in place and returns its max.
EV_ALWAYS_INLINE float mask_and_max(float* __restrict row, const uint8_t* __restrict mask, int n) {
  apply_mask(row, mask, n);
  return max_of(row, n);
}

// row (n) <- exp(row - mx); returns the sum (kNR independent partial sums, so it vectorises).
EV_ALWAYS_INLINE float exp_and_sum(float* __restrict row, float mx, int n) {
  float acc[kNR] = {};
  const int body = n / kNR * kNR;
  for (int j = 0; j < body; j += kNR)
    for (int c = 0; c < kNR; ++c) {
      const float e = cpu_detail::exp_approx(row[j + c] - mx);
      row[j + c] = e;
      acc[c] += e;
    }
  float sum = 0.f;
  for (int j = body; j < n; ++j) {
    const float e = cpu_detail::exp_approx(row[j] - mx);
    row[j] = e;
    sum += e;
  }
  for (int c = 0; c < kNR; ++c) sum += acc[c];
  return sum;
}

// Query blocks: ceil(Sq / kQB) blocks of equal height (a multiple of kMR), the last one shorter, so that
// a static split of the tasks is balanced (197 queries: 52, 52, 52, 41 rather than 64, 64, 64, 5). Depends
// on the shape only, never on the thread count: outputs are bit-identical across thread counts.
int query_block_rows(int seq_q) {
  const int blocks = (seq_q + kQB - 1) / kQB;
  return round_up((seq_q + blocks - 1) / blocks, kMR);
}

#if EV_HAVE_AVX2_CLONE
// dst (16 rows, stride ld_dst) = src (16 rows, stride ld_src)^T for a 16 x 16 float block, in registers:
// 32-bit and 64-bit interleaves, then two rounds of 128-bit lane shuffles. The fused kernel's K^T copy
// with it: 16 loads and 16 stores per 256 floats instead of 256 scalar stores, each to another cache line.
EV_TARGET_AVX512 inline void transpose16_avx512(const float* src, int64_t ld_src, float* dst, int64_t ld_dst) {
  // (maskz_ forms with full masks: GCC 12's unmasked ones warn about their undefined source operand.)
  const __mmask16 kAll = 0xFFFF;
  const __mmask8 kAll8 = 0xFF;
  __m512 r[16], t[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(src + i * ld_src);
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_maskz_unpacklo_ps(kAll, r[i], r[i + 1]);
    t[i + 1] = _mm512_maskz_unpackhi_ps(kAll, r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_castpd_ps(_mm512_maskz_unpacklo_pd(kAll8, _mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
    r[i + 1] = _mm512_castpd_ps(_mm512_maskz_unpackhi_pd(kAll8, _mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
    r[i + 2] = _mm512_castpd_ps(_mm512_maskz_unpacklo_pd(kAll8, _mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
    r[i + 3] = _mm512_castpd_ps(_mm512_maskz_unpackhi_pd(kAll8, _mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
  }
  // r[4g + k] now holds, in its 128-bit lane L, column 4L + k of rows 4g .. 4g + 3.
  for (int k = 0; k < 4; ++k) {
    t[k] = _mm512_maskz_shuffle_f32x4(kAll, r[k], r[4 + k], 0x88);
    t[4 + k] = _mm512_maskz_shuffle_f32x4(kAll, r[k], r[4 + k], 0xdd);
    t[8 + k] = _mm512_maskz_shuffle_f32x4(kAll, r[8 + k], r[12 + k], 0x88);
    t[12 + k] = _mm512_maskz_shuffle_f32x4(kAll, r[8 + k], r[12 + k], 0xdd);
  }
  for (int k = 0; k < 4; ++k) {
    r[k] = _mm512_maskz_shuffle_f32x4(kAll, t[k], t[8 + k], 0x88);
    r[8 + k] = _mm512_maskz_shuffle_f32x4(kAll, t[k], t[8 + k], 0xdd);
    r[4 + k] = _mm512_maskz_shuffle_f32x4(kAll, t[4 + k], t[12 + k], 0x88);
    r[12 + k] = _mm512_maskz_shuffle_f32x4(kAll, t[4 + k], t[12 + k], 0xdd);
  }
  for (int i = 0; i < 16; ++i) _mm512_storeu_ps(dst + i * ld_dst, r[i]);
}
#endif

#if EV_HAVE_AVX2_CLONE
// Horizontal max / sum of 16 lanes (GCC 12's _mm512_reduce_* and unmasked max warn about undefined sources).
EV_TARGET_AVX512 inline float hmax16(__m512 v) {
  __m256 a = _mm256_max_ps(_mm512_maskz_extractf32x8_ps(0xFF, v, 0), _mm512_maskz_extractf32x8_ps(0xFF, v, 1));
  __m128 b = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  b = _mm_max_ps(b, _mm_movehl_ps(b, b));
  b = _mm_max_ss(b, _mm_movehdup_ps(b));
  return _mm_cvtss_f32(b);
}
EV_TARGET_AVX512 inline float hsum16(__m512 v) {
  __m256 a = _mm256_add_ps(_mm512_maskz_extractf32x8_ps(0xFF, v, 0), _mm512_maskz_extractf32x8_ps(0xFF, v, 1));
  __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  b = _mm_add_ps(b, _mm_movehl_ps(b, b));
  b = _mm_add_ss(b, _mm_movehdup_ps(b));
  return _mm_cvtss_f32(b);
}

// One score row's softmax numerator on AVX-512 for keys [0, nk) of a tile row padded to whole vectors:
// row_max_avx512 returns max(init, row[0..nk)) (NaN scores are skipped, as in max_of); exp_sum_avx512 writes
// exp(row - mx) over [0, nk) and returns the sum. The padded lanes [nk, nkp) are masked, neither read nor
// written (the P V GEMM reads nk columns). exp is exp_approx_avx512: the same polynomial as exp_approx,
// its round and 2^n as vrndscaleps and vscalefps; the compiler-vectorised exp_and_sum spent ~20 zmm
// instructions per 16 exps against ~14 here.
EV_TARGET_AVX512 inline float row_max_avx512(const float* row, int nk, float init) {
  const __mmask16 all = 0xFFFF;
  __m512 m = _mm512_set1_ps(init);
  int j = 0;
  for (; j + 16 <= nk; j += 16) m = _mm512_maskz_max_ps(all, _mm512_loadu_ps(row + j), m);
  if (j < nk) {
    const __mmask16 tail = static_cast<__mmask16>((1u << (nk - j)) - 1u);
    m = _mm512_mask_max_ps(m, tail, _mm512_maskz_loadu_ps(tail, row + j), m);
  }
  return hmax16(m);
}

EV_TARGET_AVX512 inline float exp_sum_avx512(float* row, int nk, float mx) {
  const __m512 m = _mm512_set1_ps(mx);
  __m512 sum = _mm512_setzero_ps();
  int j = 0;
  for (; j + 16 <= nk; j += 16) {
    const __m512 e = cpu_detail::exp_approx_avx512(_mm512_sub_ps(_mm512_loadu_ps(row + j), m));
    _mm512_storeu_ps(row + j, e);
    sum = _mm512_add_ps(sum, e);
  }
  if (j < nk) {
    const __mmask16 tail = static_cast<__mmask16>((1u << (nk - j)) - 1u);
    const __m512 e = cpu_detail::exp_approx_avx512(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, row + j), m));
    _mm512_mask_storeu_ps(row + j, tail, e);
    sum = _mm512_mask_add_ps(sum, tail, sum, e);
  }
  return hsum16(sum);
}
#endif

// One thread's tiles (~256 KB with the V8 path's V tile: 384 KB; on the stack of the thread running it).
template <int kKeyBlock, bool kCopyV>
struct FusedScratch {
  alignas(64) float qs[kQB * kMaxD];         // (nqp, dp) scaled Q, zero padded
  alignas(64) float kt[kMaxD * kKeyBlock];   // (dp, nkp) K^T, zero padded
  alignas(64) float vs[kCopyV ? kKeyBlock * kMaxD : 1];  // (nk, dp) V, zero padded columns (V8 path)
  alignas(64) float acc[kQB * kMaxD];        // (nqp, dp) unnormalised O
  alignas(64) float s[kQB * kKeyBlock];      // (nqp, nkp) scores, then probabilities
  float row_max[kQB];
  float row_sum[kQB];
  // kt holds K^T of (kt_b, kt_h) keys [0, seq_kv) when the whole key range is one block; -1: nothing.
  int kt_b = -1, kt_h = -1;
};

// The fused task's phases (EV_ALWAYS_INLINE: they are the task body's own code, in its order).

// Q rows [q0, q0 + nq) of one head (qb), pre-scaled, into the zero-padded (nqp, dp) tile qs; the
// accumulator rows are zeroed and the running max / sum reset.
EV_ALWAYS_INLINE void load_q_tile(const AttnParams& p, const float* qb, int q0, int nq, int nqp, int d, int dp,
                                  float* __restrict qs, float* __restrict acc, float* row_max, float* row_sum) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  for (int i = 0; i < nqp; ++i) {
    float* dst = qs + i * dp;
    if (i < nq) {
      const float* src = qb + (q0 + i) * p.q.row;
      for (int t = 0; t < d; ++t) dst[t] = src[t] * p.scale;
      for (int t = d; t < dp; ++t) dst[t] = 0.f;
    } else {
      for (int t = 0; t < dp; ++t) dst[t] = 0.f;
    }
    for (int t = 0; t < dp; ++t) acc[i * dp + t] = 0.f;
    row_max[i] = neg_inf;
    row_sum[i] = 0.f;
  }
}

// K^T (dp, nkp) of keys [k0, k0 + nk) of one head (kb) into kt, its padded entries zero, and with kCopyV
// V (nk, dp) (vb) into vs, its padded columns zero.
template <bool kAvx512, bool kCopyV>
EV_ALWAYS_INLINE void copy_kv_tile(const AttnParams& p, const float* kb, [[maybe_unused]] const float* vb, int k0,
                                   int nk, int nkp, int d, int dp, float* __restrict kt,
                                   [[maybe_unused]] float* __restrict vs) {
  for (int t = 0; t < dp; ++t)
    for (int j = nk; j < nkp; ++j) kt[t * nkp + j] = 0.f;
  int j_done = 0;  // keys [0, j_done) already in kt
#if EV_HAVE_AVX2_CLONE
  if constexpr (kAvx512) {
    if (d % 16 == 0) {
      for (; j_done + 16 <= nk; j_done += 16)
        for (int t0 = 0; t0 < d; t0 += 16)
          transpose16_avx512(kb + (k0 + j_done) * p.k.row + t0, p.k.row, kt + t0 * nkp + j_done, nkp);
    }
  }
#endif
  for (int j = j_done; j < nk; ++j) {
    const float* kr = kb + (k0 + j) * p.k.row;
    for (int t = 0; t < d; ++t) kt[t * nkp + j] = kr[t];
    for (int t = d; t < dp; ++t) kt[t * nkp + j] = 0.f;
    if constexpr (kCopyV) {  // libxsmm reads V in place (row stride p.v.row)
      const float* vr = vb + (k0 + j) * p.v.row;
      float* vd = vs + j * dp;
      for (int t = 0; t < d; ++t) vd[t] = vr[t];
      for (int t = d; t < dp; ++t) vd[t] = 0.f;
    }
  }
}

// Online softmax over score rows [0, nq) of the (nqp, nkp) tile s (keys [0, nk) valid, tile_mask: the
// tile's key mask or nullptr): each row's running max and sum move to the tile, its accumulator row is
// rescaled, and the row becomes exp(s - max) (zeros while nothing in the row has been attended).
template <bool kAvx512>
EV_ALWAYS_INLINE void softmax_tile_rows(float* __restrict s, float* __restrict acc, float* row_max, float* row_sum,
                                        const uint8_t* tile_mask, int nq, int nk, int nkp, int dp) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  for (int i = 0; i < nq; ++i) {
    float* row = s + i * nkp;
    apply_mask(row, tile_mask, nk);
    float m_new;
#if EV_HAVE_AVX2_CLONE
    if constexpr (kAvx512) {
      m_new = row_max_avx512(row, nk, row_max[i]);
    } else
#endif
    {
      // The padded keys [nk, nkp) become -inf (exp gives exactly 0 there), so max and exp run over whole
      // kNR-wide groups with no scalar tail (197 keys: 5 scalar exps per row before).
      for (int j = nk; j < nkp; ++j) row[j] = neg_inf;
      m_new = std::max(row_max[i], max_of(row, nkp));
    }
    if (m_new == neg_inf) {  // nothing attended yet in this row: contributes nothing
      for (int j = 0; j < nk; ++j) row[j] = 0.f;
      continue;
    }
    const bool first = row_max[i] == neg_inf;  // acc row and sum are still zero: nothing to rescale
    const float alpha = first ? 0.f : cpu_detail::exp_approx(row_max[i] - m_new);
    row_max[i] = m_new;
    float tile_sum;
#if EV_HAVE_AVX2_CLONE
    if constexpr (kAvx512) {
      tile_sum = exp_sum_avx512(row, nk, m_new);
    } else
#endif
    {
      tile_sum = exp_and_sum(row, m_new, nkp);
    }
    row_sum[i] = first ? tile_sum : row_sum[i] * alpha + tile_sum;
    if (!first && alpha != 1.f) {
      float* a = acc + i * dp;
      for (int t = 0; t < dp; ++t) a[t] *= alpha;
    }
  }
}

// O rows [q0, q0 + nq) of one head (ob) = the accumulator rows / their sums (a fully masked row: zeros).
EV_ALWAYS_INLINE void store_o_rows(const AttnParams& p, float* ob, const float* __restrict acc,
                                   const float* row_sum, int q0, int nq, int d, int dp) {
  for (int i = 0; i < nq; ++i) {
    float* dst = ob + (q0 + i) * p.o.row;
    const float inv = row_sum[i] > 0.f ? 1.f / row_sum[i] : 0.f;  // fully masked row -> zeros
    for (int t = 0; t < d; ++t) dst[t] = acc[i * dp + t] * inv;
  }
}

// One (b, h, query block [q0, q0 + nq)) of the fused kernel. kXsmm: the two tile GEMMs through libxsmm's
// JIT kernels (AVX-512 where the CPU has it) instead of the V8 loops.
template <bool kXsmm, bool kAvx512, int kKeyBlock, bool kCopyV>
EV_ALWAYS_INLINE void fused_task_body(const AttnParams& p, const float* q, const float* k, const float* v, float* o,
                                      int b, int h, int q0, int nq, FusedScratch<kKeyBlock, kCopyV>& w) {
  float* __restrict qs = w.qs;
  float* __restrict kt = w.kt;
  float* __restrict vs = w.vs;
  float* __restrict acc = w.acc;
  float* __restrict s = w.s;
  float* row_max = w.row_max;
  float* row_sum = w.row_sum;

  const int d = p.head_dim;
  const int dp = round_up(d, kNR);
  const int nqp = round_up(nq, kMR);
  const float* qb = q + b * p.q.batch + h * p.q.head;
  const float* kb = k + b * p.k.batch + h * p.k.head;
  const float* vb = v + b * p.v.batch + h * p.v.head;
  const uint8_t* mask = p.key_mask != nullptr ? p.key_mask + static_cast<int64_t>(b) * p.seq_kv : nullptr;
  const bool one_key_block = p.seq_kv <= kKeyBlock;

  load_q_tile(p, qb, q0, nq, nqp, d, dp, qs, acc, row_max, row_sum);
  for (int k0 = 0; k0 < p.seq_kv; k0 += kKeyBlock) {
    const int nk = std::min(kKeyBlock, p.seq_kv - k0);
    const int nkp = round_up(nk, kNR);
    const uint8_t* tile_mask = mask != nullptr ? mask + k0 : nullptr;
    if (tile_mask != nullptr && std::none_of(tile_mask, tile_mask + nk, [](uint8_t m) { return m != 0; }))
      continue;

    if (!(one_key_block && w.kt_b == b && w.kt_h == h)) {
      copy_kv_tile<kAvx512, kCopyV>(p, kb, vb, k0, nk, nkp, d, dp, kt, vs);
      w.kt_b = one_key_block ? b : -1;
      w.kt_h = one_key_block ? h : -1;
    }

    if constexpr (kXsmm) {
#if defined(EDGEVIT_HAVE_LIBXSMM)
      xsmm_rowmajor(nqp, nkp, dp, dp, nkp, nkp, 0.f)(kt, qs, s);
#endif
    } else {
      tile_qk(qs, kt, s, nqp, dp, nkp);
    }
    softmax_tile_rows<kAvx512>(s, acc, row_max, row_sum, tile_mask, nq, nk, nkp, dp);
    // Padded rows of s (i >= nq) hold 0 scores from zero Q rows and are never written out.
    if constexpr (kXsmm) {
#if defined(EDGEVIT_HAVE_LIBXSMM)
      xsmm_rowmajor(nqp, d, nk, nkp, static_cast<int>(p.v.row), dp, 1.f)(vb + static_cast<int64_t>(k0) * p.v.row, s, acc);
#endif
    } else {
      tile_pv(s, nkp, vs, acc, nqp, nk, dp);
    }
  }
  store_o_rows(p, o + b * p.o.batch + h * p.o.head, acc, row_sum, q0, nq, d, dp);
}

// Software prefetch into L2 of `rows` rows of `cols` floats, row stride `ld` floats, a cache line at a time.
EV_ALWAYS_INLINE void prefetch_rows_l2(const float* base, int64_t ld, int rows, int cols) {
  for (int r = 0; r < rows; ++r) {
    const char* row = reinterpret_cast<const char*>(base + r * ld);
    for (int c = 0; c < cols * static_cast<int>(sizeof(float)); c += 64) __builtin_prefetch(row + c, 0, 2);
  }
}

// Tasks [t0, t1) in (b, h, query block) order on the calling thread, its tiles on its stack. Consecutive
// tasks of one head reuse K^T (libxsmm path, one key block). Before each task the next one's Q rows (and,
// when it starts another head, that head's K and V rows) are prefetched into L2: the packed qkv buffer of a
// ViT-B image is 1.8 MB, so a head's rows (scattered at the qkv row stride) otherwise come from L3 while
// the tile GEMMs wait.
template <bool kXsmm, bool kAvx512, int kKeyBlock, bool kCopyV>
EV_ALWAYS_INLINE void fused_tasks_body(const AttnParams& p, const float* q, const float* k, const float* v, float* o,
                                       int t0, int t1) {
  FusedScratch<kKeyBlock, kCopyV> w;
  const int rows = query_block_rows(p.seq_q);
  const int qblocks = (p.seq_q + rows - 1) / rows;
  for (int t = t0; t < t1; ++t) {
    const int qb = t % qblocks;
    const int h = (t / qblocks) % p.heads;
    const int b = t / (qblocks * p.heads);
    const int q0 = qb * rows;
    if (t + 1 < t1) {
      const int nqb = (t + 1) % qblocks;
      const int nh = ((t + 1) / qblocks) % p.heads;
      const int nb = (t + 1) / (qblocks * p.heads);
      const int nq0 = nqb * rows;
      prefetch_rows_l2(q + nb * p.q.batch + nh * p.q.head + nq0 * p.q.row, p.q.row, std::min(rows, p.seq_q - nq0),
                       p.head_dim);
      if (nh != h || nb != b) {
        prefetch_rows_l2(k + nb * p.k.batch + nh * p.k.head, p.k.row, p.seq_kv, p.head_dim);
        prefetch_rows_l2(v + nb * p.v.batch + nh * p.v.head, p.v.row, p.seq_kv, p.head_dim);
      }
    }
    fused_task_body<kXsmm, kAvx512>(p, q, k, v, o, b, h, q0, std::min(rows, p.seq_q - q0), w);
  }
}

}  // namespace
}  // namespace edgevit
