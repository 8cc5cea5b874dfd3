// The image pipeline against the checkpoints' own: tests/data/preprocess/ (tools/make_preprocess_golden.py,
// Pillow 12) holds seven pipelines' config files (timm config.json, Hugging Face preprocessor_config.json),
// test images (two PNGs, grey JPEGs with EXIF orientations 1..8) and what timm's eval transform and the HF
// image processors make of them. Each config is read by runtime/preprocess_config.cpp, each image decoded
// and preprocessed by runtime/inputs.cpp, and compared per element in 8-bit levels (|diff| * std / rescale).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "platform/device_registry.h"
#include "runtime/config.h"
#include "runtime/engine.h"
#include "runtime/importer.h"
#include "runtime/inputs.h"
#include "runtime/preprocess_config.h"
#include "runtime/safetensors.h"
#include "tests/testutil/testutil.h"

namespace edgevit {
namespace {

namespace fs = std::filesystem;

// At most tol::kPreprocessLevels per pixel from the reference pipelines. resize_u8 is bit-exact with Pillow 12,
// so what remains is float rounding (float32 there, double then float here): far below a level.
constexpr double kMaxLevels = tol::kPreprocessLevels;
constexpr double kRoundingLevels = tol::kPreprocessRoundingLevels;

constexpr int kImgSize = 32;

// The pipeline's config read for a model with an img_h x img_w input.
Result<Preprocess> read_pipeline(const std::string& pipe, int img_h = kImgSize, int img_w = kImgSize) {
  const std::string dir = testutil::source_path("tests/data/preprocess/" + pipe);
  Preprocess p;
  const std::string hf = dir + "/preprocessor_config.json";
  if (fs::exists(hf)) {
    EV_ASSIGN_OR_RETURN(const bool found, read_hf_preprocessor_config(hf, img_h, img_w, 3, &p));
    if (!found) return internal_error(hf + ": not read");
    return p;
  }
  EV_ASSIGN_OR_RETURN(const bool found, read_timm_pretrained_cfg(dir + "/config.json", img_h, img_w, 3, &p));
  if (!found) return internal_error(dir + "/config.json: no timm keys");
  return p;
}

ModelSpec spec_with(const Preprocess& p, int img_h = kImgSize, int img_w = kImgSize) {
  ModelSpec s;
  s.name = "preprocess_test";
  s.arch.img_h = img_h;
  s.arch.img_w = img_w;
  s.arch.patch_size = 16;
  s.arch.in_chans = 3;
  s.preprocess = p;
  return s;
}

// Every tensor "<pipeline>/<image>" of `goldens` (under tests/data/preprocess/) against what edgevit makes of
// the image with that pipeline's config, for an img_h x img_w model; returns the number of cases.
int check_goldens(const std::string& goldens, const std::string& pipe_dir, int img_h, int img_w) {
  auto f = SafetensorsFile::open(testutil::source_path("tests/data/preprocess/" + goldens));
  EXPECT_TRUE(f.ok()) << f.status().to_string();
  if (!f.ok()) return 0;
  std::map<std::string, double> worst;  // pipeline -> max levels
  int cases = 0;
  const size_t plane = static_cast<size_t>(img_h) * img_w;
  for (const TensorInfo& t : f->tensors()) {
    const size_t slash = t.name.find('/');
    EXPECT_NE(slash, std::string::npos) << t.name;
    if (slash == std::string::npos) continue;
    const std::string pipe = t.name.substr(0, slash), image = t.name.substr(slash + 1);
    auto pre = read_pipeline(pipe_dir + pipe, img_h, img_w);
    EXPECT_TRUE(pre.ok()) << pre.status().to_string();
    if (!pre.ok()) continue;
    const ModelSpec spec = spec_with(*pre, img_h, img_w);
    EXPECT_EQ(static_cast<size_t>(t.numel), 3 * plane) << t.name;
    if (static_cast<size_t>(t.numel) != 3 * plane) continue;
    std::vector<float> want(static_cast<size_t>(t.numel)), got(want.size(), NAN);
    convert_to_f32(t, f->data(t), want.data());
    const Status s =
        load_image_file(testutil::source_path("tests/data/preprocess/images/" + image), spec, got.data());
    EXPECT_TRUE(s.ok()) << t.name << ": " << s.to_string();
    if (!s.ok()) continue;
    double max_levels = 0;
    int off_by_a_level = 0, nonfinite = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const size_t c = i / plane;
      if (!std::isfinite(got[i])) ++nonfinite;
      const double levels = std::fabs(double{got[i]} - want[i]) * spec.preprocess.std[c] / spec.preprocess.rescale;
      max_levels = std::max(max_levels, levels);
      if (levels > kRoundingLevels) ++off_by_a_level;
    }
    EXPECT_EQ(nonfinite, 0) << t.name;
    EXPECT_LE(max_levels, kMaxLevels) << t.name;
    EXPECT_EQ(off_by_a_level, 0) << t.name << ": elements a pixel value apart (max " << max_levels << " levels)";
    worst[pipe] = std::max(worst[pipe], max_levels);
    ++cases;
  }
  for (const auto& [pipe, levels] : worst) std::printf("  %-20s max %.2e levels\n", pipe.c_str(), levels);
  return cases;
}

TEST(Preprocess, MatchesTimmAndHuggingFacePipelines) {
  EXPECT_EQ(check_goldens("goldens.safetensors", "", kImgSize, kImgSize), 30);
}

// A model 48 high and 32 wide (tests/data/preprocess/nonsquare, tools/make_preprocess_nonsquare_golden.py):
// timm's ResizeKeepRatio (center crop_pct with unequal scale sides) and Resize((h, w)) (squash), HF's
// {height, width} resize and shortest edge + {height, width} crop, each ending at 48 x 32.
TEST(Preprocess, NonSquareMatchesTimmAndHuggingFacePipelines) {
  EXPECT_EQ(check_goldens("nonsquare/goldens.safetensors", "nonsquare/", 48, 32), 20);
}

TEST(Preprocess, NonSquareConfigsReadAsTheirLibrariesDo) {
  auto timm = read_pipeline("nonsquare/timm_bicubic_875", 48, 32);
  ASSERT_TRUE(timm.ok()) << timm.status().to_string();
  EXPECT_EQ(timm->resize_mode, ResizeMode::kKeepRatio);
  EXPECT_EQ(timm->resize_h, 54);  // floor(48 / 0.875)
  EXPECT_EQ(timm->resize_w, 36);  // floor(32 / 0.875)
  EXPECT_EQ(timm->crop_pct, 0.875);
  EXPECT_EQ(timm->interpolation, Interpolation::kBilinear);  // ResizeKeepRatio's own default
  EXPECT_NE(timm->note.find("ResizeKeepRatio resizes bilinear, not bicubic"), std::string::npos) << timm->note;
  auto squash = read_pipeline("nonsquare/timm_nearest_squash", 48, 32);
  ASSERT_TRUE(squash.ok()) << squash.status().to_string();
  EXPECT_EQ(squash->resize_mode, ResizeMode::kExact);
  EXPECT_EQ(squash->resize_h, 53);  // floor(48 / 0.9)
  EXPECT_EQ(squash->resize_w, 35);  // floor(32 / 0.9)
  auto clip = read_pipeline("nonsquare/hf_clip", 48, 32);
  ASSERT_TRUE(clip.ok()) << clip.status().to_string();
  EXPECT_EQ(clip->resize_mode, ResizeMode::kShortestEdge);
  EXPECT_EQ(clip->resize, 48);
  // The same configs for a model of another size: a pipeline that ends elsewhere is refused, naming both.
  auto other = read_pipeline("nonsquare/hf_vit", 32, 48);
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.status().message().find("ends at 32x48 but the model's input is 48x32"), std::string::npos)
      << other.status().to_string();
}

// Each non-square pipeline survives the YAML (resize_keep_ratio / crop_pct / resize_exact): written, read back,
// the same spec.
TEST(Preprocess, NonSquareYamlRoundTrip) {
  for (const char* pipe : {"timm_bicubic_875", "timm_bilinear_100", "timm_nearest_squash", "hf_vit", "hf_clip"}) {
    auto pre = read_pipeline(std::string("nonsquare/") + pipe, 48, 32);
    ASSERT_TRUE(pre.ok()) << pre.status().to_string();
    ModelSpec spec = spec_with(*pre, 48, 32);
    spec.arch.patch_size = 16;
    spec.weights_path = "w.safetensors";
    auto yaml = model_spec_to_yaml(spec, "");
    ASSERT_TRUE(yaml.ok()) << yaml.status().to_string();
    EXPECT_NE(yaml->find("img_size: [48, 32]"), std::string::npos) << *yaml;
    auto back = parse_model_spec(*yaml, "roundtrip.yaml", "");
    ASSERT_TRUE(back.ok()) << pipe << ": " << back.status().to_string() << "\n" << *yaml;
    back->name = spec.name;
    EXPECT_TRUE(same_model_spec(spec, *back)) << pipe << "\n" << *yaml;
  }
}

// A non-square model without a resize key gets timm's eval transform at crop_pct 1: keep the aspect ratio to
// cover the input, then the centre crop. Worked by hand for a 97x61 image and a 48x32 (h x w) input:
// ratio = min(61 / 48, 97 / 32) = 1.2708..., resized to round(61 / ratio) = 48 rows and round(97 / ratio) =
// round(76.33) = 76 columns, cropped at left int(round((76 - 32) / 2.0)) = 22, top 0.
TEST(Preprocess, NonSquareDefaultKeepsTheAspectRatio) {
  const std::string yaml =
      "architecture: {img_size: [48, 32], patch_size: 16, embed_dim: 8, depth: 1, num_heads: 2, num_classes: 0}\n"
      "weights: {path: w.safetensors}\n"
      "preprocess: {interpolation: nearest, mean: [0, 0, 0], std: [1, 1, 1], rescale: 1.0}\n";
  auto spec = parse_model_spec(yaml, "nonsquare.yaml", "");
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  EXPECT_EQ(spec->arch.img_h, 48);
  EXPECT_EQ(spec->arch.img_w, 32);
  EXPECT_EQ(spec->arch.num_patches(), 6);  // 3 x 2
  EXPECT_EQ(spec->preprocess.resize_mode, ResizeMode::kKeepRatio);
  EXPECT_EQ(spec->preprocess.resize_h, 48);
  EXPECT_EQ(spec->preprocess.resize_w, 32);
  // Raw pixels whose value is their column (red), row (green) and 7: with a nearest resize to 76x48 the
  // output column x reads source column int((x + 22 + 0.5) * 97 / 76), row y source row int((y + 0.5) * 61 / 48).
  const int w = 97, h = 61;
  std::vector<uint8_t> px(static_cast<size_t>(w) * h * 3);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      uint8_t* p = &px[(static_cast<size_t>(y) * w + x) * 3];
      p[0] = static_cast<uint8_t>(x);
      p[1] = static_cast<uint8_t>(y);
      p[2] = 7;
    }
  std::vector<float> dst(3 * 48 * 32, NAN);
  ASSERT_TRUE(preprocess_pixels(px.data(), w, h, 3, "ramp", *spec, dst.data()).ok());
  for (int y = 0; y < 48; ++y)
    for (int x = 0; x < 32; ++x) {
      const int sx = static_cast<int>((x + 22 + 0.5) * 97.0 / 76.0), sy = static_cast<int>((y + 0.5) * 61.0 / 48.0);
      ASSERT_EQ(dst[static_cast<size_t>(y) * 32 + x], static_cast<float>(sx)) << y << "," << x;
      ASSERT_EQ(dst[48 * 32 + static_cast<size_t>(y) * 32 + x], static_cast<float>(sy)) << y << "," << x;
      ASSERT_EQ(dst[2 * 48 * 32 + static_cast<size_t>(y) * 32 + x], 7.0f);
    }
}

TEST(Preprocess, ConfigsReadAsTheirLibrariesDo) {
  auto clip = read_pipeline("hf_clip");
  ASSERT_TRUE(clip.ok()) << clip.status().to_string();
  EXPECT_EQ(clip->resize_mode, ResizeMode::kShortestEdge);
  EXPECT_EQ(clip->resize, 32);
  EXPECT_EQ(clip->interpolation, Interpolation::kBicubic);
  EXPECT_EQ(clip->crop_rounding, CropRounding::kFloor);
  EXPECT_EQ(clip->mean, (std::vector<double>{0.48145466, 0.4578275, 0.40821073}));
  auto vit = read_pipeline("hf_vit");
  ASSERT_TRUE(vit.ok());
  EXPECT_EQ(vit->resize_mode, ResizeMode::kExact);
  EXPECT_EQ(vit->interpolation, Interpolation::kBilinear);
  EXPECT_EQ(vit->mean, (std::vector<double>{0.5, 0.5, 0.5}));  // not ImageNet's
  auto timm = read_pipeline("timm_bicubic_875");
  ASSERT_TRUE(timm.ok());
  EXPECT_EQ(timm->crop_pct, 0.875);
  EXPECT_EQ(timm->resize, 36);  // floor(32 / 0.875)
  EXPECT_EQ(timm->crop_rounding, CropRounding::kHalfEven);
  EXPECT_EQ(timm->std, (std::vector<double>{0.5, 0.5, 0.5}));
  auto squash = read_pipeline("timm_nearest_squash");
  ASSERT_TRUE(squash.ok());
  EXPECT_EQ(squash->resize_mode, ResizeMode::kExact);
  EXPECT_EQ(squash->resize_h, 35);  // floor(32 / 0.9)
  EXPECT_EQ(squash->interpolation, Interpolation::kNearest);
}

// PNG eXIf orientation, as PIL's exif_transpose reads it: grey_exif{o}_48x32.png (chunk before the image data)
// and grey_exif{o}_tail_48x32.png (after it) hold the JPEGs' pixels (tools/make_png_exif_images.py), so each
// must give the JPEG's golden tensor, upright.
TEST(Preprocess, PngExifAsPil) {
  auto f = SafetensorsFile::open(testutil::source_path("tests/data/preprocess/goldens.safetensors"));
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  auto pre = read_pipeline("timm_bicubic_875");
  ASSERT_TRUE(pre.ok()) << pre.status().to_string();
  const ModelSpec spec = spec_with(*pre);
  for (int o = 1; o <= 8; ++o) {
    const std::string jpg = "grey_exif" + std::to_string(o) + "_48x32.jpg";
    const TensorInfo* t = f->find("timm_bicubic_875/" + jpg);
    ASSERT_NE(t, nullptr) << jpg;
    std::vector<float> want(static_cast<size_t>(t->numel));
    convert_to_f32(*t, f->data(*t), want.data());
    for (const std::string tail : {"", "_tail"}) {
      const std::string png = "grey_exif" + std::to_string(o) + tail + "_48x32.png";
      std::vector<float> got(want.size(), NAN);
      const Status s = load_image_file(testutil::source_path("tests/data/preprocess/images/" + png), spec, got.data());
      ASSERT_TRUE(s.ok()) << png << ": " << s.to_string();
      double max_levels = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        const size_t c = i / (kImgSize * kImgSize);
        max_levels = std::max(max_levels, std::fabs(double{got[i]} - want[i]) * spec.preprocess.std[c] /
                                              spec.preprocess.rescale);
      }
      EXPECT_LE(max_levels, kRoundingLevels) << png << " vs " << jpg;
    }
  }
}

// The acceptance's "same top-1 on every test image": a classifier (the DeiT-distilled family checkpoint,
// 32 x 32, 10 classes) run on what edgevit's pipeline makes of each test image and on what the reference
// pipeline made of it (the goldens) gives the same class, and logits within the fp32 end-to-end tolerance.
TEST(Preprocess, SameTop1AsTheReferencePipelinesOnEveryTestImage) {
  ImportOptions io;
  io.heads = 2;
  auto spec = infer_model_spec_timm(testutil::source_path("tests/data/families/timm_deit_distilled.safetensors"), io);
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  auto f = SafetensorsFile::open(testutil::source_path("tests/data/preprocess/goldens.safetensors"));
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  auto dev = find_device_profile("host-cpu", {testutil::source_path("config/devices")});
  ASSERT_TRUE(dev.ok()) << dev.status().to_string();
  int images = 0;
  for (const TensorInfo& t : f->tensors()) {
    const size_t slash = t.name.find('/');
    ASSERT_NE(slash, std::string::npos) << t.name;
    auto pre = read_pipeline(t.name.substr(0, slash));
    ASSERT_TRUE(pre.ok()) << pre.status().to_string();
    ModelSpec s = *spec;
    s.preprocess = *pre;
    s.max_batch = 2;
    EngineOptions o;
    o.plan.batch = 2;
    o.threads = 2;
    auto engine = Engine::create(s, *dev, o);
    ASSERT_TRUE(engine.ok()) << engine.status().to_string();
    const size_t elems = 3 * kImgSize * kImgSize;
    std::vector<float> input(2 * elems);
    convert_to_f32(t, f->data(t), input.data() + elems);  // image 1: the reference pipeline's tensor
    const Status ls = load_image_file(
        testutil::source_path("tests/data/preprocess/images/" + t.name.substr(slash + 1)), s, input.data());
    ASSERT_TRUE(ls.ok()) << t.name << ": " << ls.to_string();
    ASSERT_TRUE((*engine)->infer(input.data(), 2).ok()) << t.name;
    const int classes = (*engine)->output_dim();
    const float* logits = (*engine)->logits();
    const auto top = testutil::argmax_rows(logits, 2, classes);
    EXPECT_EQ(top[0], top[1]) << t.name;
    EXPECT_LE(testutil::rel_error(logits, logits + classes, static_cast<size_t>(classes)), tol::kFp32EndToEnd)
        << t.name;
    ++images;
  }
  EXPECT_EQ(images, 30);
}

// Every pipeline survives the YAML: written, read back, the same spec.
TEST(Preprocess, YamlRoundTrip) {
  for (const char* pipe : {"timm_bicubic_875", "timm_bilinear_100", "timm_nearest_squash", "hf_vit", "hf_clip",
                           "hf_siglip", "hf_dinov2"}) {
    auto pre = read_pipeline(pipe);
    ASSERT_TRUE(pre.ok()) << pre.status().to_string();
    ModelSpec spec = spec_with(*pre);
    spec.weights_path = "w.safetensors";
    auto yaml = model_spec_to_yaml(spec, "");
    ASSERT_TRUE(yaml.ok()) << yaml.status().to_string();
    auto back = parse_model_spec(*yaml, "roundtrip.yaml", "");
    ASSERT_TRUE(back.ok()) << pipe << ": " << back.status().to_string() << "\n" << *yaml;
    back->name = spec.name;
    EXPECT_TRUE(same_model_spec(spec, *back)) << pipe << "\n" << *yaml;
  }
}

// An existing config (`resize: N` + mean/std) keeps its meaning: bilinear, shorter side, centre crop.
TEST(Preprocess, LegacyConfigDefaults) {
  const std::string yaml =
      "architecture: {img_size: 32, patch_size: 16, embed_dim: 8, depth: 1, num_heads: 2, num_classes: 0}\n"
      "weights: {path: w.safetensors}\n"
      "preprocess: {resize: 36, mean: [0.5, 0.5, 0.5], std: [0.5, 0.5, 0.5]}\n";
  auto spec = parse_model_spec(yaml, "legacy.yaml", "");
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  EXPECT_EQ(spec->preprocess.resize_mode, ResizeMode::kShortestEdge);
  EXPECT_EQ(spec->preprocess.resize, 36);
  EXPECT_EQ(spec->preprocess.interpolation, Interpolation::kBilinear);
  EXPECT_EQ(spec->preprocess.crop_rounding, CropRounding::kHalfEven);
  EXPECT_DOUBLE_EQ(spec->preprocess.rescale, 1.0 / 255);
  auto both = parse_model_spec(
      "architecture: {img_size: 32, patch_size: 16, embed_dim: 8, depth: 1, num_heads: 2, num_classes: 0}\n"
      "weights: {path: w.safetensors}\npreprocess: {resize: 36, crop_pct: 0.875}\n",
      "both.yaml", "");
  ASSERT_FALSE(both.ok());
  EXPECT_NE(both.status().message().find("give one of resize"), std::string::npos) << both.status().to_string();
}

class PreprocessDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("edgevit_preprocess_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write(const std::string& name, const std::string& text) { std::ofstream(dir_ / name) << text; }
  Result<ModelSpec> import_spec() {
    ModelSpec spec = spec_with(Preprocess{});
    spec.weights_path = (dir_ / "model.safetensors").string();
    EV_RETURN_IF_ERROR(read_checkpoint_preprocess(&spec));
    return spec;
  }
  fs::path dir_;
};

TEST_F(PreprocessDir, WithoutConfigSaysWhichDefaults) {
  write("config.json", R"({"model_type": "vit", "hidden_size": 8})");  // HF's: no preprocessing keys
  auto spec = import_spec();
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  EXPECT_EQ(spec->preprocess.mean, (std::vector<double>{0.485, 0.456, 0.406}));
  EXPECT_EQ(spec->preprocess.resize, kImgSize);
  EXPECT_NE(spec->preprocess.note.find("using defaults"), std::string::npos) << spec->preprocess.note;
  EXPECT_NE(spec->preprocess.note.find("ImageNet"), std::string::npos) << spec->preprocess.note;
}

TEST_F(PreprocessDir, PreprocessorConfigWinsAndIsNamed) {
  write("preprocessor_config.json",
        R"({"size": {"height": 32, "width": 32}, "resample": 3, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]})");
  auto spec = import_spec();
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  EXPECT_EQ(spec->preprocess.mean, (std::vector<double>{0.5, 0.5, 0.5}));
  EXPECT_EQ(spec->preprocess.interpolation, Interpolation::kBicubic);
  EXPECT_NE(spec->preprocess.note.find("preprocessor_config.json"), std::string::npos) << spec->preprocess.note;
}

TEST_F(PreprocessDir, RefusesWhatItCannotReproduce) {
  write("preprocessor_config.json", R"({"size": {"height": 32, "width": 32}, "resample": 1})");
  auto lanczos = import_spec();
  ASSERT_FALSE(lanczos.ok());
  EXPECT_EQ(lanczos.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(lanczos.status().message().find("resample"), std::string::npos);
  fs::remove(dir_ / "preprocessor_config.json");
  write("config.json", R"({"pretrained_cfg": {"input_size": [3, 32, 32], "crop_mode": "border"}})");
  auto border = import_spec();
  ASSERT_FALSE(border.ok());
  EXPECT_NE(border.status().message().find("crop_mode"), std::string::npos) << border.status().to_string();
  write("config.json", R"({"pretrained_cfg": {"input_size": [3, 32, 32], "mean": "half"}})");
  auto bad = import_spec();
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kConfigError);
  write("preprocessor_config.json", R"({"size": {"height": 48, "width": 48}})");  // ends at 48, model is 32
  auto size = import_spec();
  ASSERT_FALSE(size.ok());
  EXPECT_NE(size.status().message().find("48x48"), std::string::npos) << size.status().to_string();
}

}  // namespace
}  // namespace edgevit
