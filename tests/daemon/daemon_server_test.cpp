// In-process edgevitd (serving/server.h) on the digits model over loopback Unix sockets: answers
// bit-identical to an in-process Engine, malformed frames, busy, peer allow-list, socket mode, hot reload
// (beside, drain-and-replace, rollback) under load.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <atomic>
#include <nlohmann/json.hpp>

#include "runtime/plan.h"
#include "tests/daemon/daemon_fixture.h"
#include "tests/testutil/testutil.h"

namespace edgevit::daemon {
namespace {

using namespace testing;

nlohmann::json health(const std::string& sock) {
  client::Connection c;
  client::Error err;
  std::string j;
  if (!c.connect(sock, &err) || !c.query(protocol::Op::kHealth, &j, &err)) return {};
  return nlohmann::json::parse(j);
}

// `clients` threads each send `per_client` tensor requests and check every answer bit for bit.
struct LoadResult {
  std::atomic<int> ok{0}, failed{0}, mismatched{0};
  std::string first_error;
  std::mutex mu;
};

void run_load(const std::string& sock, int clients, int per_client, const std::vector<std::vector<float>>& inputs,
              const Reference& ref, LoadResult* r, std::atomic<bool>* stop = nullptr) {
  std::vector<std::thread> ts;
  for (int t = 0; t < clients; ++t) {
    ts.emplace_back([&, t] {
      client::Connection c;
      client::Error err;
      if (!c.connect(sock, &err)) {
        ++r->failed;
        return;
      }
      for (int j = 0; j < per_client || (stop && !*stop); ++j) {
        if (stop && *stop) break;
        const size_t i = static_cast<size_t>(t * 7 + j) % inputs.size();
        client::InferAnswer a;
        if (!c.infer_tensor(inputs[i].data(), kDigitsDims, 3, 3, true, &a, &err)) {
          ++r->failed;
          std::lock_guard<std::mutex> lock(r->mu);
          if (r->first_error.empty()) r->first_error = err.message;
          if (!c.connected() && !c.connect(sock, &err)) return;
          continue;
        }
        const auto& want = ref.at(a.batch_images).at(a.batch_row).at(i);
        const bool same = a.logits.size() == want.size() &&
                          std::memcmp(a.logits.data(), want.data(), want.size() * sizeof(float)) == 0 &&
                          a.topk.size() == 1 && a.topk[0].size() == 3 &&
                          a.topk[0][0].index == testutil::argmax_rows(want.data(), 1, static_cast<int>(want.size()))[0];
        if (same) ++r->ok; else ++r->mismatched;
      }
    });
  }
  for (auto& t : ts) t.join();
}

class DaemonServer : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = make_temp_dir();
    ASSERT_FALSE(dir_.empty());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST_F(DaemonServer, ConcurrentClientsGetBitIdenticalAnswers) {
  EDGEVIT_SKIP_IF_EMULATED();
  DaemonConfig cfg = digits_config(dir_, 8);
  auto server = Server::start(server_options(cfg));
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  const auto inputs = random_inputs(16, 100);
  const auto ref = reference_logits(inputs, 8);
  ASSERT_EQ(ref[8][7].size(), inputs.size());
  LoadResult r;
  run_load(cfg.socket_path, 8, 150, inputs, ref, &r);
  EXPECT_EQ(r.failed.load(), 0) << r.first_error;
  EXPECT_EQ(r.mismatched.load(), 0);
  EXPECT_EQ(r.ok.load(), 8 * 150);
  const auto stats = nlohmann::json::parse((*server)->stats_json());
  EXPECT_EQ(stats["requests_ok"].get<int>(), 8 * 150);
  EXPECT_GE(stats["batches"].get<int>(), 1);
}

TEST_F(DaemonServer, ImageRequestMatchesTheCliPath) {
  DaemonConfig cfg = digits_config(dir_, 8);
  auto server = Server::start(server_options(cfg));
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  client::Connection c;
  client::Error err;
  ASSERT_TRUE(c.connect(cfg.socket_path, &err)) << err.message;
  for (int d = 0; d < 10; ++d) {
    std::ifstream in(testutil::source_path("tests/data/digits/digit-" + std::to_string(d) + ".png"), std::ios::binary);
    std::vector<uint8_t> png((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    client::InferAnswer a;
    ASSERT_TRUE(c.infer_image(png.data(), png.size(), 1, false, &a, &err)) << err.message;
    ASSERT_EQ(a.topk.size(), 1u);
    EXPECT_EQ(a.topk[0][0].index, d);
    EXPECT_EQ(a.topk[0][0].label, std::to_string(d));
    EXPECT_GT(a.topk[0][0].score, 0.2f);  // well above chance (0.1)
  }
}

TEST_F(DaemonServer, MalformedFramesGetTypedErrorsAndOthersDoNotStall) {
  DaemonConfig cfg = digits_config(dir_, 8);
  cfg.max_frame_bytes = 4096;
  cfg.read_deadline_ms = 400;
  cfg.max_connections_per_uid = 0;  // every slot is checked from this one uid at the end
  auto server = Server::start(server_options(cfg));
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  const std::string& sock = cfg.socket_path;
  const auto in = testutil::random_floats(kDigitsPerImage, 5);
  const auto good = tensor_payload(in.data(), {1, 8, 8}, kDigitsPerImage);
  const uint16_t tensor_op = static_cast<uint16_t>(protocol::Op::kInferTensor);

  // A well-behaved client keeps sending during all of it; no request may take longer than the deadline.
  std::atomic<bool> stop{false};
  std::atomic<int> good_ok{0}, good_failed{0};
  std::atomic<int64_t> worst_us{0};
  std::thread bystander([&] {
    client::Connection c;
    client::Error err;
    if (!c.connect(sock, &err)) {
      ++good_failed;
      return;
    }
    while (!stop) {
      client::InferAnswer a;
      const auto t0 = Clock::now();
      if (c.infer_tensor(in.data(), kDigitsDims, 3, 1, false, &a, &err)) ++good_ok; else ++good_failed;
      const int64_t us = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0).count();
      if (us > worst_us) worst_us = us;
    }
  });

  auto expect_error = [&](const std::vector<uint8_t>& bytes, uint32_t code, bool closed_after) {
    const int fd = raw_connect(sock);
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(write_all(fd, bytes.data(), bytes.size()));
    EXPECT_EQ(read_answer(fd), code);
    if (closed_after) {
      EXPECT_EQ(read_answer(fd, 2000), client::kTransportError) << "connection should be closed";
    } else {
      // The connection is still usable.
      const auto f = frame(tensor_op, good);
      ASSERT_TRUE(write_all(fd, f.data(), f.size()));
      EXPECT_EQ(read_answer(fd), 0u);
    }
    close(fd);
  };
  using E = protocol::ErrorCode;
  expect_error(frame(tensor_op, good, 0xdeadbeef), static_cast<uint32_t>(E::kBadFrame), true);
  expect_error(frame(tensor_op, good, protocol::kMagic, 99), static_cast<uint32_t>(E::kBadVersion), true);
  expect_error(frame(tensor_op, {}, protocol::kMagic, protocol::kProtocolVersion, 1 << 20),
               static_cast<uint32_t>(E::kTooLarge), true);
  const auto wrong = testutil::random_floats(3 * 8 * 8, 6);
  expect_error(frame(tensor_op, tensor_payload(wrong.data(), {3, 8, 8}, wrong.size())), static_cast<uint32_t>(E::kBadShape),
               false);
  expect_error(frame(tensor_op, tensor_payload(in.data(), {1, 8, 4}, 32)), static_cast<uint32_t>(E::kBadShape), false);
  auto short_data = good;
  short_data.resize(short_data.size() - 4);
  expect_error(frame(tensor_op, short_data), static_cast<uint32_t>(E::kBadFrame), false);
  expect_error(frame(77, {1, 2, 3}), static_cast<uint32_t>(E::kUnknownOp), false);
  std::vector<uint8_t> junk_image(protocol::kInferPrefixBytes, 0);
  for (int i = 0; i < 200; ++i) junk_image.push_back(static_cast<uint8_t>(i * 37));
  expect_error(frame(static_cast<uint16_t>(protocol::Op::kInferImage), junk_image), static_cast<uint32_t>(E::kBadImage),
               false);

  // Stalling writer: half a header, then nothing -> timeout error after the read deadline, then closed.
  {
    const int fd = raw_connect(sock);
    const auto f = frame(tensor_op, good);
    ASSERT_TRUE(write_all(fd, f.data(), 10));
    const auto t0 = Clock::now();
    EXPECT_EQ(read_answer(fd, 3000), static_cast<uint32_t>(E::kTimeout));
    EXPECT_LT(Clock::now() - t0, std::chrono::milliseconds(cfg.read_deadline_ms + 1000));
    close(fd);
  }
  // Stalling mid-payload.
  {
    const int fd = raw_connect(sock);
    const auto f = frame(tensor_op, good);
    ASSERT_TRUE(write_all(fd, f.data(), f.size() - 20));
    EXPECT_EQ(read_answer(fd, 3000), static_cast<uint32_t>(E::kTimeout));
    close(fd);
  }
  // Truncated: the client closes inside the payload; vanishing: the client closes before its answer.
  for (int k = 0; k < 2; ++k) {
    const int fd = raw_connect(sock);
    const auto f = frame(tensor_op, good);
    ASSERT_TRUE(write_all(fd, f.data(), k == 0 ? f.size() / 2 : f.size()));
    close(fd);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  stop = true;
  bystander.join();
  EXPECT_EQ(good_failed.load(), 0);
  EXPECT_GT(good_ok.load(), 10);
  EXPECT_LT(worst_us.load(), cfg.read_deadline_ms * 1000) << "a well-behaved client stalled";
  // Slots of the misbehaving connections were all returned: every slot is usable again. The server sees
  // each client's close on its own time (the bystander's last, just above), so wait for it first: a slot
  // not returned within 2 s fails here.
  const auto active = [&] {
    return nlohmann::json::parse((*server)->stats_json())["connections"]["active"].get<int>();
  };
  const auto give_up = Clock::now() + std::chrono::seconds(2);
  while (active() > 0 && Clock::now() < give_up) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_EQ(active(), 0) << "connections still held 2 s after their clients closed";
  std::vector<std::unique_ptr<client::Connection>> all;
  for (int i = 0; i < cfg.max_connections; ++i) {
    all.push_back(std::make_unique<client::Connection>());
    client::Error err;
    ASSERT_TRUE(all.back()->connect(sock, &err));
    std::string j;
    EXPECT_TRUE(all.back()->query(protocol::Op::kVersion, &j, &err)) << "slot " << i << ": " << err.message;
  }
}

TEST_F(DaemonServer, FullQueueAnswersBusyAndStopAnswersInFlight) {
  DaemonConfig cfg = digits_config(dir_, 1);
  cfg.queue_depth = 1;
  ServerOptions so = server_options(cfg);
  so.test_hang_after_batches = 0;  // the worker takes one request and hangs until stop()
  auto server = Server::start(so);
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  const auto in = testutil::random_floats(kDigitsPerImage, 9);
  const auto f = frame(static_cast<uint16_t>(protocol::Op::kInferTensor), tensor_payload(in.data(), {1, 8, 8}, kDigitsPerImage));
  const int a = raw_connect(cfg.socket_path), b = raw_connect(cfg.socket_path), c = raw_connect(cfg.socket_path);
  ASSERT_TRUE(write_all(a, f.data(), f.size()));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // a is taken by the (hanging) worker
  ASSERT_TRUE(write_all(b, f.data(), f.size()));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // b waits in the queue (depth 1)
  ASSERT_TRUE(write_all(c, f.data(), f.size()));
  const auto t0 = Clock::now();
  EXPECT_EQ(read_answer(c, 2000), static_cast<uint32_t>(protocol::ErrorCode::kBusy));
  EXPECT_LT(Clock::now() - t0, std::chrono::milliseconds(500)) << "busy must be answered at once";
  std::thread stopper([&] { (*server)->stop(); });
  EXPECT_EQ(read_answer(a, 5000), 0u);
  EXPECT_EQ(read_answer(b, 5000), 0u);
  stopper.join();
  close(a), close(b), close(c);
  struct stat st {};
  EXPECT_NE(lstat(cfg.socket_path.c_str(), &st), 0) << "socket file left behind";
}

TEST_F(DaemonServer, PeersOutsideTheAllowListAreRejected) {
  DaemonConfig cfg = digits_config(dir_, 1);
  cfg.allow_uids = {static_cast<uint32_t>(getuid()) + 4242};
  cfg.allow_gids = {static_cast<uint32_t>(getgid()) + 4242};
  auto server = Server::start(server_options(cfg));
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  client::Connection c;
  client::Error err;
  ASSERT_TRUE(c.connect(cfg.socket_path, &err));
  std::string j;
  EXPECT_FALSE(c.query(protocol::Op::kHealth, &j, &err));
  EXPECT_EQ(err.code, static_cast<uint32_t>(protocol::ErrorCode::kPermissionDenied)) << err.message;
  EXPECT_EQ(nlohmann::json::parse((*server)->stats_json())["connections"]["rejected_peers"].get<int>(), 1);

  // Our own uid in the list: allowed.
  (*server)->stop();
  cfg.allow_uids = {static_cast<uint32_t>(getuid())};
  auto server2 = Server::start(server_options(cfg));
  ASSERT_TRUE(server2.ok());
  client::Connection c2;
  ASSERT_TRUE(c2.connect(cfg.socket_path, &err));
  EXPECT_TRUE(c2.query(protocol::Op::kHealth, &j, &err)) << err.message;
}

TEST_F(DaemonServer, SocketModeAsConfigured) {
  for (uint32_t mode : {0600u, 0660u, 0666u}) {
    DaemonConfig cfg = digits_config(dir_, 1);
    cfg.socket_mode = mode;
    auto server = Server::start(server_options(cfg));
    ASSERT_TRUE(server.ok()) << server.status().to_string();
    struct stat st {};
    ASSERT_EQ(lstat(cfg.socket_path.c_str(), &st), 0);
    EXPECT_TRUE(S_ISSOCK(st.st_mode));
    EXPECT_EQ(st.st_mode & 0777, mode);
  }
}

TEST_F(DaemonServer, SecondDaemonOnTheSameSocketIsRefused) {
  DaemonConfig cfg = digits_config(dir_, 1);
  auto a = Server::start(server_options(cfg));
  ASSERT_TRUE(a.ok());
  auto b = Server::start(server_options(cfg));
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("another edgevitd"), std::string::npos) << b.status().message();
  EXPECT_TRUE(health(cfg.socket_path).is_object()) << "the first daemon must keep its socket";
}

TEST_F(DaemonServer, ReloadUnderLoadLosesNoRequest) {
  EDGEVIT_SKIP_IF_EMULATED();
  DaemonConfig cfg = digits_config(dir_, 8);
  auto server = Server::start(server_options(cfg));
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  const auto inputs = random_inputs(8, 300);
  const auto ref = reference_logits(inputs, 8);
  LoadResult r;
  std::atomic<bool> stop{false};
  std::thread load([&] { run_load(cfg.socket_path, 4, 0, inputs, ref, &r, &stop); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  for (int i = 0; i < 3; ++i) {
    const Status s = (*server)->reload_with(cfg);
    EXPECT_TRUE(s.ok()) << s.to_string();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  stop = true;
  load.join();
  EXPECT_EQ(r.failed.load(), 0) << r.first_error;
  EXPECT_EQ(r.mismatched.load(), 0);
  EXPECT_GT(r.ok.load(), 0);
  const auto h = health(cfg.socket_path);
  EXPECT_EQ(h["generation"].get<int>(), 4);
  EXPECT_EQ(h["last_reload"]["result"], "ok");
}

// Copies the digits model next to a corrupted checkpoint (one header byte changed).
std::string corrupt_digits_model(const std::string& dir) {
  namespace fs = std::filesystem;
  const fs::path src = testutil::source_path("config/models");
  fs::copy_file(src / "vit-digits.yaml", fs::path(dir) / "broken.yaml");
  fs::copy_file(src / "vit-digits.labels.txt", fs::path(dir) / "vit-digits.labels.txt");
  std::ifstream in(src / "vit-digits.safetensors", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  bytes.resize(bytes.size() / 2);  // truncated: data section shorter than the header says
  std::ofstream(fs::path(dir) / "vit-digits.safetensors", std::ios::binary) << bytes;
  return (fs::path(dir) / "broken.yaml").string();
}

TEST_F(DaemonServer, BrokenConfigOrCheckpointKeepsTheOldModelServing) {
  DaemonConfig cfg = digits_config(dir_, 8);
  auto server = Server::start(server_options(cfg));
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  const std::string plan_hash = health(cfg.socket_path)["plan_hash"];

  DaemonConfig bad = cfg;
  bad.model = dir_ + "/missing.yaml";
  Status s = (*server)->reload_with(bad);
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s.to_string();
  auto h = health(cfg.socket_path);
  EXPECT_EQ(h["last_reload"]["result"], "failed");
  EXPECT_EQ(h["plan_hash"], plan_hash);

  bad.model = corrupt_digits_model(dir_);
  s = (*server)->reload_with(bad);
  EXPECT_EQ(s.code(), StatusCode::kCheckpointError) << s.to_string();
  h = health(cfg.socket_path);
  EXPECT_EQ(h["last_reload"]["result"], "failed");
  EXPECT_NE(h["last_reload"]["message"].get<std::string>().find("safetensors"), std::string::npos) << h.dump();
  EXPECT_EQ(h["generation"].get<int>(), 1);

  client::Connection c;
  client::Error err;
  ASSERT_TRUE(c.connect(cfg.socket_path, &err));
  const auto in = testutil::random_floats(kDigitsPerImage, 3);
  client::InferAnswer a;
  EXPECT_TRUE(c.infer_tensor(in.data(), kDigitsDims, 3, 1, false, &a, &err)) << err.message;
}

TEST_F(DaemonServer, TightBudgetDrainsSwapsAndRollsBack) {
  // A device whose budget holds one digits engine at batch 64 but not two: 1.5x the plan's total (what the
  // plan counts is the plan's business, so the budget follows it).
  auto spec = load_model_spec(digits_model());
  auto host = find_device_profile("host-cpu", {devices_dir()});
  ASSERT_TRUE(spec.ok() && host.ok());
  PlanOptions po;
  po.batch = 64;
  po.threads = 1;  // digits_config's engine threads
  auto plan = make_plan(*spec, *host, po);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  const int64_t budget_mib = (plan->total_bytes * 3 / 2 + (1 << 20) - 1) >> 20;
  ASSERT_LT(budget_mib << 20, 2 * plan->total_bytes) << "two engines must not fit";
  std::ifstream in(testutil::source_path("config/devices/host-cpu.yaml"));
  std::string yaml((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  yaml.replace(yaml.find("name: host-cpu"), 14, "name: tight-cpu");
  yaml.replace(yaml.find("budget_mib: 6144"), 16, "budget_mib: " + std::to_string(budget_mib));
  std::ofstream(dir_ + "/tight-cpu.yaml") << yaml;
  DaemonConfig cfg = digits_config(dir_, 64);
  cfg.device = dir_ + "/tight-cpu.yaml";
  auto server = Server::start(server_options(cfg));
  ASSERT_TRUE(server.ok()) << server.status().to_string();

  DaemonConfig bad = cfg;
  bad.model = corrupt_digits_model(dir_);
  const Status s = (*server)->reload_with(bad);
  EXPECT_FALSE(s.ok());
  auto h = health(cfg.socket_path);
  EXPECT_EQ(h["last_reload"]["result"], "rolled_back") << h.dump();
  EXPECT_EQ(h["status"], "degraded");
  client::Connection c;
  client::Error err;
  ASSERT_TRUE(c.connect(cfg.socket_path, &err));
  const auto x = testutil::random_floats(kDigitsPerImage, 3);
  client::InferAnswer a;
  EXPECT_TRUE(c.infer_tensor(x.data(), kDigitsDims, 3, 1, false, &a, &err)) << err.message;

  EXPECT_TRUE((*server)->reload_with(cfg).ok());
  h = health(cfg.socket_path);
  EXPECT_EQ(h["last_reload"]["result"], "ok");
  EXPECT_EQ(h["status"], "ready");
  EXPECT_TRUE(c.infer_tensor(x.data(), kDigitsDims, 3, 1, false, &a, &err)) << err.message;
}

}  // namespace
}  // namespace edgevit::daemon
