// Top-k of one row of class scores (logits), the one ranking every answer uses: `edgevit run` and
// edgevitd (docs/protocol.md: "ties in the logits rank the lower class index first").
// Order: score descending, then class index ascending. Scores are expected finite (the engine and the daemon
// refuse NaN/Inf outputs before ranking).
#pragma once

#include <utility>
#include <vector>

namespace edgevit {

// Writes the indices of the k best of scores[0, n) to order[0, k), best first; order[k, n) is left in an
// unspecified order. `order` is the caller's scratch of n ints (the daemon sizes it at start-up: this
// allocates nothing). k is clamped to [0, n].
void top_k_order(const float* scores, int n, int k, int* order);

// The same as {index, score} pairs, best first (allocates; for code off the daemon's request path).
std::vector<std::pair<int, float>> top_k(const float* scores, int n, int k);

}  // namespace edgevit
