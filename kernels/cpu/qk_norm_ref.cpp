// qk_norm_ref: LayerNorm over each head's q and k (timm Attention's q_norm / k_norm) in double, element by element.
#include <cmath>
#include <cstdint>

#include "kernels/cpu/kernels.h"

namespace edgevit {

void qk_norm_ref(float* qkv,  // (rows, 3, H, D)
                 const float* q_gamma, const float* q_beta, const float* k_gamma, const float* k_beta,  // (D) each
                 int rows, int heads, int head_dim, float eps, int /*threads*/) {
  for (int64_t r = 0; r < rows; ++r)
    for (int part = 0; part < 2; ++part)
      for (int h = 0; h < heads; ++h) {
        float* v = qkv + ((r * 3 + part) * heads + h) * head_dim;
        const float* g = part == 0 ? q_gamma : k_gamma;
        const float* b = part == 0 ? q_beta : k_beta;
        double mean = 0, var = 0;
        for (int j = 0; j < head_dim; ++j) mean += v[j];
        mean /= head_dim;
        for (int j = 0; j < head_dim; ++j) var += (v[j] - mean) * (v[j] - mean);
        const double inv = 1.0 / std::sqrt(var / head_dim + static_cast<double>(eps));
        for (int j = 0; j < head_dim; ++j) v[j] = static_cast<float>((v[j] - mean) * inv * g[j] + b[j]);
      }
}

}  // namespace edgevit
