#include "runtime/topk.h"

#include <algorithm>
#include <numeric>

namespace edgevit {

void top_k_order(const float* scores, int n, int k, int* order) {
  if (n <= 0) return;
  k = std::clamp(k, 0, n);
  std::iota(order, order + n, 0);
  std::partial_sort(order, order + k, order + n, [scores](int a, int b) {
    return scores[a] > scores[b] || (scores[a] == scores[b] && a < b);
  });
}

std::vector<std::pair<int, float>> top_k(const float* scores, int n, int k) {
  if (n <= 0) return {};
  std::vector<int> order(static_cast<size_t>(n));
  top_k_order(scores, n, k, order.data());
  k = std::clamp(k, 0, n);
  std::vector<std::pair<int, float>> best;
  best.reserve(static_cast<size_t>(k));
  for (int j = 0; j < k; ++j) best.emplace_back(order[j], scores[order[j]]);
  return best;
}

}  // namespace edgevit
