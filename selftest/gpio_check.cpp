// gpio.loopback: an output line wired to an input line (a jumper on the header) proves the GPIO path the
// daemon uses end to end: request, drive, edge detection, release.
#include "platform/gpio.h"
#include "selftest/checks.h"

namespace edgevit::selftest {
namespace {

CheckResult gpio_result(const GpioLoopback& g) {
  CheckResult c;
  c.name = "gpio.loopback";
  c.bound = std::to_string(kLoopbackToggles) + " of " + std::to_string(kLoopbackToggles) + " edges within " +
            std::to_string(kLoopbackTimeoutMs) + " ms";
  c.detail = g.chip + " line " + std::to_string(g.out_line) + " -> line " + std::to_string(g.in_line);
  return c;
}

}  // namespace

CheckResult run_gpio_loopback_on(GpioBackend& backend, const GpioLoopback& g) {
  Stopwatch w;
  CheckResult c = gpio_result(g);
  c.detail += " (" + std::string(backend.name()) + " backend)";
  c.outcome = Outcome::kFail;
  if (g.out_line < 0 || g.in_line < 0 || g.out_line == g.in_line) {
    c.measured = "invalid loopback: output and input must be two distinct line offsets";
    return c;
  }
  GpioLineRequest in_req, out_req;
  in_req.chip = out_req.chip = g.chip;
  in_req.offset = static_cast<unsigned>(g.in_line);
  out_req.offset = static_cast<unsigned>(g.out_line);
  in_req.consumer = out_req.consumer = "edgevit-selftest";
  auto input = backend.request_edges(in_req, GpioEdge::kBoth);
  if (!input.ok()) {
    c.measured = "input line: " + input.status().to_string();
    return c;
  }
  auto output = backend.request_output(out_req, false);
  if (!output.ok()) {
    c.measured = "output line: " + output.status().to_string();
    return c;
  }
  int seen = 0;
  for (int i = 0; i < kLoopbackToggles; ++i) {
    const Status s = (*output)->set(i % 2 == 0);
    if (!s.ok()) {
      c.measured = "set: " + s.to_string();
      return c;
    }
    auto edges = (*input)->wait_edges(kLoopbackTimeoutMs);
    if (!edges.ok()) {
      c.measured = "wait_edges: " + edges.status().to_string();
      return c;
    }
    seen += *edges > 0 ? 1 : 0;
  }
  c.outcome = seen == kLoopbackToggles ? Outcome::kPass : Outcome::kFail;
  c.measured = std::to_string(seen) + " of " + std::to_string(kLoopbackToggles) + " edges seen";
  c.seconds = w.seconds();
  return c;
}

CheckResult run_gpio_loopback(const GpioLoopback& g) {
  auto backend = make_gpiod_backend();
  if (!backend.ok()) {
    CheckResult c = gpio_result(g);
    c.outcome = Outcome::kFail;
    c.measured = backend.status().to_string();
    return c;
  }
  return run_gpio_loopback_on(**backend, g);
}

}  // namespace edgevit::selftest
