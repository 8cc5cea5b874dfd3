// qk_norm_f32: timm's qk_norm (q_norm / k_norm, a LayerNorm over head_dim per head) in place on the packed qkv
// tensor, statistics in fp32 (two passes: mean, then the mean of squared deviations, as layernorm_f32). Memory
// bound: one read and one write of two thirds of the qkv tensor.
#include <omp.h>

#include <cmath>
#include <cstdint>

#include "kernels/cpu/kernels.h"

namespace edgevit {

namespace {

void normalize(float* v, const float* gamma, const float* beta, int d, float eps) {  // v (d)
  float mean = 0.f;
  for (int j = 0; j < d; ++j) mean += v[j];
  mean /= static_cast<float>(d);
  float var = 0.f;
  for (int j = 0; j < d; ++j) var += (v[j] - mean) * (v[j] - mean);
  const float inv = 1.f / std::sqrt(var / static_cast<float>(d) + eps);
  for (int j = 0; j < d; ++j) v[j] = (v[j] - mean) * inv * gamma[j] + beta[j];
}

}  // namespace

void qk_norm_f32(float* qkv,  // (rows, 3, H, D): q and k normalized in place, v untouched
                 const float* q_gamma, const float* q_beta, const float* k_gamma, const float* k_beta,  // (D) each
                 int rows, int heads, int head_dim, float eps, int threads) {
  const int64_t row_len = int64_t{3} * heads * head_dim;
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
  for (int r = 0; r < rows; ++r) {
    float* q = qkv + r * row_len;  // (H, D), then k (H, D)
    for (int h = 0; h < heads; ++h) {
      normalize(q + int64_t{h} * head_dim, q_gamma, q_beta, head_dim, eps);
      normalize(q + (int64_t{heads} + h) * head_dim, k_gamma, k_beta, head_dim, eps);
    }
  }
}

}  // namespace edgevit
