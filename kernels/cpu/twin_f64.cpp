// The INT8 twin kernels (docs/int8.md "fp32 mode"): the float64 references, split over an OpenMP team.
//   mha_f64     mha_ref over (image, head) slices: the same float64 arithmetic per query row, so the same bits
//   mha_i8_ref_team  mha_i8_ref (the INT8 attention's reference) over (image, head) slices likewise
//   linear_f64  linear_ref over row ranges: the same float64 dot product and epilogue per output, the same bits
// The split never changes a bit (each output is one slice's, computed by the reference's loop), which
// twin_f64_test checks against the references at several team sizes. CUDA computes the same arithmetic
// (kernels/cuda/twin_f64.h) so that the CPU INT8 path and the GPU's fp32 mode round the same fp32 values to
// int8. Speed: the reference loops' (float64, no vectorisation across the sums); docs/int8.md has the cost.
#include <omp.h>

#include <cstdint>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/mha_i8_ref.h"

namespace edgevit {
namespace {

// Runs f(i0, i1) over [0, n) in contiguous ranges, one per thread; no OpenMP region when serial (libgomp
// would make a team for a serialised region, which infer() must not allocate).
template <typename F>
void split(int64_t n, int threads, const F& f) {
  if (threads <= 1 || n <= 1) {
    if (n > 0) f(int64_t{0}, n);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const int64_t t = omp_get_num_threads(), i = omp_get_thread_num();
    const int64_t i0 = n * i / t, i1 = n * (i + 1) / t;
    if (i0 < i1) f(i0, i1);
  }
}

}  // namespace

void mha_f64(const AttnParams& p, const float* q, const float* k, const float* v, float* o, int threads) {
  const int64_t slices = static_cast<int64_t>(p.batch) * p.heads;
  split(slices, threads, [&](int64_t s0, int64_t s1) {
    for (int64_t s = s0; s < s1; ++s) {
      const int b = static_cast<int>(s / p.heads), h = static_cast<int>(s % p.heads);
      AttnParams one = p;  // one image, one head: mha_ref's loop over it
      one.batch = 1;
      one.heads = 1;
      if (p.key_mask != nullptr) one.key_mask = p.key_mask + static_cast<int64_t>(b) * p.seq_kv;
      mha_ref(one, q + b * p.q.batch + h * p.q.head, k + b * p.k.batch + h * p.k.head,
              v + b * p.v.batch + h * p.v.head, o + b * p.o.batch + h * p.o.head, 1);
    }
  });
}

void mha_i8_ref_team(const AttnParams& p, const int8_t* q, const int8_t* k, const float* v, const AttnI8Scales& sc,
                     MhaI8Softmax softmax, float* o, int threads) {
  const int64_t slices = static_cast<int64_t>(p.batch) * p.heads;
  split(slices, threads, [&](int64_t s0, int64_t s1) {
    for (int64_t s = s0; s < s1; ++s) {
      const int b = static_cast<int>(s / p.heads), h = static_cast<int>(s % p.heads);
      AttnParams one = p;  // one image, one head: mha_i8_ref's loop over it
      one.batch = 1;
      one.heads = 1;
      if (p.key_mask != nullptr) one.key_mask = p.key_mask + static_cast<int64_t>(b) * p.seq_kv;
      AttnI8Scales sc1 = sc;
      sc1.q = sc.q + b * sc.qs.batch + h * sc.qs.head;
      sc1.k = sc.k + b * sc.ks.batch + h * sc.ks.head;
      mha_i8_ref(one, q + b * p.q.batch + h * p.q.head, k + b * p.k.batch + h * p.k.head,
                 v + b * p.v.batch + h * p.v.head, sc1, softmax, o + b * p.o.batch + h * p.o.head);
    }
  });
}

void linear_f64(const float* x, const float* w, const float* bias, float* y, int m, int n, int k, Epilogue ep,
                int threads) {
  split(m, threads, [&](int64_t i0, int64_t i1) {
    linear_ref(x + i0 * k, w, bias, y + i0 * n, static_cast<int>(i1 - i0), n, k, ep);
  });
}

}  // namespace edgevit
