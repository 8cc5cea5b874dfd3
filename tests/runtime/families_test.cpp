// The ViT families beyond the plain one (issue #24), on the CPU engine in fp32:
//   - against the reference forward composed from the kernels' references (tests/testutil/vit_ref.h), on
//     random seeded models: every batch row, both attention paths;
//   - against timm and transformers themselves: the tiny seeded checkpoints and float64 outputs of
//     tests/data/families (tools/gpu/make_family_goldens.py), imported as a user would, within
//     tol::kFp32EndToEnd normwise and with the same top-1.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "base/tolerances.h"
#include "platform/device_registry.h"
#include "runtime/config.h"
#include "runtime/engine.h"
#include "runtime/importer.h"
#include "runtime/safetensors.h"
#include "runtime/weights.h"
#include "tests/runtime/checkpoint_fixtures.h"
#include "tests/runtime/family_goldens.h"
#include "tests/testutil/testutil.h"
#include "tests/testutil/vit_ref.h"

namespace edgevit {
namespace {

DeviceProfile host_cpu() {
  auto dev = find_device_profile("host-cpu", {testutil::source_path("config/devices")});
  EXPECT_TRUE(dev.ok());
  return *dev;
}

std::vector<float> read_tensor(const SafetensorsFile& f, const std::string& name) {
  const TensorInfo* t = f.find(name);
  EXPECT_NE(t, nullptr) << name;
  if (t == nullptr) return {};
  std::vector<float> v(static_cast<size_t>(t->numel));
  convert_to_f32(*t, f.data(*t), v.data());
  return v;
}

VitArch tiny(int classes) {
  VitArch a;
  a.img_h = a.img_w = 32;
  a.patch_size = 8;
  a.embed_dim = 64;
  a.depth = 2;
  a.num_heads = 2;
  a.num_classes = classes;
  return a;
}

// ---- against the reference forward ---------------------------------------------------------------------

struct RefCase {
  const char* name;
  VitArch arch;
};

class FamilyRefTest : public ::testing::TestWithParam<std::tuple<RefCase, AttentionImpl>> {};

TEST_P(FamilyRefTest, MatchesReferenceForward) {
  const auto [c, attention] = GetParam();
  const VitArch& a = c.arch;
  testutil::TensorMap w = testutil::random_checkpoint(a, 24);
  for (auto& [name, t] : w)  // LayerScale gammas near DINOv2's scale of the branch, sign-mixed
    if (name.find(".gamma") != std::string::npos)
      for (float& v : t.data) v *= 0.5f;
  const std::string dir = testutil::make_temp_dir("family");
  const std::string path = dir + "/model.safetensors";
  ASSERT_TRUE(testutil::write_tensors(path, w).ok());
  ModelSpec spec;
  spec.name = c.name;
  spec.arch = a;
  spec.weights_path = path;
  const int n = 3;
  spec.max_batch = n;
  EngineOptions o;
  o.plan.attention = attention;
  o.plan.batch = n;
  o.threads = 2;
  auto engine = Engine::create(spec, host_cpu(), o);
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  const std::vector<float> input = testutil::random_floats(static_cast<size_t>(n) * 3 * 32 * 32, 7);
  ASSERT_TRUE((*engine)->infer(input.data(), n).ok());
  const testutil::VitRefOutputs ref = testutil::vit_forward_ref(a, w, input.data(), n);
  EXPECT_LE(testutil::rel_error((*engine)->pre_logits(), ref.pre_logits.data(), ref.pre_logits.size()),
            tol::kFp32EndToEnd);
  EXPECT_LE(testutil::rel_error((*engine)->logits(), ref.logits.data(), ref.logits.size()), tol::kFp32EndToEnd);
  std::filesystem::remove_all(dir);
}

std::vector<RefCase> ref_cases() {
  std::vector<RefCase> cases;
  VitArch deit = tiny(10);
  deit.dist_token = true;
  cases.push_back({"deit_distilled", deit});
  deit.num_classes = 0;
  cases.push_back({"deit_distilled_headless", deit});
  VitArch dinov2 = tiny(10);
  dinov2.layer_scale = true;
  cases.push_back({"layer_scale", dinov2});
  dinov2.reg_tokens = 4;
  dinov2.no_embed_class = true;
  cases.push_back({"layer_scale_reg4", dinov2});
  VitArch cls_mean = tiny(10);  // HF Dinov2ForImageClassification's head
  cls_mean.layer_scale = true;
  cls_mean.head_mean_tokens = true;
  cases.push_back({"class_and_patch_mean_head", cls_mean});
  VitArch clip = tiny(16);  // CLIP: norm_pre, bias-free patch embedding and projection, QuickGELU
  clip.pre_norm = true;
  clip.patch_bias = false;
  clip.head_bias = false;
  clip.act = Activation::kQuickGelu;
  clip.layer_norm_eps = 1e-5;
  cases.push_back({"clip_quick_gelu", clip});
  VitArch qk = tiny(10);
  qk.qk_norm = true;
  cases.push_back({"qk_norm", qk});
  VitArch map = tiny(0);  // SigLIP: no class token, MAP head, tanh GELU
  map.class_token = false;
  map.global_pool = GlobalPool::kMap;
  map.act = Activation::kGeluTanh;
  cases.push_back({"siglip_map", map});
  map.num_classes = 10;
  cases.push_back({"siglip_map_head", map});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Families, FamilyRefTest,
                         ::testing::Combine(::testing::ValuesIn(ref_cases()),
                                            ::testing::Values(AttentionImpl::kAuto, AttentionImpl::kExplicit)),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param).name) + "_" +
                                  to_string(std::get<1>(info.param));
                         });

// ---- against timm / transformers -------------------------------------------------------------------------

// The engine's outputs for a golden case's input, compared with every output the golden has
// (testutil::golden_outputs: logits and its top-1, embedding, pre_logits, tokens), twice: with the model's
// default outputs (no tokens buffer: tokens() is nullptr, the class-token tail where the model has one) and
// with every output asked for (PlanOptions::outputs, as `run --tokens` asks).
void expect_matches_golden(const ModelSpec& imported, const std::string& golden_path) {
  auto golden = SafetensorsFile::open(golden_path);
  ASSERT_TRUE(golden.ok()) << golden.status().to_string();
  const std::vector<float> input = read_tensor(*golden, "input");
  const int n = static_cast<int>(golden->find("input")->shape[0]);
  ModelSpec spec = imported;
  spec.max_batch = n;
  for (bool every : {false, true}) {
    SCOPED_TRACE(every ? "every output" : "default outputs");
    EngineOptions o;
    o.plan.batch = n;
    if (every) o.plan.outputs = available_outputs(spec.arch);
    o.threads = 2;
    auto engine = Engine::create(spec, host_cpu(), o);
    ASSERT_TRUE(engine.ok()) << engine.status().to_string();
    const Engine& e = **engine;
    EXPECT_EQ(e.tokens() != nullptr, every);
    EXPECT_EQ(e.outputs().has(OutputKind::kLogits), spec.arch.num_classes > 0 && !spec.arch.projection_head);
    ASSERT_TRUE((*engine)->infer(input.data(), n).ok());
    const std::vector<testutil::GoldenOutput> checks = testutil::golden_outputs(e, *golden);
    for (const testutil::GoldenOutput& c : checks) {
      const std::vector<float> want = read_tensor(*golden, c.golden);
      const float* got = e.output(c.kind);
      ASSERT_NE(got, nullptr) << to_string(c.kind);
      ASSERT_EQ(want.size(), static_cast<size_t>(n * e.output_numel_per_image(c.kind))) << to_string(c.kind);
      EXPECT_LE(testutil::rel_error(got, want.data(), want.size()), tol::kFp32EndToEnd)
          << to_string(c.kind) << " against the golden's " << c.golden;
      if (c.kind == OutputKind::kLogits) {
        const int classes = static_cast<int>(want.size()) / n;
        EXPECT_EQ(testutil::argmax_rows(got, n, classes), testutil::argmax_rows(want.data(), n, classes));
      }
    }
    // Every golden tensor but the input is checked by some output (tokens only when asked for).
    for (const TensorInfo& t : golden->tensors()) {
      if (t.name == "input" || (t.name == "tokens" && !every)) continue;
      bool checked = false;
      for (const testutil::GoldenOutput& c : checks) checked = checked || c.golden == t.name;
      EXPECT_TRUE(checked) << golden_path << ": " << t.name << " is not checked";
    }
  }
}

std::string family_path(const std::string& name) { return testutil::source_path("tests/data/families/" + name); }

// What a timm checkpoint cannot say and the user gives: the LayerNorm eps (--eps; the CLIP cases were built
// with nn.LayerNorm's 1e-5) and the activation (the config's act).
struct TimmCase {
  const char* name;
  double eps;
  Activation act;
};

class TimmFamilyGolden : public ::testing::TestWithParam<TimmCase> {};

TEST_P(TimmFamilyGolden, ImportedMatchesTimm) {
  const TimmCase c = GetParam();
  const std::string base = family_path(c.name);
  ImportOptions io;
  io.heads = 2;
  io.eps = c.eps;
  auto spec = infer_model_spec_timm(base + ".safetensors", io);
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  spec->arch.act = c.act;
  expect_matches_golden(*spec, base + ".golden.safetensors");
}

INSTANTIATE_TEST_SUITE_P(Families, TimmFamilyGolden,
                         ::testing::Values(TimmCase{"timm_vit_nohead", 1e-6, Activation::kGelu},
                                           TimmCase{"timm_gelu_tanh", 1e-6, Activation::kGeluTanh},
                                           TimmCase{"timm_deit_distilled", 1e-6, Activation::kGelu},
                                           TimmCase{"timm_dinov2", 1e-6, Activation::kGelu},
                                           TimmCase{"timm_dinov2_reg4", 1e-6, Activation::kGelu},
                                           TimmCase{"timm_clip", 1e-5, Activation::kGelu},
                                           TimmCase{"timm_clip_quickgelu", 1e-5, Activation::kQuickGelu},
                                           TimmCase{"timm_qknorm", 1e-6, Activation::kGelu},
                                           TimmCase{"timm_siglip", 1e-6, Activation::kGeluTanh}),
                         [](const auto& info) { return std::string(info.param.name); });

class HfFamilyGolden : public ::testing::TestWithParam<const char*> {};

TEST_P(HfFamilyGolden, ImportedMatchesTransformers) {
  const std::string base = family_path(GetParam());
  auto spec = infer_model_spec_hf(base, {});
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  expect_matches_golden(*spec, base + ".golden.safetensors");
}

INSTANTIATE_TEST_SUITE_P(Families, HfFamilyGolden,
                         ::testing::Values("hf_vit_model", "hf_deit_distilled", "hf_dinov2", "hf_dinov2_reg4",
                                           "hf_clip_vision", "hf_siglip_vision", "hf_dinov2_cls"),
                         [](const auto& info) { return std::string(info.param); });

// ---- config round trip and full two-tower checkpoints ------------------------------------------------------

// Every family's imported spec, saved as YAML and read back, is the same spec (the architecture keys of
// docs/config.md carry every family field).
TEST(FamilyConfig, ImportedSpecsRoundTripThroughYaml) {
  const std::string dir = testutil::make_temp_dir("family_yaml");
  for (const char* name : {"timm_deit_distilled", "timm_dinov2_reg4", "timm_clip_quickgelu", "timm_qknorm",
                           "timm_siglip", "hf_clip_vision", "hf_dinov2_cls", "hf_dinov2_reg4", "hf_siglip_vision",
                           "hf_vit_model"}) {
    SCOPED_TRACE(name);
    const std::string base = family_path(name);
    Result<ModelSpec> spec = not_found("");
    if (std::string(name).rfind("timm_", 0) == 0) {
      ImportOptions io;
      io.heads = 2;
      spec = infer_model_spec_timm(base + ".safetensors", io);
    } else {
      spec = infer_model_spec_hf(base, {});
    }
    ASSERT_TRUE(spec.ok()) << spec.status().to_string();
    if (std::string(name) == "timm_clip_quickgelu") spec->arch.act = Activation::kQuickGelu;
    const std::string yaml = dir + "/" + name + ".yaml";
    ASSERT_TRUE(save_imported_spec(*spec, yaml).ok());
    auto back = load_model_spec(yaml);
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    back->source_path.clear();
    back->name = spec->name;
    EXPECT_TRUE(same_model_spec(*spec, *back)) << name;
  }
  std::filesystem::remove_all(dir);
}

// The vision tower of a full CLIP checkpoint (CLIPModel: vision_model.*, visual_projection, and a text tower
// that is skipped) gives the same outputs as CLIPVisionModelWithProjection's.
TEST(FamilyConfig, FullClipCheckpointRunsItsVisionTower) {
  const std::string src = family_path("hf_clip_vision");
  testutil::TensorMap w = testutil::read_all_f32(src + "/model.safetensors");
  w["text_model.embeddings.token_embedding.weight"] = {{8, 4}, std::vector<float>(32, 0.5f)};
  w["text_model.final_layer_norm.weight"] = {{4}, std::vector<float>(4, 1.f)};
  w["text_projection.weight"] = {{16, 4}, std::vector<float>(64, 0.25f)};
  w["logit_scale"] = {{}, {2.f}};
  std::ifstream in(src + "/config.json");
  const nlohmann::json vision = nlohmann::json::parse(in);
  const nlohmann::json full = {{"model_type", "clip"}, {"vision_config", vision}, {"text_config", {{"hidden_size", 4}}}};
  const std::string dir = testutil::make_temp_dir("full_clip");
  ASSERT_TRUE(testutil::write_tensors(dir + "/model.safetensors", w).ok());
  std::ofstream(dir + "/config.json") << full.dump();
  auto spec = infer_model_spec_hf(dir, {});
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  EXPECT_EQ(spec->arch.num_classes, 16);
  expect_matches_golden(*spec, src + ".golden.safetensors");
  std::filesystem::remove_all(dir);
}

// ---- a timm CLIP tower's head: the image projection or a classifier (runtime/timm_head.h) -------------------

// timm_clip (a pre_norm tower with a 16-wide head) as a hub folder: model.safetensors with the head's bias as
// trained, all zeros (timm's OpenAI/OpenCLIP conversion) or absent, and a config.json as timm's save_for_hf
// writes it (or none); import must tell the projection from a classifier, and the model then gives timm's
// outputs: head(pre_logits) as `embedding` (no `logits`) or as `logits`.
enum class Bias { kTrained, kZero, kAbsent };

nlohmann::json timm_hub_config(const std::string& architecture, const std::string& tag) {
  return {{"architecture", architecture},
          {"num_classes", 16},
          {"num_features", 64},
          {"global_pool", "token"},
          {"pretrained_cfg",
           {{"tag", tag},
            {"custom_load", false},
            {"input_size", {3, 32, 32}},
            {"fixed_input_size", true},
            {"interpolation", "bicubic"},
            {"crop_pct", 0.9},
            {"crop_mode", "center"},
            {"mean", {0.48145466, 0.4578275, 0.40821073}},
            {"std", {0.26862954, 0.26130258, 0.27577711}},
            {"num_classes", 512},
            {"pool_size", nullptr},
            {"first_conv", "patch_embed.proj"},
            {"classifier", "head"},
            {"license", "apache-2.0"}}}};
}

struct TimmHeadCase {
  const char* name;
  Bias bias;
  nlohmann::json config;  // config.json beside the checkpoint; null: none
  bool projection;
  const char* note;  // in import's head note
};

std::vector<TimmHeadCase> timm_head_cases() {
  const std::string clip = "vit_base_patch16_clip_224";
  return {
      {"weights_trained", Bias::kTrained, nullptr, false,
       "a classifier (logits): no timm config.json beside the checkpoint; norm_pre and a head with a trained"},
      {"weights_zero", Bias::kZero, nullptr, true,
       "the CLIP image projection (embedding, no logits): no timm config.json beside the checkpoint; norm_pre and "
       "a head with an all-zero bias"},
      {"weights_absent", Bias::kAbsent, nullptr, true, "norm_pre and a head with no bias"},
      {"hub_openai", Bias::kZero, timm_hub_config(clip, "openai"), true,
       "the CLIP image projection (embedding, no logits): "},
      {"hub_laion_no_bias", Bias::kAbsent, timm_hub_config("vit_large_patch14_clip_quickgelu_224", "laion2b"), true,
       "names vit_large_patch14_clip_quickgelu_224.laion2b, a CLIP tower; norm_pre and a head with no bias"},
      {"hub_openai_trained", Bias::kTrained, timm_hub_config(clip, "openai"), false,
       "names vit_base_patch16_clip_224.openai, a CLIP tower; norm_pre and a head with a trained"},
      {"hub_fine_tuned", Bias::kZero, timm_hub_config(clip, "openai_ft_in1k"), false,
       "names vit_base_patch16_clip_224.openai_ft_in1k, a CLIP tower fine-tuned as a classifier"},
      {"hub_dotted_name", Bias::kZero, {{"architecture", clip + ".laion2b_ft_in12k"}}, false,
       "fine-tuned as a classifier"},
      {"hub_not_clip", Bias::kZero, timm_hub_config("vit_base_patch16_224", "augreg_in21k"), false,
       "names vit_base_patch16_224.augreg_in21k, not a CLIP tower (vit_*_clip_*)"},
      {"hf_config_beside", Bias::kZero, {{"model_type", "vit"}}, true, "no timm config.json beside the checkpoint"},
  };
}

class TimmClipHead : public ::testing::TestWithParam<TimmHeadCase> {};

TEST_P(TimmClipHead, ImportTellsProjectionFromClassifier) {
  const TimmHeadCase c = GetParam();
  const std::string dir = testutil::make_temp_dir("timm_head");
  testutil::TensorMap w = testutil::read_all_f32(family_path("timm_clip.safetensors"));
  const std::vector<float> trained = w["head.bias"].data;
  if (c.bias == Bias::kZero) std::fill(w["head.bias"].data.begin(), w["head.bias"].data.end(), 0.0f);
  if (c.bias == Bias::kAbsent) w.erase("head.bias");
  ASSERT_TRUE(testutil::write_tensors(dir + "/model.safetensors", w).ok());
  if (!c.config.is_null()) std::ofstream(dir + "/config.json") << c.config.dump(2);
  ImportOptions io;
  io.heads = 2;
  io.eps = 1e-5;
  auto spec = infer_model_spec_timm(dir + "/model.safetensors", io);
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  EXPECT_EQ(spec->arch.projection_head, c.projection);
  EXPECT_EQ(spec->arch.head_bias, c.bias != Bias::kAbsent);
  EXPECT_NE(spec->head_note.find(c.note), std::string::npos) << spec->head_note;
  // The YAML keeps the decision.
  ASSERT_TRUE(save_imported_spec(*spec, dir + "/model.yaml").ok());
  auto back = load_model_spec(dir + "/model.yaml");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->arch.projection_head, c.projection);
  // timm's head output with this bias: the golden's logits less the trained bias unless it is kept.
  auto golden = SafetensorsFile::open(family_path("timm_clip.golden.safetensors"));
  ASSERT_TRUE(golden.ok());
  testutil::TensorMap want;
  for (const char* name : {"input", "pre_logits", "tokens", "logits"})
    want[name] = {golden->find(name)->shape, read_tensor(*golden, name)};
  if (c.bias != Bias::kTrained)
    for (size_t i = 0; i < want["logits"].data.size(); ++i) want["logits"].data[i] -= trained[i % trained.size()];
  if (c.projection) {
    want["embedding"] = want["logits"];
    want.erase("logits");
  }
  ASSERT_TRUE(testutil::write_tensors(dir + "/golden.safetensors", want).ok());
  expect_matches_golden(*spec, dir + "/golden.safetensors");
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Families, TimmClipHead, ::testing::ValuesIn(timm_head_cases()),
                         [](const auto& info) { return std::string(info.param.name); });

// A plain timm ViT with a head (no norm_pre) stays a classifier and says so; a model without a head says nothing.
TEST(TimmClipHead, NonClipModelsKeepTheirClassifier) {
  ImportOptions io;
  io.heads = 2;
  auto dinov2 = infer_model_spec_timm(family_path("timm_dinov2.safetensors"), io);
  ASSERT_TRUE(dinov2.ok()) << dinov2.status().to_string();
  EXPECT_FALSE(dinov2->arch.projection_head);
  EXPECT_NE(dinov2->head_note.find("the checkpoint has no norm_pre, so it is not a CLIP tower"), std::string::npos)
      << dinov2->head_note;
  auto nohead = infer_model_spec_timm(family_path("timm_vit_nohead.safetensors"), io);
  ASSERT_TRUE(nohead.ok()) << nohead.status().to_string();
  EXPECT_TRUE(nohead->head_note.empty()) << nohead->head_note;
}

// A timm config.json whose architecture or pretrained tag is not a string: a config error (exit 3) naming the
// file and the key.
TEST(TimmClipHead, MalformedTimmConfigIsRefused) {
  const std::string dir = testutil::make_temp_dir("timm_head_bad");
  std::filesystem::copy_file(family_path("timm_clip.safetensors"), dir + "/model.safetensors");
  nlohmann::json tag_number = timm_hub_config("vit_base_patch16_clip_224", "openai");
  tag_number["pretrained_cfg"]["tag"] = 7;
  const std::pair<nlohmann::json, const char*> cases[] = {
      {{{"architecture", 42}}, "config.json: key 'architecture': expected a timm model name, got 42"},
      {{{"architecture", ""}}, "config.json: key 'architecture': expected a timm model name, got \"\""},
      {tag_number, "config.json: key 'pretrained_cfg.tag': expected a string, got 7"},
  };
  ImportOptions io;
  io.heads = 2;
  for (const auto& [cfg, message] : cases) {
    SCOPED_TRACE(cfg.dump());
    std::ofstream(dir + "/config.json") << cfg.dump();
    auto spec = infer_model_spec_timm(dir + "/model.safetensors", io);
    ASSERT_FALSE(spec.ok());
    EXPECT_EQ(spec.status().code(), StatusCode::kConfigError);
    EXPECT_EQ(exit_code_for(spec.status().code()), 3);
    EXPECT_NE(spec.status().message().find(message), std::string::npos) << spec.status().message();
  }
  std::filesystem::remove_all(dir);
}

// ---- families not supported yet: a clear error naming what is missing --------------------------------------

TEST(UnsupportedFamilies, TimmCheckpointsNameWhatIsMissing) {
  struct Case {
    const char* tensor;    // added to a plain ViT's checkpoint
    const char* fragment;  // in the error
  };
  const Case cases[] = {{"blocks.0.mlp.fc1_g.weight", "SwiGLU"},
                        {"rope.freqs", "rotary position embeddings"},
                        {"blocks.0.gamma_1", "BEiT/EVA-style layer scale"},
                        {"blocks.0.attn.relative_position_bias_table", "relative position bias"}};
  const std::string dir = testutil::make_temp_dir("unsupported");
  for (const Case& c : cases) {
    SCOPED_TRACE(c.tensor);
    testutil::TensorMap w = testutil::random_checkpoint(tiny(10), 3);
    w[c.tensor] = {{4}, std::vector<float>(4, 1.f)};
    const std::string path = dir + "/model.safetensors";
    ASSERT_TRUE(testutil::write_tensors(path, w).ok());
    ImportOptions io;
    io.heads = 2;
    auto spec = infer_model_spec_timm(path, io);
    ASSERT_FALSE(spec.ok());
    EXPECT_EQ(spec.status().code(), StatusCode::kUnsupported);
    EXPECT_NE(spec.status().message().find(c.fragment), std::string::npos) << spec.status().message();
    EXPECT_NE(spec.status().message().find(c.tensor), std::string::npos) << spec.status().message();
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace edgevit
