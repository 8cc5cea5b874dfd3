// The plan hash of every shipped model x device profile x batch {1, 8} equals the checked-in table
// (tests/data/plan_hashes.txt). The same table is checked on x86-64 and aarch64 (the cross build runs
// this test under qemu), so a plan never depends on the architecture it was computed on.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "platform/device_registry.h"
#include "runtime/config.h"
#include "runtime/plan.h"
#include "tests/testutil/testutil.h"

namespace edgevit {
namespace {

TEST(PlanHash, MatchesCheckedInTableOnThisArchitecture) {
  std::ifstream in(testutil::source_path("tests/data/plan_hashes.txt"));
  ASSERT_TRUE(in) << "missing tests/data/plan_hashes.txt (tools/update_plan_goldens.sh writes it)";
  std::string line;
  int checked = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ls(line);
    std::string model, device, hash;
    int batch = 0;
    ls >> model >> device >> batch >> hash;
    SCOPED_TRACE(line);
    auto spec = load_model_spec(testutil::source_path("config/models/" + model + ".yaml"));
    ASSERT_TRUE(spec.ok()) << spec.status().to_string();
    auto dev = find_device_profile(device, {testutil::source_path("config/devices")});
    ASSERT_TRUE(dev.ok()) << dev.status().to_string();
    PlanOptions o;
    o.batch = batch;
    auto plan = make_plan(*spec, *dev, o);
    ASSERT_TRUE(plan.ok()) << plan.status().to_string();
    EXPECT_EQ(plan->hash_hex(), hash);
    ++checked;
  }
  EXPECT_GE(checked, 7 * 6 * 2) << "every shipped model x profile x batch {1,8} should be listed";
}

}  // namespace
}  // namespace edgevit
