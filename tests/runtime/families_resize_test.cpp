// The input size is the user's (issue #24): the tests/data/families checkpoints (32 x 32, patch 8; and the HF
// ViTForImageClassification tests/data/hf/vit-hf-micro) run at 48 x 48 and 48 x 32 (height x width: a 6 x 4
// grid) on the CPU engine in fp32, their position embeddings resampled once at load
// (WeightSource::fit_pos_embed, kernels/cpu resample_pos_embed_bicubic), against timm's and transformers' own
// outputs at that size (tests/data/families/resize, tools/gpu/make_resize_goldens.py): timm models built at the
// size; HF DINOv2 (with and without registers) as its forward interpolates; HF ViT (ViTModel,
// ViTForImageClassification), DeiT distilled, CLIP and SigLIP vision towers with interpolate_pos_encoding=True.
//   - the resampled table against the golden `pos_embed` (timm: the model's table after
//     resample_abs_pos_embed; HF: what the family's interpolate_pos_encoding returns);
//   - every output the golden has within tol::kFp32EndToEnd normwise, and the same top-1.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "base/tolerances.h"
#include "kernels/cpu/kernels.h"
#include "platform/device_registry.h"
#include "runtime/config.h"
#include "runtime/engine.h"
#include "runtime/graph.h"
#include "runtime/importer.h"
#include "runtime/plan.h"
#include "runtime/safetensors.h"
#include "runtime/weights.h"
#include "tests/runtime/checkpoint_fixtures.h"
#include "tests/runtime/family_goldens.h"
#include "tests/testutil/testutil.h"

namespace edgevit {
namespace {

// torch resizes in float32 (timm and transformers cast the table to float32 first), edgevit in double: the
// two differ by the float32 rounding of a 16-tap sum, a few ulps, stored float32.
constexpr double kPosEmbedRel = 1e-6;

std::vector<float> read_tensor(const SafetensorsFile& f, const std::string& name) {
  const TensorInfo* t = f.find(name);
  EXPECT_NE(t, nullptr) << name;
  if (t == nullptr) return {};
  std::vector<float> v(static_cast<size_t>(t->numel));
  convert_to_f32(*t, f.data(*t), v.data());
  return v;
}

std::string family_path(const std::string& name) { return testutil::source_path("tests/data/families/" + name); }
std::string golden_path(const std::string& name, int h, int w) {
  return family_path("resize/" + name + ".size" + std::to_string(h) + "x" + std::to_string(w) + ".golden.safetensors");
}

struct ResizeCase {
  const char* name;  // the golden's name: resize/<name>.size<H>x<W>.golden.safetensors
  double eps;        // timm: what the checkpoint cannot say (the CLIP case was built with nn.LayerNorm's 1e-5)
  const char* checkpoint = nullptr;  // a Hugging Face folder under tests/data when not families/<name>
};

bool is_hf(const ResizeCase& c) { return c.checkpoint != nullptr || std::string(c.name).rfind("hf_", 0) == 0; }

// The input sizes checked, (height, width): a larger square and a non-square one.
struct Size {
  int h, w;
};
constexpr Size kSizes[] = {{48, 48}, {48, 32}};

// h > 0: imported as `import --image-size HxW` does it.
Result<ModelSpec> import_case(const ResizeCase& c, int h = 0, int w = 0) {
  const std::string base = c.checkpoint ? testutil::source_path(std::string("tests/data/") + c.checkpoint)
                                         : family_path(c.name);
  ImportOptions io;
  if (h > 0) io.image_size = std::make_pair(h, w);
  if (is_hf(c)) return infer_model_spec_hf(base, io);
  io.heads = 2;
  io.eps = c.eps;
  return infer_model_spec_timm(base + ".safetensors", io);
}

// The plain kernel on the plain case: class row kept, the 4 x 4 grid resized to 6 x 6 as timm does it.
TEST(ResamplePosEmbed, KernelMatchesTorchBicubic) {
  auto ckpt = SafetensorsFile::open(family_path("timm_vit_nohead.safetensors"));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
  auto golden = SafetensorsFile::open(golden_path("timm_vit_nohead", 48, 48));
  ASSERT_TRUE(golden.ok()) << golden.status().to_string();
  const std::vector<float> src = read_tensor(*ckpt, "pos_embed");
  const std::vector<float> want = read_tensor(*golden, "pos_embed");
  const int e = 64;
  ASSERT_EQ(src.size(), static_cast<size_t>((1 + 16) * e));
  ASSERT_EQ(want.size(), static_cast<size_t>((1 + 36) * e));
  std::vector<float> got(want.size());
  std::copy(src.begin(), src.begin() + e, got.begin());
  resample_pos_embed_bicubic(src.data() + e, 4, 4, e, got.data() + e, 6, 6, /*antialias=*/true);
  EXPECT_LE(testutil::rel_error(got.data(), want.data(), want.size()), kPosEmbedRel);
}

// Non-square: the 4 x 4 grid to 6 rows x 4 columns (48 x 32), each axis with its own scale (rows 4 -> 6,
// columns kept at 4).
TEST(ResamplePosEmbed, KernelMatchesTorchBicubicNonSquare) {
  auto ckpt = SafetensorsFile::open(family_path("timm_vit_nohead.safetensors"));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
  auto golden = SafetensorsFile::open(golden_path("timm_vit_nohead", 48, 32));
  ASSERT_TRUE(golden.ok()) << golden.status().to_string();
  const std::vector<float> src = read_tensor(*ckpt, "pos_embed");
  const std::vector<float> want = read_tensor(*golden, "pos_embed");
  const int e = 64;
  ASSERT_EQ(want.size(), static_cast<size_t>((1 + 24) * e));
  std::vector<float> got(want.size());
  std::copy(src.begin(), src.begin() + e, got.begin());
  resample_pos_embed_bicubic(src.data() + e, 4, 4, e, got.data() + e, 6, 4, /*antialias=*/true);
  EXPECT_LE(testutil::rel_error(got.data(), want.data(), want.size()), kPosEmbedRel);
  // The transposed grid (4 rows x 6 columns) is another table: rows and columns are not interchangeable.
  std::vector<float> wide(want.size());
  std::copy(src.begin(), src.begin() + e, wide.begin());
  resample_pos_embed_bicubic(src.data() + e, 4, 4, e, wide.data() + e, 4, 6, /*antialias=*/true);
  EXPECT_GT(testutil::rel_error(wide.data(), want.data(), want.size()), 1e-3);
}

class FamilyResize : public ::testing::TestWithParam<std::tuple<ResizeCase, Size>> {};

// What the loader puts in the arena for pos_embed at each size is the golden table.
TEST_P(FamilyResize, PosEmbedResampledAtLoad) {
  const auto [c, size] = GetParam();
  auto spec = import_case(c);
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  spec->arch.img_h = size.h;
  spec->arch.img_w = size.w;
  auto w = WeightSource::open(spec->weights_path, spec->weights_naming);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  ASSERT_TRUE(w->fit_pos_embed(spec->arch).ok());
  ASSERT_TRUE(w->check(spec->arch).ok()) << w->check(spec->arch).to_string();
  auto golden = SafetensorsFile::open(golden_path(c.name, size.h, size.w));
  ASSERT_TRUE(golden.ok()) << golden.status().to_string();
  std::vector<float> want = read_tensor(*golden, "pos_embed");
  const int e = spec->arch.embed_dim;
  size_t skip = 0;
  // HF DINOv2 with registers: the registers carry no position; edgevit folds the class row into cls_token.
  if (is_hf(c) && spec->arch.no_embed_class) skip = static_cast<size_t>(e);
  std::vector<float> got(static_cast<size_t>(spec->arch.pos_embed_len() * e));
  ASSERT_EQ(got.size() + skip, want.size());
  ASSERT_TRUE(w->read_f32("pos_embed", got.data(), got.size()).ok());
  EXPECT_LE(testutil::rel_error(got.data(), want.data() + skip, got.size()), kPosEmbedRel);
}

// Imported at the size (import --image-size HxW), saved as YAML and read back: the user's size is the model's.
// The YAML says `img_size: 48` for the square and `img_size: [48, 32]` for the other.
TEST_P(FamilyResize, OutputsMatchReference) {
  const auto [c, size] = GetParam();
  auto imported = import_case(c, size.h, size.w);
  ASSERT_TRUE(imported.ok()) << imported.status().to_string();
  EXPECT_EQ(imported->arch.img_h, size.h);
  EXPECT_EQ(imported->arch.img_w, size.w);
  const std::string dir = testutil::make_temp_dir("resize_yaml");
  ASSERT_TRUE(save_imported_spec(*imported, dir + "/model.yaml").ok());
  std::stringstream yaml;
  yaml << std::ifstream(dir + "/model.yaml").rdbuf();
  const std::string size_line = size.h == size.w ? "img_size: " + std::to_string(size.h) + "\n"
                                                 : "img_size: [" + std::to_string(size.h) + ", " +
                                                       std::to_string(size.w) + "]\n";
  EXPECT_NE(yaml.str().find(size_line), std::string::npos) << yaml.str();
  auto spec = load_model_spec(dir + "/model.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  EXPECT_EQ(spec->arch.img_h, size.h);
  EXPECT_EQ(spec->arch.img_w, size.w);
  auto golden = SafetensorsFile::open(golden_path(c.name, size.h, size.w));
  ASSERT_TRUE(golden.ok()) << golden.status().to_string();
  const std::vector<float> input = read_tensor(*golden, "input");
  const int n = 2;
  ASSERT_EQ(input.size(), static_cast<size_t>(n * 3 * size.h * size.w));
  spec->max_batch = n;
  auto dev = find_device_profile("host-cpu", {testutil::source_path("config/devices")});
  ASSERT_TRUE(dev.ok());
  EngineOptions o;
  o.plan.batch = n;
  o.plan.outputs = available_outputs(spec->arch);  // tokens too
  o.threads = 2;
  auto engine = Engine::create(*spec, *dev, o);
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  ASSERT_TRUE((*engine)->infer(input.data(), n).ok());
  // Every output the golden holds (testutil::golden_outputs: logits and its top-1, embedding, pre_logits,
  // tokens), each within kFp32EndToEnd; every golden tensor but the input and the table is checked.
  const std::vector<testutil::GoldenOutput> checks = testutil::golden_outputs(**engine, *golden);
  for (const testutil::GoldenOutput& check : checks) {
    const std::vector<float> want = read_tensor(*golden, check.golden);
    const float* got = (*engine)->output(check.kind);
    ASSERT_NE(got, nullptr) << to_string(check.kind);
    ASSERT_EQ(want.size(), static_cast<size_t>(n * (*engine)->output_numel_per_image(check.kind)))
        << to_string(check.kind);
    EXPECT_LE(testutil::rel_error(got, want.data(), want.size()), tol::kFp32EndToEnd)
        << to_string(check.kind) << " against the golden's " << check.golden;
    if (check.kind == OutputKind::kLogits) {
      const int classes = static_cast<int>(want.size()) / n;
      EXPECT_EQ(testutil::argmax_rows(got, n, classes), testutil::argmax_rows(want.data(), n, classes));
    }
  }
  for (const TensorInfo& t : golden->tensors()) {
    if (t.name == "input" || t.name == "pos_embed") continue;
    bool checked = false;
    for (const testutil::GoldenOutput& check : checks) checked = checked || check.golden == t.name;
    EXPECT_TRUE(checked) << t.name << " is not checked";
  }
  // plan states the token count at the model's size (48 x 48: 6 x 6 = 36 patches; 48 x 32: 6 x 4 = 24) + the
  // prefix tokens, and its JSON the size as (height, width).
  const int patches = (size.h / 8) * (size.w / 8);
  const std::string text = format_plan_text((*engine)->plan(), false);
  const std::string want_line = std::to_string(patches + spec->arch.num_prefix_tokens()) + " tokens at " +
                                std::to_string(size.h) + "x" + std::to_string(size.w) + " (" +
                                std::to_string(size.h / 8) + "x" + std::to_string(size.w / 8) + " patches";
  EXPECT_NE(text.find(want_line), std::string::npos) << text.substr(0, 400);
  const nlohmann::json plan_json = nlohmann::json::parse(format_plan_json((*engine)->plan()));
  EXPECT_EQ(plan_json["image_size"], nlohmann::json::array({size.h, size.w}));
  EXPECT_EQ(plan_json["tokens"], patches + spec->arch.num_prefix_tokens());
  std::filesystem::remove_all(dir);
}

TEST(ImportImageSize, RefusesWhatCannotBeRun) {
  const std::string ckpt = family_path("timm_vit_nohead.safetensors");
  ImportOptions io;
  io.heads = 2;
  io.image_size = std::make_pair(44, 44);  // not a multiple of the patch (8)
  auto spec = infer_model_spec_timm(ckpt, io);
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(spec.status().message().find("multiple of the patch size 8"), std::string::npos) << spec.status().message();
  io.image_size = std::make_pair(48, 30);  // the width is not
  spec = infer_model_spec_timm(ckpt, io);
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(spec.status().message().find("--image-size 48x30: width 30 is not a positive multiple of the patch size 8"),
            std::string::npos)
      << spec.status().message();
  io.image_size = std::make_pair(0, 32);
  spec = infer_model_spec_timm(ckpt, io);
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(spec.status().message().find("height 0"), std::string::npos) << spec.status().message();
}

// timm loads a table whose length already fits the model as it is (checkpoint_filter_fn resamples only when
// the lengths differ), HF resamples unless the grid is the same: 32 x 32 (4 x 4) to 64 x 16 (8 x 2).
TEST(ImportImageSize, SameLengthOtherGridFollowsTheLibrary) {
  for (const ResizeCase c : {ResizeCase{"timm_vit_nohead", 1e-6}, ResizeCase{"hf_dinov2", 1e-6}}) {
    auto spec = import_case(c, 64, 16);
    ASSERT_TRUE(spec.ok()) << spec.status().to_string();
    auto w = WeightSource::open(spec->weights_path, spec->weights_naming);
    ASSERT_TRUE(w.ok());
    const int e = spec->arch.embed_dim;
    std::vector<float> as_loaded(static_cast<size_t>(spec->arch.pos_embed_len() * e));
    ASSERT_TRUE(w->read_f32("pos_embed", as_loaded.data(), as_loaded.size()).ok());
    ASSERT_TRUE(w->fit_pos_embed(spec->arch).ok());
    std::vector<float> fitted(as_loaded.size());
    ASSERT_TRUE(w->read_f32("pos_embed", fitted.data(), fitted.size()).ok());
    const double moved = testutil::rel_error(fitted.data(), as_loaded.data(), fitted.size());
    if (std::string(c.name).rfind("timm_", 0) == 0)
      EXPECT_EQ(moved, 0.0) << c.name;
    else
      EXPECT_GT(moved, 1e-3) << c.name;
  }
}

// HF DINOv2 with registers: Dinov2WithRegistersEmbeddings.interpolate_pos_encoding passes antialias=True
// (plain DINOv2 does not): the loader's table at 48 x 32 is the antialiased resize of the table at the
// checkpoint's 4 x 4 grid, and not the plain one (its golden, FamilyResize hf_dinov2_reg4, agrees).
TEST(ResamplePosEmbed, HfDinov2WithRegistersAntialiases) {
  auto spec = import_case(ResizeCase{"hf_dinov2_reg4", 1e-6});
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  ASSERT_GT(spec->arch.reg_tokens, 0);
  auto w = WeightSource::open(spec->weights_path, spec->weights_naming);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  const int e = spec->arch.embed_dim, prefix = spec->arch.no_embed_class ? 0 : spec->arch.num_prefix_tokens();
  std::vector<float> native(static_cast<size_t>(spec->arch.pos_embed_len() * e));
  ASSERT_TRUE(w->read_f32("pos_embed", native.data(), native.size()).ok());
  ASSERT_EQ(native.size(), static_cast<size_t>((prefix + 16) * e));
  spec->arch.img_h = 48;
  spec->arch.img_w = 32;
  ASSERT_TRUE(w->fit_pos_embed(spec->arch).ok());
  std::vector<float> got(static_cast<size_t>(spec->arch.pos_embed_len() * e));
  ASSERT_TRUE(w->read_f32("pos_embed", got.data(), got.size()).ok());
  for (bool antialias : {true, false}) {
    std::vector<float> want(got.size());
    std::copy(native.begin(), native.begin() + static_cast<size_t>(prefix) * e, want.begin());
    resample_pos_embed_bicubic(native.data() + static_cast<size_t>(prefix) * e, 4, 4, e,
                               want.data() + static_cast<size_t>(prefix) * e, 6, 4, antialias);
    const double err = testutil::rel_error(got.data(), want.data(), want.size());
    if (antialias)
      EXPECT_EQ(err, 0.0);
    else
      EXPECT_GT(err, 1e-4);  // the two resizes differ here: the check can tell them apart
  }
}

// A Hugging Face checkpoint trained at a non-square size: config.json's image_size [48, 32] (ViTConfig,
// CLIPVisionConfig and SiglipVisionConfig take an int or [height, width]) and a 6 x 4 position table. Built from
// the 32 x 32 checkpoint with the table its family's interpolate_pos_encoding gives at 48 x 32 (the golden's
// pos_embed): transformers runs such a checkpoint at 48 x 32 with that table as it is, so its outputs are the
// 48 x 32 golden's. `clip_full`: the same tower as the vision_config of a full `clip` config.
struct NonSquareCase {
  const char* name;
  bool clip_full;
};

std::string write_non_square_checkpoint(const NonSquareCase& c, const std::string& dir, const nlohmann::json& size) {
  const std::string src = family_path(c.name);
  testutil::TensorMap tensors = testutil::read_all_f32(src + "/model.safetensors");
  auto golden = SafetensorsFile::open(golden_path(c.name, 48, 32));
  EXPECT_TRUE(golden.ok());
  if (!golden.ok()) return dir;
  const std::vector<float> table = read_tensor(*golden, "pos_embed");
  for (auto& [name, t] : tensors) {
    if (name.find("position_embedding") == std::string::npos) continue;
    const int64_t e = t.shape.back(), rows = static_cast<int64_t>(table.size()) / e;
    t.data = table;
    t.shape[t.shape.size() - 2] = rows;
  }
  std::filesystem::create_directories(dir);
  EXPECT_TRUE(testutil::write_tensors(dir + "/model.safetensors", tensors).ok());
  nlohmann::json cfg = nlohmann::json::parse(std::ifstream(src + "/config.json"));
  cfg["image_size"] = size;
  if (c.clip_full) cfg = {{"model_type", "clip"}, {"projection_dim", 16}, {"vision_config", cfg}};
  std::ofstream(dir + "/config.json") << cfg.dump(2);
  return dir;
}

class HfNonSquareCheckpoint : public ::testing::TestWithParam<NonSquareCase> {};

// Imported at its own size, the YAML says the input and the table's grid (pos_embed_grid), and the engine's
// outputs are transformers' at 48 x 32 (no resampling).
TEST_P(HfNonSquareCheckpoint, RunsAtItsOwnSize) {
  const NonSquareCase c = GetParam();
  const std::string dir = testutil::make_temp_dir("nonsquare");
  const std::string ckpt = write_non_square_checkpoint(c, dir + "/ckpt", nlohmann::json::array({48, 32}));
  auto imported = infer_model_spec_hf(ckpt, {});
  ASSERT_TRUE(imported.ok()) << imported.status().to_string();
  EXPECT_EQ(imported->arch.img_h, 48);
  EXPECT_EQ(imported->arch.img_w, 32);
  EXPECT_EQ(imported->arch.pos_grid_h, 6);
  EXPECT_EQ(imported->arch.pos_grid_w, 4);
  ASSERT_TRUE(save_imported_spec(*imported, dir + "/model.yaml").ok());
  std::stringstream yaml;
  yaml << std::ifstream(dir + "/model.yaml").rdbuf();
  EXPECT_NE(yaml.str().find("img_size: [48, 32]"), std::string::npos) << yaml.str();
  EXPECT_NE(yaml.str().find("pos_embed_grid: [6, 4]"), std::string::npos) << yaml.str();
  auto spec = load_model_spec(dir + "/model.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  EXPECT_TRUE(same_model_spec(*spec, *imported));
  auto golden = SafetensorsFile::open(golden_path(c.name, 48, 32));
  ASSERT_TRUE(golden.ok());
  const std::vector<float> input = read_tensor(*golden, "input");
  const int n = 2;
  spec->max_batch = n;
  auto dev = find_device_profile("host-cpu", {testutil::source_path("config/devices")});
  ASSERT_TRUE(dev.ok());
  EngineOptions o;
  o.plan.batch = n;
  o.plan.outputs = available_outputs(spec->arch);
  o.threads = 2;
  auto engine = Engine::create(*spec, *dev, o);
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  ASSERT_TRUE((*engine)->infer(input.data(), n).ok());
  const std::vector<testutil::GoldenOutput> checks = testutil::golden_outputs(**engine, *golden);
  EXPECT_EQ(checks.size(), 2u);  // tokens and embedding
  for (const testutil::GoldenOutput& check : checks) {
    const std::vector<float> want = read_tensor(*golden, check.golden);
    ASSERT_EQ(want.size(), static_cast<size_t>(n * (*engine)->output_numel_per_image(check.kind)));
    EXPECT_LE(testutil::rel_error((*engine)->output(check.kind), want.data(), want.size()), tol::kFp32EndToEnd)
        << check.golden;
  }
  // The transposed size has the same 24 positions: the recorded grid tells them apart, and transformers
  // cannot resample a non-square table (it reshapes it to sqrt(length) squared), so both are refused.
  for (const auto& [h, w] : {std::make_pair(32, 48), std::make_pair(48, 48)}) {
    ModelSpec other = *spec;
    other.arch.img_h = h;
    other.arch.img_w = w;
    auto refused = Engine::create(other, *dev, o);
    ASSERT_FALSE(refused.ok()) << h << "x" << w;
    EXPECT_EQ(refused.status().code(), StatusCode::kCheckpointError);
    EXPECT_NE(refused.status().message().find("non-square 6x4 patch grid"), std::string::npos)
        << refused.status().message();
    ImportOptions io;
    io.image_size = std::make_pair(h, w);
    auto at_size = infer_model_spec_hf(ckpt, io);
    ASSERT_FALSE(at_size.ok());
    EXPECT_EQ(at_size.status().code(), StatusCode::kCheckpointError);
  }
  std::filesystem::remove_all(dir);
}

// Malformed sizes are refused naming the file, the key (vision_config.image_size inside a full CLIP config) and
// the reason: config_error (exit 3), or unsupported (exit 7) for non-square patches.
TEST_P(HfNonSquareCheckpoint, RefusesMalformedSizes) {
  const NonSquareCase c = GetParam();
  const std::string key = std::string(c.clip_full ? "vision_config." : "") + "image_size";
  struct Bad {
    nlohmann::json size;
    const char* reason;
  };
  const Bad bad[] = {
      {0, "expected a positive integer or [height, width], got 0"},
      {-48, "expected a positive integer or [height, width], got -48"},
      {"48", "expected a positive integer or [height, width], got \"48\""},
      {48.5, "expected a positive integer or [height, width], got 48.5"},
      {true, "expected a positive integer or [height, width], got true"},
      {nlohmann::json::array({48, 32, 3}), "expected an integer or [height, width], got a list of 3 entries"},
      {nlohmann::json::array({48}), "expected an integer or [height, width], got a list of 1 entries: [48]"},
      {nlohmann::json::array({48, 0}), "width must be a positive integer, got 0"},
      {nlohmann::json::array({-8, 32}), "height must be a positive integer, got -8"},
      {nlohmann::json::array({48, "32"}), "width must be a positive integer, got \"32\""},
      {nlohmann::json::array({48, nlohmann::json::array({32})}), "width must be a positive integer, got [32]"},
      {44, "size 44 is not a multiple of patch_size 8"},
      {nlohmann::json::array({48, 36}), "width 36 is not a multiple of patch_size 8"},
  };
  const std::string dir = testutil::make_temp_dir("nonsquare_bad");
  int i = 0;
  for (const Bad& b : bad) {
    SCOPED_TRACE(b.size.dump());
    const std::string ckpt = write_non_square_checkpoint(c, dir + "/" + std::to_string(i++), b.size);
    auto spec = infer_model_spec_hf(ckpt, {});
    ASSERT_FALSE(spec.ok());
    EXPECT_EQ(spec.status().code(), StatusCode::kConfigError) << spec.status().to_string();
    EXPECT_EQ(exit_code_for(spec.status().code()), 3);
    EXPECT_NE(spec.status().message().find(ckpt + "/config.json: key '" + key + "': " + b.reason), std::string::npos)
        << spec.status().message();
  }
  // Non-square patches are valid for transformers and not supported by edgevit.
  std::string ckpt = write_non_square_checkpoint(c, dir + "/patch", nlohmann::json::array({48, 32}));
  nlohmann::json cfg = nlohmann::json::parse(std::ifstream(ckpt + "/config.json"));
  (c.clip_full ? cfg["vision_config"] : cfg)["patch_size"] = nlohmann::json::array({8, 16});
  std::ofstream(ckpt + "/config.json") << cfg.dump(2);
  auto spec = infer_model_spec_hf(ckpt, {});
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(spec.status().message().find("non-square patches [8,16] are not supported"), std::string::npos)
      << spec.status().message();
  std::filesystem::remove_all(dir);
}

// The checkpoint's preprocessor_config.json at that size: {height: 48, width: 32} resizes to exactly 32 wide x 48
// high (as ViTImageProcessor does); the transposed size is refused naming both (W x H, as the message writes
// sizes); without a size the processor's default is the model's own 48 x 32.
TEST(HfNonSquareCheckpoint, PreprocessorConfigEndsAtItsSize) {
  const std::string dir = testutil::make_temp_dir("nonsquare_pre");
  const std::string ckpt =
      write_non_square_checkpoint(NonSquareCase{"hf_vit_model", false}, dir + "/ckpt", nlohmann::json::array({48, 32}));
  const nlohmann::json base = {{"do_resize", true},          {"resample", 2},           {"do_rescale", true},
                               {"rescale_factor", 1.0 / 255}, {"do_normalize", true},    {"image_mean", {0.5, 0.5, 0.5}},
                               {"image_std", {0.5, 0.5, 0.5}}};
  nlohmann::json pre = base;
  pre["size"] = {{"height", 48}, {"width", 32}};
  std::ofstream(ckpt + "/preprocessor_config.json") << pre.dump();
  auto spec = infer_model_spec_hf(ckpt, {});
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  EXPECT_EQ(spec->preprocess.resize_mode, ResizeMode::kExact);
  EXPECT_EQ(spec->preprocess.resize_h, 48);
  EXPECT_EQ(spec->preprocess.resize_w, 32);
  pre["size"] = {{"height", 32}, {"width", 48}};
  std::ofstream(ckpt + "/preprocessor_config.json") << pre.dump();
  auto transposed = infer_model_spec_hf(ckpt, {});
  ASSERT_FALSE(transposed.ok());
  EXPECT_EQ(transposed.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(transposed.status().message().find(
                "preprocessor_config.json: key 'size': the pipeline ends at 48x32 but the model's input is 32x48"),
            std::string::npos)
      << transposed.status().message();
  std::ofstream(ckpt + "/preprocessor_config.json") << base.dump();
  auto unsized = infer_model_spec_hf(ckpt, {});
  ASSERT_TRUE(unsized.ok()) << unsized.status().to_string();
  EXPECT_EQ(unsized->preprocess.resize_h, 48);
  EXPECT_EQ(unsized->preprocess.resize_w, 32);
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Families, HfNonSquareCheckpoint,
                         ::testing::Values(NonSquareCase{"hf_vit_model", false}, NonSquareCase{"hf_clip_vision", true},
                                           NonSquareCase{"hf_siglip_vision", false}),
                         [](const auto& info) {
                           return std::string(info.param.name) + (info.param.clip_full ? "_full_clip" : "");
                         });

INSTANTIATE_TEST_SUITE_P(Families, FamilyResize,
                         ::testing::Combine(::testing::Values(ResizeCase{"timm_vit_nohead", 1e-6},
                                                              ResizeCase{"timm_dinov2", 1e-6},
                                                              ResizeCase{"timm_dinov2_reg4", 1e-6},
                                                              ResizeCase{"timm_clip", 1e-5},
                                                              ResizeCase{"hf_dinov2", 0},
                                                              ResizeCase{"hf_dinov2_reg4", 0},
                                                              ResizeCase{"hf_vit_model", 0},
                                                              ResizeCase{"vit-hf-micro", 0, "hf/vit-hf-micro"},
                                                              ResizeCase{"hf_deit_distilled", 0},
                                                              ResizeCase{"hf_clip_vision", 0},
                                                              ResizeCase{"hf_siglip_vision", 0}),
                                            ::testing::ValuesIn(kSizes)),
                         [](const auto& info) {
                           const Size s = std::get<1>(info.param);
                           std::string name = std::get<0>(info.param).name;
                           for (char& ch : name)
                             if (ch == '-') ch = '_';
                           return name + "_" + std::to_string(s.h) + "x" + std::to_string(s.w);
                         });

}  // namespace
}  // namespace edgevit
