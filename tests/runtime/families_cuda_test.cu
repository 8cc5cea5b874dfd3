// The ViT families of issue #24 on the CUDA backend: the tiny seeded timm and transformers checkpoints of
// tests/data/families, imported as a user would, on a DeviceProfile queried from GPU 0: fp16 within 5e-3
// normwise of the float64 outputs (issue #24's bound: tol::kFp16Kernel's value, tighter than
// tol::kFp16EndToEnd) and the same top-1, fp32 within tol::kFp32EndToEnd; the class-token tail (the default)
// and every token (all_tokens, which also asks for every output: tokens included), fused and explicit
// attention. Every output the golden holds is compared (testutil::golden_outputs: logits, embedding,
// pre_logits, and tokens when asked for), as families_test does on the CPU. CudaFamiliesResized: ten of
// them (timm and Hugging Face) imported at 48 x 48 and 48 x 32 (import --image-size HxW, position embeddings
// resampled at load) against timm's and transformers' outputs at that size (tests/data/families/resize, as
// families_resize_test on the CPU).
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "base/tolerances.h"
#include "platform/cuda_query.h"
#include "runtime/engine.h"
#include "runtime/importer.h"
#include "runtime/safetensors.h"
#include "tests/runtime/family_goldens.h"
#include "tests/testutil/cuda_main.h"
#include "tests/testutil/testutil.h"

namespace edgevit {
namespace {

const DeviceProfile& gpu_profile() {
  static const DeviceProfile profile = [] {
    auto p = query_cuda_device(0);
    EXPECT_TRUE(p.ok()) << p.status().to_string();
    return p.ok() ? *p : DeviceProfile{};
  }();
  return profile;
}

std::vector<float> read_tensor(const SafetensorsFile& f, const std::string& name) {
  const TensorInfo* t = f.find(name);
  EXPECT_NE(t, nullptr) << name;
  if (t == nullptr) return {};
  std::vector<float> v(static_cast<size_t>(t->numel));
  convert_to_f32(*t, f.data(*t), v.data());
  return v;
}

struct FamilyCase {
  const char* name;  // tests/data/families/<name>[.safetensors]
  bool timm;
  double eps;        // timm: --eps (the CLIP cases use nn.LayerNorm's 1e-5)
  Activation act;    // timm: the activation the checkpoint cannot say
};

constexpr FamilyCase kCases[] = {
    {"timm_vit_nohead", true, 1e-6, Activation::kGelu},
    {"timm_gelu_tanh", true, 1e-6, Activation::kGeluTanh},
    {"timm_deit_distilled", true, 1e-6, Activation::kGelu},
    {"timm_dinov2", true, 1e-6, Activation::kGelu},
    {"timm_dinov2_reg4", true, 1e-6, Activation::kGelu},
    {"timm_clip", true, 1e-5, Activation::kGelu},
    {"timm_clip_quickgelu", true, 1e-5, Activation::kQuickGelu},
    {"timm_qknorm", true, 1e-6, Activation::kGelu},
    {"timm_siglip", true, 1e-6, Activation::kGeluTanh},
    {"hf_vit_model", false, 0, Activation::kGelu},
    {"hf_deit_distilled", false, 0, Activation::kGelu},
    {"hf_dinov2", false, 0, Activation::kGelu},
    {"hf_dinov2_reg4", false, 0, Activation::kGelu},
    {"hf_clip_vision", false, 0, Activation::kGelu},
    {"hf_siglip_vision", false, 0, Activation::kGelu},
    {"hf_dinov2_cls", false, 0, Activation::kGelu},
};

Result<ModelSpec> import_case(const FamilyCase& c) {
  const std::string base = testutil::source_path(std::string("tests/data/families/") + c.name);
  if (!c.timm) return infer_model_spec_hf(base, {});
  ImportOptions io;
  io.heads = 2;
  io.eps = c.eps;
  EV_ASSIGN_OR_RETURN(ModelSpec spec, infer_model_spec_timm(base + ".safetensors", io));
  spec.arch.act = c.act;
  return spec;
}

class CudaFamilies : public ::testing::TestWithParam<std::tuple<FamilyCase, Precision, AttentionImpl, bool>> {};

TEST_P(CudaFamilies, MatchesReference) {
  const auto [c, precision, attention, all_tokens] = GetParam();
  auto spec = import_case(c);
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  auto golden = SafetensorsFile::open(testutil::source_path(std::string("tests/data/families/") + c.name +
                                                            ".golden.safetensors"));
  ASSERT_TRUE(golden.ok()) << golden.status().to_string();
  const std::vector<float> input = read_tensor(*golden, "input");
  const int n = static_cast<int>(golden->find("input")->shape[0]);
  spec->max_batch = n;
  EngineOptions o;
  o.plan.precision = precision;
  o.plan.attention = attention;
  o.plan.batch = n;
  o.plan.all_tokens = all_tokens;
  if (all_tokens) o.plan.outputs = available_outputs(spec->arch);
  auto engine = Engine::create(*spec, gpu_profile(), o);
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  Engine& e = **engine;
  ASSERT_TRUE(e.infer(input.data(), n).ok());
  const double bound = precision == Precision::kFp16 ? tol::kFp16Kernel : tol::kFp32EndToEnd;
  EXPECT_EQ(e.tokens() != nullptr, all_tokens);
  const std::vector<testutil::GoldenOutput> checks = testutil::golden_outputs(e, *golden);
  EXPECT_FALSE(checks.empty()) << c.name;
  for (const testutil::GoldenOutput& g : checks) {
    const std::vector<float> want = read_tensor(*golden, g.golden);
    const float* got = e.output(g.kind);
    ASSERT_NE(got, nullptr) << c.name << " " << to_string(g.kind);
    ASSERT_EQ(want.size(), static_cast<size_t>(n * e.output_numel_per_image(g.kind))) << c.name << " " << g.golden;
    const double err = testutil::rel_error(got, want.data(), want.size());
    EXPECT_LE(err, bound) << c.name << " " << to_string(g.kind) << " against the golden's " << g.golden;
    std::printf("%s %s %s%s %s: rel err %.3g\n", c.name, to_string(precision), to_string(e.plan().graph.attention),
                all_tokens ? " all_tokens" : "", to_string(g.kind), err);
    if (g.kind == OutputKind::kLogits) {
      const int classes = static_cast<int>(want.size()) / n;
      EXPECT_EQ(testutil::argmax_rows(got, n, classes), testutil::argmax_rows(want.data(), n, classes)) << c.name;
    }
  }
}

// ---- other input sizes (issue #24: the input size is the user's) ------------------------------------------

struct ResizeCase {
  const char* name;  // tests/data/families/<name>, golden resize/<name>.size<H>x<W>.golden.safetensors
  double eps;        // timm: --eps
  int h, w;          // the input size imported
};

constexpr ResizeCase kResizeCases[] = {
    {"timm_vit_nohead", 1e-6, 48, 48}, {"timm_dinov2", 1e-6, 48, 48}, {"timm_dinov2_reg4", 1e-6, 48, 48},
    {"timm_clip", 1e-5, 48, 48},       {"hf_dinov2", 1e-6, 48, 48},   {"timm_vit_nohead", 1e-6, 48, 32},
    {"timm_dinov2", 1e-6, 48, 32},     {"timm_dinov2_reg4", 1e-6, 48, 32}, {"timm_clip", 1e-5, 48, 32},
    {"hf_dinov2", 1e-6, 48, 32},       {"hf_dinov2_reg4", 0, 48, 48},  {"hf_vit_model", 0, 48, 48},
    {"hf_deit_distilled", 0, 48, 48},  {"hf_clip_vision", 0, 48, 48},  {"hf_siglip_vision", 0, 48, 48},
    {"hf_dinov2_reg4", 0, 48, 32},     {"hf_vit_model", 0, 48, 32},    {"hf_deit_distilled", 0, 48, 32},
    {"hf_clip_vision", 0, 48, 32},     {"hf_siglip_vision", 0, 48, 32},
};

class CudaFamiliesResized : public ::testing::TestWithParam<std::tuple<ResizeCase, Precision, AttentionImpl>> {};

TEST_P(CudaFamiliesResized, MatchesReference) {
  const auto [c, precision, attention] = GetParam();
  const std::string base = testutil::source_path(std::string("tests/data/families/") + c.name);
  ImportOptions io;
  io.image_size = std::make_pair(c.h, c.w);
  const bool hf = std::string(c.name).rfind("hf_", 0) == 0;
  if (!hf) {
    io.heads = 2;
    io.eps = c.eps;
  }
  auto spec = hf ? infer_model_spec_hf(base, io) : infer_model_spec_timm(base + ".safetensors", io);
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  ASSERT_EQ(spec->arch.img_h, c.h);
  ASSERT_EQ(spec->arch.img_w, c.w);
  const std::string size = std::to_string(c.h) + "x" + std::to_string(c.w);
  auto golden = SafetensorsFile::open(testutil::source_path(std::string("tests/data/families/resize/") + c.name +
                                                            ".size" + size + ".golden.safetensors"));
  ASSERT_TRUE(golden.ok()) << golden.status().to_string();
  const std::vector<float> input = read_tensor(*golden, "input");
  const int n = static_cast<int>(golden->find("input")->shape[0]);
  ASSERT_EQ(input.size(), static_cast<size_t>(n) * 3 * c.h * c.w);
  spec->max_batch = n;
  EngineOptions o;
  o.plan.precision = precision;
  o.plan.attention = attention;
  o.plan.batch = n;
  auto engine = Engine::create(*spec, gpu_profile(), o);
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  Engine& e = **engine;
  ASSERT_TRUE(e.infer(input.data(), n).ok());
  const double bound = precision == Precision::kFp16 ? tol::kFp16Kernel : tol::kFp32EndToEnd;
  // Every output the golden holds, by name (testutil::golden_outputs: a pooler's or a projection's embedding
  // is not pre_logits).
  const std::vector<testutil::GoldenOutput> checks = testutil::golden_outputs(e, *golden);
  for (const testutil::GoldenOutput& check : checks) {
    const std::vector<float> want = read_tensor(*golden, check.golden);
    const float* got = e.output(check.kind);
    ASSERT_NE(got, nullptr) << to_string(check.kind);
    ASSERT_EQ(want.size(), static_cast<size_t>(n * e.output_numel_per_image(check.kind))) << to_string(check.kind);
    const double err = testutil::rel_error(got, want.data(), want.size());
    EXPECT_LE(err, bound) << c.name << " " << size << " " << check.golden;
    std::printf("%s %s %s %s %s: rel err %.3g\n", c.name, size.c_str(), to_string(precision),
                to_string(e.plan().graph.attention), check.golden.c_str(), err);
    if (check.kind == OutputKind::kLogits) {
      const int classes = static_cast<int>(want.size()) / n;
      EXPECT_EQ(testutil::argmax_rows(got, n, classes), testutil::argmax_rows(want.data(), n, classes)) << c.name;
    }
  }
  EXPECT_FALSE(checks.empty());
}

INSTANTIATE_TEST_SUITE_P(Sizes, CudaFamiliesResized,
                         ::testing::Combine(::testing::ValuesIn(kResizeCases),
                                            ::testing::Values(Precision::kFp16, Precision::kFp32),
                                            ::testing::Values(AttentionImpl::kAuto, AttentionImpl::kExplicit)),
                         [](const auto& info) {
                           const ResizeCase& c = std::get<0>(info.param);
                           return std::string(c.name) + "_" + std::to_string(c.h) + "x" + std::to_string(c.w) + "_" +
                                  to_string(std::get<1>(info.param)) + "_" + to_string(std::get<2>(info.param));
                         });

INSTANTIATE_TEST_SUITE_P(Families, CudaFamilies,
                         ::testing::Combine(::testing::ValuesIn(kCases),
                                            ::testing::Values(Precision::kFp16, Precision::kFp32),
                                            ::testing::Values(AttentionImpl::kAuto, AttentionImpl::kExplicit),
                                            ::testing::Values(false, true)),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param).name) + "_" +
                                  to_string(std::get<1>(info.param)) + "_" + to_string(std::get<2>(info.param)) +
                                  (std::get<3>(info.param) ? "_all_tokens" : "");
                         });

}  // namespace
}  // namespace edgevit
