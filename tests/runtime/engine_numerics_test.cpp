// An answer is right or it is an error (issue: NaN logits with exit 0 at head_dim 160):
// - every head_dim the plan accepts runs a kernel that serves it: the fused CPU kernel up to
//   kMhaFusedMaxHeadDim, the explicit one above it, chosen by the plan with the reason stated; the engine's
//   outputs match the forward composed of the kernels' references (tests/testutil/vit_ref.h);
// - a non-finite output is never returned as an answer: infer() reports kNonFinite naming the output.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>

#include "platform/device_registry.h"
#include "runtime/engine.h"
#include "runtime/plan.h"
#include "tests/runtime/checkpoint_fixtures.h"
#include "tests/testutil/testutil.h"
#include "base/tolerances.h"
#include "tests/testutil/vit_ref.h"

namespace edgevit {
namespace {

DeviceProfile host_cpu() {
  auto dev = find_device_profile("host-cpu", {testutil::source_path("config/devices")});
  EXPECT_TRUE(dev.ok()) << dev.status().to_string();
  return *dev;
}

// A small model of the given head_dim: 16x16 images, 8x8 patches (5 tokens), one block.
VitArch arch_with_head_dim(int head_dim, int heads) {
  VitArch a;
  a.img_h = a.img_w = 16;
  a.patch_size = 8;
  a.embed_dim = head_dim * heads;
  a.num_heads = heads;
  a.depth = 1;
  a.mlp_ratio = 2.0;
  a.num_classes = 5;
  return a;
}

// Random weights scaled by 1/sqrt(fan_in) (activations of order one at every width), written to dir.
testutil::TensorMap write_checkpoint(const VitArch& a, const std::string& path, uint32_t seed) {
  testutil::TensorMap w = testutil::random_checkpoint(a, seed);
  for (auto& [name, t] : w) {
    if (t.shape.size() < 2 || name == "pos_embed" || name == "cls_token") continue;
    int64_t fan_in = 1;
    for (size_t i = 1; i < t.shape.size(); ++i) fan_in *= t.shape[i];
    const float s = 1.f / std::sqrt(static_cast<float>(fan_in));
    for (float& v : t.data) v *= s;
  }
  EXPECT_TRUE(testutil::write_tensors(path, w).ok());
  return w;
}

ModelSpec spec_for(const VitArch& a, const std::string& weights, int batch) {
  ModelSpec s;
  s.name = "head-dim-" + std::to_string(a.head_dim());
  s.arch = a;
  s.weights_path = weights;
  s.max_batch = batch;
  return s;
}

TEST(EngineNumerics, EveryHeadDimRunsAKernelThatServesIt) {
  const std::string dir = testutil::make_temp_dir("headdim");
  const DeviceProfile dev = host_cpu();
  uint32_t seed = 700;
  for (int d : {8, 24, 48, 72, 160, 256}) {
    SCOPED_TRACE("head_dim " + std::to_string(d));
    const VitArch a = arch_with_head_dim(d, 2);
    const std::string path = dir + "/hd" + std::to_string(d) + ".safetensors";
    const testutil::TensorMap w = write_checkpoint(a, path, seed += 100);
    const int batch = 2;
    const auto input = testutil::random_floats(static_cast<size_t>(batch) * 3 * 16 * 16, seed + 1);
    const testutil::VitRefOutputs ref = testutil::vit_forward_ref(a, w, input.data(), batch);
    for (AttentionImpl impl : {AttentionImpl::kAuto, AttentionImpl::kExplicit}) {
      SCOPED_TRACE(std::string("attention ") + to_string(impl));
      EngineOptions o;
      o.threads = 2;
      o.plan.attention = impl;
      auto engine = Engine::create(spec_for(a, path, batch), dev, o);
      ASSERT_TRUE(engine.ok()) << engine.status().to_string();
      const Plan& plan = (*engine)->plan();
      const bool fused_serves = d <= kMhaFusedMaxHeadDim;
      if (impl == AttentionImpl::kAuto) {
        // The resolved name: the kernel, and its libxsmm tiles where this build generated them.
        const std::string want = fused_serves ? "cpu.mha_fused_f32" : "cpu.mha_explicit_f32";
        EXPECT_EQ(plan.attention_kernel.rfind(want, 0), 0u) << plan.attention_kernel;
        EXPECT_EQ(plan.attention_fallback, !fused_serves) << "a kernel the plan did not want must be loud";
        if (!fused_serves) {
          EXPECT_NE(plan.attention_reason.find("head_dim " + std::to_string(d)), std::string::npos)
              << plan.attention_reason;
        }
      }
      ASSERT_TRUE((*engine)->infer(input.data(), batch).ok());
      const size_t n = static_cast<size_t>(batch) * a.num_classes;
      ASSERT_TRUE(testutil::all_finite((*engine)->logits(), n));
      EXPECT_LE(testutil::rel_error((*engine)->logits(), ref.logits.data(), n), tol::kFp32EndToEnd);
      EXPECT_LE(testutil::rel_error((*engine)->pre_logits(), ref.pre_logits.data(),
                                    static_cast<size_t>(batch) * a.embed_dim),
                tol::kFp32EndToEnd);
    }
  }
  std::filesystem::remove_all(dir);
}

// The tanh-approximation GELU (SigLIP's MLP): the fc1 GEMMs run its epilogue, the plan names it, and the
// outputs match the reference forward with gelu_tanh_ref (and differ from the erf model's).
TEST(EngineNumerics, TanhGeluModelMatchesItsReference) {
  const std::string dir = testutil::make_temp_dir("gelutanh");
  VitArch a = arch_with_head_dim(32, 2);
  a.depth = 2;
  const std::string path = dir + "/tanh.safetensors";
  const testutil::TensorMap w = write_checkpoint(a, path, 4242);
  const int batch = 3;
  const auto input = testutil::random_floats(static_cast<size_t>(batch) * 3 * 16 * 16, 4243);
  const size_t n = static_cast<size_t>(batch) * a.num_classes;
  a.act = Activation::kGelu;
  const testutil::VitRefOutputs ref_erf = testutil::vit_forward_ref(a, w, input.data(), batch);
  a.act = Activation::kGeluTanh;
  const testutil::VitRefOutputs ref_tanh = testutil::vit_forward_ref(a, w, input.data(), batch);
  for (Activation act : {Activation::kGelu, Activation::kGeluTanh}) {
    SCOPED_TRACE(to_string(act));
    a.act = act;
    EngineOptions o;
    o.threads = 2;
    auto engine = Engine::create(spec_for(a, path, batch), host_cpu(), o);
    ASSERT_TRUE(engine.ok()) << engine.status().to_string();
    int fc1 = 0;
    for (const Op& op : (*engine)->plan().graph.ops) {
      if (op.name.find("mlp.fc1") == std::string::npos) continue;
      ++fc1;
      const bool tanh_named = op.kernel.find("+bias_gelu_tanh") != std::string::npos;
      EXPECT_EQ(tanh_named, act == Activation::kGeluTanh) << op.kernel;
    }
    EXPECT_EQ(fc1, a.depth);
    ASSERT_TRUE((*engine)->infer(input.data(), batch).ok());
    const auto& own = act == Activation::kGeluTanh ? ref_tanh : ref_erf;
    const auto& other = act == Activation::kGeluTanh ? ref_erf : ref_tanh;
    const double e_own = testutil::rel_error((*engine)->logits(), own.logits.data(), n);
    const double e_other = testutil::rel_error((*engine)->logits(), other.logits.data(), n);
    EXPECT_LE(e_own, tol::kFp32EndToEnd);
    // The two GELUs differ by < 5e-4 absolute, so the models' logits are close; each engine must still be
    // an order of magnitude nearer its own reference than the other's.
    EXPECT_LT(10 * e_own, e_other) << "own " << e_own << ", other " << e_other;
  }
  std::filesystem::remove_all(dir);
}

TEST(EngineNumerics, FusedRequestedAboveItsHeadDimIsRefusedLoudly) {
  const VitArch a = arch_with_head_dim(160, 2);
  PlanOptions o;
  o.attention = AttentionImpl::kFused;
  auto plan = make_plan(spec_for(a, "", 1), host_cpu(), o);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  EXPECT_EQ(plan->attention_kernel, "cpu.mha_explicit_f32");
  EXPECT_TRUE(plan->attention_fallback);
  EXPECT_NE(plan->attention_reason.find("fused attention requested but unavailable"), std::string::npos)
      << plan->attention_reason;
}

// One weight set to Inf (as a corrupt or badly exported checkpoint holds it): the logits are NaN/Inf and
// infer() must say so instead of answering.
TEST(EngineNumerics, InfWeightIsAnErrorNotAnAnswer) {
  const std::string dir = testutil::make_temp_dir("infweight");
  const VitArch a = arch_with_head_dim(16, 2);
  const std::string path = dir + "/inf.safetensors";
  testutil::TensorMap w = write_checkpoint(a, path, 11);
  w["blocks.0.mlp.fc2.weight"].data[3] = std::numeric_limits<float>::infinity();
  ASSERT_TRUE(testutil::write_tensors(path, w).ok());
  EngineOptions o;
  o.threads = 1;
  auto engine = Engine::create(spec_for(a, path, 2), host_cpu(), o);
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  const auto input = testutil::random_floats(2 * 3 * 16 * 16, 12);
  const Status st = (*engine)->infer(input.data(), 2);
  ASSERT_EQ(st.code(), StatusCode::kNonFinite) << st.to_string();
  EXPECT_NE(st.message().find("output 'logits' of image 0"), std::string::npos) << st.message();
  EXPECT_EQ(exit_code_for(st.code()), 11);
  std::filesystem::remove_all(dir);
}

TEST(EngineNumerics, NonFiniteInputIsAnErrorNotAnAnswer) {
  const std::string dir = testutil::make_temp_dir("naninput");
  const VitArch a = arch_with_head_dim(16, 2);
  const std::string path = dir + "/ok.safetensors";
  write_checkpoint(a, path, 21);
  auto engine = Engine::create(spec_for(a, path, 2), host_cpu(), {});
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  auto input = testutil::random_floats(2 * 3 * 16 * 16, 22);
  ASSERT_TRUE((*engine)->infer(input.data(), 2).ok());
  input[3 * 16 * 16 + 5] = std::numeric_limits<float>::quiet_NaN();  // image 1 only
  const Status st = (*engine)->infer(input.data(), 2);
  ASSERT_EQ(st.code(), StatusCode::kNonFinite) << st.to_string();
  EXPECT_NE(st.message().find("of image 1"), std::string::npos) << st.message();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace edgevit
