// In-process edgevitd against the hostile inputs and clients of issue #22: invalid UTF-8 reaching health,
// labels cut inside a character, non-finite outputs, a broken config at reload, reserved frame fields over
// the socket, a second daemon on a taken socket, idle connections holding every slot, requests during a
// stop, and FIFOs given as paths.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <sstream>

#include <nlohmann/json.hpp>

#include "runtime/inputs.h"
#include "runtime/safetensors.h"
#include "serving/client.h"
#include "serving/json_text.h"
#include "tests/daemon/daemon_fixture.h"
#include "tests/runtime/image_fixtures.h"
#include "tests/testutil/testutil.h"

namespace edgevit::daemon {
namespace {

using namespace testing;
using E = protocol::ErrorCode;
namespace fs = std::filesystem;

class DaemonHostile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = make_temp_dir();
    ASSERT_FALSE(dir_.empty());
  }
  void TearDown() override { fs::remove_all(dir_); }

  // The raw health answer over the socket (the path that aborted the daemon), parsed strictly.
  nlohmann::json health(const std::string& sock) {
    client::Connection c;
    client::Error err;
    std::string j;
    EXPECT_TRUE(c.connect(sock, &err) && c.query(protocol::Op::kHealth, &j, &err)) << err.message;
    return nlohmann::json::parse(j);
  }
  nlohmann::json stats(Server& s) { return nlohmann::json::parse(s.stats_json()); }

  // The digits model copied into dir_ with its own labels file (the checkpoint is linked).
  std::string digits_with_labels(const std::string& labels) {
    const fs::path src = testutil::source_path("config/models");
    fs::copy_file(src / "vit-digits.yaml", fs::path(dir_) / "digits.yaml");
    fs::create_symlink(src / "vit-digits.safetensors", fs::path(dir_) / "vit-digits.safetensors");
    std::ofstream(fs::path(dir_) / "vit-digits.labels.txt", std::ios::binary) << labels;
    return (fs::path(dir_) / "digits.yaml").string();
  }

  std::string dir_;
};

bool valid(const std::string& s) { return valid_utf8(s) == s; }

// Issue #22 item 1: a failed reload whose message holds invalid UTF-8 made `health` throw in dump() and
// the daemon abort (exit 134).
TEST_F(DaemonHostile, HealthAfterAReloadErrorWithInvalidUtf8) {
  DaemonConfig cfg = digits_config(dir_, 4);
  auto server = Server::start(server_options(cfg));
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  DaemonConfig bad = cfg;
  bad.model = dir_ + "/model-\xff\xfe\xc3(.yaml";  // not there: the error message quotes the path
  EXPECT_FALSE((*server)->reload_with(bad).ok());
  for (int i = 0; i < 3; ++i) {  // the monitoring probe asks again and again
    const auto h = health(cfg.socket_path);
    EXPECT_EQ(h["status"], "degraded");
    const std::string msg = h["last_reload"]["message"];
    EXPECT_NE(msg.find("model-\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD(.yaml"), std::string::npos) << msg;
  }
  const auto st = stats(**server);
  EXPECT_EQ(st["handler_exceptions"].get<int>(), 0);
  // Still serving.
  client::Connection c;
  client::Error err;
  ASSERT_TRUE(c.connect(cfg.socket_path, &err));
  const auto in = testutil::random_floats(kDigitsPerImage, 1);
  client::InferAnswer a;
  EXPECT_TRUE(c.infer_tensor(in.data(), kDigitsDims, 3, 1, false, &a, &err)) << err.message;
}

// Issue #22 item 6: a label longer than 64 bytes was cut inside a UTF-8 sequence and `edgevit client
// --json` aborted on it; invalid bytes in a label went out as they were.
TEST_F(DaemonHostile, LabelsAreValidUtf8CutOnCharacterBoundaries) {
  std::string labels;
  const std::string long_label = std::string(62, 'a') + "\xE2\x82\xAC" + "tail";  // the euro sign spans 62..64
  labels += long_label + "\n";
  labels += "one\xff\n";
  for (int i = 2; i < 10; ++i) labels += std::to_string(i) + "\n";
  DaemonConfig cfg = digits_config(dir_, 4);
  cfg.model = digits_with_labels(labels);
  auto server = Server::start(server_options(cfg));
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  client::Connection c;
  client::Error err;
  ASSERT_TRUE(c.connect(cfg.socket_path, &err));
  const auto in = testutil::random_floats(kDigitsPerImage, 2);
  client::InferAnswer a;
  ASSERT_TRUE(c.infer_tensor(in.data(), kDigitsDims, 3, 10, false, &a, &err)) << err.message;
  bool saw0 = false, saw1 = false;
  for (const auto& e : a.topk[0]) {
    EXPECT_LE(e.label.size(), protocol::kMaxLabelBytes);
    EXPECT_TRUE(valid(e.label)) << e.index;
    if (e.index == 0) {
      saw0 = true;
      EXPECT_EQ(e.label, std::string(62, 'a'));
    }
    if (e.index == 1) {
      saw1 = true;
      EXPECT_EQ(e.label, "one\xEF\xBF\xBD");
    }
  }
  EXPECT_TRUE(saw0 && saw1);

  // The client's --json output of such an answer.
  std::ofstream(dir_ + "/digit-3.png", std::ios::binary)
      << std::ifstream(testutil::source_path("tests/data/digits/digit-3.png"), std::ios::binary).rdbuf();
  ClientOptions o;
  o.socket_path = cfg.socket_path;
  o.inputs = {dir_ + "/digit-3.png"};
  o.topk = 10;
  o.json = true;
  std::ostringstream out;
  const Status s = run_client(o, out);
  ASSERT_TRUE(s.ok()) << s.to_string();
  const auto j = nlohmann::json::parse(out.str());
  EXPECT_EQ(j["topk"].size(), 10u);
}

// Writes a safetensors file with tensor `input` (1, 1, 8, 8) holding `values`.
std::string input_file(const std::string& path, const std::vector<float>& values) {
  const Status s = write_safetensors(path, {{"input", {1, 1, 8, 8}, values.data()}}, {});
  return s.ok() ? path : "";
}

// Issue #22 item 7: NaN/Inf outputs were answered as predictions (p=nan).
TEST_F(DaemonHostile, NonFiniteOutputIsAnErrorCountedAndServingGoesOn) {
  DaemonConfig cfg = digits_config(dir_, 4);
  auto server = Server::start(server_options(cfg));
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  client::Connection c;
  client::Error err;
  ASSERT_TRUE(c.connect(cfg.socket_path, &err));
  auto in = testutil::random_floats(kDigitsPerImage, 3);
  for (const float poison : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    auto bad = in;
    bad[5] = poison;
    client::InferAnswer a;
    EXPECT_FALSE(c.infer_tensor(bad.data(), kDigitsDims, 3, 3, true, &a, &err));
    EXPECT_EQ(err.code, static_cast<uint32_t>(E::kNonFinite)) << err.message;
    EXPECT_TRUE(c.connected()) << "the connection stays open";
    EXPECT_TRUE(c.infer_tensor(in.data(), kDigitsDims, 3, 3, true, &a, &err)) << err.message;
    for (float v : a.logits) EXPECT_TRUE(std::isfinite(v));
  }
  EXPECT_EQ(stats(**server)["errors"]["non_finite_output"].get<int>(), 2);

  // The client reports it: kNonFinite (exit 11), nothing printed.
  auto bad = in;
  bad[0] = std::numeric_limits<float>::quiet_NaN();
  ClientOptions o;
  o.socket_path = cfg.socket_path;
  o.inputs = {input_file(dir_ + "/nan.safetensors", bad)};
  std::ostringstream out;
  const Status s = run_client(o, out);
  EXPECT_EQ(s.code(), StatusCode::kNonFinite) << s.to_string();
  EXPECT_EQ(exit_code_for(s.code()), 11);
  EXPECT_EQ(out.str(), "");
  EXPECT_EQ(status_for_daemon_error(static_cast<uint32_t>(E::kNonFinite)), StatusCode::kNonFinite);
}

// A NaN request batched with a good one fails alone: the engine refuses the whole batch, so each request
// of it runs again by itself. (Batching is forced: the good request's frame arrives in two parts, and the
// worker waits up to max_wait_us for a connection that is mid-frame.)
TEST_F(DaemonHostile, ANonFiniteRequestDoesNotFailTheOthersInItsBatch) {
  DaemonConfig cfg = digits_config(dir_, 4);
  cfg.max_wait_us = 1000000;
  auto server = Server::start(server_options(cfg));
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  const uint16_t tensor = static_cast<uint16_t>(protocol::Op::kInferTensor);
  const auto in = testutil::random_floats(kDigitsPerImage, 8);
  auto bad = in;
  bad[10] = std::numeric_limits<float>::quiet_NaN();
  const auto good_frame = frame(tensor, tensor_payload(in.data(), {1, 8, 8}, kDigitsPerImage));
  const auto bad_frame = frame(tensor, tensor_payload(bad.data(), {1, 8, 8}, kDigitsPerImage));
  const int good_fd = raw_connect(cfg.socket_path), bad_fd = raw_connect(cfg.socket_path);
  ASSERT_GE(good_fd, 0);
  ASSERT_GE(bad_fd, 0);
  const size_t half = good_frame.size() / 2;
  ASSERT_TRUE(write_all(good_fd, good_frame.data(), half));  // mid-frame: the worker will wait for it
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(write_all(bad_fd, bad_frame.data(), bad_frame.size()));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_TRUE(write_all(good_fd, good_frame.data() + half, good_frame.size() - half));
  EXPECT_EQ(read_answer(bad_fd), static_cast<uint32_t>(E::kNonFinite));
  EXPECT_EQ(read_answer(good_fd), 0u) << "the good request failed with its batch";
  const auto st = stats(**server);
  EXPECT_EQ(st["batches"].get<int>(), 3) << "one batch of two, then each alone: " << st.dump();
  EXPECT_EQ(st["requests_ok"].get<int>(), 1);
  close(good_fd);
  close(bad_fd);
}

// A stand-in daemon that answers one infer request with a NaN score: the client refuses to print it.
TEST_F(DaemonHostile, ClientRefusesToPrintANonFiniteAnswer) {
  const std::string sock = dir_ + "/fake.sock";
  const int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, sock.c_str(), sizeof addr.sun_path - 1);
  ASSERT_EQ(bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(listen(lfd, 1), 0);
  std::thread fake([&] {
    const int fd = accept(lfd, nullptr, nullptr);
    uint8_t head[protocol::kHeaderBytes];
    if (fd < 0 || recv(fd, head, sizeof head, MSG_WAITALL) != static_cast<ssize_t>(sizeof head)) return;
    const protocol::Header req = protocol::decode_header(head);
    std::vector<uint8_t> payload(req.payload_bytes);
    recv(fd, payload.data(), payload.size(), MSG_WAITALL);
    std::vector<uint8_t> answer(protocol::kHeaderBytes + protocol::kInferAnswerFixedBytes + 12, 0);
    uint8_t* a = answer.data() + protocol::kHeaderBytes;
    protocol::put_u32(a, 1);      // n
    protocol::put_u32(a + 4, 1);  // k
    protocol::put_u32(a + 32, 1);
    protocol::put_u32(a + protocol::kInferAnswerFixedBytes, 3);
    protocol::put_f32(a + protocol::kInferAnswerFixedBytes + 4, std::numeric_limits<float>::quiet_NaN());
    protocol::Header h;
    h.op = req.op;
    h.flags = protocol::kFlagResponse;
    h.payload_bytes = static_cast<uint32_t>(answer.size() - protocol::kHeaderBytes);
    h.request_id = req.request_id;
    protocol::encode_header(h, answer.data());
    write_all(fd, answer.data(), answer.size());
    close(fd);
  });
  std::ofstream(dir_ + "/digit-3.png", std::ios::binary)
      << std::ifstream(testutil::source_path("tests/data/digits/digit-3.png"), std::ios::binary).rdbuf();
  ClientOptions o;
  o.socket_path = sock;
  o.inputs = {dir_ + "/digit-3.png"};
  std::ostringstream out;
  const Status s = run_client(o, out);
  EXPECT_EQ(s.code(), StatusCode::kNonFinite) << s.to_string();
  EXPECT_NE(s.message().find("non-finite score for class 3"), std::string::npos) << s.message();
  EXPECT_EQ(out.str(), "") << "a NaN was printed";
  fake.join();
  close(lfd);
}

// Issue #22 item 8: a config that no longer parses at SIGHUP left health `ready` (and the LED steady).
TEST_F(DaemonHostile, BrokenConfigAtReloadIsDegraded) {
  DaemonConfig cfg = digits_config(dir_, 4);
  ServerOptions so = server_options(cfg);
  so.reload_config = [] { return Result<DaemonConfig>(config_error("edgevitd.yaml:3:3: limits.queue_depht: unknown key")); };
  auto server = Server::start(so);
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  EXPECT_EQ(health(cfg.socket_path)["status"], "ready");
  EXPECT_FALSE((*server)->reload().ok());
  const auto h = health(cfg.socket_path);
  EXPECT_EQ(h["status"], "degraded") << h.dump();
  EXPECT_EQ(h["last_reload"]["result"], "failed");
  EXPECT_EQ(stats(**server)["reloads"]["failed"].get<int>(), 1);
}

// Issue #22 item 9: reserved fields, the response flag and a payload on health are refused over the socket
// too, and the connection stays usable.
TEST_F(DaemonHostile, ReservedFieldsAreRefusedOverTheSocket) {
  DaemonConfig cfg = digits_config(dir_, 4);
  auto server = Server::start(server_options(cfg));
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  const int fd = raw_connect(cfg.socket_path);
  ASSERT_GE(fd, 0);
  const auto in = testutil::random_floats(kDigitsPerImage, 4);
  auto with_flags = [](std::vector<uint8_t> f, uint32_t flags) {
    protocol::put_u32(f.data() + 8, flags);
    return f;
  };
  const uint16_t tensor = static_cast<uint16_t>(protocol::Op::kInferTensor);
  const auto good = frame(tensor, tensor_payload(in.data(), {1, 8, 8}, kDigitsPerImage));
  auto reserved = tensor_payload(in.data(), {1, 8, 8}, kDigitsPerImage);
  reserved[3] = 1;
  for (const auto& f : {frame(3, {1, 2}), with_flags(good, protocol::kFlagResponse), frame(tensor, reserved)}) {
    ASSERT_TRUE(write_all(fd, f.data(), f.size()));
    EXPECT_EQ(read_answer(fd), static_cast<uint32_t>(E::kBadFrame));
  }
  ASSERT_TRUE(write_all(fd, good.data(), good.size()));
  EXPECT_EQ(read_answer(fd), 0u);
  close(fd);
}

// Issue #22 item 9: a second daemon ran its whole self-test (and built its engine) before it found the
// socket taken.
TEST_F(DaemonHostile, SecondDaemonChecksTheSocketBeforeItsSelfTest) {
  DaemonConfig cfg = digits_config(dir_, 1);
  auto a = Server::start(server_options(cfg));
  ASSERT_TRUE(a.ok());
  std::atomic<int> checks{0};
  ServerOptions so = server_options(cfg);
  so.model_check = [&](const std::string&, const DaemonConfig&, bool) {
    ++checks;
    return Status::Ok();
  };
  auto b = Server::start(so);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("another edgevitd"), std::string::npos) << b.status().message();
  EXPECT_EQ(checks.load(), 0) << "the self-test ran before the socket check";
}

// Issue #22 item 9: a stopping daemon closed idle connections without a word, so a request sent at that
// moment got EOF; now every connection gets `shutting_down`, and a request arriving during the drain is
// answered with it.
TEST_F(DaemonHostile, StopAnswersShuttingDownInsteadOfEof) {
  DaemonConfig cfg = digits_config(dir_, 1);
  auto server = Server::start(server_options(cfg));
  ASSERT_TRUE(server.ok());
  const int idle = raw_connect(cfg.socket_path);
  const int late = raw_connect(cfg.socket_path);
  ASSERT_GE(idle, 0);
  ASSERT_GE(late, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto in = testutil::random_floats(kDigitsPerImage, 5);
  const auto f = frame(static_cast<uint16_t>(protocol::Op::kInferTensor), tensor_payload(in.data(), {1, 8, 8}, kDigitsPerImage));
  std::thread stopper([&] { (*server)->stop(); });
  // Sent as the stop begins: answered (shutting_down), never a bare EOF.
  write_all(late, f.data(), f.size());
  const uint32_t late_answer = read_answer(late, 3000);
  EXPECT_TRUE(late_answer == static_cast<uint32_t>(E::kShuttingDown) || late_answer == 0u) << late_answer;
  EXPECT_EQ(read_answer(idle, 3000), static_cast<uint32_t>(E::kShuttingDown));
  stopper.join();
  close(idle), close(late);
}

// Issue #22 item 4: 16 idle connections that send `version` now and then (here every 1.5 s; 25 s in the
// report) held every slot and locked everyone else out (0 of 90 legitimate requests served).
TEST_F(DaemonHostile, IdleConnectionsDoNotLockOthersOut) {
  EDGEVIT_SKIP_IF_EMULATED();
  DaemonConfig cfg = digits_config(dir_, 4);
  cfg.max_connections_per_uid = 0;  // one uid runs everything here: the slots alone must not lock it out
  auto server = Server::start(server_options(cfg));
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  std::atomic<bool> stop{false};
  std::vector<std::thread> hogs;
  for (int i = 0; i < cfg.max_connections; ++i) {
    hogs.emplace_back([&] {
      client::Connection c;
      client::Error err;
      while (!stop) {
        if (!c.connected() && !c.connect(cfg.socket_path, &err)) continue;
        std::string j;
        c.query(protocol::Op::kVersion, &j, &err);  // evicted: reconnect and hog again
        for (int t = 0; t < 150 && !stop; ++t) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));  // every slot is held, idle for > 1 s
  int served = 0;
  std::string first_error;
  const auto in = testutil::random_floats(kDigitsPerImage, 6);
  for (int r = 0; r < 30; ++r) {  // each legitimate request on a fresh connection
    client::Connection c;
    client::Error err;
    client::InferAnswer a;
    if (c.connect(cfg.socket_path, &err) && c.infer_tensor(in.data(), kDigitsDims, 3, 1, false, &a, &err)) ++served;
    else if (first_error.empty()) first_error = err.message;
  }
  stop = true;
  for (auto& t : hogs) t.join();
  EXPECT_EQ(served, 30) << first_error;
  EXPECT_GT(stats(**server)["connections"]["evicted_idle"].get<int>(), 0);
}

// The per-uid cap: a uid at its cap gets a slot by evicting its own longest-idle connection; the evicted
// client reads why (busy) instead of a bare close.
TEST_F(DaemonHostile, PerUidCapEvictsThatUidsLongestIdle) {
  DaemonConfig cfg = digits_config(dir_, 1);
  cfg.max_connections_per_uid = 3;
  auto server = Server::start(server_options(cfg));
  ASSERT_TRUE(server.ok());
  std::vector<int> fds;
  for (int i = 0; i < 3; ++i) {
    fds.push_back(raw_connect(cfg.socket_path));
    std::this_thread::sleep_for(std::chrono::milliseconds(30));  // fds[0] is the longest idle
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));  // idle long enough to be evicted
  const int fourth = raw_connect(cfg.socket_path);
  EXPECT_EQ(read_answer(fds[0], 3000), static_cast<uint32_t>(E::kBusy)) << "the longest-idle one is evicted";
  const auto v = frame(static_cast<uint16_t>(protocol::Op::kVersion), {});
  for (int fd : {fds[1], fds[2], fourth}) {
    ASSERT_TRUE(write_all(fd, v.data(), v.size()));
    EXPECT_EQ(read_answer(fd), 0u);
  }
  for (int fd : fds) close(fd);
  close(fourth);
}

// Issue #22 item 5: a FIFO as the labels file blocked the reload (and the daemon) forever.
TEST_F(DaemonHostile, FifoAsLabelsOrModelIsRefusedWithoutBlocking) {
  DaemonConfig cfg = digits_config(dir_, 4);
  auto server = Server::start(server_options(cfg));
  ASSERT_TRUE(server.ok());
  const std::string model = digits_with_labels("");
  fs::remove(dir_ + "/vit-digits.labels.txt");
  ASSERT_EQ(mkfifo((dir_ + "/vit-digits.labels.txt").c_str(), 0600), 0);
  DaemonConfig bad = cfg;
  bad.model = model;
  const auto t0 = Clock::now();
  Status s = (*server)->reload_with(bad);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("not a regular file"), std::string::npos) << s.to_string();
  ASSERT_EQ(mkfifo((dir_ + "/model.yaml").c_str(), 0600), 0);
  bad.model = dir_ + "/model.yaml";
  s = (*server)->reload_with(bad);
  EXPECT_NE(s.message().find("not a regular file"), std::string::npos) << s.to_string();
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5));
  EXPECT_EQ(health(cfg.socket_path)["status"], "degraded");
  const Result<DaemonConfig> c = load_daemon_config(dir_ + "/model.yaml");
  EXPECT_FALSE(c.ok());
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Issue #22 item 2: image decoding had no global bound (4 concurrent 16-bit RGBA 8192x8191 PNGs took the
// daemon to 4.28 GB). Images now decode within limits.decode_budget_bytes, shared by all connections:
// beyond it they wait their turn, and one image above the whole budget is refused before decoding.
TEST_F(DaemonHostile, DecodeBudgetQueuesImagesAndRefusesOnesAboveIt) {
  const std::string png = dir_ + "/grey2048.png";
  ASSERT_TRUE(testutil::write_zero_png(png, 2048, 2048, 0, 8));
  const std::vector<uint8_t> bytes = read_bytes(png);
  auto spec = load_model_spec(digits_model());
  ASSERT_TRUE(spec.ok());
  const auto need = image_decode_bytes(bytes.data(), bytes.size(), "grey2048.png", *spec);
  ASSERT_TRUE(need.ok()) << need.status().to_string();

  DaemonConfig cfg = digits_config(dir_, 4);
  cfg.decode_budget_bytes = *need * 3 / 2;  // one such decode at a time
  cfg.decode_wait_ms = 20000;
  auto server = Server::start(server_options(cfg));
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  std::atomic<int> ok{0};
  std::string first_error;
  std::mutex mu;
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t) {
    ts.emplace_back([&] {
      client::Connection c;
      client::Error err;
      if (!c.connect(cfg.socket_path, &err)) return;
      for (int r = 0; r < 3; ++r) {
        client::InferAnswer a;
        if (c.infer_image(bytes.data(), bytes.size(), 1, false, &a, &err)) {
          ++ok;
        } else {
          std::lock_guard<std::mutex> lock(mu);
          first_error = err.message;
        }
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(ok.load(), 12) << first_error;
  auto st = stats(**server);
  EXPECT_EQ(st["decode"]["granted"].get<int>(), 12);
  EXPECT_LE(st["decode"]["peak_bytes"].get<int64_t>(), cfg.decode_budget_bytes);
  EXPECT_EQ(st["decode"]["peak_bytes"].get<int64_t>(), *need) << "never two at once";

  // The decode bomb: above the whole budget, refused from its header (nothing decoded, nothing waits).
  const std::string bomb = dir_ + "/rgba16.png";
  ASSERT_TRUE(testutil::write_zero_png(bomb, 8192, 8191, 6, 16));
  const std::vector<uint8_t> bomb_bytes = read_bytes(bomb);
  client::Connection c;
  client::Error err;
  ASSERT_TRUE(c.connect(cfg.socket_path, &err));
  client::InferAnswer a;
  EXPECT_FALSE(c.infer_image(bomb_bytes.data(), bomb_bytes.size(), 1, false, &a, &err));
  EXPECT_EQ(err.code, static_cast<uint32_t>(E::kBadImage)) << err.message;
  EXPECT_NE(err.message.find("decode_budget_bytes"), std::string::npos) << err.message;
  st = stats(**server);
  EXPECT_EQ(st["decode"]["granted"].get<int>(), 12);
  const auto h = health(cfg.socket_path);
  EXPECT_EQ(h["memory"]["bound_bytes"].get<int64_t>(),
            h["memory"]["plan_bytes"].get<int64_t>() + cfg.decode_budget_bytes);
}

}  // namespace
}  // namespace edgevit::daemon
