// The INT8 GEMM tuning records and the cuBLASLt IMMA candidate's admission (runtime/int8_gemm_tuning.h), on any
// host: the room after the tile counters in the plan's INT8 workspace decides which shapes IMMA is timed at
// (ViT-B/16 at the plan's sizes), the margin decides when it is pinned, and every record says what became of it.
#include "runtime/int8_gemm_tuning.h"

#include <gtest/gtest.h>

#include "runtime/plan.h"

namespace edgevit {
namespace {

TEST(Int8GemmTuning, ImmaOutputMustFitAfterTheCounters) {
  const int64_t ws = kCudaI8SplitCounterBytes + kCudaI8SplitPartialsMaxBytes;  // a capped plan (ViT-B batch 8)
  EXPECT_EQ(lt_imma_room_bytes(ws), kCudaI8SplitPartialsMaxBytes);
  EXPECT_EQ(lt_imma_room_bytes(0), 0);
  EXPECT_EQ(lt_imma_room_bytes(kCudaI8SplitCounterBytes - 256), 0);
  EXPECT_TRUE(lt_imma_fits(197, 3072, ws));       // ViT-B b1 fc1: 2.4 MB
  EXPECT_TRUE(lt_imma_fits(1576, 2304, ws));      // b8 qkv: 14.5 MB
  EXPECT_FALSE(lt_imma_fits(1576, 3072, ws));     // b8 fc1: 19.4 MB
  EXPECT_FALSE(lt_imma_fits(12608, 768, ws));     // b64 proj: 38.7 MB
  EXPECT_TRUE(lt_imma_fits(4096, 1024, ws));      // exactly the room
  EXPECT_FALSE(lt_imma_fits(4097, 1024, ws));
  EXPECT_FALSE(lt_imma_fits(0, 8, ws));
  EXPECT_FALSE(lt_imma_fits(1, 8, 0));            // no INT8 workspace (CPU plans)
}

TEST(Int8GemmTuning, ImmaIsPinnedOnlyWhenFasterByTheMargin) {
  EXPECT_TRUE(lt_imma_wins(9.0, 10.0, 0.97));
  EXPECT_FALSE(lt_imma_wins(9.8, 10.0, 0.97));  // 2% faster: the row stays
  EXPECT_FALSE(lt_imma_wins(11.0, 10.0, 0.97));
  EXPECT_FALSE(lt_imma_wins(0.0, 10.0, 0.97));  // not timed
  EXPECT_TRUE(lt_imma_wins(5.0, 0.0, 0.97));    // no row timed (forced)
}

TEST(Int8GemmTuning, RecordsSayWhatBecameOfEachCandidate) {
  const int64_t ws = kCudaI8SplitCounterBytes + (int64_t{1} << 20);
  Int8GemmTiming t;
  t.batch = 8;
  t.row = "i8_128x64x128_w4_s3";
  EXPECT_EQ(int8_gemm_choice(t), "i8_128x64x128_w4_s3");
  EXPECT_EQ(int8_gemm_detail(t, ws), "the table's first row without split-K, untimed");

  t.rows_timed = 30;
  t.split_timed = 5;
  t.split_skipped = 2;
  t.first_us = 12.5;
  t.row_us = 10.25;
  t.lt = LtImmaState::kNoRoom;
  t.lt_acc_bytes = 4 << 20;
  const std::string no_room = int8_gemm_detail(t, ws);
  EXPECT_NE(no_room.find("30 rows timed (5 split-K), first 12.50 us, fastest row 10.25 us"), std::string::npos)
      << no_room;
  EXPECT_NE(no_room.find("2 split-K rows not timed"), std::string::npos) << no_room;
  EXPECT_NE(no_room.find("cuBLASLt IMMA not timed: its 4194304-byte int32 output exceeds the 1048576 bytes"),
            std::string::npos)
      << no_room;

  t.lt = LtImmaState::kNoAlgorithm;
  t.x_u8 = true;
  EXPECT_NE(int8_gemm_detail(t, ws).find("no uint8 x int8 algorithm"), std::string::npos);
  t.x_u8 = false;
  EXPECT_NE(int8_gemm_detail(t, ws).find("heuristic offered no algorithm"), std::string::npos);

  t.lt = LtImmaState::kTimed;
  t.lt_timed = 8;
  t.lt_us = 11.0;
  t.lt_algo = "id 21 tile 18 stages 8 splitK 1";
  EXPECT_NE(int8_gemm_detail(t, ws).find("cuBLASLt IMMA: 8 algorithms timed, best 11.00 us (slower)"),
            std::string::npos);
  EXPECT_EQ(int8_gemm_choice(t), "i8_128x64x128_w4_s3");
  t.lt_chosen = true;
  EXPECT_EQ(int8_gemm_choice(t), "lt_imma id 21 tile 18 stages 8 splitK 1");
  EXPECT_NE(int8_gemm_detail(t, ws).find("(chosen)"), std::string::npos);

  t.lt = LtImmaState::kForced;
  EXPECT_NE(int8_gemm_detail(t, ws).find("cuBLASLt IMMA forced"), std::string::npos);
}

}  // namespace
}  // namespace edgevit
