// assemble_tokens_ref: element by element, following timm's VisionTransformer._pos_embed.
#include <cstdint>

#include "kernels/cpu/kernels.h"

namespace edgevit {

void assemble_tokens_ref(const float* patch_tokens,  // (B, P, E)
                         const float* cls,           // (E) or nullptr
                         const float* reg,           // (R, E) or nullptr
                         int reg_tokens,
                         const float* pos,           // (P, E) if no_embed_class else (T, E)
                         bool no_embed_class,
                         float* x,                   // (B, T, E)
                         int batch, int num_patches, int embed) {
  const int n_cls = cls != nullptr ? 1 : 0;
  const int n_reg = reg != nullptr ? reg_tokens : 0;
  const int prefix = n_cls + n_reg;
  const int tokens = prefix + num_patches;
  for (int b = 0; b < batch; ++b)
    for (int t = 0; t < tokens; ++t)
      for (int j = 0; j < embed; ++j) {
        double v;
        if (t < n_cls) {
          v = cls[j];
        } else if (t < prefix) {
          v = reg[static_cast<int64_t>(t - n_cls) * embed + j];
        } else {
          v = patch_tokens[(static_cast<int64_t>(b) * num_patches + (t - prefix)) * embed + j];
        }
        if (!no_embed_class) {
          v += pos[static_cast<int64_t>(t) * embed + j];
        } else if (t >= prefix) {
          v += pos[static_cast<int64_t>(t - prefix) * embed + j];
        }
        x[(static_cast<int64_t>(b) * tokens + t) * embed + j] = static_cast<float>(v);
      }
}

}  // namespace edgevit
