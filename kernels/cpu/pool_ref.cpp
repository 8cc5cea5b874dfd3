// pool_ref: token 0, or the mean over tokens [prefix, T) in double.
#include <cstdint>

#include "kernels/cpu/kernels.h"

namespace edgevit {

void pool_ref(const float* x,  // (B, T, E)
              float* out,      // (B, E)
              int batch, int tokens, int embed, bool avg, int prefix) {
  for (int b = 0; b < batch; ++b)
    for (int j = 0; j < embed; ++j) {
      const float* xb = x + static_cast<int64_t>(b) * tokens * embed;
      if (!avg) {
        out[static_cast<int64_t>(b) * embed + j] = xb[j];
        continue;
      }
      double s = 0;
      for (int t = prefix; t < tokens; ++t) s += xb[static_cast<int64_t>(t) * embed + j];
      out[static_cast<int64_t>(b) * embed + j] = tokens > prefix ? static_cast<float>(s / (tokens - prefix)) : 0.f;
    }
}

void pool_prefix_ref(const float* x,  // (B, T, E)
                     float* out,      // (B, E), or (B, count * E) when concat
                     int batch, int tokens, int embed, int count, bool concat) {
  for (int b = 0; b < batch; ++b) {
    const float* xb = x + static_cast<int64_t>(b) * tokens * embed;
    for (int j = 0; j < embed; ++j) {
      double s = 0;
      for (int t = 0; t < count; ++t) {
        const float v = xb[static_cast<int64_t>(t) * embed + j];
        if (concat) out[(static_cast<int64_t>(b) * count + t) * embed + j] = v;
        s += v;
      }
      if (!concat) out[static_cast<int64_t>(b) * embed + j] = static_cast<float>(s / count);
    }
  }
}

}  // namespace edgevit
