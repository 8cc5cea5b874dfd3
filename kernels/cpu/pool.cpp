// pool_f32: token 0, or the mean over tokens [prefix, T) accumulated row-wise (vectorised over E).
// Memory bound; microseconds for ViT shapes.
#include <cstdint>

#include "kernels/cpu/kernels.h"

namespace edgevit {

void pool_f32(const float* x,  // (B, T, E)
              float* out,      // (B, E)
              int batch, int tokens, int embed, bool avg, int prefix) {
  const int64_t e = embed;
  for (int b = 0; b < batch; ++b) {
    const float* xb = x + static_cast<int64_t>(b) * tokens * e;  // (T, E)
    float* ob = out + b * e;                                     // (E)
    if (!avg) {
      for (int j = 0; j < embed; ++j) ob[j] = xb[j];
      continue;
    }
    for (int j = 0; j < embed; ++j) ob[j] = 0.f;
    for (int t = prefix; t < tokens; ++t)
      for (int j = 0; j < embed; ++j) ob[j] += xb[t * e + j];
    const float inv = tokens > prefix ? 1.f / static_cast<float>(tokens - prefix) : 0.f;
    for (int j = 0; j < embed; ++j) ob[j] *= inv;
  }
}

void pool_prefix_f32(const float* x,  // (B, T, E)
                     float* out,      // (B, E), or (B, count * E) when concat
                     int batch, int tokens, int embed, int count, bool concat) {
  const int64_t e = embed;
  for (int b = 0; b < batch; ++b) {
    const float* xb = x + static_cast<int64_t>(b) * tokens * e;  // (T, E)
    if (concat) {
      float* ob = out + b * count * e;  // (count * E)
      for (int64_t j = 0; j < count * e; ++j) ob[j] = xb[j];
      continue;
    }
    float* ob = out + b * e;  // (E)
    for (int j = 0; j < embed; ++j) ob[j] = xb[j];
    for (int t = 1; t < count; ++t)
      for (int j = 0; j < embed; ++j) ob[j] += xb[t * e + j];
    const float inv = 1.f / static_cast<float>(count);
    for (int j = 0; j < embed; ++j) ob[j] *= inv;
  }
}

}  // namespace edgevit
