// edgevitd's configuration (config/daemon/edgevitd.yaml; every key documented in docs/daemon.md).
// Read through base/yaml_guard like every edgevit config: errors are kConfigError
// "<file>:<line>:<col>: <key.path>: <reason>"; unknown keys are errors.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace edgevit::daemon {

enum class LogFormat { kText, kJson };
enum class TriggerEdge { kRising, kFalling, kBoth };

struct GpioLineConfig {
  int offset = -1;  // -1: line not used
  bool active_low = false;
};

struct GpioConfig {
  bool enabled = false;
  std::string chip;                  // "gpiochip0", "/dev/gpiochip0" or a chip label
  GpioLineConfig status_led;         // ready: steady; busy: 2 Hz blink; fault: 8 Hz blink
  GpioLineConfig trigger;            // input: each edge runs one inference on the spool's newest image
  TriggerEdge trigger_edge = TriggerEdge::kRising;
  int debounce_ms = 20;              // edges closer than this to the previous one are ignored
  std::string spool_dir;             // resolved against the config's directory
  GpioLineConfig actuator;           // output: pulsed when top-1 is an alarm class with score >= threshold
  int pulse_ms = 500;
  std::vector<int> alarm_classes;
  double alarm_threshold = 0.5;
};

struct DaemonConfig {
  std::string source_path;  // the YAML file ("" when built from flags only)

  std::string model = "";            // model config path ("" = the embedded default, vit-digits)
  std::string device = "auto";       // device profile name or path, or "auto" (detection)
  int threads = 0;                   // CPU threads of the engine (0 = all cores)
  // CUDA: time cuBLASLt algorithms and fused-attention rows at start-up and pin the fastest
  // (EngineOptions::tune_gemms and tune_attention). false: the heuristic's and the table's choices, untimed,
  // so outputs are bit-identical across restarts on the same GPU and software, and start-up is shorter.
  bool kernel_tuning = true;
  int default_topk = 5;

  std::string socket_path = "/run/edgevit/edgevitd.sock";
  uint32_t socket_mode = 0660;
  std::string socket_group;          // group name or number ("" = the daemon's)
  std::vector<uint32_t> allow_uids;  // empty allow_uids and allow_gids: whoever can open the socket
  std::vector<uint32_t> allow_gids;

  int max_connections = 16;
  int64_t max_frame_bytes = 4 << 20;  // payload limit of a request
  int queue_depth = 32;
  int read_deadline_ms = 2000;        // a started frame must be complete within this
  int idle_timeout_ms = 60000;        // an idle connection is closed after this
  int write_deadline_ms = 2000;       // an answer must be taken by the client within this
  // Connections one peer uid (SO_PEERCRED) may hold at once (0: no cap beyond max_connections). A uid at its
  // cap, or any client when every slot is taken, gets a slot by evicting the longest-idle connection (of that
  // uid, at its cap); `busy` only when none is idle.
  int max_connections_per_uid = 8;
  // Image decoding: bytes the decoder may hold at once, over all connections (runtime/inputs.h
  // image_decode_bytes of each image in flight). A request waits up to decode_wait_ms for its share
  // (then `busy`); an image needing more than the whole budget is refused (`bad_image`).
  int64_t decode_budget_bytes = int64_t{256} << 20;
  int decode_wait_ms = 2000;
  // A reload (SIGHUP) not finished within this is abandoned: health reports it failed, the old model serves.
  int reload_timeout_ms = 120000;

  int max_batch = 0;                  // dynamic batching: images per Engine::infer (0 = the model's max_batch)
  int max_wait_us = 500;              // how long the worker waits for more requests to fill a batch

  LogFormat log_format = LogFormat::kText;
  std::string log_level = "info";    // trace | debug | info | warn | error | critical | off

  GpioConfig gpio;
};

// Parses YAML text; relative paths (model, gpio.spool_dir) resolve against `base_dir`.
Result<DaemonConfig> parse_daemon_config(const std::string& yaml_text, const std::string& display_name,
                                         const std::string& base_dir);
// Reads and parses a file (base_dir = the file's directory).
Result<DaemonConfig> load_daemon_config(const std::string& path);

// Refuses a path that is not a regular file (a FIFO, device, socket or directory would block a read or
// never end) without blocking: opened with O_NONBLOCK, then fstat. kNotFound when missing, kIoError else.
// `what` names the file in the message ("labels", "model config", ...).
Status require_regular_file(const std::string& path, const std::string& what);

// Checks cross-field rules (also for configs built from flags). kConfigError.
Status validate_daemon_config(const DaemonConfig& config);

}  // namespace edgevit::daemon
