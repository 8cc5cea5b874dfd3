// libFuzzer target: model configs (YAML guard, yaml-cpp, strict schema) through parse_model_spec. A spec
// that parses must survive a save/parse round trip unchanged and plan on a host CPU profile without
// overflow (UBSan watches the size arithmetic).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "platform/device_profile.h"
#include "runtime/config.h"
#include "runtime/plan.h"

namespace {

edgevit::DeviceProfile host_cpu() {
  edgevit::DeviceProfile d;
  d.name = "fuzz-cpu";
  d.kind = edgevit::DeviceKind::kCpu;
  d.memory_total_bytes = int64_t{8} << 30;
  d.memory_budget_bytes = int64_t{6} << 30;
  d.cpu_cores = 4;
  return d;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto spec = edgevit::parse_model_spec(text, "fuzz.yaml", "/base");
  if (!spec.ok()) return 0;
  auto yaml = edgevit::model_spec_to_yaml(*spec, "/base");
  if (!yaml.ok()) std::abort();
  auto back = edgevit::parse_model_spec(*yaml, "fuzz-roundtrip.yaml", "/base");
  if (!back.ok() || !edgevit::same_model_spec(*spec, *back)) std::abort();
  edgevit::PlanOptions options;
  options.batch = 1;
  auto plan = edgevit::make_plan(*spec, host_cpu(), options);
  (void)plan;
  return 0;
}
