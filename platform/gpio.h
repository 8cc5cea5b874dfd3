// GPIO lines for the daemon (status LED, trigger input, actuation output) behind one interface, with two
// backends: libgpiod 1.6 (platform/gpio_gpiod.cpp, real /dev/gpiochipN character devices) and an
// in-process simulation (SimulatedGpio, for tests). platform/ knows nothing of models: this file only
// drives lines.
//
// Lines are requested with consumer "edgevit". Values are logical: `active` = true drives the pin high,
// or low when the line is active-low. Every line object releases its line in its destructor, driving an
// output to inactive first, so every exit path (error returns, exceptions in callers, normal stop) leaves
// outputs in the safe (inactive) state.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/status.h"

namespace edgevit {

enum class GpioEdge { kRising, kFalling, kBoth };

struct GpioLineRequest {
  std::string chip;   // "gpiochip0", "/dev/gpiochip0", a chip label, or a number ("0")
  unsigned offset = 0;
  bool active_low = false;
  std::string consumer = "edgevit";
};

class GpioOutput {
 public:
  virtual ~GpioOutput() = default;  // implementations drive inactive, then release
  virtual Status set(bool active) = 0;
};

class GpioEdgeInput {
 public:
  virtual ~GpioEdgeInput() = default;  // implementations release the line
  // Waits up to timeout_ms for edges of the requested kind; returns how many were read (0: timeout).
  virtual Result<int> wait_edges(int timeout_ms) = 0;
};

class GpioBackend {
 public:
  virtual ~GpioBackend() = default;
  virtual const char* name() const = 0;
  // kNotFound: no such chip or offset; kDeviceError: the line is busy (EBUSY) or the request failed.
  virtual Result<std::unique_ptr<GpioOutput>> request_output(const GpioLineRequest& line, bool initial_active) = 0;
  virtual Result<std::unique_ptr<GpioEdgeInput>> request_edges(const GpioLineRequest& line, GpioEdge edge) = 0;
};

// libgpiod 1.6 backend. kUnsupported when edgevit was built without libgpiod-dev.
Result<std::unique_ptr<GpioBackend>> make_gpiod_backend();
// True when /dev/gpiochip* exists (real-backend tests run only then).
bool gpio_chips_present();

// In-process simulated chips. Tests keep a pointer to inspect outputs and inject edges; the backend must
// outlive every line it hands out. Thread-safe.
class SimulatedGpio : public GpioBackend {
 public:
  using Clock = std::chrono::steady_clock;
  struct Change {
    unsigned offset;
    bool level;  // physical level (after active_low)
    Clock::time_point when;
  };

  // `chips` names the chips that exist, `lines_per_chip` the offsets each has (0..n-1).
  explicit SimulatedGpio(std::vector<std::string> chips = {"gpiochip0"}, unsigned lines_per_chip = 32);

  const char* name() const override { return "simulated"; }
  Result<std::unique_ptr<GpioOutput>> request_output(const GpioLineRequest& line, bool initial_active) override;
  Result<std::unique_ptr<GpioEdgeInput>> request_edges(const GpioLineRequest& line, GpioEdge edge) override;

  // Test hooks.
  void inject_edge(unsigned offset, bool rising);  // an external edge on an input line
  bool level(unsigned offset) const;               // physical level of a line (false when never driven)
  bool requested(unsigned offset) const;           // currently held by someone
  std::vector<Change> changes(unsigned offset) const;  // every physical level change of an output, in order
  void hold_externally(unsigned offset);           // another process holds it: requests fail with EBUSY

 private:
  friend class SimOutput;
  friend class SimInput;
  struct Line {
    bool requested = false;
    bool external = false;
    bool level = false;
    bool active_low = false;
    GpioEdge edge = GpioEdge::kRising;
    bool is_input = false;
    int pending_edges = 0;
    std::vector<Change> changes;
  };
  Status check_request(const GpioLineRequest& line) const;  // with mu_ held
  void release(unsigned offset);
  void drive(unsigned offset, bool active);

  mutable std::mutex mu_;
  std::condition_variable edge_cv_;
  std::vector<std::string> chips_;
  unsigned lines_per_chip_;
  std::map<unsigned, Line> lines_;
};

}  // namespace edgevit
