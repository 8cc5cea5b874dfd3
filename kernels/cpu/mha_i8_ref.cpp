// mha_i8_ref: the arithmetic stated in mha_i8_ref.h, one query row at a time.
#include "kernels/cpu/mha_i8_ref.h"

#include <cmath>
#include <cstdint>
#include <limits>

namespace edgevit {

float round_to_fp16(float x) {
  if (!std::isfinite(x)) return x;
  const float ax = std::fabs(x);
  if (ax >= 65520.f) return std::copysign(std::numeric_limits<float>::infinity(), x);  // past 65504 + ulp/2
  if (ax < 6.103515625e-05f) return std::nearbyint(x * 16777216.f) / 16777216.f;     // subnormal: 2^-24 steps
  int e = 0;
  std::frexp(ax, &e);                      // ax in [2^(e-1), 2^e): 11 significant bits -> ulp 2^(e-11)
  const float ulp = std::ldexp(1.f, e - 11);
  return std::nearbyint(x / ulp) * ulp;    // nearbyint: ties to even in the default rounding mode
}

float quantize_i8_row(const float* x, int n, int8_t* out) {
  float amax = 0.f;
  for (int i = 0; i < n; ++i) amax = std::fmax(amax, std::fabs(x[i]));
  const float scale = amax / 127.f;
  for (int i = 0; i < n; ++i) {
    const float r = scale > 0.f ? std::round(x[i] / scale) : 0.f;
    out[i] = static_cast<int8_t>(std::fmax(-127.f, std::fmin(127.f, r)));
  }
  return scale;
}

namespace {

// The logit of query (b, i, h) and key j in log2 units (-inf for a masked key).
double logit(const AttnParams& p, const int8_t* qi, const int8_t* k, const AttnI8Scales& sc, double sq, int b, int h,
             int j) {
  if (p.key_mask != nullptr && p.key_mask[static_cast<int64_t>(b) * p.seq_kv + j] == 0)
    return -std::numeric_limits<double>::infinity();
  const int8_t* kj = k + b * p.k.batch + j * p.k.row + h * p.k.head;
  int64_t s = 0;
  for (int d = 0; d < p.head_dim; ++d) s += static_cast<int64_t>(qi[d]) * kj[d];
  const double sk = sc.k[b * sc.ks.batch + j * sc.ks.row + h * sc.ks.head];
  return static_cast<double>(s) * sq * sk * p.scale * 1.4426950408889634;
}

}  // namespace

void mha_i8_ref(const AttnParams& p, const int8_t* q, const int8_t* k, const float* v, const AttnI8Scales& sc,
                MhaI8Softmax softmax, float* o) {
  const double neg_inf = -std::numeric_limits<double>::infinity();
  constexpr int kChunk = 32;  // O in double, kChunk head-dim entries at a time (no heap: this is a kernel too)
  for (int b = 0; b < p.batch; ++b)
    for (int h = 0; h < p.heads; ++h)
      for (int i = 0; i < p.seq_q; ++i) {
        const int8_t* qi = q + b * p.q.batch + i * p.q.row + h * p.q.head;
        const double sq = sc.q[b * sc.qs.batch + i * sc.qs.row + h * sc.qs.head];
        float* oi = o + b * p.o.batch + i * p.o.row + h * p.o.head;
        for (int d = 0; d < p.head_dim; ++d) oi[d] = 0.f;
        double m = neg_inf;
        for (int j = 0; j < p.seq_kv; ++j) m = std::fmax(m, logit(p, qi, k, sc, sq, b, h, j));
        if (m == neg_inf) continue;  // every key masked: zeros
        if (softmax == MhaI8Softmax::kScaleMax)
          m = 16129.0 * sq * sc.k[b * sc.ks.batch + h * sc.ks.head] * p.scale * 1.4426950408889634;
        const auto prob = [&](int j) {
          return static_cast<double>(round_to_fp16(static_cast<float>(std::exp2(logit(p, qi, k, sc, sq, b, h, j) - m))));
        };
        double denom = 0;
        for (int j = 0; j < p.seq_kv; ++j) denom += prob(j);
        if (denom == 0) continue;  // every p underflowed (scale-max): zeros, as the kernel writes
        for (int d0 = 0; d0 < p.head_dim; d0 += kChunk) {
          const int nd = p.head_dim - d0 < kChunk ? p.head_dim - d0 : kChunk;
          double acc[kChunk] = {};
          for (int j = 0; j < p.seq_kv; ++j) {
            const double pj = prob(j);
            if (pj == 0) continue;
            const float* vj = v + b * p.v.batch + j * p.v.row + h * p.v.head;
            for (int d = 0; d < nd; ++d) acc[d] += pj * vj[d0 + d];
          }
          for (int d = 0; d < nd; ++d) oi[d0 + d] = static_cast<float>(acc[d] / denom);
        }
      }
}

}  // namespace edgevit
