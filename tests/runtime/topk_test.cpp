// top_k / top_k_order (runtime/topk.h), the ranking of `edgevit run` and edgevitd: score descending, ties by
// the lower class index (docs/protocol.md), k clamped to the row.
#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "runtime/topk.h"

namespace edgevit {
namespace {

using Pairs = std::vector<std::pair<int, float>>;

TEST(TopK, ScoreDescending) {
  const float s[] = {0.1f, 3.0f, -2.0f, 2.5f, 0.0f};
  EXPECT_EQ(top_k(s, 5, 3), (Pairs{{1, 3.0f}, {3, 2.5f}, {0, 0.1f}}));
}

TEST(TopK, TiesRankTheLowerIndexFirst) {
  const float s[] = {1.0f, 2.0f, 2.0f, 1.0f, 2.0f, 1.0f};
  EXPECT_EQ(top_k(s, 6, 5), (Pairs{{1, 2.0f}, {2, 2.0f}, {4, 2.0f}, {0, 1.0f}, {3, 1.0f}}));
  const float all_equal[] = {7.f, 7.f, 7.f, 7.f};
  EXPECT_EQ(top_k(all_equal, 4, 4), (Pairs{{0, 7.f}, {1, 7.f}, {2, 7.f}, {3, 7.f}}));
}

TEST(TopK, NegativeZeroTiesWithZero) {
  const float s[] = {-0.0f, 0.0f};  // equal as floats: the lower index first
  const Pairs best = top_k(s, 2, 2);
  ASSERT_EQ(best.size(), 2u);
  EXPECT_EQ(best[0].first, 0);
  EXPECT_EQ(best[1].first, 1);
}

TEST(TopK, KIsClampedToTheRow) {
  const float s[] = {0.5f, 1.5f};
  EXPECT_EQ(top_k(s, 2, 10), (Pairs{{1, 1.5f}, {0, 0.5f}}));
  EXPECT_TRUE(top_k(s, 2, 0).empty());
  EXPECT_TRUE(top_k(s, 2, -3).empty());
  EXPECT_TRUE(top_k(s, 0, 3).empty());
}

TEST(TopK, OrderUsesTheCallersScratchAndMatchesTopK) {
  std::vector<float> s(1000);
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<float>((i * 7919) % 97);  // many ties
  std::vector<int> order(s.size(), -1);
  top_k_order(s.data(), static_cast<int>(s.size()), 20, order.data());
  const Pairs best = top_k(s.data(), static_cast<int>(s.size()), 20);
  ASSERT_EQ(best.size(), 20u);
  for (int j = 0; j < 20; ++j) {
    EXPECT_EQ(order[j], best[j].first);
    if (j > 0) {
      const auto& a = best[j - 1];
      const auto& b = best[j];
      EXPECT_TRUE(a.second > b.second || (a.second == b.second && a.first < b.first)) << "rank " << j;
    }
  }
  // Nothing left out ranks above the k-th.
  for (int j = 20; j < static_cast<int>(s.size()); ++j) {
    const int c = order[j];
    EXPECT_TRUE(s[c] < best[19].second || (s[c] == best[19].second && c > best[19].first)) << "index " << c;
  }
}

}  // namespace
}  // namespace edgevit
