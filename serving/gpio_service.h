// The daemon's GPIO duties (platform/gpio.h lines, configured by DaemonConfig::gpio):
//   status LED   ready: steady on; busy (requests queued or running): 2 Hz blink; fault: 8 Hz blink;
//                off when stopped.
//   trigger      each configured edge (debounced) runs one inference on the newest regular file of the
//                spool directory (by modification time, then name) and publishes the result to stats.
//   actuator     pulsed active for pulse_ms when a trigger's top-1 class is an alarm class with
//                score >= threshold.
// Every line is released, outputs inactive, when the service stops or fails to start.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "platform/gpio.h"
#include "serving/daemon_config.h"
#include "serving/server.h"

namespace edgevit::daemon {

enum class LedState { kOff, kReady, kBusy, kFault };

struct GpioHooks {
  std::function<LedState()> led_state;                                  // polled every 25 ms
  std::function<Result<TopResult>(const uint8_t*, size_t)> infer_image;  // one encoded image
};

class GpioService {
 public:
  // Requests the configured lines on `backend` (not owned; must outlive the service). kNotFound for a
  // missing chip/line, kDeviceError for a busy line: clear start-up errors naming chip and offset.
  static Result<std::unique_ptr<GpioService>> start(const GpioConfig& config, GpioBackend* backend, GpioHooks hooks);
  ~GpioService();
  void stop();  // joins the threads; LED off, actuator inactive, lines released. Idempotent.

  std::string stats_json() const;  // {"triggers":..,"trigger_errors":..,"alarms":..,"last_trigger":{...}}

 private:
  GpioService() = default;
  void led_loop();
  void trigger_loop();
  void handle_trigger();

  GpioConfig config_;
  GpioHooks hooks_;
  std::unique_ptr<GpioOutput> led_;
  std::unique_ptr<GpioEdgeInput> trigger_;
  std::unique_ptr<GpioOutput> actuator_;
  std::thread led_thread_, trigger_thread_;
  std::atomic<bool> stopping_{false};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<long> triggers_{0}, trigger_errors_{0}, alarms_{0};
  std::string last_trigger_json_;  // guarded by mu_
};

}  // namespace edgevit::daemon
