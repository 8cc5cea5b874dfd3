// choose_mha and the fused-attention kernel table (kernels/mha_variants.h): CPU only, no CUDA needed.
#include "kernels/mha_variants.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <iterator>
#include <set>
#include <vector>
#include <string>

namespace edgevit {
namespace {

constexpr int64_t kOrinOptin = 163 * 1024;   // SM87
constexpr int64_t kSm86Optin = 99 * 1024;    // SM86 / SM89
constexpr int64_t kH100Optin = 227 * 1024;   // SM90

// The fused kernel's shared memory, written out here rather than through mha_fused_smem_bytes (which the
// table's rows are built with): a Q tile and `stages` K and V tiles of fp16 rows, each row padded by 8 halves.
int64_t smem_written_out(const MhaVariant& row) {
  const int64_t row_bytes = (row.head_dim + 8) * 2;
  return (row.q_tile + 2 * row.stages * row.kv_tile) * row_bytes;
}

TEST(MhaVariants, TableRowsAreConsistent) {
  // One row by hand: D 64, 64 query rows, double-buffered 64-key tiles: (64 + 2*2*64) * 72 * 2 bytes.
  EXPECT_EQ(mha_fused_smem_bytes(64, 64, 64, 2), 46080);
  std::set<std::string> names;
  ASSERT_GT(std::size(kMhaVariants), 0u);
  for (const MhaVariant& row : kMhaVariants) {
    EXPECT_TRUE(names.insert(row.name).second) << "duplicate row " << row.name;
    EXPECT_EQ(row.smem_bytes, smem_written_out(row)) << row.name;
    // The name states the row's shape; the fields must say the same.
    const std::string shape = "_d" + std::to_string(row.head_dim) + "_q" + std::to_string(row.q_tile) + "_w" +
                              std::to_string(row.threads / 32) + "_kv" + std::to_string(row.kv_tile) + "_s" +
                              std::to_string(row.stages);
    EXPECT_NE(std::string(row.name).find(shape), std::string::npos) << row.name << " vs " << shape;
    EXPECT_LE(row.smem_bytes, kOrinOptin) << row.name;
    EXPECT_EQ(row.threads % 32, 0) << row.name;
    ASSERT_GE(row.kv_split, 1) << row.name;
    EXPECT_EQ((row.threads / 32) % row.kv_split, 0) << row.name;
    const int warp_rows = row.q_tile / (row.threads / 32 / row.kv_split);
    EXPECT_TRUE(warp_rows == 16 || warp_rows == 32) << row.name;
    if (row.kv_split > 1) {
      EXPECT_EQ(warp_rows, 16) << row.name;
      EXPECT_EQ(row.kv_tile % (16 * row.kv_split), 0) << row.name;
      EXPECT_NE(std::string(row.name).find("_ks" + std::to_string(row.kv_split)), std::string::npos) << row.name;
    }
    EXPECT_EQ(row.head_dim % 16, 0) << row.name;
  }
  // Every head dim has a row within the 48 KB default (devices without the opt-in).
  for (int d : {32, 64, 80, 96, 128}) {
    const MhaChoice c = choose_mha(87, 0, d, true, false);
    ASSERT_TRUE(c.fused) << c.reason;
    EXPECT_LE(c.variant->smem_bytes, kMhaDefaultSmemBytes) << c.reason;
  }
}

TEST(MhaVariants, OrinTakesTheFirstGeneralRowOfEachHeadDimWithoutAGrid) {
  for (int d : {32, 64, 80, 96, 128}) {
    const MhaChoice c = choose_mha(87, kOrinOptin, d, true, false);
    ASSERT_TRUE(c.fused) << c.reason;
    EXPECT_EQ(c.variant->head_dim, d);
    const MhaVariant* first = nullptr;
    for (const MhaVariant& row : kMhaVariants)
      if (row.head_dim == d && first == nullptr && row.min_blocks_per_sm == 0 && row.max_blocks_per_sm == 0 &&
          row.max_seq_q == 0)
        first = &row;
    EXPECT_EQ(c.variant, first) << c.reason;
    EXPECT_NE(c.reason.find("fused MHA: yes: "), std::string::npos) << c.reason;
  }
}

TEST(MhaVariants, SmallerOptinSkipsRowsAndSaysWhy) {
  for (int64_t optin : {kSm86Optin, int64_t{60 * 1024}}) {
    const MhaChoice c = choose_mha(86, optin, 128, true, false);
    ASSERT_TRUE(c.fused) << c.reason;
    EXPECT_LE(c.variant->smem_bytes, optin) << c.reason;
    // Every row ahead of the chosen one was too large, and the reason names it.
    for (const MhaVariant* row = kMhaVariants; row != c.variant; ++row) {
      if (row->head_dim != 128) continue;
      EXPECT_GT(row->smem_bytes, optin) << row->name;
      EXPECT_NE(c.reason.find(std::string(row->name) + ": smem"), std::string::npos) << c.reason;
    }
  }
  const MhaChoice tight = choose_mha(86, 60 * 1024, 128, true, false);
  EXPECT_NE(tight.reason.find("skipped"), std::string::npos) << tight.reason;
  EXPECT_TRUE(choose_mha(90, kH100Optin, 128, true, false).fused);
}

bool named(const MhaChoice& c, const char* fragment) {
  return c.fused && std::string(c.variant->name).find(fragment) != std::string::npos;
}

TEST(MhaVariants, GridWindowsPickRowsByBlocksPerSm) {
  // H100 (132 SMs): the measured winners of tools/gpu/bench_mha.py per grid size (docs/kernels-mha.md).
  const MhaGrid large{64, 12, 197, 132}, tiny{1, 12, 197, 132}, b8{8, 12, 197, 132}, s577{16, 6, 577, 132};
  const MhaChoice l = choose_mha(90, kH100Optin, 64, true, false, &large);
  EXPECT_TRUE(named(l, "_q128_w4_kv32_s2_qs")) << l.reason;
  EXPECT_NE(l.reason.find("11.6 blocks/SM on 132 SMs"), std::string::npos) << l.reason;
  EXPECT_NE(l.reason.find("q64_w4_kv32_s2_qs: 23.3 blocks/SM >= 3"), std::string::npos) << l.reason;
  const MhaChoice t = choose_mha(90, kH100Optin, 64, true, false, &tiny);
  EXPECT_TRUE(named(t, "_q32_w8_kv128_s2_ks4")) << t.reason;
  EXPECT_NE(t.reason.find("0.636 blocks/SM on 132 SMs"), std::string::npos) << t.reason;
  EXPECT_NE(t.reason.find("q64_w4_kv32_s2_qs: 0.364 blocks/SM < 0.5"), std::string::npos) << t.reason;
  EXPECT_NE(t.reason.find("q128_w4_kv32_s2_qs: 0.182 blocks/SM < 1"), std::string::npos) << t.reason;
  // ViT-B at batch 8: 2.91 blocks of 64 rows per SM, the middle-grid row.
  const MhaChoice b = choose_mha(90, kH100Optin, 64, true, false, &b8);
  EXPECT_TRUE(named(b, "_q64_w4_kv32_s2_qs")) << b.reason;
  EXPECT_NE(b.reason.find("2.91 blocks/SM on 132 SMs"), std::string::npos) << b.reason;
  // ViT-B/16 at 384 px (S = 577), batch 16 of 6 heads: past the middle window, the large-grid row.
  const MhaChoice m = choose_mha(90, kH100Optin, 64, true, false, &s577);
  EXPECT_TRUE(named(m, "_q128_w4_kv32_s2_qs")) << m.reason;
  EXPECT_NE(m.reason.find("q64_w4_kv32_s2_qs: 7.27 blocks/SM >= 3"), std::string::npos) << m.reason;
  // S = 577 and 1025 at 3-4 blocks of 64 rows per SM: past the middle window (session 8's sweep).
  for (const MhaGrid g : {MhaGrid{4, 12, 577, 132}, MhaGrid{8, 6, 577, 132}, MhaGrid{2, 12, 1025, 132}}) {
    const MhaChoice c = choose_mha(90, kH100Optin, 64, true, false, &g);
    EXPECT_TRUE(named(c, "_q128_w4_kv32_s2_qs")) << c.reason;
  }
  // ViT-Ti at batch 8 (H3): 0.727 blocks of 64 rows per SM, inside the middle window too.
  const MhaGrid ti_b8{8, 3, 197, 132};
  EXPECT_TRUE(named(choose_mha(90, kH100Optin, 64, true, false, &ti_b8), "_q64_w4_kv32_s2_qs"));
  // Without a grid the windowed rows are skipped, and the reason says so.
  const MhaChoice none = choose_mha(90, kH100Optin, 64, true, false);
  EXPECT_TRUE(named(none, "_q64_w4_kv64_s2")) << none.reason;
  EXPECT_NE(none.reason.find("grid size unknown"), std::string::npos) << none.reason;
  // Orin NX (8 SMs): ViT-B/16 at batch 1 is already a large grid there (3 blocks of 128 rows per SM, 6 of 64),
  // ViT-Ti (3 heads) at batch 1 a middle one (1.5 blocks of 64 rows per SM).
  const MhaGrid orin_b1{1, 12, 197, 8}, orin_b8{8, 12, 197, 8}, orin_ti_b1{1, 3, 197, 8};
  EXPECT_TRUE(named(choose_mha(87, kOrinOptin, 64, true, false, &orin_b1), "_q128_w4_kv32_s2_qs"));
  EXPECT_TRUE(named(choose_mha(87, kOrinOptin, 64, true, false, &orin_ti_b1), "_q64_w4_kv32_s2_qs"));
  EXPECT_TRUE(named(choose_mha(87, kOrinOptin, 64, true, false, &orin_b8), "_q128_w4_kv32_s2_qs"));
  EXPECT_DOUBLE_EQ(mha_blocks_per_sm(*choose_mha(87, kOrinOptin, 64, true, false, &orin_b8).variant, orin_b8), 24.0);
  // A grid with no SM count is treated as unknown.
  const MhaGrid no_sms{64, 12, 197, 0};
  EXPECT_TRUE(named(choose_mha(90, kH100Optin, 64, true, false, &no_sms), "_q64_w4_kv64_s2"));
}

TEST(MhaVariants, FewQueryRowsTakeTheQueryLimitedSplitRow) {
  // The class-token tail: one query row per image and head over all keys. The grid-sized rows would run it
  // in blocks of 32-128 query rows with one valid; the split-KV row of 16 rows is chosen whatever the grid.
  for (const MhaGrid g : {MhaGrid{64, 12, 1, 132}, MhaGrid{1, 12, 1, 132}, MhaGrid{1, 12, 1, 8}, MhaGrid{8, 3, 16, 132}}) {
    const MhaChoice c = choose_mha(g.sm_count == 8 ? 87 : 90, g.sm_count == 8 ? kOrinOptin : kH100Optin, 64, true,
                                   false, &g);
    EXPECT_TRUE(named(c, "_q16_w4_kv128_s2_ks4")) << c.reason;
    EXPECT_EQ(c.variant->max_seq_q, 16) << c.reason;
  }
  // More query rows, or none known: skipped, with the reason.
  const MhaGrid full{64, 12, 197, 132};
  const MhaChoice f = choose_mha(90, kH100Optin, 64, true, false, &full);
  EXPECT_FALSE(named(f, "_q16_w4_kv128_s2_ks4")) << f.reason;
  EXPECT_NE(f.reason.find("q16_w4_kv128_s2_ks4: seq_q 197 > 16"), std::string::npos) << f.reason;
  const MhaGrid seventeen{1, 12, 17, 132};
  EXPECT_FALSE(named(choose_mha(90, kH100Optin, 64, true, false, &seventeen), "_q16_w4_kv128_s2_ks4"));
  const MhaChoice none = choose_mha(90, kH100Optin, 64, true, false);
  EXPECT_NE(none.reason.find("query count unknown (row serves <= 16 query rows)"), std::string::npos) << none.reason;
}

TEST(MhaVariants, UnsupportedRequestsFallBackWithReasons) {
  const MhaChoice d40 = choose_mha(87, kOrinOptin, 40, true, false);
  EXPECT_FALSE(d40.fused);
  EXPECT_EQ(d40.variant, nullptr);
  EXPECT_EQ(d40.reason, "fused MHA: no: head_dim 40 not in {32,64,80,96,128}; using unfused cuBLAS + softmax");

  const MhaChoice old_gpu = choose_mha(75, 64 * 1024, 64, true, false);
  EXPECT_FALSE(old_gpu.fused);
  EXPECT_NE(old_gpu.reason.find("sm 75 < min_sm 80"), std::string::npos) << old_gpu.reason;

  const MhaChoice fp32 = choose_mha(87, kOrinOptin, 64, false, false);
  EXPECT_FALSE(fp32.fused);
  EXPECT_NE(fp32.reason.find("not fp16"), std::string::npos) << fp32.reason;

  const MhaChoice forced = choose_mha(87, kOrinOptin, 64, true, true);
  EXPECT_FALSE(forced.fused);
  EXPECT_NE(forced.reason.find("unfused requested"), std::string::npos) << forced.reason;
}

// The rows the CUDA backend times at start-up: every row of the head dim that the device can run, whatever
// its grid window or query limit, in table order; the choose_mha row of any grid is among them.
TEST(MhaVariants, EligibleRowsIgnoreWindowsButNotTheDevice) {
  for (const int d : {32, 64, 80, 96, 128}) {
    const std::vector<const MhaVariant*> rows = mha_eligible_rows(90, kH100Optin, d);
    size_t expected = 0;
    for (const MhaVariant& row : kMhaVariants) expected += row.head_dim == d ? 1 : 0;
    EXPECT_EQ(rows.size(), expected) << d;  // every row fits an H100
    for (size_t i = 0; i < rows.size(); ++i) {
      EXPECT_EQ(rows[i]->head_dim, d);
      if (i > 0) {
        EXPECT_LT(rows[i - 1], rows[i]);  // table order
      }
    }
    for (const MhaGrid g : {MhaGrid{1, 12, 197, 132}, MhaGrid{8, 12, 197, 132}, MhaGrid{64, 12, 197, 132},
                            MhaGrid{64, 12, 1, 132}}) {
      const MhaChoice c = choose_mha(90, kH100Optin, d, true, false, &g);
      ASSERT_TRUE(c.fused) << c.reason;
      EXPECT_NE(std::find(rows.begin(), rows.end(), c.variant), rows.end()) << c.variant->name;
    }
  }
  // A smaller opt-in drops the rows that do not fit, as choose_mha does.
  for (const MhaVariant* row : mha_eligible_rows(86, 60 * 1024, 128)) EXPECT_LE(row->smem_bytes, 60 * 1024);
  EXPECT_LT(mha_eligible_rows(86, 60 * 1024, 128).size(), mha_eligible_rows(90, kH100Optin, 128).size());
  EXPECT_TRUE(mha_eligible_rows(75, 64 * 1024, 64).empty());  // below SM80
  EXPECT_TRUE(mha_eligible_rows(90, kH100Optin, 40).empty());  // no row for head_dim 40
}

}  // namespace
}  // namespace edgevit
