// 10,000 requests from 8 concurrent clients against the real edgevitd (CPU backend, digits model): zero
// errors, every answer bit-identical to an in-process Engine (same batch size and row, reported by each
// answer), and the daemon's RSS and open fds flat from request 1,000 on. Label slow (6 s on an idle 2-core
// machine, minutes on a loaded one); daemon_server_test runs a smaller version in the fast suite.
#include <gtest/gtest.h>

#include <atomic>

#include "tests/daemon/daemon_fixture.h"

namespace edgevit::daemon {
namespace {

using namespace testing;

TEST(DaemonSoak, TenThousandRequestsFromEightClients) {
  constexpr int kClients = 8, kTotal = 10000, kBatch = 8;
  const std::string dir = make_temp_dir();
  const std::string cfg = dir + "/edgevitd.yaml";
  std::ofstream(cfg) << "model: " << digits_model() << "\ndevice: host-cpu\nthreads: 1\nbatching:\n  max_batch: " << kBatch
                     << "\nsocket:\n  path: " << dir << "/d.sock\n";
  DaemonProcess d;
  ASSERT_TRUE(d.start({"--config", cfg, "--config-dir", testutil::source_path("config")}, {}, dir + "/log"));
  ASSERT_TRUE(d.wait_socket(dir + "/d.sock")) << d.log();

  const auto inputs = random_inputs(32, 500);
  const auto ref = reference_logits(inputs, kBatch);
  ASSERT_EQ(ref[kBatch][kBatch - 1].size(), inputs.size());

  std::atomic<int> done{0}, failed{0}, mismatched{0}, finished{0};
  std::atomic<bool> release{false};  // clients stay connected until the last sample is taken
  std::vector<std::thread> ts;
  for (int t = 0; t < kClients; ++t) {
    ts.emplace_back([&, t] {
      client::Connection c;
      client::Error err;
      if (!c.connect(dir + "/d.sock", &err)) {
        failed += kTotal / kClients;
        return;
      }
      for (int j = 0; j < kTotal / kClients; ++j) {
        const size_t i = static_cast<size_t>(t * 13 + j) % inputs.size();
        client::InferAnswer a;
        if (!c.infer_tensor(inputs[i].data(), kDigitsDims, 3, 5, true, &a, &err)) {
          ++failed;
          if (!c.connected() && !c.connect(dir + "/d.sock", &err)) return;
        } else {
          const auto& want = ref.at(a.batch_images).at(a.batch_row).at(i);
          if (a.logits.size() != want.size() || std::memcmp(a.logits.data(), want.data(), want.size() * 4) != 0)
            ++mismatched;
        }
        ++done;
      }
      ++finished;
      while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    });
  }
  while (done < 1000) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const long rss_1000 = rss_kib(d.pid);
  const int fds_1000 = count_fds(d.pid);
  while (finished < kClients) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const long rss_end = rss_kib(d.pid);
  const int fds_end = count_fds(d.pid);
  release = true;
  for (auto& t : ts) t.join();
  EXPECT_EQ(done.load(), kTotal);
  EXPECT_EQ(failed.load(), 0) << d.log();
  EXPECT_EQ(mismatched.load(), 0);
  EXPECT_EQ(fds_end, fds_1000);
  // Flat: pools are sized at start-up; 256 KiB leaves room for page-granular noise (the stack and malloc
  // arenas touching a new page), far below what a per-request leak of even 32 bytes would add (280 KiB).
  EXPECT_LE(rss_end - rss_1000, 256) << "RSS grew from " << rss_1000 << " KiB to " << rss_end << " KiB";
  kill(d.pid, SIGTERM);
  EXPECT_EQ(d.wait_exit(5000), 0);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace edgevit::daemon
