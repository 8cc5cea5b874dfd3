// End to end against timm: the three shared golden models, both attention paths, 1 and 2 threads,
// logits and pre_logits within tol::kFp32EndToEnd (normwise) of timm's float64 outputs.
#include <gtest/gtest.h>

#include "kernels/cpu/kernels.h"
#include "platform/device_registry.h"
#include "runtime/config.h"
#include "runtime/engine.h"
#include "runtime/plan.h"
#include "runtime/importer.h"
#include "runtime/safetensors.h"
#include "tests/testutil/testutil.h"

namespace edgevit {
namespace {

std::vector<float> read_tensor(const SafetensorsFile& f, const std::string& name, std::vector<int64_t>* shape) {
  const TensorInfo* t = f.find(name);
  EXPECT_NE(t, nullptr) << name;
  if (t == nullptr) return {};
  std::vector<float> v(static_cast<size_t>(t->numel));
  convert_to_f32(*t, f.data(*t), v.data());
  if (shape) *shape = t->shape;
  return v;
}

struct Case {
  const char* config;
  const char* golden;
};

class GoldenTest : public ::testing::TestWithParam<std::tuple<Case, AttentionImpl, int>> {};

TEST_P(GoldenTest, MatchesTimm) {
  const auto [c, attention, threads] = GetParam();
  if (testutil::under_emulator() && (threads > 1 || std::string(c.config) == "vit-tiny-golden.yaml")) {
    // qemu runs one thread (OMP_NUM_THREADS=1), and ViT-Ti takes minutes there; vit-micro and vit-avgpool
    // cover the aarch64 kernels. Natively every combination runs.
    GTEST_SKIP() << "under emulation only the small models at one thread";
  }
  auto spec = load_model_spec(testutil::source_path(std::string("config/models/") + c.config));
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  auto dev = find_device_profile("host-cpu", {testutil::source_path("config/devices")});
  ASSERT_TRUE(dev.ok());
  auto golden = SafetensorsFile::open(testutil::golden_path(c.golden));
  ASSERT_TRUE(golden.ok()) << golden.status().to_string();
  std::vector<int64_t> in_shape, logit_shape, pre_shape;
  const auto input = read_tensor(*golden, "input", &in_shape);
  const auto logits = read_tensor(*golden, "logits", &logit_shape);
  const auto pre = read_tensor(*golden, "pre_logits", &pre_shape);
  const int n = static_cast<int>(in_shape[0]);

  EngineOptions o;
  o.plan.attention = attention;
  o.plan.batch = n;
  o.threads = threads;
  auto engine = Engine::create(*spec, *dev, o);
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  ASSERT_TRUE((*engine)->infer(input.data(), n).ok());
  const double e_logits = testutil::rel_error((*engine)->logits(), logits.data(), logits.size());
  const double e_pre = testutil::rel_error((*engine)->pre_logits(), pre.data(), pre.size());
  EXPECT_LE(e_logits, tol::kFp32EndToEnd) << c.config;
  EXPECT_LE(e_pre, tol::kFp32EndToEnd) << c.config;
  EXPECT_EQ(testutil::argmax_rows((*engine)->logits(), n, static_cast<int>(logit_shape[1])),
            testutil::argmax_rows(logits.data(), n, static_cast<int>(logit_shape[1])));
  std::printf("%s attention=%s threads=%d: logits rel err %.3g, pre_logits %.3g\n", c.config,
              to_string(attention), threads, e_logits, e_pre);

  // Smaller batch than planned: image by image through the same engine.
  for (int i = 0; i < n; ++i) {
    ASSERT_TRUE((*engine)->infer(input.data() + i * (*engine)->input_numel_per_image(), 1).ok());
    const int classes = static_cast<int>(logit_shape[1]);
    EXPECT_LE(testutil::rel_error((*engine)->logits(), logits.data() + i * classes, classes), tol::kFp32EndToEnd);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shared, GoldenTest,
    ::testing::Combine(::testing::Values(Case{"vit-micro.yaml", "vit-micro.golden.safetensors"},
                                         Case{"vit-avgpool.yaml", "vit-avgpool.golden.safetensors"},
                                         Case{"vit-tiny-golden.yaml", "vit-tiny-patch16-224.golden.safetensors"}),
                       ::testing::Values(AttentionImpl::kFused, AttentionImpl::kExplicit), ::testing::Values(1, 2)));

// Token-pooled models run the class-token tail by default (runtime/graph.h): the same outputs as the
// full last block (PlanOptions::all_tokens), with the last block's attention on one query and its proj / MLP on
// one row per image; average-pooled models keep every token.
TEST(ClassTokenTail, SameOutputsAsEveryTokenAndFewerFlops) {
  auto dev = find_device_profile("host-cpu", {testutil::source_path("config/devices")});
  ASSERT_TRUE(dev.ok());
  bool emulated_out = false;
  for (const Case c : {Case{"vit-micro.yaml", "vit-micro.golden.safetensors"},
                       Case{"vit-tiny-golden.yaml", "vit-tiny-patch16-224.golden.safetensors"},
                       Case{"vit-avgpool.yaml", "vit-avgpool.golden.safetensors"}}) {
    for (const AttentionImpl attention : {AttentionImpl::kFused, AttentionImpl::kExplicit}) {
      SCOPED_TRACE(std::string(c.config) + " attention " + to_string(attention));
      if (testutil::under_emulator() && std::string(c.config) == "vit-tiny-golden.yaml") {
        emulated_out = true;  // said below, so that the skip is listed (tools/skips.sh)
        continue;
      }
      auto spec = load_model_spec(testutil::source_path(std::string("config/models/") + c.config));
      ASSERT_TRUE(spec.ok()) << spec.status().to_string();
      auto golden = SafetensorsFile::open(testutil::golden_path(c.golden));
      ASSERT_TRUE(golden.ok()) << golden.status().to_string();
      std::vector<int64_t> in_shape;
      const auto input = read_tensor(*golden, "input", &in_shape);
      const int n = static_cast<int>(in_shape[0]);
      std::unique_ptr<Engine> e[2];
      double flops[2] = {0, 0};
      for (int all = 0; all < 2; ++all) {
        EngineOptions o;
        o.plan.attention = attention;
        o.plan.batch = n;
        o.plan.all_tokens = all == 1;
        o.threads = 1;
        auto engine = Engine::create(*spec, *dev, o);
        ASSERT_TRUE(engine.ok()) << engine.status().to_string();
        e[all] = std::move(*engine);
        ASSERT_TRUE(e[all]->infer(input.data(), n).ok());
        for (const Op& op : e[all]->plan().graph.ops) flops[all] += op.flops;
      }
      const Graph& tail = e[0]->plan().graph;
      const VitArch& a = tail.arch;
      int attn_seq_q = -1;
      for (const Op& op : tail.ops)
        if (op.kind == OpKind::kAttention) attn_seq_q = static_cast<int>(op.seq_q);  // the last block's
      const bool token_pooled = a.global_pool == GlobalPool::kToken;
      EXPECT_EQ(attn_seq_q, token_pooled ? 1 : a.num_tokens());
      EXPECT_EQ(e[0]->plan().class_token_tail, token_pooled);
      EXPECT_FALSE(e[1]->plan().class_token_tail);
      EXPECT_EQ(format_plan_json(e[0]->plan()).find("\"class_token_tail\": true") != std::string::npos, token_pooled);
      const std::vector<OpTiming>& tail_timings = e[0]->op_timings();
      if (token_pooled) {
        // The last block's proj and MLP run T times fewer rows: at least their share of the FLOPs is gone.
        const double e = a.embed_dim, m = a.mlp_hidden(), t = a.num_tokens();
        const double saved = 2.0 * n * (t - 1) * (e * e + 2 * e * m);
        EXPECT_LE(flops[0], flops[1] - saved) << flops[0] << " vs " << flops[1];
        // On the packed-GEMM path the tail's qkv computes its Q columns (whole 64-feature blocks below E) for
        // the class token only, and the profile counts what runs.
        const Op* attn = nullptr;
        for (const Op& op : tail.ops)
          if (op.kind == OpKind::kAttention) attn = &op;
        ASSERT_NE(attn, nullptr);
        for (size_t i = 0; i < tail.ops.size(); ++i) {
          const Op& op = tail.ops[i];
          if (op.kind != OpKind::kLinear || op.outputs[0] != attn->inputs[0]) continue;
          const OpTiming& timing = tail_timings[i];
          if (!cpu_packed_gemm_available()) {
            EXPECT_EQ(timing.flops, op.flops);
            continue;
          }
          const int cb = PackedLinear::auto_col_block(3 * a.embed_dim);
          const double lead = static_cast<double>(a.embed_dim / cb * cb);
          EXPECT_DOUBLE_EQ(timing.flops, 2.0 * e * (n * t * (3 * e - lead) + n * lead)) << op.name;
          EXPECT_NE(timing.kernel.find("+lead_rows"), std::string::npos) << timing.kernel;
        }
      } else {
        EXPECT_EQ(flops[0], flops[1]);
        EXPECT_EQ(e[0]->plan().hash, e[1]->plan().hash);
      }
      const int classes = e[0]->output_dim();
      EXPECT_LE(testutil::rel_error(e[0]->logits(), e[1]->logits(), static_cast<size_t>(n) * classes),
                tol::kFp32Reordered);
      EXPECT_LE(testutil::rel_error(e[0]->pre_logits(), e[1]->pre_logits(), static_cast<size_t>(n) * a.embed_dim),
                tol::kFp32Reordered);
    }
  }
  if (emulated_out) GTEST_SKIP() << "too slow under emulation; runs in the native test suite (vit-tiny-golden only)";
}

TEST(Engine, RefusesAPlanThatDoesNotFitBeforeAllocating) {
  auto spec = load_model_spec(testutil::source_path("config/models/vit-micro.yaml"));
  ASSERT_TRUE(spec.ok());
  auto dev = find_device_profile("host-cpu", {testutil::source_path("config/devices")});
  ASSERT_TRUE(dev.ok());
  DeviceProfile small = *dev;
  small.memory_budget_bytes = 4096;
  auto engine = Engine::create(*spec, small, {});
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.status().code(), StatusCode::kDoesNotFit);
  EXPECT_NE(engine.status().message().find("budget 4096 bytes"), std::string::npos) << engine.status().message();
}

TEST(Engine, BatchOutsideThePlanIsAnError) {
  auto spec = load_model_spec(testutil::source_path("config/models/vit-micro.yaml"));
  ASSERT_TRUE(spec.ok());
  auto dev = find_device_profile("host-cpu", {testutil::source_path("config/devices")});
  EngineOptions o;
  o.plan.batch = 2;
  auto engine = Engine::create(*spec, *dev, o);
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  std::vector<float> in(3 * (*engine)->input_numel_per_image(), 0.5f);
  EXPECT_EQ((*engine)->infer(in.data(), 3).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*engine)->infer(in.data(), 0).code(), StatusCode::kInvalidArgument);
}

// timm checkpoints of the plain family built by tools/gpu/make_family_goldens.py (tests/data/families):
// imported as a user would (`edgevit import`), the activation set where the checkpoint cannot say it, then
// the CPU engine's outputs against timm's float64 ones.
TEST(FamilyGolden, TimmPlainAndTanhGeluMatchTimm) {
  auto dev = find_device_profile("host-cpu", {testutil::source_path("config/devices")});
  ASSERT_TRUE(dev.ok());
  struct FamilyCase {
    const char* name;
    Activation act;
  };
  for (const FamilyCase c : {FamilyCase{"timm_gelu_tanh", Activation::kGeluTanh},
                             FamilyCase{"timm_vit_nohead", Activation::kGelu}}) {
    SCOPED_TRACE(c.name);
    const std::string base = testutil::source_path(std::string("tests/data/families/") + c.name);
    ImportOptions io;
    io.heads = 2;
    auto spec = infer_model_spec_timm(base + ".safetensors", io);
    ASSERT_TRUE(spec.ok()) << spec.status().to_string();
    spec->arch.act = c.act;
    auto golden = SafetensorsFile::open(base + ".golden.safetensors");
    ASSERT_TRUE(golden.ok()) << golden.status().to_string();
    std::vector<int64_t> in_shape;
    const auto input = read_tensor(*golden, "input", &in_shape);
    const int n = static_cast<int>(in_shape[0]);
    spec->max_batch = n;
    EngineOptions o;
    o.threads = 2;
    auto engine = Engine::create(*spec, *dev, o);
    ASSERT_TRUE(engine.ok()) << engine.status().to_string();
    ASSERT_TRUE((*engine)->infer(input.data(), n).ok());
    const auto pre = read_tensor(*golden, "pre_logits", nullptr);
    EXPECT_LE(testutil::rel_error((*engine)->pre_logits(), pre.data(), pre.size()), tol::kFp32EndToEnd);
    if (golden->find("logits") != nullptr) {
      const auto logits = read_tensor(*golden, "logits", nullptr);
      const int classes = static_cast<int>(logits.size()) / n;
      EXPECT_LE(testutil::rel_error((*engine)->logits(), logits.data(), logits.size()), tol::kFp32EndToEnd);
      EXPECT_EQ(testutil::argmax_rows((*engine)->logits(), n, classes), testutil::argmax_rows(logits.data(), n, classes));
    }
  }
}

}  // namespace
}  // namespace edgevit
