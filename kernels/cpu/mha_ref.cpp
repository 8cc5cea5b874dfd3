// mha_ref: the definition in attn_params.h, one query row at a time, in double; mha_i8out_ref: the same, then
// quantized to int8 codes at one scale.
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/cpu/gemm_i8_ref.h"
#include "kernels/cpu/kernels.h"

namespace edgevit {

void mha_ref(const AttnParams& p,
             const float* q,  // element (b, s, h, d) at q[b*p.q.batch + s*p.q.row + h*p.q.head + d]
             const float* k,  // same addressing with p.k, s < Skv
             const float* v,  // same addressing with p.v, s < Skv
             float* o,        // same addressing with p.o, s < Sq
             int /*threads*/) {
  const double neg_inf = -std::numeric_limits<double>::infinity();
  for (int b = 0; b < p.batch; ++b)
    for (int h = 0; h < p.heads; ++h)
      for (int i = 0; i < p.seq_q; ++i) {
        const float* qi = q + b * p.q.batch + i * p.q.row + h * p.q.head;
        float* oi = o + b * p.o.batch + i * p.o.row + h * p.o.head;
        double mx = neg_inf;
        for (int j = 0; j < p.seq_kv; ++j) {
          if (p.key_mask != nullptr && p.key_mask[static_cast<int64_t>(b) * p.seq_kv + j] == 0) continue;
          const float* kj = k + b * p.k.batch + j * p.k.row + h * p.k.head;
          double s = 0;
          for (int d = 0; d < p.head_dim; ++d) s += static_cast<double>(qi[d]) * kj[d];
          mx = std::fmax(mx, s * p.scale);
        }
        for (int d = 0; d < p.head_dim; ++d) oi[d] = 0.f;
        if (mx == neg_inf) continue;  // every key masked: the row is zeros

        double denom = 0;
        for (int j = 0; j < p.seq_kv; ++j) {
          if (p.key_mask != nullptr && p.key_mask[static_cast<int64_t>(b) * p.seq_kv + j] == 0) continue;
          const float* kj = k + b * p.k.batch + j * p.k.row + h * p.k.head;
          double s = 0;
          for (int d = 0; d < p.head_dim; ++d) s += static_cast<double>(qi[d]) * kj[d];
          denom += std::exp(s * p.scale - mx);
        }
        // O row in double, kChunk head-dim entries at a time (no heap: this is a kernel too).
        constexpr int kChunk = 32;
        for (int d0 = 0; d0 < p.head_dim; d0 += kChunk) {
          const int nd = p.head_dim - d0 < kChunk ? p.head_dim - d0 : kChunk;
          double acc[kChunk] = {};
          for (int j = 0; j < p.seq_kv; ++j) {
            if (p.key_mask != nullptr && p.key_mask[static_cast<int64_t>(b) * p.seq_kv + j] == 0) continue;
            const float* kj = k + b * p.k.batch + j * p.k.row + h * p.k.head;
            const float* vj = v + b * p.v.batch + j * p.v.row + h * p.v.head;
            double s = 0;
            for (int t = 0; t < p.head_dim; ++t) s += static_cast<double>(qi[t]) * kj[t];
            const double w = std::exp(s * p.scale - mx) / denom;
            for (int d = 0; d < nd; ++d) acc[d] += w * vj[d0 + d];
          }
          for (int d = 0; d < nd; ++d) oi[d0 + d] = static_cast<float>(acc[d]);
        }
      }
}

void mha_i8out_ref(const AttnParams& p, const float* q, const float* k, const float* v, float o_scale, int8_t* o) {
  AttnParams dense = p;
  const int64_t e = static_cast<int64_t>(p.heads) * p.head_dim;
  dense.o = AttnStrides{p.seq_q * e, e, p.head_dim};
  std::vector<float> out(static_cast<size_t>(p.batch * p.seq_q * e));  // (B, Sq, H, D)
  mha_ref(dense, q, k, v, out.data(), 1);
  for (int b = 0; b < p.batch; ++b)
    for (int i = 0; i < p.seq_q; ++i)
      for (int h = 0; h < p.heads; ++h)
        for (int d = 0; d < p.head_dim; ++d)
          o[b * p.o.batch + i * p.o.row + h * p.o.head + d] =
              gemm_i8_quantize_ref(out[static_cast<size_t>(((b * p.seq_q + i) * p.heads + h) * p.head_dim + d)] / o_scale);
}

}  // namespace edgevit
