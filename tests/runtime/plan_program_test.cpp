// The plan is the program: after Engine::create the plan names, op by op, the kernel the forward dispatches
// (the backend records what each op's dispatch took: Backend::executed_kernels), and its hash covers those
// names. Before that, `plan` on any machine is a forecast from the op table (runtime/op_table.h): the first
// row that supports each op; the engine substitutes the next row where this build or CPU cannot run it
// (libxsmm's packed GEMM off x86-64) and says so in the plan's notes.
#include <gtest/gtest.h>

#include "kernels/cpu/kernels.h"
#include "platform/device_registry.h"
#include "runtime/config.h"
#include "runtime/engine.h"
#include "runtime/plan.h"
#include "tests/testutil/testutil.h"

namespace edgevit {
namespace {

DeviceProfile host_cpu() {
  auto dev = find_device_profile("host-cpu", {testutil::source_path("config/devices")});
  EXPECT_TRUE(dev.ok());
  return *dev;
}

TEST(PlanIsTheProgram, CpuEngineRunsWhatItsPlanNames) {
  int cases = 0;
  for (const char* config : {"vit-micro.yaml", "vit-avgpool.yaml", "vit-tiny-golden.yaml"}) {
    for (AttentionImpl attention : {AttentionImpl::kAuto, AttentionImpl::kExplicit}) {
      for (bool all_tokens : {false, true}) {
        SCOPED_TRACE(std::string(config) + " " + to_string(attention) + (all_tokens ? " all tokens" : ""));
        auto spec = load_model_spec(testutil::source_path(std::string("config/models/") + config));
        ASSERT_TRUE(spec.ok()) << spec.status().to_string();
        EngineOptions o;
        o.threads = 2;
        o.plan.batch = 2;
        o.plan.attention = attention;
        o.plan.all_tokens = all_tokens;
        auto forecast = make_plan(*spec, host_cpu(), o.plan);
        ASSERT_TRUE(forecast.ok());
        EXPECT_FALSE(forecast->resolved);
        auto engine = Engine::create(*spec, host_cpu(), o);
        ASSERT_TRUE(engine.ok()) << engine.status().to_string();
        const Plan& plan = (*engine)->plan();
        EXPECT_TRUE(plan.resolved);
        std::vector<float> in(2 * (*engine)->input_numel_per_image(), 0.25f);
        ASSERT_TRUE((*engine)->infer(in.data(), 2).ok());
        const std::vector<std::string> ran = (*engine)->executed_kernels();
        ASSERT_EQ(ran.size(), plan.graph.ops.size());
        bool names_changed = false;
        for (size_t i = 0; i < ran.size(); ++i) {
          EXPECT_EQ(plan.graph.ops[i].kernel, ran[i]) << "op " << plan.graph.ops[i].name;
          names_changed |= forecast->graph.ops[i].kernel != ran[i];
          if (plan.graph.ops[i].kind == OpKind::kLinear) {
            // The forecast names the table's first linear row; what runs is the GEMM library this build and
            // CPU have.
            EXPECT_EQ(forecast->graph.ops[i].row, "cpu.gemm_libxsmm_packed");
            const std::string lib = cpu_packed_gemm_available() ? "cpu.gemm_libxsmm_packed" : "cpu.sgemm_openblas";
            EXPECT_EQ(ran[i].rfind(lib, 0), 0u) << ran[i] << " (" << cpu_gemm_library() << ")";
          }
        }
        // A substituted row is said in the plan's notes.
        bool substitution_noted = false;
        for (const std::string& n : plan.notes) substitution_noted |= n.find("unavailable here") != std::string::npos;
        EXPECT_EQ(substitution_noted, !cpu_packed_gemm_available());
        // The hash covers the resolved names: it changes exactly when a name does.
        EXPECT_EQ(plan.hash != forecast->hash, names_changed);
        ++cases;
      }
    }
  }
  EXPECT_EQ(cases, 12);
}

}  // namespace
}  // namespace edgevit
