// The shared op-case list (runtime/op_check.h) on every CPU row this build can run: each op kind and variant
// against its double-precision reference. tests/runtime/op_cases_cuda_test.cu runs the same list on CUDA.
#include <gtest/gtest.h>

#include <set>

#include "platform/device_registry.h"
#include "runtime/op_check.h"
#include "tests/testutil/testutil.h"

namespace edgevit {
namespace {

TEST(OpCases, EveryCaseOnEveryAvailableCpuRowMatchesItsReference) {
  auto dev = find_device_profile("host-cpu", {testutil::source_path("config/devices")});
  ASSERT_TRUE(dev.ok());
  auto device = cpu_op_case_device();
  std::set<std::string> rows_run;
  uint32_t seed = 1000;
  for (const OpCase& c : standard_op_cases(Precision::kFp32)) {
    SCOPED_TRACE(c.name);
    auto results = run_op_case(c, *dev, *device, seed++);
    ASSERT_TRUE(results.ok()) << results.status().to_string();
    EXPECT_FALSE(results->empty()) << "no row ran the case";
    for (const OpCaseResult& r : *results) {
      std::printf("%-52s %-24s %-44s %.2e\n", c.name.c_str(), r.row.c_str(), r.kernel.c_str(), r.error);
      EXPECT_TRUE(r.ok) << r.row << " (" << r.kernel << "): " << r.detail;
      rows_run.insert(r.row);
    }
  }
  // Every row this build can run was exercised by some case.
  for (const OpRow* row : available_rows(DeviceKind::kCpu))
    EXPECT_EQ(rows_run.count(row->name), 1u) << row->name << " is run by no op case";
}

TEST(OpCases, ModelShapesRunOnTheCpu) {
  auto dev = find_device_profile("host-cpu", {testutil::source_path("config/devices")});
  ASSERT_TRUE(dev.ok());
  ModelSpec spec;
  spec.name = "vit-ti-shapes";
  spec.arch.img_h = spec.arch.img_w = 224;
  spec.arch.embed_dim = 192;
  spec.arch.num_heads = 3;
  spec.arch.depth = 12;
  auto device = cpu_op_case_device();
  const auto cases = model_op_cases(spec, 1, Precision::kFp32);
  EXPECT_EQ(cases.size(), 13u);
  for (const OpCase& c : cases) {
    SCOPED_TRACE(c.name);
    auto results = run_op_case(c, *dev, *device, 77);
    ASSERT_TRUE(results.ok()) << results.status().to_string();
    for (const OpCaseResult& r : *results) EXPECT_TRUE(r.ok) << r.row << ": " << r.detail;
  }
}

}  // namespace
}  // namespace edgevit
