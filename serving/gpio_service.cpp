#include "serving/gpio_service.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "runtime/inputs.h"
#include "serving/daemon_config.h"
#include "serving/json_text.h"

namespace edgevit::daemon {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

GpioLineRequest line_request(const GpioConfig& c, const GpioLineConfig& l) {
  GpioLineRequest r;
  r.chip = c.chip;
  r.offset = static_cast<unsigned>(l.offset);
  r.active_low = l.active_low;
  return r;
}

GpioEdge to_edge(TriggerEdge e) {
  switch (e) {
    case TriggerEdge::kRising: return GpioEdge::kRising;
    case TriggerEdge::kFalling: return GpioEdge::kFalling;
    case TriggerEdge::kBoth: return GpioEdge::kBoth;
  }
  return GpioEdge::kRising;
}

// Newest regular file in `dir` (modification time, then name for ties).
Result<fs::path> newest_file(const std::string& dir) {
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) return not_found("spool directory " + dir + ": " + ec.message());
  fs::path best;
  fs::file_time_type best_time{};
  for (const auto& entry : it) {
    if (!entry.is_regular_file(ec)) continue;
    const auto t = entry.last_write_time(ec);
    if (ec) continue;
    if (best.empty() || t > best_time || (t == best_time && entry.path().filename() > best.filename())) {
      best = entry.path();
      best_time = t;
    }
  }
  if (best.empty()) return not_found("spool directory " + dir + " holds no image");
  return best;
}

}  // namespace

Result<std::unique_ptr<GpioService>> GpioService::start(const GpioConfig& config, GpioBackend* backend,
                                                         GpioHooks hooks) {
  std::unique_ptr<GpioService> s(new GpioService());
  s->config_ = config;
  s->hooks_ = std::move(hooks);
  const std::string where = std::string("gpio (") + backend->name() + "): ";
  if (config.status_led.offset >= 0) {
    auto led = backend->request_output(line_request(config, config.status_led), false);
    if (!led.ok()) return led.status().with_context(where + "status_led");
    s->led_ = std::move(*led);
  }
  if (config.actuator.offset >= 0) {
    auto act = backend->request_output(line_request(config, config.actuator), false);
    if (!act.ok()) return act.status().with_context(where + "actuator");
    s->actuator_ = std::move(*act);
  }
  if (config.trigger.offset >= 0) {
    auto trig = backend->request_edges(line_request(config, config.trigger), to_edge(config.trigger_edge));
    if (!trig.ok()) return trig.status().with_context(where + "trigger");
    s->trigger_ = std::move(*trig);
  }
  if (s->led_) s->led_thread_ = std::thread([p = s.get()] { p->led_loop(); });
  if (s->trigger_) s->trigger_thread_ = std::thread([p = s.get()] { p->trigger_loop(); });
  return s;
}

GpioService::~GpioService() { stop(); }

void GpioService::stop() {
  stopping_ = true;
  cv_.notify_all();
  if (trigger_thread_.joinable()) trigger_thread_.join();
  if (led_thread_.joinable()) led_thread_.join();
  // Destructors drive outputs inactive and release the lines.
  trigger_.reset();
  actuator_.reset();
  led_.reset();
}

void GpioService::led_loop() {
  // Phase counter in 25 ms ticks: busy toggles every 10 ticks (2 Hz period 500 ms), fault every 2 ticks.
  long tick = 0;
  bool last = false, first = true;
  while (!stopping_) {
    const LedState st = hooks_.led_state ? hooks_.led_state() : LedState::kReady;
    bool on = false;
    switch (st) {
      case LedState::kOff: on = false; break;
      case LedState::kReady: on = true; break;
      case LedState::kBusy: on = (tick / 10) % 2 == 0; break;
      case LedState::kFault: on = (tick / 2) % 2 == 0; break;
    }
    if (first || on != last) {
      const Status s = led_->set(on);
      if (!s.ok()) spdlog::warn("status LED: {}", s.message());
      last = on;
      first = false;
    }
    ++tick;
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::milliseconds(25), [&] { return stopping_.load(); });
  }
  const Status s = led_->set(false);
  if (!s.ok()) spdlog::warn("status LED: {}", s.message());
}

void GpioService::trigger_loop() {
  Clock::time_point last_edge{};
  while (!stopping_) {
    auto edges = trigger_->wait_edges(100);
    if (!edges.ok()) {
      spdlog::error("gpio trigger: {}", edges.status().message());
      ++trigger_errors_;
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::milliseconds(500), [&] { return stopping_.load(); });
      continue;
    }
    if (*edges == 0 || stopping_) continue;
    const auto now = Clock::now();
    if (last_edge != Clock::time_point{} && now - last_edge < std::chrono::milliseconds(config_.debounce_ms)) continue;
    last_edge = now;
    handle_trigger();
  }
}

void GpioService::handle_trigger() {
  nlohmann::ordered_json j;
  j["time_unix_ms"] = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch()).count();
  auto fail = [&](const Status& s) {
    ++trigger_errors_;
    j["ok"] = false;
    j["error"] = valid_utf8(s.to_string());
    spdlog::warn("gpio trigger: {}", s.message());
    std::lock_guard<std::mutex> lock(mu_);
    last_trigger_json_ = dump_json(j);
    ++triggers_;  // counted once its result is visible
  };
  auto file = newest_file(config_.spool_dir);
  if (!file.ok()) return fail(file.status());
  // Checked without blocking (a FIFO swapped in after the listing is refused, not read) and bounded like
  // any image file (runtime/inputs.h ImageLimits::max_file_bytes).
  const Status regular = require_regular_file(file->string(), "spool file");
  if (!regular.ok()) return fail(regular);
  std::error_code size_error;
  const uintmax_t size = fs::file_size(*file, size_error);
  const int64_t max_bytes = ImageLimits().max_file_bytes;
  if (size_error || size > static_cast<uintmax_t>(max_bytes))
    return fail(input_error("spool file " + file->string() + ": over " + std::to_string(max_bytes) + " bytes"));
  std::ifstream in(*file, std::ios::binary);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof()) return fail(io_error("cannot read " + file->string()));
  j["file"] = valid_utf8(file->string());
  auto r = hooks_.infer_image(bytes.data(), bytes.size());
  if (!r.ok()) return fail(r.status());
  const bool alarm = actuator_ &&
                     std::find(config_.alarm_classes.begin(), config_.alarm_classes.end(), r->index) !=
                         config_.alarm_classes.end() &&
                     r->score >= config_.alarm_threshold;
  j["ok"] = true;
  j["index"] = r->index;
  j["label"] = valid_utf8(r->label);
  j["score"] = r->score;
  j["alarm"] = alarm;
  {
    std::lock_guard<std::mutex> lock(mu_);
    last_trigger_json_ = dump_json(j);
    ++triggers_;
  }
  spdlog::info("gpio trigger: {} -> {} ({}) score {:.4f}{}", file->filename().string(), r->index, r->label, r->score,
               alarm ? ", alarm" : "");
  if (!alarm) return;
  ++alarms_;
  Status s = actuator_->set(true);
  if (!s.ok()) spdlog::error("gpio actuator: {}", s.message());
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::milliseconds(config_.pulse_ms), [&] { return stopping_.load(); });
  }
  s = actuator_->set(false);
  if (!s.ok()) spdlog::error("gpio actuator: {}", s.message());
}

std::string GpioService::stats_json() const {
  nlohmann::ordered_json j;
  j["triggers"] = triggers_.load();
  j["trigger_errors"] = trigger_errors_.load();
  j["alarms"] = alarms_.load();
  std::string last;
  {
    std::lock_guard<std::mutex> lock(mu_);
    last = last_trigger_json_;
  }
  j["last_trigger"] = last.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json::parse(last, nullptr, false);
  return dump_json(j);
}

}  // namespace edgevit::daemon
