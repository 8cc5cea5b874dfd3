// GPIO: the daemon with the simulated backend (LED states, trigger -> inference -> actuation pulse, safe
// state on exit, EBUSY / missing chip at start-up), and the libgpiod backend where /dev/gpiochip* exists.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "platform/gpio.h"
#include "tests/daemon/daemon_fixture.h"

namespace edgevit::daemon {
namespace {

using namespace testing;
constexpr unsigned kLed = 1, kTrigger = 2, kActuator = 3;

class DaemonGpio : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = make_temp_dir();
    ASSERT_FALSE(dir_.empty());
    std::filesystem::create_directory(dir_ + "/spool");
    cfg_ = digits_config(dir_, 4);
    GpioConfig& g = cfg_.gpio;
    g.enabled = true;
    g.chip = "gpiochip0";
    g.status_led.offset = kLed;
    g.trigger.offset = kTrigger;
    g.spool_dir = dir_ + "/spool";
    g.debounce_ms = 0;
    g.actuator.offset = kActuator;
    g.actuator.active_low = true;
    g.pulse_ms = 150;
    g.alarm_classes = {3};
    g.alarm_threshold = 0.3;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void spool(const std::string& digit, const std::string& name) {
    std::filesystem::copy_file(testutil::source_path("tests/data/digits/digit-" + digit + ".png"), dir_ + "/spool/" + name,
                               std::filesystem::copy_options::overwrite_existing);
  }
  // Waits until the daemon's stats report `n` triggers.
  nlohmann::json wait_triggers(Server& s, int n) {
    const auto end = Clock::now() + std::chrono::seconds(5);
    nlohmann::json g;
    while (Clock::now() < end) {
      g = nlohmann::json::parse(s.stats_json())["gpio"];
      if (g["triggers"].get<int>() >= n && !g["last_trigger"].is_null()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return g;
  }
  std::string dir_;
  DaemonConfig cfg_;
};

TEST_F(DaemonGpio, TriggerRunsInferenceAndPulsesTheActuatorOnAlarm) {
  SimulatedGpio sim;
  ServerOptions so = server_options(cfg_);
  so.gpio_backend = &sim;
  auto server = Server::start(so);
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  EXPECT_TRUE(sim.requested(kLed) && sim.requested(kTrigger) && sim.requested(kActuator));
  // Active-low actuator idles high (inactive).
  EXPECT_TRUE(sim.level(kActuator));

  // Not an alarm class: no pulse.
  spool("7", "a.png");
  sim.inject_edge(kTrigger, true);
  auto g = wait_triggers(**server, 1);
  EXPECT_EQ(g["last_trigger"]["index"], 7) << g.dump();
  EXPECT_EQ(g["last_trigger"]["alarm"], false);
  EXPECT_EQ(sim.changes(kActuator).size(), 1u) << "the actuator moved without an alarm";

  // A falling edge is not configured: ignored.
  sim.inject_edge(kTrigger, false);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(nlohmann::json::parse((*server)->stats_json())["gpio"]["triggers"], 1);

  // The newest spool file is a 3: alarm -> one pulse of pulse_ms (low = active).
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  spool("3", "b.png");
  sim.inject_edge(kTrigger, true);
  g = wait_triggers(**server, 2);
  EXPECT_EQ(g["last_trigger"]["index"], 3) << g.dump();
  EXPECT_EQ(g["last_trigger"]["alarm"], true);
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  const auto ch = sim.changes(kActuator);
  ASSERT_EQ(ch.size(), 3u);
  EXPECT_FALSE(ch[1].level);
  EXPECT_TRUE(ch[2].level);
  const auto pulse = std::chrono::duration_cast<std::chrono::milliseconds>(ch[2].when - ch[1].when).count();
  EXPECT_GE(pulse, 150);
  EXPECT_LT(pulse, 400);
  EXPECT_EQ(nlohmann::json::parse((*server)->stats_json())["gpio"]["alarms"], 1);

  // Ready: LED steady on.
  EXPECT_TRUE(sim.level(kLed));
  (*server)->stop();
  // Safe state: LED off, actuator inactive (high), every line released.
  EXPECT_FALSE(sim.level(kLed));
  EXPECT_TRUE(sim.level(kActuator));
  EXPECT_FALSE(sim.requested(kLed) || sim.requested(kTrigger) || sim.requested(kActuator));
}

TEST_F(DaemonGpio, LedBlinksFastWhenTheWorkerIsStuck) {
  SimulatedGpio sim;
  cfg_.gpio.trigger.offset = -1;
  cfg_.gpio.actuator.offset = -1;
  ServerOptions so = server_options(cfg_);
  so.gpio_backend = &sim;
  so.test_hang_after_batches = 0;
  auto server = Server::start(so);
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_TRUE(sim.level(kLed));
  const size_t steady = sim.changes(kLed).size();
  std::thread req([&] {
    client::Connection c;
    client::Error err;
    client::InferAnswer a;
    const auto in = testutil::random_floats(kDigitsPerImage, 1);
    if (c.connect(cfg_.socket_path, &err)) c.infer_tensor(in.data(), kDigitsDims, 3, 1, false, &a, &err);
  });
  // Busy (a request running) blinks at 2 Hz, then after 2 s without progress: fault, 8 Hz.
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  const size_t before = sim.changes(kLed).size();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const size_t after = sim.changes(kLed).size();
  EXPECT_GT(before, steady) << "no blinking while busy";
  EXPECT_GE(after - before, 6u) << "fault blink is 8 Hz (a change every 50 ms)";
  (*server)->stop();
  req.join();
  EXPECT_FALSE(sim.level(kLed));
  EXPECT_FALSE(sim.requested(kLed));
}

// A spool file larger than any image file may be (64 MiB, sparse here) is a trigger error, not read into
// memory; the service goes on.
TEST_F(DaemonGpio, OversizedSpoolFileIsATriggerErrorNotARead) {
  SimulatedGpio sim;
  ServerOptions so = server_options(cfg_);
  so.gpio_backend = &sim;
  auto server = Server::start(so);
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  std::ofstream(dir_ + "/spool/huge.png").put('x');
  std::filesystem::resize_file(dir_ + "/spool/huge.png", (std::uintmax_t{64} << 20) + 1);
  sim.inject_edge(kTrigger, true);
  const auto g = wait_triggers(**server, 1);
  EXPECT_EQ(g["trigger_errors"], 1) << g.dump();
  EXPECT_NE(g["last_trigger"]["error"].get<std::string>().find("over 67108864 bytes"), std::string::npos) << g.dump();
  (*server)->stop();
}

// Issue #22 item 8: a daemon config that no longer parsed at SIGHUP left the LED steady (and health
// `ready`); every failed reload shows the fault blink.
TEST_F(DaemonGpio, LedBlinksFaultAfterAReloadOfABrokenConfig) {
  SimulatedGpio sim;
  cfg_.gpio.trigger.offset = -1;
  cfg_.gpio.actuator.offset = -1;
  ServerOptions so = server_options(cfg_);
  so.gpio_backend = &sim;
  so.reload_config = [] { return Result<DaemonConfig>(config_error("edgevitd.yaml:2:3: limits.queue_depht: unknown key")); };
  auto server = Server::start(so);
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const size_t steady = sim.changes(kLed).size();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(sim.changes(kLed).size(), steady) << "ready: steady on";
  EXPECT_FALSE((*server)->reload().ok());
  const size_t before = sim.changes(kLed).size();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_GE(sim.changes(kLed).size() - before, 6u) << "fault blink is 8 Hz (a change every 50 ms)";
  EXPECT_EQ(nlohmann::json::parse((*server)->health_json())["status"], "degraded");
  (*server)->stop();
}

TEST_F(DaemonGpio, BusyLineAndMissingChipAreClearStartupErrors) {
  {
    SimulatedGpio sim;
    sim.hold_externally(kActuator);
    ServerOptions so = server_options(cfg_);
    so.gpio_backend = &sim;
    auto server = Server::start(so);
    ASSERT_FALSE(server.ok());
    EXPECT_EQ(server.status().code(), StatusCode::kDeviceError);
    EXPECT_NE(server.status().message().find("EBUSY"), std::string::npos) << server.status().message();
    EXPECT_NE(server.status().message().find("line 3"), std::string::npos) << server.status().message();
    // Nothing left behind: the LED requested before the failure is released and off, no socket.
    EXPECT_FALSE(sim.requested(kLed));
    EXPECT_FALSE(sim.level(kLed));
    EXPECT_FALSE(std::filesystem::exists(cfg_.socket_path));
  }
  {
    SimulatedGpio sim({"gpiochip1"});
    ServerOptions so = server_options(cfg_);
    so.gpio_backend = &sim;
    auto server = Server::start(so);
    ASSERT_FALSE(server.ok());
    EXPECT_EQ(server.status().code(), StatusCode::kNotFound);
    EXPECT_NE(server.status().message().find("gpiochip0"), std::string::npos) << server.status().message();
  }
}

TEST(GpioGpiod, RealChipWhenPresent) {
  if (!gpio_chips_present()) GTEST_SKIP() << "skipped: no gpiochip";
  auto backend = make_gpiod_backend();
  ASSERT_TRUE(backend.ok()) << backend.status().to_string();
  GpioLineRequest r;
  r.chip = "gpiochip0";
  r.offset = 100000;  // no chip has this many lines: a clear kNotFound, nothing requested
  auto out = (*backend)->request_output(r, false);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), StatusCode::kNotFound) << out.status().to_string();
  r.chip = "no-such-chip-edgevit";
  r.offset = 0;
  EXPECT_EQ((*backend)->request_output(r, false).status().code(), StatusCode::kNotFound);
}

TEST(GpioGpiod, MissingChipIsNotFoundEvenWithoutChips) {
  auto backend = make_gpiod_backend();
  if (!backend.ok()) {
    EXPECT_EQ(backend.status().code(), StatusCode::kUnsupported);
    GTEST_SKIP() << "skipped: built without libgpiod";
  }
  GpioLineRequest r;
  r.chip = "/dev/gpiochip-edgevit-missing";
  auto out = (*backend)->request_output(r, false);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), StatusCode::kNotFound) << out.status().to_string();
}

}  // namespace
}  // namespace edgevit::daemon
