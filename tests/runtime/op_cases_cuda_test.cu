// The shared op-case list (runtime/op_check.h) on every CUDA row of this build, fp16, fp32 and INT8, against the
// double-precision references, on the GPU this runs on (its profile from the CUDA properties).
#include <gtest/gtest.h>

#include <cstdio>
#include <set>

#include "platform/cuda_query.h"
#include "runtime/op_check.h"

namespace edgevit {
namespace {

TEST(OpCasesCuda, EveryCaseOnEveryCudaRowMatchesItsReference) {
  auto device = cuda_op_case_device();
  ASSERT_NE(device, nullptr);
  auto profile = query_cuda_device(0);
  ASSERT_TRUE(profile.ok()) << profile.status().to_string();
  std::set<std::string> rows_run;
  uint32_t seed = 5000;
  for (Precision p : {Precision::kFp16, Precision::kFp32, Precision::kInt8}) {
    for (const OpCase& c : standard_op_cases(p)) {
      SCOPED_TRACE(c.name + " " + to_string(p));
      auto results = run_op_case(c, *profile, *device, seed++);
      ASSERT_TRUE(results.ok()) << results.status().to_string();
      for (const OpCaseResult& r : *results) {
        std::printf("%-5s %-50s %-26s %-48s %.2e\n", to_string(p), c.name.c_str(), r.row.c_str(), r.kernel.c_str(),
                    r.error);
        EXPECT_TRUE(r.ok) << r.row << " (" << r.kernel << "): " << r.detail;
        rows_run.insert(r.row);
      }
    }
  }
  for (const OpRow* row : available_rows(DeviceKind::kCuda))
    EXPECT_EQ(rows_run.count(row->name), 1u) << row->name << " is run by no op case";
}

}  // namespace
}  // namespace edgevit
