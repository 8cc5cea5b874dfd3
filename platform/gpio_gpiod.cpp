// libgpiod 1.6 backend of platform/gpio.h (character device /dev/gpiochipN; the sysfs interface is
// deprecated). Built only where libgpiod-dev was found (EDGEVIT_HAVE_GPIOD); gpio.cpp supplies the
// kUnsupported fallback otherwise.
#ifdef EDGEVIT_HAVE_GPIOD

#include <gpiod.h>

#include <cerrno>
#include <cstring>
#include <ctime>

#include "platform/gpio.h"

namespace edgevit {

namespace {

std::string describe(const GpioLineRequest& r) { return "GPIO " + r.chip + " line " + std::to_string(r.offset); }

Status request_error(const GpioLineRequest& r, int err) {
  if (err == EBUSY)
    return device_error(describe(r) + ": Device or resource busy (EBUSY): another consumer holds it (see gpioinfo)");
  return device_error(describe(r) + ": request failed: " + std::strerror(err));
}

// Owns the chip handle and the line; the line is released before the chip is closed.
struct Held {
  gpiod_chip* chip = nullptr;
  gpiod_line* line = nullptr;
  ~Held() {
    if (line != nullptr) gpiod_line_release(line);
    if (chip != nullptr) gpiod_chip_close(chip);
  }
};

Status open_line(const GpioLineRequest& r, Held* h) {
  errno = 0;
  h->chip = gpiod_chip_open_lookup(r.chip.c_str());  // path, name, label or number
  if (h->chip == nullptr)
    return not_found("GPIO chip '" + r.chip + "' not found (" + std::strerror(errno ? errno : ENOENT) +
                     "; see gpiodetect)");
  if (r.offset >= gpiod_chip_num_lines(h->chip))
    return not_found(describe(r) + ": the chip has " + std::to_string(gpiod_chip_num_lines(h->chip)) + " lines");
  h->line = gpiod_chip_get_line(h->chip, r.offset);
  if (h->line == nullptr) return device_error(describe(r) + ": " + std::strerror(errno));
  return Status::Ok();
}

class GpiodOutput : public GpioOutput {
 public:
  explicit GpiodOutput(std::unique_ptr<Held> held, std::string what) : held_(std::move(held)), what_(std::move(what)) {}
  ~GpiodOutput() override { gpiod_line_set_value(held_->line, 0); }  // safe state; Held releases after
  Status set(bool active) override {
    if (gpiod_line_set_value(held_->line, active ? 1 : 0) != 0)
      return device_error(what_ + ": set value failed: " + std::strerror(errno));
    return Status::Ok();
  }

 private:
  std::unique_ptr<Held> held_;
  std::string what_;
};

class GpiodInput : public GpioEdgeInput {
 public:
  explicit GpiodInput(std::unique_ptr<Held> held, std::string what) : held_(std::move(held)), what_(std::move(what)) {}
  Result<int> wait_edges(int timeout_ms) override {
    timespec ts{timeout_ms / 1000, static_cast<long>(timeout_ms % 1000) * 1000000L};
    const int rc = gpiod_line_event_wait(held_->line, &ts);
    if (rc < 0) return device_error(what_ + ": event wait failed: " + std::strerror(errno));
    if (rc == 0) return 0;
    gpiod_line_event events[16];
    const int n = gpiod_line_event_read_multiple(held_->line, events, 16);
    if (n < 0) return device_error(what_ + ": event read failed: " + std::strerror(errno));
    return n;
  }

 private:
  std::unique_ptr<Held> held_;
  std::string what_;
};

class GpiodBackend : public GpioBackend {
 public:
  const char* name() const override { return "libgpiod"; }

  Result<std::unique_ptr<GpioOutput>> request_output(const GpioLineRequest& r, bool initial_active) override {
    auto held = std::make_unique<Held>();
    EV_RETURN_IF_ERROR(open_line(r, held.get()));
    gpiod_line_request_config cfg{};
    cfg.consumer = r.consumer.c_str();
    cfg.request_type = GPIOD_LINE_REQUEST_DIRECTION_OUTPUT;
    cfg.flags = r.active_low ? GPIOD_LINE_REQUEST_FLAG_ACTIVE_LOW : 0;
    if (gpiod_line_request(held->line, &cfg, initial_active ? 1 : 0) != 0) {
      const int err = errno;
      held->line = nullptr;  // not requested: nothing to release
      return request_error(r, err);
    }
    return std::unique_ptr<GpioOutput>(new GpiodOutput(std::move(held), describe(r)));
  }

  Result<std::unique_ptr<GpioEdgeInput>> request_edges(const GpioLineRequest& r, GpioEdge edge) override {
    auto held = std::make_unique<Held>();
    EV_RETURN_IF_ERROR(open_line(r, held.get()));
    gpiod_line_request_config cfg{};
    cfg.consumer = r.consumer.c_str();
    cfg.request_type = edge == GpioEdge::kRising    ? GPIOD_LINE_REQUEST_EVENT_RISING_EDGE
                       : edge == GpioEdge::kFalling ? GPIOD_LINE_REQUEST_EVENT_FALLING_EDGE
                                                    : GPIOD_LINE_REQUEST_EVENT_BOTH_EDGES;
    cfg.flags = r.active_low ? GPIOD_LINE_REQUEST_FLAG_ACTIVE_LOW : 0;
    if (gpiod_line_request(held->line, &cfg, 0) != 0) {
      const int err = errno;
      held->line = nullptr;
      return request_error(r, err);
    }
    return std::unique_ptr<GpioEdgeInput>(new GpiodInput(std::move(held), describe(r)));
  }
};

}  // namespace

Result<std::unique_ptr<GpioBackend>> make_gpiod_backend() { return std::unique_ptr<GpioBackend>(new GpiodBackend()); }

}  // namespace edgevit

#endif  // EDGEVIT_HAVE_GPIOD
