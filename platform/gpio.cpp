#include "platform/gpio.h"

#include <glob.h>

#include <algorithm>

namespace edgevit {

bool gpio_chips_present() {
  glob_t g{};
  const int rc = glob("/dev/gpiochip*", 0, nullptr, &g);
  const bool found = rc == 0 && g.gl_pathc > 0;
  globfree(&g);
  return found;
}

#ifndef EDGEVIT_HAVE_GPIOD
Result<std::unique_ptr<GpioBackend>> make_gpiod_backend() {
  return unsupported("GPIO: this edgevit was built without libgpiod (install libgpiod-dev and rebuild)");
}
#endif

// ---- simulation -------------------------------------------------------------------------------------

class SimOutput : public GpioOutput {
 public:
  SimOutput(SimulatedGpio* sim, unsigned offset) : sim_(sim), offset_(offset) {}  // sim_ not owned
  ~SimOutput() override {
    sim_->drive(offset_, false);
    sim_->release(offset_);
  }
  Status set(bool active) override {
    sim_->drive(offset_, active);
    return Status::Ok();
  }

 private:
  SimulatedGpio* sim_;
  unsigned offset_;
};

class SimInput : public GpioEdgeInput {
 public:
  SimInput(SimulatedGpio* sim, unsigned offset) : sim_(sim), offset_(offset) {}  // sim_ not owned
  ~SimInput() override { sim_->release(offset_); }
  Result<int> wait_edges(int timeout_ms) override {
    std::unique_lock<std::mutex> lock(sim_->mu_);
    SimulatedGpio::Line& l = sim_->lines_[offset_];
    sim_->edge_cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return l.pending_edges > 0; });
    const int n = l.pending_edges;
    l.pending_edges = 0;
    return n;
  }

 private:
  SimulatedGpio* sim_;
  unsigned offset_;
};

SimulatedGpio::SimulatedGpio(std::vector<std::string> chips, unsigned lines_per_chip)
    : chips_(std::move(chips)), lines_per_chip_(lines_per_chip) {}

Status SimulatedGpio::check_request(const GpioLineRequest& line) const {
  std::string chip = line.chip;
  if (chip.rfind("/dev/", 0) == 0) chip = chip.substr(5);
  if (std::find(chips_.begin(), chips_.end(), chip) == chips_.end())
    return not_found("GPIO chip '" + line.chip + "' not found (simulated)");
  if (line.offset >= lines_per_chip_)
    return not_found("GPIO chip '" + line.chip + "' has no line " + std::to_string(line.offset) + " (simulated, " +
                     std::to_string(lines_per_chip_) + " lines)");
  const auto it = lines_.find(line.offset);
  if (it != lines_.end() && (it->second.requested || it->second.external))
    return device_error("GPIO " + line.chip + " line " + std::to_string(line.offset) +
                        ": Device or resource busy (EBUSY): held by another consumer");
  return Status::Ok();
}

Result<std::unique_ptr<GpioOutput>> SimulatedGpio::request_output(const GpioLineRequest& line, bool initial_active) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    EV_RETURN_IF_ERROR(check_request(line));
    Line& l = lines_[line.offset];
    l.requested = true;
    l.is_input = false;
    l.active_low = line.active_low;
  }
  drive(line.offset, initial_active);
  return std::unique_ptr<GpioOutput>(new SimOutput(this, line.offset));
}

Result<std::unique_ptr<GpioEdgeInput>> SimulatedGpio::request_edges(const GpioLineRequest& line, GpioEdge edge) {
  std::lock_guard<std::mutex> lock(mu_);
  EV_RETURN_IF_ERROR(check_request(line));
  Line& l = lines_[line.offset];
  l.requested = true;
  l.is_input = true;
  l.active_low = line.active_low;
  l.edge = edge;
  l.pending_edges = 0;
  return std::unique_ptr<GpioEdgeInput>(new SimInput(this, line.offset));
}

void SimulatedGpio::inject_edge(unsigned offset, bool rising) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    Line& l = lines_[offset];
    if (!l.requested || !l.is_input) return;
    // An active-low line reports logical edges inverted, like the kernel does with ACTIVE_LOW.
    const bool logical_rising = rising != l.active_low;
    if (l.edge == GpioEdge::kBoth || (l.edge == GpioEdge::kRising) == logical_rising) ++l.pending_edges;
  }
  edge_cv_.notify_all();
}

bool SimulatedGpio::level(unsigned offset) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = lines_.find(offset);
  return it != lines_.end() && it->second.level;
}

bool SimulatedGpio::requested(unsigned offset) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = lines_.find(offset);
  return it != lines_.end() && it->second.requested;
}

std::vector<SimulatedGpio::Change> SimulatedGpio::changes(unsigned offset) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = lines_.find(offset);
  return it == lines_.end() ? std::vector<Change>{} : it->second.changes;
}

void SimulatedGpio::hold_externally(unsigned offset) {
  std::lock_guard<std::mutex> lock(mu_);
  lines_[offset].external = true;
}

void SimulatedGpio::release(unsigned offset) {
  std::lock_guard<std::mutex> lock(mu_);
  lines_[offset].requested = false;
}

void SimulatedGpio::drive(unsigned offset, bool active) {
  std::lock_guard<std::mutex> lock(mu_);
  Line& l = lines_[offset];
  const bool level = active != l.active_low;
  if (l.changes.empty() || l.level != level) l.changes.push_back({offset, level, Clock::now()});
  l.level = level;
}

}  // namespace edgevit
