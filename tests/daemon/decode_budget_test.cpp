// DecodeBudget (serving/decode_budget.h), the daemon's shared image decode budget: grants in
// arrival order, never above the capacity, waits until a deadline, and gives up on a stop.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "serving/decode_budget.h"

namespace edgevit::daemon {
namespace {

using Clock = DecodeBudget::Clock;
using std::chrono::milliseconds;

TEST(DecodeBudget, GrantsWithinCapacityAndTimesOut) {
  DecodeBudget b(100);
  std::atomic<bool> stopping{false};
  ASSERT_TRUE(b.acquire(60, Clock::now(), stopping));
  ASSERT_TRUE(b.acquire(40, Clock::now(), stopping));
  const auto t0 = Clock::now();
  EXPECT_FALSE(b.acquire(1, t0 + milliseconds(100), stopping)) << "full: waits, then gives up";
  EXPECT_GE(Clock::now() - t0, milliseconds(90));
  b.release(60);
  EXPECT_TRUE(b.acquire(50, Clock::now(), stopping));
  const auto s = b.stats();
  EXPECT_EQ(s.in_use, 90);
  EXPECT_EQ(s.peak, 100);
  EXPECT_EQ(s.granted, 3u);
  EXPECT_EQ(s.timed_out, 1u);
  EXPECT_EQ(s.waiting, 0u);
}

TEST(DecodeBudget, WaitersAreServedInArrivalOrderAndNeverExceedTheCapacity) {
  DecodeBudget b(100);
  std::atomic<bool> stopping{false};
  ASSERT_TRUE(b.acquire(100, Clock::now(), stopping));
  std::vector<int> order;
  std::mutex mu;
  std::atomic<int64_t> held{0}, worst{0};
  std::vector<std::thread> ts;
  for (int i = 0; i < 6; ++i) {
    ts.emplace_back([&, i] {
      ASSERT_TRUE(b.acquire(70, Clock::now() + milliseconds(5000), stopping));
      const int64_t now = held += 70;
      for (int64_t w = worst; now > w && !worst.compare_exchange_weak(w, now);) {
      }
      {
        std::lock_guard<std::mutex> lock(mu);
        order.push_back(i);
      }
      std::this_thread::sleep_for(milliseconds(5));
      held -= 70;
      b.release(70);
    });
    std::this_thread::sleep_for(milliseconds(20));  // thread i queues before thread i + 1
  }
  b.release(100);
  for (auto& t : ts) t.join();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4, 5}));
  EXPECT_LE(worst.load(), 100);
  EXPECT_EQ(b.stats().peak, 100);
  EXPECT_EQ(b.stats().waited, 6u);
}

TEST(DecodeBudget, AStopEndsTheWait) {
  DecodeBudget b(10);
  std::atomic<bool> stopping{false};
  ASSERT_TRUE(b.acquire(10, Clock::now(), stopping));
  std::thread stopper([&] {
    std::this_thread::sleep_for(milliseconds(50));
    stopping = true;
  });
  const auto t0 = Clock::now();
  EXPECT_FALSE(b.acquire(5, t0 + milliseconds(10000), stopping, milliseconds(10)));
  EXPECT_LT(Clock::now() - t0, milliseconds(2000));
  stopper.join();
}

}  // namespace
}  // namespace edgevit::daemon
