// Shared by the footprint tests (memory_footprint_slow_test.cpp on the CPU, footprint_cuda_test.cu on a
// GPU): the process's resident bytes, the cases (ViT-Ti and ViT-B at batch 1 and 64), the plan's lines as
// printed beside a measurement, and the bound: 5% of the plan's figure or 8 MiB, whichever is larger.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>

#include "runtime/plan.h"

namespace edgevit::testutil {

inline int64_t rss_bytes() {
  std::ifstream in("/proc/self/statm");
  int64_t size = 0, resident = 0;
  in >> size >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

struct FootprintCase {
  const char* config;  // under config/models/
  int batch;
};

inline auto footprint_cases() {
  return ::testing::Values(FootprintCase{"vit-tiny-patch16-224.yaml", 1}, FootprintCase{"vit-tiny-patch16-224.yaml", 64},
                           FootprintCase{"vit-base-patch16-224.yaml", 1}, FootprintCase{"vit-base-patch16-224.yaml", 64});
}

inline std::string footprint_case_name(const ::testing::TestParamInfo<FootprintCase>& i) {
  return std::string(i.param.config[4] == 't' ? "ViT_Ti" : "ViT_B") + "_batch" + std::to_string(i.param.batch);
}

inline void print_memory_lines(const Plan& plan) {
  for (const MemoryLine& l : plan.memory)
    std::printf("  %-6s %-60s %12lld  %s%s\n", to_string(l.space), l.name.c_str(), static_cast<long long>(l.bytes),
                l.basis.c_str(), l.load_only ? " (load only)" : "");
}

// The plan's figure against the measured one: within 5% or 8 MiB.
inline void expect_footprint(const char* what, int64_t planned, int64_t measured) {
  const double slack = std::max(0.05 * static_cast<double>(planned), 8.0 * (1 << 20));
  EXPECT_LE(std::abs(static_cast<double>(measured - planned)), slack)
      << what << ": plan " << planned << " vs measured " << measured;
}

}  // namespace edgevit::testutil
