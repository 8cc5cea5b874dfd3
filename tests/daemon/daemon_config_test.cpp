// daemon.yaml: the shipped example parses to the documented values; every kind of mistake is a
// kConfigError naming file:line:col and the key.
#include <gtest/gtest.h>

#include "serving/daemon_config.h"
#include "tests/testutil/testutil.h"

namespace edgevit::daemon {
namespace {

TEST(DaemonConfig, ShippedExampleParses) {
  auto c = load_daemon_config(testutil::source_path("config/daemon/edgevitd.yaml"));
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->model, testutil::source_path("config/models/vit-digits.yaml"));
  EXPECT_EQ(c->socket_path, "/run/edgevit/edgevitd.sock");
  EXPECT_EQ(c->socket_mode, 0660u);
  EXPECT_EQ(c->socket_group, "edgevit");
  EXPECT_EQ(c->max_batch, 8);
  EXPECT_EQ(c->queue_depth, 32);
  EXPECT_EQ(c->max_connections_per_uid, 8);
  EXPECT_EQ(c->decode_budget_bytes, int64_t{256} << 20);
  EXPECT_EQ(c->decode_wait_ms, 2000);
  EXPECT_EQ(c->reload_timeout_ms, 120000);
  EXPECT_EQ(c->log_format, LogFormat::kText);
  EXPECT_FALSE(c->gpio.enabled);
  EXPECT_EQ(c->gpio.actuator.offset, 7);
  EXPECT_EQ(c->gpio.alarm_classes, std::vector<int>{3});
}

TEST(DaemonConfig, DefaultsWhenEmptySections) {
  auto c = parse_daemon_config("device: host-cpu\n", "d.yaml", "/etc/edgevit");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->model, "");
  EXPECT_EQ(c->max_connections, 16);
  EXPECT_EQ(c->socket_mode, 0660u);
  EXPECT_FALSE(c->gpio.enabled);
}

TEST(DaemonConfig, KernelTuningDefaultsOnAndTurnsOff) {
  auto on = parse_daemon_config("threads: 2\n", "d.yaml", "/etc/edgevit");
  ASSERT_TRUE(on.ok()) << on.status().to_string();
  EXPECT_TRUE(on->kernel_tuning);
  auto off = parse_daemon_config("kernel_tuning: false\n", "d.yaml", "/etc/edgevit");
  ASSERT_TRUE(off.ok()) << off.status().to_string();
  EXPECT_FALSE(off->kernel_tuning);
}

TEST(DaemonConfig, RelativePathsResolveAgainstTheFile) {
  auto c = parse_daemon_config("model: m/x.yaml\nsocket:\n  path: run/s.sock\n", "d.yaml", "/etc/edgevit");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->model, "/etc/edgevit/m/x.yaml");
  EXPECT_EQ(c->socket_path, "/etc/edgevit/run/s.sock");
}

struct BadCase {
  const char* text;
  const char* expect;  // substring of the message
};

TEST(DaemonConfig, MistakesAreConfigErrorsWithPositions) {
  const BadCase cases[] = {
      {"modle: x.yaml\n", "d.yaml:1:1: modle"},
      {"socket:\n  mode: 0999\n", "d.yaml:2:9: socket.mode: expected an octal"},
      {"socket:\n  mode: 0066\n", "d.yaml:2:9: socket.mode: the owner"},
      {"socket:\n  allow_uids: [1.5]\n", "socket.allow_uids: expected integers"},
      {"limits:\n  queue_depth: 0\n", "d.yaml:2:16: limits.queue_depth"},
      {"limits:\n  max_frame_bytes: \"big\"\n", "limits.max_frame_bytes"},
      {"log:\n  level: loud\n", "d.yaml:2:10: log.level"},
      {"log:\n  format: xml\n", "log.format"},
      {"batching:\n  max_wait_us: -1\n", "batching.max_wait_us"},
      {"gpio:\n  chip: gpiochip0\n  actuator:\n    offset: 3\n", "gpio.actuator.alarm_classes"},
      {"gpio:\n  chip: gpiochip0\n  status_led:\n    offset: 3\n  trigger:\n    offset: 3\n    spool_dir: /s\n",
       "line offset 3 used twice"},
      {"gpio:\n  chip: gpiochip0\n  trigger:\n    offset: 2\n", "gpio.trigger.spool_dir"},
      {"gpio:\n  chip: gpiochip0\n  trigger:\n    offset: 2\n    spool_dir: /s\n    edge: up\n", "gpio.trigger.edge"},
      {"gpio:\n  status_led:\n    offset: 1\n", "gpio.chip"},
      {"socket:\n  path: /tmp/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n",
       "longer than 107 bytes"},
      {"- a\n- b\n", "d.yaml"},
      {"threads: &a 2\nx: *a\n", "anchor not allowed"},
      {"kernel_tuning: sometimes\n", "d.yaml:1:16: kernel_tuning"},
      {"limits:\n  max_connections_per_uid: -1\n", "d.yaml:2:28: limits.max_connections_per_uid"},
      {"limits:\n  decode_budget_bytes: 1000\n", "limits.decode_budget_bytes"},
      {"limits:\n  reload_timeout_ms: 0\n", "limits.reload_timeout_ms"},
  };
  for (const auto& bc : cases) {
    auto c = parse_daemon_config(bc.text, "d.yaml", "/etc/edgevit");
    ASSERT_FALSE(c.ok()) << bc.text;
    EXPECT_EQ(c.status().code(), StatusCode::kConfigError) << bc.text;
    EXPECT_NE(c.status().message().find(bc.expect), std::string::npos)
        << "text:\n" << bc.text << "message: " << c.status().message();
  }
}

TEST(DaemonConfig, MissingFileIsNotFound) {
  auto c = load_daemon_config("/nonexistent/edgevitd.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace edgevit::daemon
