// libFuzzer target: device profiles (YAML guard, yaml-cpp, strict schema) through parse_device_profile,
// with and without a file name the `name` key must match. A profile that parses keeps its invariants.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "platform/device_registry.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  for (const char* expected : {"", "fuzz"}) {
    auto p = edgevit::parse_device_profile(text, "fuzz.yaml", expected);
    if (!p.ok()) continue;
    if (p->memory_budget_bytes > p->memory_total_bytes || p->memory_budget_bytes <= 0) std::abort();
    if (p->cuda_context_bytes >= p->memory_budget_bytes) std::abort();
    if (p->name.empty()) std::abort();
  }
  return 0;
}
