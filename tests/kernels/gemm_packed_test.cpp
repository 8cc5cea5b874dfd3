// PackedLinear (libxsmm JIT kernels over weights packed once) against linear_ref (double): every epilogue,
// column tails (N % 64), row tails (M % 32), fewer rows than planned (smaller batches), 1 and 2 threads,
// and bit-identical results across runs and thread counts. Skipped (with the reason) where the build or
// CPU has no libxsmm: OpenBLAS's linear_f32 serves there and linear_test covers it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/cpu/kernels.h"
#include "tests/testutil/testutil.h"

namespace edgevit {
namespace {

const float kNaN = std::numeric_limits<float>::quiet_NaN();

// The reason is one tools/skips.sh allows in the aarch64 stage only (no libxsmm JIT there).
#define SKIP_WITHOUT_PACKED_GEMM()                                                                    \
  do {                                                                                               \
    if (!cpu_packed_gemm_available())                                                                \
      GTEST_SKIP() << "skipped: no packed GEMM in this build or on this CPU (" << cpu_gemm_library() \
                   << ")";                                                                           \
  } while (0)

// Packs a copy of w for max_rows rows and runs m rows; compares with linear_ref on the plain weights.
void check(int m, int max_rows, int n, int k, Epilogue ep, bool with_bias, uint32_t seed,
           PackedTiling tiling = PackedTiling()) {
  const int k_chunk = tiling.k_chunk;
  SCOPED_TRACE("m=" + std::to_string(m) + " max_rows=" + std::to_string(max_rows) + " n=" + std::to_string(n) +
               " k=" + std::to_string(k) + " k_chunk=" + std::to_string(k_chunk) + " ep=" + std::to_string(static_cast<int>(ep)) +
               (with_bias ? " bias" : " no-bias"));
  const auto x = testutil::random_floats(static_cast<size_t>(m) * k, seed);
  const auto w = testutil::random_floats(static_cast<size_t>(n) * k, seed + 1);
  const auto b = testutil::random_floats(n, seed + 2);
  const size_t out = static_cast<size_t>(m) * n;
  std::vector<float> y = ep == Epilogue::kResidualAdd ? testutil::random_floats(out, seed + 3)
                                                      : std::vector<float>(out, kNaN);
  std::vector<float> ref = y;
  const float* bias = with_bias ? b.data() : nullptr;
  linear_ref(x.data(), w.data(), bias, ref.data(), m, n, k, ep);

  std::vector<float> packed = w;
  PackedLinear lin;
  ASSERT_EQ(lin.init(packed.data(), max_rows, n, k, ep, tiling), "");
  ASSERT_TRUE(lin.ready());
  if (n > 1 && k > 1) {
    EXPECT_NE(std::memcmp(packed.data(), w.data(), sizeof(float) * w.size()), 0) << "not re-laid out";
  }
  lin.run(x.data(), bias, y.data(), m);
  ASSERT_TRUE(testutil::all_finite(ref.data(), out));
  EXPECT_TRUE(testutil::all_finite(y.data(), out));
  EXPECT_LE(testutil::rel_error(y.data(), ref.data(), out), tol::kFp32Kernel);
}

TEST(PackedLinear, AllEpiloguesAndTails) {
  SKIP_WITHOUT_PACKED_GEMM();
  cpu_init_threads(1);
  uint32_t seed = 10;
  // {m, n, k}: ViT-Ti shapes, the head (m = 1, n = 1000: a 40-wide column tail), and odd sizes below one
  // column block / one row tile.
  const int shapes[][3] = {{1, 1, 1}, {3, 17, 5}, {17, 3, 197}, {197, 576, 192}, {197, 192, 768},
                           {197, 768, 192}, {1, 1000, 192}, {5, 7, 1}, {33, 65, 9}, {64, 128, 64}};
  for (const auto& s : shapes)
    for (Epilogue ep : {Epilogue::kNone, Epilogue::kGelu, Epilogue::kResidualAdd, Epilogue::kGeluTanh})
      for (bool bias : {true, false}) check(s[0], s[0], s[1], s[2], ep, bias, seed += 10);
}

// K in chunks (first chunk writes or accumulates, later ones accumulate), with and without a K tail.
TEST(PackedLinear, KChunks) {
  SKIP_WITHOUT_PACKED_GEMM();
  cpu_init_threads(1);
  uint32_t seed = 300;
  for (int k_chunk : {1, 64, 100, 256})
    for (Epilogue ep : {Epilogue::kNone, Epilogue::kGelu, Epilogue::kResidualAdd, Epilogue::kGeluTanh})
      check(45, 45, 70, 197, ep, true, seed += 10, {0, PackedLinear::kTileRows, k_chunk});
  check(197, 197, 192, 3072, Epilogue::kResidualAdd, true, seed += 10);  // ViT-B fc2: 12 chunks of 256
}

// Planned for batch 4 (788 rows), run with 1, 2 and 3 images: every row tail has its kernel.
TEST(PackedLinear, FewerRowsThanPlanned) {
  SKIP_WITHOUT_PACKED_GEMM();
  cpu_init_threads(1);
  uint32_t seed = 500;
  for (int images = 1; images <= 4; ++images)
    check(197 * images, 197 * 4, 192, 64, Epilogue::kResidualAdd, true, seed += 10);
}

TEST(PackedLinear, TwoThreads) {
  SKIP_WITHOUT_PACKED_GEMM();
  cpu_init_threads(2);
  uint32_t seed = 1000;
  for (Epilogue ep : {Epilogue::kNone, Epilogue::kGelu, Epilogue::kResidualAdd, Epilogue::kGeluTanh})
    check(197, 197, 768, 192, ep, true, seed += 10);
  cpu_init_threads(1);
}

// Tile bounds do not depend on the thread count, so neither do the bits; and runs repeat exactly.
// N = 576 has 32-row tiles, N = 192 (ViT-Ti proj / fc2 with the residual epilogue) 16-row ones.
TEST(PackedLinear, BitIdenticalAcrossRunsAndThreads) {
  SKIP_WITHOUT_PACKED_GEMM();
  const int m = 197, k = 192;
  for (int n : {576, 192}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    const Epilogue ep = n == 576 ? Epilogue::kGelu : Epilogue::kResidualAdd;
    const auto x = testutil::random_floats(static_cast<size_t>(m) * k, 7);
    auto w = testutil::random_floats(static_cast<size_t>(n) * k, 8);
    const auto b = testutil::random_floats(n, 9);
    const auto y0 = testutil::random_floats(static_cast<size_t>(m) * n, 10);  // the residual
    PackedLinear lin;
    ASSERT_EQ(lin.init(w.data(), m, n, k, ep), "");
    std::vector<float> first = y0, again;
    cpu_init_threads(1);
    lin.run(x.data(), b.data(), first.data(), m);
    for (int threads : {1, 2, 3, 16, 1}) {
      cpu_init_threads(threads);
      again = y0;
      lin.run(x.data(), b.data(), again.data(), m);
      EXPECT_EQ(std::memcmp(first.data(), again.data(), sizeof(float) * first.size()), 0) << threads << " threads";
    }
  }
  cpu_init_threads(1);
}

// The class-token tail's qkv (runtime/backend_cpu.cpp): leading column blocks computed on the first rows of
// each image only. Those elements and every element of the other columns are bit-identical to the full run;
// the skipped ones keep what y held. 2 images of 197 tokens, ViT-Ti's qkv (N = 576, Q = the first 192), the
// first 1 and 3 rows per image, 1 and 2 threads; lead_cols not a multiple of the column block (48 here) rounds
// down to whole blocks.
TEST(PackedLinear, LeadColumnsOnTheLeadRowsOnly) {
  SKIP_WITHOUT_PACKED_GEMM();
  const int period = 197, m = 2 * period, n = 576, k = 192;
  const auto x = testutil::random_floats(static_cast<size_t>(m) * k, 71);
  std::vector<float> w = testutil::random_floats(static_cast<size_t>(n) * k, 72);
  const auto b = testutil::random_floats(n, 73);
  PackedLinear lin;
  ASSERT_EQ(lin.init(w.data(), m, n, k, Epilogue::kNone), "");
  for (const int threads : {1, 2}) {
    cpu_init_threads(threads);
    std::vector<float> full(static_cast<size_t>(m) * n, kNaN);
    lin.run(x.data(), b.data(), full.data(), m);
    for (const int lead_rows : {1, 3}) {
      for (const int lead_cols : {192, 200}) {
        SCOPED_TRACE("threads " + std::to_string(threads) + " lead_rows " + std::to_string(lead_rows) +
                     " lead_cols " + std::to_string(lead_cols));
        std::vector<float> part(static_cast<size_t>(m) * n, kNaN);
        lin.run(x.data(), b.data(), part.data(), m, lead_cols, period, lead_rows);
        const int lead_end = lead_cols / lin.col_block() * lin.col_block();
        int computed = 0, skipped = 0;
        for (int r = 0; r < m; ++r) {
          for (int c = 0; c < n; ++c) {
            const float got = part[static_cast<size_t>(r) * n + c], want = full[static_cast<size_t>(r) * n + c];
            if (c < lead_end && r % period >= lead_rows) {
              skipped += std::isnan(got) ? 1 : 0;
            } else {
              computed += std::memcmp(&got, &want, sizeof got) == 0 ? 1 : 0;
            }
          }
        }
        const int lead_skipped = lead_end * (m - 2 * lead_rows);
        EXPECT_EQ(skipped, lead_skipped);
        EXPECT_EQ(computed, m * n - lead_skipped);
      }
    }
  }
  // Not a whole number of periods: the full run.
  cpu_init_threads(1);
  std::vector<float> full(static_cast<size_t>(m - 1) * n), part(full.size(), kNaN);
  lin.run(x.data(), b.data(), full.data(), m - 1);
  lin.run(x.data(), b.data(), part.data(), m - 1, 192, period, 1);
  EXPECT_EQ(std::memcmp(full.data(), part.data(), sizeof(float) * full.size()), 0);
}

// Other tile geometries (column block, tile rows, K chunk, with and without prefetching the next block's weights;
// at 1 thread the default prefetches; K chunks outermost or not: the default picks them for K > N at 1 thread,
// as for the first check() shape here): each matches the reference (with a 16-wide column
// tail and odd row tails). Where no geometry leaves a column tail (N = 384, as ViT's N are multiples of 48 and 64),
// each gives the default geometry's bits exactly: the kernels sum K in one chain per output whatever the tile.
// (libxsmm's narrow tail kernels may use several chains, so a geometry that moves a column tail can change
// the last bits: a fixed geometry keeps runs bit-identical, a changed one need not.)
TEST(PackedLinear, TilingChangesSpeedNotBits) {
  SKIP_WITHOUT_PACKED_GEMM();
  const PackedTiling tilings[] = {{},
                                  {48, 32, 256, false},
                                  {64, 32, 256, true},
                                  {64, 32, 256, false},
                                  {32, 28, 256},
                                  {32, 64, 128},
                                  {48, 24, 96},
                                  {128, 12, 384},
                                  {64, 24, 128},
                                  {48, 32, 256, true, 1},
                                  {48, 32, 128, false, 1},
                                  {32, 28, 256, true, 1},
                                  {64, 24, 96, true, 1},
                                  {48, 32, 256, true, 0}};
  uint32_t seed = 910;
  for (const auto& t : tilings)
    for (Epilogue ep : {Epilogue::kNone, Epilogue::kGelu, Epilogue::kResidualAdd, Epilogue::kGeluTanh})
      check(197, 197, 336, 384, ep, true, seed += 10, t);
  const int m = 197, n = 384, k = 384;
  const auto x = testutil::random_floats(static_cast<size_t>(m) * k, 900);
  const auto w = testutil::random_floats(static_cast<size_t>(n) * k, 901);
  const auto b = testutil::random_floats(n, 902);
  for (int threads : {1, 3}) {
    cpu_init_threads(threads);
    std::vector<float> first;
    for (const auto& t : tilings) {
      SCOPED_TRACE("col_block " + std::to_string(t.col_block) + " tile_rows " + std::to_string(t.tile_rows) +
                   " k_chunk " + std::to_string(t.k_chunk) + " prefetch " + std::to_string(t.prefetch_next_block) + " k_outer " + std::to_string(t.k_outer) +
                   ", " + std::to_string(threads) + " threads");
      std::vector<float> packed = w, y(static_cast<size_t>(m) * n, 0.f);
      PackedLinear lin;
      ASSERT_EQ(lin.init(packed.data(), m, n, k, Epilogue::kGelu, t), "");
      lin.run(x.data(), b.data(), y.data(), m);
      if (first.empty()) {
        first = y;
      } else {
        EXPECT_EQ(std::memcmp(first.data(), y.data(), sizeof(float) * y.size()), 0);
      }
    }
  }
  cpu_init_threads(1);
}

// The default takes K chunks outermost (serial runs) exactly where K > N: ViT's fc2, not qkv, proj or fc1.
TEST(PackedLinear, KOuterOrderWhereTheInputIsWiderThanTheOutput) {
  SKIP_WITHOUT_PACKED_GEMM();
  const struct {
    int n, k;
    bool k_outer;
  } shapes[] = {{768, 3072, true}, {192, 768, true}, {2304, 768, false}, {768, 768, false}, {3072, 768, false}};
  for (const auto& s : shapes) {
    std::vector<float> w(static_cast<size_t>(s.n) * s.k, 0.f);
    PackedLinear lin;
    ASSERT_EQ(lin.init(w.data(), 4, s.n, s.k, Epilogue::kNone), "");
    EXPECT_EQ(lin.k_outer(), s.k_outer) << s.n << " x " << s.k;
    ASSERT_EQ(lin.init(w.data(), 4, s.n, s.k, Epilogue::kNone, {0, 32, 256, true, 0}), "");
    EXPECT_FALSE(lin.k_outer());
  }
}

// A row's outputs must not depend on where it sits in the batch or how many rows run with it (the daemon's
// self-check and batching rely on it): with the default geometry, for N with and without column tails (10 and
// 1000: the head; 64 and 256: vit-digits' proj and fc1; 192, 576), each of a few rows gives the same bits
// alone, in a batch of 40 at its own place, and moved to other places in a batch of 17.
TEST(PackedLinear, RowBitsDoNotDependOnItsPlaceInTheBatch) {
  SKIP_WITHOUT_PACKED_GEMM();
  cpu_init_threads(1);
  const int k = 64, max_rows = 40;
  uint32_t seed = 1200;
  for (const int n : {10, 64, 192, 256, 576, 1000})
    for (Epilogue ep : {Epilogue::kNone, Epilogue::kGelu, Epilogue::kGeluTanh}) {
      SCOPED_TRACE("n " + std::to_string(n) + " epilogue " + std::to_string(static_cast<int>(ep)));
      const auto x = testutil::random_floats(static_cast<size_t>(max_rows) * k, seed += 10);
      std::vector<float> w = testutil::random_floats(static_cast<size_t>(n) * k, seed += 10);
      const auto b = testutil::random_floats(n, seed += 10);
      PackedLinear lin;
      ASSERT_EQ(lin.init(w.data(), max_rows, n, k, ep), "");
      std::vector<float> all(static_cast<size_t>(max_rows) * n);
      lin.run(x.data(), b.data(), all.data(), max_rows);
      for (const int row : {0, 5, 33, 39}) {
        std::vector<float> alone(n);
        lin.run(x.data() + static_cast<size_t>(row) * k, b.data(), alone.data(), 1);
        EXPECT_EQ(std::memcmp(alone.data(), all.data() + static_cast<size_t>(row) * n, sizeof(float) * n), 0)
            << "row " << row << " alone vs in a batch of 40";
        for (const int place : {0, 7, 16}) {
          std::vector<float> xs(static_cast<size_t>(17) * k, 0.5f), ys(static_cast<size_t>(17) * n);
          std::memcpy(xs.data() + static_cast<size_t>(place) * k, x.data() + static_cast<size_t>(row) * k,
                      sizeof(float) * k);
          lin.run(xs.data(), b.data(), ys.data(), 17);
          EXPECT_EQ(std::memcmp(alone.data(), ys.data() + static_cast<size_t>(place) * n, sizeof(float) * n), 0)
              << "row " << row << " at place " << place << " of 17";
        }
      }
    }
}

TEST(PackedLinear, RefusesBadTilingWithReason) {
  SKIP_WITHOUT_PACKED_GEMM();
  float w[4] = {1.f, 2.f, 3.f, 4.f};
  for (const PackedTiling t : {PackedTiling{8, 32, 256}, PackedTiling{40, 32, 256},
                                       PackedTiling{144, 32, 256}, PackedTiling{64, 0, 256},
                                       PackedTiling{64, 65, 256}, PackedTiling{64, 32, 0}}) {
    PackedLinear lin;
    const std::string why = lin.init(w, 2, 2, 2, Epilogue::kNone, t);
    EXPECT_NE(why.find("bad tiling"), std::string::npos) << why;
    EXPECT_FALSE(lin.ready());
    EXPECT_EQ(w[1], 2.f);
  }
}

TEST(PackedLinear, RefusesEmptyShapeWithReason) {
  SKIP_WITHOUT_PACKED_GEMM();
  float w[1] = {1.f};
  PackedLinear lin;
  EXPECT_NE(lin.init(w, 1, 1, 0, Epilogue::kNone), "");
  EXPECT_FALSE(lin.ready());
  EXPECT_EQ(w[0], 1.f);
}

}  // namespace
}  // namespace edgevit
