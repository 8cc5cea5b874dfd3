// The self-test report as text (for a person at a board) and JSON (for the daemon, CI and fleet tools).
#include <nlohmann/json.hpp>

#include <cstdio>
#include <sstream>

#include "selftest/checks.h"

namespace edgevit::selftest {
namespace {

std::string mib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

std::string mhz(int64_t hz) { return std::to_string(hz / 1000000) + " MHz"; }

std::string check_line(const CheckResult& c) {
  std::string s = c.name;
  if (!c.model.empty()) s += " (" + c.model + ")";
  if (c.outcome == Outcome::kSkip) return s + ": " + c.detail;
  s += ": " + c.measured;
  if (!c.bound.empty()) s += (c.outcome == Outcome::kFail ? "  violates bound " : "  bound ") + c.bound;
  if (!c.detail.empty()) s += "  [" + c.detail + "]";
  return s;
}

const char* verdict(const SelftestReport& r) { return r.passed() ? "PASS" : "FAIL"; }

}  // namespace

std::string format_report_text(const SelftestReport& r) {
  std::ostringstream s;
  const PlatformInfo& p = r.platform;
  const DeviceProfile& d = p.detected.profile;
  s << "edgevit-selftest (" << (r.quick ? "quick" : "full") << ", seed " << r.seed << ")\n";
  if (!r.fault.empty()) s << "INJECTED FAULT: " << r.fault << " (test-only; failures below are expected)\n";
  s << "\nplatform\n";
  s << "  device:      " << d.name << " - " << d.description << "\n";
  s << "  detected by: " << p.detected.source << "\n";
  if (!p.detected.details.empty()) s << "  details:     " << p.detected.details << "\n";
  s << "  power mode:  " << (p.power_mode.empty() ? "unknown" : p.power_mode) << " (" << p.power_mode_source << ")\n";
  for (const ClockInfo& c : p.clocks) {
    s << "  clock:       " << c.name << " " << mhz(c.cur_hz);
    if (c.max_hz > 0) s << " (range " << mhz(c.min_hz) << " - " << mhz(c.max_hz) << ")";
    s << "\n";
  }
  if (p.clocks.empty()) s << "  clocks:      none readable (no GPU devfreq or cpufreq in sysfs)\n";
  s << "  memory:      total " << mib(p.mem_total_bytes) << ", available " << mib(p.mem_available_bytes)
    << ", profile budget " << mib(d.memory_budget_bytes) << " (" << p.meminfo_source << ")\n";
  s << "  cpu:         " << d.cpu_cores << " cores" << (d.cpu_model.empty() ? "" : ", " + d.cpu_model) << "\n";

  for (const ModelDecision& m : r.decisions) {
    s << "\nmodel " << m.model << " on " << m.device << " [" << m.role << "]\n";
    s << "  config:    " << m.config_path << "\n";
    s << "  plan:      " << m.plan_hash << ", batch " << m.batch << ", " << m.precision << ", needs "
      << mib(m.total_bytes) << " of budget " << mib(m.budget_bytes) << (m.fits ? " (fits)" : " (DOES NOT FIT)") << "\n";
    s << "  attention: " << m.attention_kernel << (m.attention_fallback ? " (FALLBACK)" : "") << ": "
      << m.attention_reason << "\n";
    for (const OpChoice& o : m.ops)
      s << "  op " << o.op_kind << " x" << o.count << ": " << o.kernel << " - " << o.reason << " (first: " << o.first_op
        << ")\n";
  }

  s << "\nchecks\n";
  for (const CheckResult& c : r.checks) {
    const char* tag = c.outcome == Outcome::kPass ? "PASS" : c.outcome == Outcome::kFail ? "FAIL" : "SKIP";
    s << "  " << tag << " " << check_line(c) << "\n";
  }
  for (const std::string& n : r.notes) s << "note: " << n << "\n";
  s << "\n" << verdict(r) << ": " << r.count(Outcome::kPass) << " passed, " << r.count(Outcome::kFail) << " failed, "
    << r.count(Outcome::kSkip) << " skipped in " << fmt_g(r.seconds) << " s\n";
  for (const CheckResult& c : r.checks)
    if (c.outcome == Outcome::kFail) s << "FAILED " << check_line(c) << "\n";
  return s.str();
}

std::string format_report_json(const SelftestReport& r) {
  using nlohmann::ordered_json;
  const PlatformInfo& p = r.platform;
  const DeviceProfile& d = p.detected.profile;
  ordered_json clocks = ordered_json::array();
  for (const ClockInfo& c : p.clocks)
    clocks.push_back({{"name", c.name}, {"path", c.path}, {"cur_hz", c.cur_hz}, {"min_hz", c.min_hz}, {"max_hz", c.max_hz}});
  ordered_json models = ordered_json::array();
  for (const ModelDecision& m : r.decisions) {
    ordered_json ops = ordered_json::array();
    for (const OpChoice& o : m.ops)
      ops.push_back({{"op", o.op_kind}, {"kernel", o.kernel}, {"reason", o.reason}, {"count", o.count}, {"first_op", o.first_op}});
    models.push_back({{"model", m.model}, {"config", m.config_path}, {"device", m.device}, {"role", m.role},
                      {"plan_hash", m.plan_hash}, {"batch", m.batch}, {"precision", m.precision},
                      {"attention_kernel", m.attention_kernel}, {"attention_reason", m.attention_reason},
                      {"attention_fallback", m.attention_fallback}, {"arena_bytes", m.arena_bytes},
                      {"total_bytes", m.total_bytes}, {"budget_bytes", m.budget_bytes}, {"fits", m.fits}, {"ops", ops}});
  }
  ordered_json checks = ordered_json::array();
  for (const CheckResult& c : r.checks)
    checks.push_back({{"name", c.name}, {"model", c.model}, {"outcome", to_string(c.outcome)}, {"measured", c.measured},
                      {"bound", c.bound}, {"detail", c.detail}, {"seconds", c.seconds}});
  ordered_json j{
      {"result", r.passed() ? "pass" : "fail"},
      {"passed", r.count(Outcome::kPass)},
      {"failed", r.count(Outcome::kFail)},
      {"skipped", r.count(Outcome::kSkip)},
      {"mode", r.quick ? "quick" : "full"},
      {"seed", r.seed},
      {"fault", r.fault},
      {"seconds", r.seconds},
      {"platform",
       {{"device", d.name}, {"description", d.description}, {"kind", to_string(d.kind)},
        {"detected_by", p.detected.source}, {"details", p.detected.details}, {"power_mode", p.power_mode},
        {"power_mode_source", p.power_mode_source}, {"clocks", clocks}, {"mem_total_bytes", p.mem_total_bytes},
        {"mem_available_bytes", p.mem_available_bytes}, {"memory_budget_bytes", d.memory_budget_bytes},
        {"cpu_cores", d.cpu_cores}, {"cpu_model", d.cpu_model}}},
      {"models", models},
      {"checks", checks},
      {"notes", r.notes},
  };
  // Replace invalid UTF-8 (a device-tree string, a path) instead of throwing from dump().
  return j.dump(1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace edgevit::selftest
