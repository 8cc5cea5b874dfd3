// The planner sizes only the outputs asked for (runtime/outputs.h, PlanOptions::outputs / tokens): without
// tokens a shipped model's plan has no tokens tensor and keeps its class-token tail; with them the io region
// grows by exactly the (batch, tokens, embed) buffer, the tail is off, and the plan says so (text and JSON).
// An output the model does not have is refused naming it.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "platform/device_registry.h"
#include "runtime/config.h"
#include "runtime/plan.h"
#include "tests/testutil/testutil.h"

namespace edgevit {
namespace {

DeviceProfile profile(const std::string& name) {
  auto dev = find_device_profile(name, {testutil::source_path("config/devices")});
  EXPECT_TRUE(dev.ok()) << dev.status().to_string();
  return *dev;
}

TEST(PlanOutputs, TokensAreSizedOnlyWhenAskedFor) {
  auto spec = load_model_spec(testutil::source_path("config/models/vit-base-patch16-224.yaml"));
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  for (const char* device : {"host-cpu", "orin-nx-16gb"}) {
    SCOPED_TRACE(device);
    PlanOptions o;
    o.batch = 8;
    auto plain = make_plan(*spec, profile(device), o);
    ASSERT_TRUE(plain.ok()) << plain.status().to_string();
    o.tokens = true;
    auto with = make_plan(*spec, profile(device), o);
    ASSERT_TRUE(with.ok()) << with.status().to_string();
    EXPECT_EQ(plain->graph.outputs, OutputSet().add(OutputKind::kLogits).add(OutputKind::kEmbedding)
                                        .add(OutputKind::kPreLogits));
    EXPECT_TRUE(with->graph.outputs.has(OutputKind::kTokens));
    EXPECT_EQ(plain->graph.tokens, -1);
    ASSERT_GE(with->graph.tokens, 0);
    const TensorDesc& t = with->graph.tensors[static_cast<size_t>(with->graph.tokens)];
    EXPECT_EQ(t.kind, TensorKind::kOutput);
    EXPECT_EQ(t.shape, (std::vector<int64_t>{8, 197, 768}));
    const int64_t elem = with->graph.act_elem_bytes();
    EXPECT_EQ(with->io_bytes - plain->io_bytes, 8 * 197 * 768 * elem);
    EXPECT_TRUE(plain->class_token_tail);
    EXPECT_FALSE(with->class_token_tail);
    EXPECT_NE(plain->hash, with->hash);
    EXPECT_NE(format_plan_text(*with, false).find("tokens [8, 197, 768]"), std::string::npos);
    EXPECT_EQ(format_plan_text(*plain, false).find("tokens ["), std::string::npos);
    const auto j = nlohmann::json::parse(format_plan_json(*with));
    ASSERT_EQ(j["outputs"].size(), 4u);
    EXPECT_EQ(j["outputs"][3]["name"], "tokens");
    EXPECT_EQ(j["outputs"][3]["staged_bytes"], 8 * 197 * 768 * 4);
    if (std::string(device) != "host-cpu") {  // CUDA: the pinned fp32 staging of the tokens too
      int64_t plain_staging = 0, with_staging = 0;
      for (const MemoryLine& l : plain->memory)
        if (l.name.rfind("pinned output staging", 0) == 0) plain_staging = l.bytes;
      for (const MemoryLine& l : with->memory)
        if (l.name.rfind("pinned output staging", 0) == 0) with_staging = l.bytes;
      EXPECT_EQ(with_staging - plain_staging, 8 * 197 * 768 * 4);
    }
  }
}

TEST(PlanOutputs, AnOutputTheModelLacksIsRefused) {
  auto spec = load_model_spec(testutil::source_path("config/models/vit-base-patch16-224.yaml"));
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  spec->arch.num_classes = 0;  // features only: no logits
  PlanOptions o;
  o.outputs = OutputSet().add(OutputKind::kLogits);
  auto plan = make_plan(*spec, profile("host-cpu"), o);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(plan.status().message().find("has no output 'logits'"), std::string::npos) << plan.status().message();
  spec->outputs = OutputSet().add(OutputKind::kLogits);  // in memory, past the YAML loader's check
  auto from_spec = make_plan(*spec, profile("host-cpu"), PlanOptions());
  ASSERT_FALSE(from_spec.ok());
  EXPECT_EQ(from_spec.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace edgevit
