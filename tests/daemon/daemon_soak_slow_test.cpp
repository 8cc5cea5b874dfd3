// Soaks of the real edgevitd (CPU backend, digits model, loopback socket only). Label slow; tools/test.sh
// runs them.
//   TenThousandRequestsFromEightClients: 10,000 requests from 8 clients: zero errors, every answer
//     bit-identical to an in-process Engine (same batch size and row, reported by each answer), RSS and open
//     fds flat from request 1,000 on.
//   HostileClientAndReloadsLoseNothing (issue #22): the same 8 x 1,250 requests while a hostile client
//     cycles through malformed frames, idle connections and image decode bombs, and the config is switched
//     between a good and a broken one with a SIGHUP every second: zero lost or wrong answers for the
//     well-formed clients, and the daemon's RSS never above plan total + decode budget + 32 MB. It prints its
//     figures (requests, client p99, daemon p99, peak RSS, faults survived) for docs/reliability.md.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <mutex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tests/daemon/daemon_fixture.h"
#include "tests/runtime/image_fixtures.h"

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

// ---- the hostile soak ------------------------------------------------------------------------------

constexpr int64_t kDecodeBudget = int64_t{64} << 20;

// The daemon config of the hostile soak; `broken`: one that does not parse (a typo'd key), for the
// SIGHUPs that must fail. Written to a temporary file and renamed, so a reload never reads half a file.
void write_config(const std::string& dir, bool broken) {
  const std::string path = dir + "/edgevitd.yaml";
  {
    std::ofstream out(path + ".tmp");
    out << "model: " << digits_model() << "\ndevice: host-cpu\nthreads: 1\nbatching:\n  max_batch: 8\n"
        << "socket:\n  path: " << dir << "/d.sock\n"
        << "limits:\n  read_deadline_ms: 300\n  max_connections_per_uid: 0\n  decode_budget_bytes: " << kDecodeBudget
        << "\n" << (broken ? "  queue_depht: 8\n" : "  queue_depth: 32\n");
  }
  std::rename((path + ".tmp").c_str(), path.c_str());
}

std::vector<uint8_t> file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

struct Hostile {
  std::atomic<int> bad_frames{0}, idle_connections{0}, bombs{0}, images{0}, non_finite{0}, full_attempts{0}, served_when_full{0};
};

// One round of the hostile client: every kind of bad frame on fresh connections, a decode bomb (refused
// from its header) and an image that decodes within the budget, then eight idle connections held for 1.2 s.
void hostile_round(const std::string& sock, const std::vector<uint8_t>& bomb, const std::vector<uint8_t>& image,
                   Hostile* h, const std::atomic<bool>& stop) {
  const uint16_t tensor = static_cast<uint16_t>(protocol::Op::kInferTensor);
  const uint16_t image_op = static_cast<uint16_t>(protocol::Op::kInferImage);
  auto in = testutil::random_floats(kDigitsPerImage, 77);
  const auto good = tensor_payload(in.data(), {1, 8, 8}, kDigitsPerImage);
  auto with_flags = [](std::vector<uint8_t> f, uint32_t flags) {
    protocol::put_u32(f.data() + 8, flags);
    return f;
  };
  auto nan_in = in;
  nan_in[3] = std::nanf("");
  std::vector<uint8_t> junk(protocol::kInferPrefixBytes, 0);
  for (int i = 0; i < 300; ++i) junk.push_back(static_cast<uint8_t>(i * 29));
  std::vector<std::vector<uint8_t>> frames = {
      frame(tensor, good, 0xdeadbeef),
      frame(tensor, good, protocol::kMagic, 7),
      frame(tensor, {}, protocol::kMagic, protocol::kProtocolVersion, 64 << 20),
      frame(99, {1, 2, 3}),
      with_flags(frame(tensor, good), protocol::kFlagResponse),
      frame(static_cast<uint16_t>(protocol::Op::kHealth), {1}),
      frame(tensor, tensor_payload(in.data(), {3, 8, 8}, kDigitsPerImage)),
      frame(tensor, tensor_payload(nan_in.data(), {1, 8, 8}, kDigitsPerImage)),
      frame(image_op, junk),
  };
  for (const auto& f : frames) {
    if (stop) return;
    const int fd = raw_connect(sock);
    if (fd < 0) continue;
    write_all(fd, f.data(), f.size());
    if (read_answer(fd, 3000) == static_cast<uint32_t>(protocol::ErrorCode::kNonFinite)) ++h->non_finite;
    ++h->bad_frames;
    close(fd);
  }
  {  // truncated frame, then a stall in the middle of a header (the read deadline closes it)
    const auto f = frame(tensor, good);
    int fd = raw_connect(sock);
    if (fd >= 0) write_all(fd, f.data(), f.size() / 2), close(fd), ++h->bad_frames;
    fd = raw_connect(sock);
    if (fd >= 0) write_all(fd, f.data(), 10), read_answer(fd, 2000), close(fd), ++h->bad_frames;
  }
  for (const auto* img : {&bomb, &image}) {
    const int fd = raw_connect(sock);
    if (fd < 0) continue;
    const auto f = frame(image_op, protocol::encode_infer_image_payload(img->data(), img->size(), 1));
    write_all(fd, f.data(), f.size());
    read_answer(fd, 10000);
    ++(img == &bomb ? h->bombs : h->images);
    close(fd);
  }
  // Idle connections that fill every slot the well-formed clients leave (16 - 8), held past the 1 s an
  // eviction needs; then one more connection, which must be served by evicting one of them.
  std::vector<int> idle;
  for (int i = 0; i < 8; ++i) {
    const int fd = raw_connect(sock);
    if (fd >= 0) idle.push_back(fd), ++h->idle_connections;
  }
  for (int t = 0; t < 12 && !stop; ++t) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const int fd = raw_connect(sock);
  if (fd >= 0) {
    ++h->full_attempts;
    const auto f = frame(static_cast<uint16_t>(protocol::Op::kVersion), {});
    write_all(fd, f.data(), f.size());
    if (read_answer(fd, 3000) == 0) ++h->served_when_full;
    close(fd);
  }
  for (int idle_fd : idle) close(idle_fd);
}

double p99_us(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(v.size() * 0.99))];
}

nlohmann::json query(const std::string& sock, protocol::Op op) {
  client::Connection c;
  client::Error err;
  std::string j;
  if (!c.connect(sock, &err) || !c.query(op, &j, &err)) return {};
  return nlohmann::json::parse(j, nullptr, false);
}

TEST(DaemonSoak, HostileClientAndReloadsLoseNothing) {
  constexpr int kClients = 8, kPerClient = 1250, kBatch = 8;
  // The well-formed clients pace their requests over at least this long, so that the hostile rounds and
  // about this many SIGHUPs happen while they run (unpaced, 10,000 requests take ~3 s).
  constexpr double kMinSeconds = 20;
  const std::string dir = make_temp_dir();
  const std::string sock = dir + "/d.sock";
  write_config(dir, false);
  DaemonProcess d;
  ASSERT_TRUE(d.start({"--config", dir + "/edgevitd.yaml", "--config-dir", testutil::source_path("config")}, {},
                      dir + "/log"));
  ASSERT_TRUE(d.wait_socket(sock)) << d.log();
  const auto health0 = query(sock, protocol::Op::kHealth);
  ASSERT_TRUE(health0.is_object());
  // The program's own image (code and libraries, present before any engine) plus what the daemon may hold:
  // its plan, the decode budget and 32 MB.
  const long image_kib = program_image_kib(testutil::binary_path("bin/edgevitd"));
  const long ready_rss = rss_kib(d.pid);
  ASSERT_GT(image_kib, 0) << "edgevitd --version did not run";
  const int64_t bound_kib =
      image_kib + ((health0["memory"]["plan_bytes"].get<int64_t>() + kDecodeBudget + (int64_t{32} << 20)) >> 10);

  ASSERT_TRUE(testutil::write_zero_png(dir + "/bomb.png", 8192, 8191, 6, 16));
  ASSERT_TRUE(testutil::write_zero_png(dir + "/grey.png", 1024, 1024, 0, 8));
  const auto bomb = file_bytes(dir + "/bomb.png");
  const auto grey = file_bytes(dir + "/grey.png");

  const auto inputs = random_inputs(32, 900);
  const auto ref = reference_logits(inputs, kBatch);
  ASSERT_EQ(ref[kBatch][kBatch - 1].size(), inputs.size());

  std::atomic<int> done{0}, failed{0}, mismatched{0};
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::string first_error;
  std::vector<double> client_us;
  std::vector<std::thread> ts;
  const auto t0 = Clock::now();
  for (int t = 0; t < kClients; ++t) {
    ts.emplace_back([&, t] {
      std::vector<double> mine;
      client::Connection c;
      client::Error err;
      for (int j = 0; j < kPerClient; ++j) {
        const size_t i = static_cast<size_t>(t * 13 + j) % inputs.size();
        std::this_thread::sleep_until(t0 + std::chrono::duration_cast<Clock::duration>(
                                               std::chrono::duration<double>(kMinSeconds * j / kPerClient)));
        client::InferAnswer a;
        const auto r0 = Clock::now();
        if ((!c.connected() && !c.connect(sock, &err)) || !c.infer_tensor(inputs[i].data(), kDigitsDims, 3, 5, true, &a, &err)) {
          ++failed;
          std::lock_guard<std::mutex> lock(mu);
          if (first_error.empty()) first_error = err.message;
          continue;
        }
        mine.push_back(std::chrono::duration<double, std::micro>(Clock::now() - r0).count());
        const auto& want = ref.at(a.batch_images).at(a.batch_row).at(i);
        if (a.logits.size() != want.size() || std::memcmp(a.logits.data(), want.data(), want.size() * 4) != 0)
          ++mismatched;
        ++done;
      }
      std::lock_guard<std::mutex> lock(mu);
      client_us.insert(client_us.end(), mine.begin(), mine.end());
    });
  }
  Hostile h;
  std::thread hostile([&] {
    while (!stop) hostile_round(sock, bomb, grey, &h, stop);
  });
  int sighups = 0;
  long peak_rss = 0, peak_anon = 0;
  std::thread signaller([&] {
    auto next = Clock::now();
    while (!stop) {
      peak_rss = std::max(peak_rss, rss_kib(d.pid));
      peak_anon = std::max(peak_anon, anon_kib(d.pid));
      if (Clock::now() >= next) {
        write_config(dir, sighups % 2 == 1);  // good, broken, good, ...
        kill(d.pid, SIGHUP);
        ++sighups;
        next += std::chrono::seconds(1);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  for (auto& t : ts) t.join();
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  stop = true;
  hostile.join();
  signaller.join();
  const auto stats = query(sock, protocol::Op::kStats);
  peak_rss = std::max(peak_rss, rss_kib(d.pid));
  peak_anon = std::max(peak_anon, anon_kib(d.pid));

  EXPECT_EQ(done.load(), kClients * kPerClient);
  EXPECT_EQ(failed.load(), 0) << first_error;
  EXPECT_EQ(mismatched.load(), 0);
  EXPECT_LE(peak_rss, bound_kib) << "RSS above the program image (" << image_kib << " KiB) + plan + decode budget + 32 MB";
  // Under load it grows by no more than the decode budget + 32 MB over what it held when it became ready
  // (its code, libraries and plan): the bound above without the image's and the plan's slack.
  EXPECT_LE(peak_rss - ready_rss, (kDecodeBudget + (int64_t{32} << 20)) >> 10)
      << "RSS grew from " << ready_rss << " KiB when ready to " << peak_rss << " KiB under load";
  EXPECT_GT(h.bombs.load(), 0);
  EXPECT_GE(sighups, static_cast<int>(kMinSeconds) - 1);
  EXPECT_EQ(h.served_when_full.load(), h.full_attempts.load()) << "a connection found every slot idle-held and was refused";
  ASSERT_TRUE(stats.is_object()) << d.log();
  EXPECT_EQ(stats["handler_exceptions"].get<int>(), 0);
  EXPECT_LE(stats["decode"]["peak_bytes"].get<int64_t>(), kDecodeBudget);
  std::printf("soak: %d requests from %d clients in %.1f s (%.0f/s), 0 lost: %d failed, %d mismatched; client p99 %.0f us, "
              "daemon p99 %.0f us (latency_us bucket); peak RSS %ld KiB (anonymous %ld KiB; %ld KiB when ready) of bound %lld KiB (image %ld KiB + plan %lld + decode budget %lld + "
              "32 MiB); survived %d SIGHUPs (reloads ok %d, failed %d), %d bad frames (%d non_finite), %d idle connections "
              "(%d evicted; %d of %d connections served with every slot taken), %d decode bombs, %d images decoded within budget (decode peak %lld bytes); errors %s\n",
              done.load(), kClients, seconds, done.load() / seconds, failed.load(), mismatched.load(), p99_us(client_us),
              stats["latency_us"]["p99"].get<double>(), peak_rss, peak_anon, ready_rss, static_cast<long long>(bound_kib), image_kib,
              static_cast<long long>(health0["memory"]["plan_bytes"].get<int64_t>()), static_cast<long long>(kDecodeBudget),
              sighups, stats["reloads"]["ok"].get<int>(), stats["reloads"]["failed"].get<int>(), h.bad_frames.load(),
              h.non_finite.load(), h.idle_connections.load(), stats["connections"]["evicted_idle"].get<int>(),
              h.served_when_full.load(), h.full_attempts.load(), h.bombs.load(), h.images.load(), static_cast<long long>(stats["decode"]["peak_bytes"].get<int64_t>()),
              stats["errors"].dump().c_str());
  {  // where each `busy` came from (eviction, no slot, queue, decode budget): its first log line
    const std::string log = d.log();
    std::istringstream lines(log);
    std::string line, first_busy;
    int busy_lines = 0;
    while (std::getline(lines, line))
      if (line.find("request error busy") != std::string::npos && ++busy_lines == 1) first_busy = line;
    std::printf("soak: %d busy answers logged; first: %s\n", busy_lines, first_busy.c_str());
  }
  kill(d.pid, SIGTERM);
  EXPECT_EQ(d.wait_exit(10000), 0) << d.log();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace edgevit::daemon
