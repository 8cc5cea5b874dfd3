// Model and device configs that ship with edgevit load; defaults, path resolution and save/load round
// trips behave as docs/config.md says.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "platform/device_registry.h"
#include "runtime/config.h"
#include "base/yaml_guard.h"
#include "tests/runtime/checkpoint_fixtures.h"
#include "tests/testutil/testutil.h"

namespace edgevit {
namespace {

namespace fs = std::filesystem;

std::vector<fs::path> yaml_files(const std::string& dir) {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ".yaml") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class TempDir {
 public:
  TempDir() : path_(fs::temp_directory_path() / ("edgevit_config_test_" + std::to_string(::getpid()))) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

TEST(ShippedConfigs, EveryModelLoads) {
  const auto files = yaml_files(testutil::source_path("config/models"));
  ASSERT_GE(files.size(), 6u);
  for (const auto& f : files) {
    auto spec = load_model_spec(f.string());
    ASSERT_TRUE(spec.ok()) << spec.status().to_string();
    EXPECT_EQ(spec->name, f.stem().string());
    EXPECT_TRUE(fs::path(spec->weights_path).is_absolute()) << spec->weights_path;
  }
}

TEST(ShippedConfigs, TimmZooModelsMatchTimm) {
  struct Expected {
    const char* file;
    int embed_dim;
    int heads;
  };
  for (const Expected& e : {Expected{"vit-tiny-patch16-224", 192, 3}, Expected{"vit-small-patch16-224", 384, 6},
                            Expected{"vit-base-patch16-224", 768, 12}}) {
    auto spec = load_model_spec(testutil::source_path(std::string("config/models/") + e.file + ".yaml"));
    ASSERT_TRUE(spec.ok()) << spec.status().to_string();
    EXPECT_EQ(spec->arch.img_h, 224);
    EXPECT_EQ(spec->arch.img_w, 224);
    EXPECT_EQ(spec->arch.patch_size, 16);
    EXPECT_EQ(spec->arch.embed_dim, e.embed_dim);
    EXPECT_EQ(spec->arch.num_heads, e.heads);
    EXPECT_EQ(spec->arch.depth, 12);
    EXPECT_EQ(spec->arch.num_classes, 1000);
    EXPECT_EQ(spec->precision, Precision::kFp32);
    EXPECT_EQ(spec->preprocess.mean, (std::vector<double>{0.5, 0.5, 0.5}));
    EXPECT_EQ(spec->preprocess.std, (std::vector<double>{0.5, 0.5, 0.5}));
  }
}

// The golden configs must describe exactly the constructor arguments in NAME.json (timm defaults elsewhere).
TEST(ShippedConfigs, GoldenModelsMatchTheirJsonAndCheckpoints) {
  const std::pair<const char*, const char*> golden[] = {
      {"vit-micro", "vit-micro"}, {"vit-avgpool", "vit-avgpool"}, {"vit-tiny-golden", "vit-tiny-patch16-224"}};
  for (const auto& [config, name] : golden) {
    SCOPED_TRACE(config);
    auto spec = load_model_spec(testutil::source_path(std::string("config/models/") + config + ".yaml"));
    ASSERT_TRUE(spec.ok()) << spec.status().to_string();
    EXPECT_EQ(fs::weakly_canonical(spec->weights_path),
              fs::weakly_canonical(testutil::golden_path(std::string(name) + ".safetensors")));
    EXPECT_TRUE(fs::exists(spec->weights_path)) << spec->weights_path;

    const auto json = nlohmann::json::parse(read_text(testutil::golden_path(std::string(name) + ".json")));
    auto kwargs = json.at("kwargs");
    if (kwargs.contains("timm_model")) {
      ASSERT_EQ(kwargs["timm_model"], "vit_tiny_patch16_224");
      kwargs = {{"img_size", 224}, {"patch_size", 16}, {"embed_dim", 192}, {"depth", 12}, {"num_heads", 3},
                {"num_classes", 1000}};
    }
    const VitArch& a = spec->arch;
    EXPECT_EQ(a.img_h, kwargs.value("img_size", 224));
    EXPECT_EQ(a.img_w, kwargs.value("img_size", 224));
    EXPECT_EQ(a.patch_size, kwargs.value("patch_size", 16));
    EXPECT_EQ(a.embed_dim, kwargs.value("embed_dim", 768));
    EXPECT_EQ(a.depth, kwargs.value("depth", 12));
    EXPECT_EQ(a.num_heads, kwargs.value("num_heads", 12));
    EXPECT_EQ(a.mlp_ratio, kwargs.value("mlp_ratio", 4.0));
    EXPECT_EQ(a.num_classes, kwargs.value("num_classes", 1000));
    EXPECT_EQ(a.class_token, kwargs.value("class_token", true));
    EXPECT_EQ(to_string(a.global_pool), kwargs.value("global_pool", std::string("token")));
    EXPECT_EQ(a.fc_norm, kwargs.value("fc_norm", false));
    EXPECT_EQ(a.qkv_bias, true);
    EXPECT_EQ(a.layer_norm_eps, 1e-6);
    EXPECT_EQ(spec->preprocess.mean, (std::vector<double>{0, 0, 0}));
    EXPECT_EQ(spec->preprocess.std, (std::vector<double>{1, 1, 1}));
  }
}

TEST(ShippedConfigs, EveryDeviceProfileLoads) {
  const std::string dir = testutil::source_path("config/devices");
  const auto files = yaml_files(dir);
  ASSERT_GE(files.size(), 7u);
  for (const auto& f : files) {
    auto p = load_device_profile(f.string());
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    EXPECT_EQ(p->name, f.stem().string());
  }
  for (const char* name : {"orin-nx-16gb", "orin-nx-8gb", "orin-nano-8gb", "orin-nano-4gb", "agx-orin-64gb",
                           "agx-orin-32gb", "host-cpu"}) {
    EXPECT_TRUE(find_device_profile(name, {dir}).ok()) << name;
  }
}

TEST(ModelConfig, DefaultsAreApplied) {
  const std::string path = testutil::source_path("tests/data/configs/valid/minimal.yaml");
  auto spec = load_model_spec(path);
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  EXPECT_EQ(spec->name, "minimal");  // file stem
  EXPECT_EQ(spec->source_path, path);
  const VitArch& a = spec->arch;
  EXPECT_EQ(a.in_chans, 3);
  EXPECT_EQ(a.mlp_ratio, 4.0);
  EXPECT_TRUE(a.qkv_bias);
  EXPECT_TRUE(a.class_token);
  EXPECT_EQ(a.reg_tokens, 0);
  EXPECT_FALSE(a.no_embed_class);
  EXPECT_EQ(a.global_pool, GlobalPool::kToken);
  EXPECT_FALSE(a.fc_norm);
  EXPECT_EQ(a.layer_norm_eps, 1e-6);
  EXPECT_EQ(spec->weights_naming, WeightNaming::kTimm);
  EXPECT_EQ(spec->precision, Precision::kFp32);
  EXPECT_EQ(spec->attention, AttentionImpl::kAuto);
  EXPECT_EQ(spec->max_batch, 1);
  EXPECT_EQ(spec->preprocess.resize, 32);  // img_size
  EXPECT_EQ(spec->preprocess.mean, (std::vector<double>{0.485, 0.456, 0.406}));
  EXPECT_EQ(spec->preprocess.std, (std::vector<double>{0.229, 0.224, 0.225}));
  EXPECT_TRUE(spec->labels_path.empty());
}

// runtime.outputs (docs/config.md): names the outputs, refuses an unknown or repeated name, an empty list and
// logits without a classifier head, each naming the key; the pooler and projection_head keys check their
// requirements; a spec with outputs round-trips through save/load.
TEST(ModelConfig, RuntimeOutputsAreParsedAndChecked) {
  const std::string minimal = read_text(testutil::source_path("tests/data/configs/valid/minimal.yaml"));
  auto with = [&](const std::string& extra) { return parse_model_spec(minimal + extra, "m.yaml", "/tmp"); };
  auto ok = with("runtime:\n  outputs: [embedding, tokens]\n");
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ(ok->outputs, OutputSet().add(OutputKind::kEmbedding).add(OutputKind::kTokens));
  EXPECT_TRUE(with("")->outputs.empty());
  struct Bad {
    const char* yaml;
    const char* key;
    const char* reason;
  };
  const Bad bad[] = {
      {"runtime:\n  outputs: [logits, probs]\n", "runtime.outputs[1]", "unknown value 'probs'; expected one of: logits"},
      {"runtime:\n  outputs: [tokens, tokens]\n", "runtime.outputs[1]", "'tokens' is listed twice"},
      {"runtime:\n  outputs: []\n", "runtime.outputs", "must name at least one output"},
      {"runtime:\n  outputs: logits\n", "runtime.outputs", "expected a list of: logits, embedding, pre_logits, tokens"},
  };
  for (const Bad& b : bad) {
    auto r = with(b.yaml);
    ASSERT_FALSE(r.ok()) << b.yaml;
    EXPECT_EQ(r.status().code(), StatusCode::kConfigError);
    EXPECT_NE(r.status().message().find(b.key), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find(b.reason), std::string::npos) << r.status().message();
  }
  std::string headless = minimal;
  headless.replace(headless.find("num_classes: 10"), 15, "num_classes: 0");
  auto no_head = parse_model_spec(headless + "runtime:\n  outputs: [logits]\n", "m.yaml", "/tmp");
  ASSERT_FALSE(no_head.ok());
  EXPECT_NE(no_head.status().message().find("'logits' needs a classifier head"), std::string::npos)
      << no_head.status().message();
  auto projection = parse_model_spec(headless.substr(0, headless.find("weights:")) + "  projection_head: true\n" +
                                         headless.substr(headless.find("weights:")),
                                     "m.yaml", "/tmp");
  ASSERT_FALSE(projection.ok());
  EXPECT_NE(projection.status().message().find("architecture.projection_head"), std::string::npos)
      << projection.status().message();
  auto pooler = parse_model_spec(minimal.substr(0, minimal.find("weights:")) + "  pooler: true\n  class_token: false\n" +
                                     minimal.substr(minimal.find("weights:")),
                                 "m.yaml", "/tmp");
  ASSERT_FALSE(pooler.ok());
  EXPECT_NE(pooler.status().message().find("pooler"), std::string::npos) << pooler.status().message();

  const std::string dir = testutil::make_temp_dir("outputs_yaml");
  ModelSpec spec = *ok;
  spec.weights_path = dir + "/w.safetensors";
  spec.name = "m";
  ASSERT_TRUE(save_model_spec(spec, dir + "/m.yaml").ok());
  auto back = load_model_spec(dir + "/m.yaml");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  back->source_path.clear();
  EXPECT_TRUE(same_model_spec(spec, *back));
  EXPECT_EQ(back->outputs, spec.outputs);
  fs::remove_all(dir);
}

// runtime.int8_float (docs/config.md): fp16 (the default) or fp32, anything else refused naming the key.
TEST(ModelConfig, Int8FloatIsParsedAndChecked) {
  const std::string minimal = read_text(testutil::source_path("tests/data/configs/valid/minimal.yaml"));
  auto with = [&](const std::string& extra) { return parse_model_spec(minimal + extra, "m.yaml", "/tmp"); };
  EXPECT_EQ(with("")->int8_float, Precision::kFp16);
  EXPECT_EQ(with("runtime:\n  int8_float: fp16\n")->int8_float, Precision::kFp16);
  EXPECT_EQ(with("runtime:\n  int8_float: fp32\n")->int8_float, Precision::kFp32);
  for (const char* bad : {"int8", "bf16", "32"}) {
    auto r = with(std::string("runtime:\n  int8_float: ") + bad + "\n");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kConfigError);
    EXPECT_NE(r.status().message().find("runtime.int8_float"), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("is not one of: fp16, fp32"), std::string::npos) << r.status().message();
  }
  // Written only when not the default, and read back.
  ModelSpec f32 = *with("runtime:\n  int8_float: fp32\n");
  auto text = model_spec_to_yaml(f32, "/tmp");
  ASSERT_TRUE(text.ok()) << text.status().to_string();
  EXPECT_NE(text->find("int8_float: fp32"), std::string::npos) << *text;
  auto back = parse_model_spec(*text, "m.yaml", "/tmp");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_TRUE(same_model_spec(f32, *back));
  f32.int8_float = Precision::kFp16;
  EXPECT_FALSE(same_model_spec(f32, *back));
  EXPECT_EQ(model_spec_to_yaml(f32, "/tmp")->find("int8_float"), std::string::npos);
}

TEST(ModelConfig, PoolingDefaultsFollowTimm) {
  auto spec = load_model_spec(testutil::source_path("tests/data/configs/valid/avg_defaults.yaml"));
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  EXPECT_EQ(spec->name, "avg-defaults");
  EXPECT_FALSE(spec->arch.class_token);
  EXPECT_EQ(spec->arch.global_pool, GlobalPool::kAvg);  // no class token -> avg
  EXPECT_TRUE(spec->arch.fc_norm);                      // avg -> fc_norm
  EXPECT_EQ(spec->arch.num_classes, 0);
  EXPECT_EQ(spec->weights_naming, WeightNaming::kHf);
  EXPECT_EQ(spec->precision, Precision::kFp16);
  EXPECT_EQ(spec->attention, AttentionImpl::kExplicit);
  EXPECT_EQ(spec->max_batch, 4);
}

TEST(ModelConfig, PathsResolveAgainstTheYamlDirectory) {
  // Relative to the current directory (ctest runs tests from the source dir) and absolute: same result.
  const fs::path dir = fs::absolute(testutil::source_path("tests/data/configs/valid")).lexically_normal();
  auto spec = load_model_spec(testutil::source_path("tests/data/configs/valid/minimal.yaml"));
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  EXPECT_EQ(spec->weights_path, (dir / "sub/minimal.safetensors").string());

  auto avg = load_model_spec(testutil::source_path("tests/data/configs/valid/avg_defaults.yaml"));
  ASSERT_TRUE(avg.ok());
  EXPECT_EQ(avg->weights_path, "/abs/path/w.safetensors");  // absolute paths are kept
  EXPECT_EQ(avg->labels_path, (dir / "labels/imagenet.txt").string());

  const std::string text = read_text(testutil::source_path("tests/data/configs/valid/minimal.yaml"));
  auto in_base = parse_model_spec(text, "m.yaml", "/models/x/../y");
  ASSERT_TRUE(in_base.ok());
  EXPECT_EQ(in_base->weights_path, "/models/y/sub/minimal.safetensors");
  EXPECT_EQ(in_base->name, "m");
  auto no_base = parse_model_spec(text, "m.yaml", "");
  ASSERT_TRUE(no_base.ok());
  EXPECT_EQ(no_base->weights_path, "sub/minimal.safetensors");
}

TEST(ModelConfig, LegitimateYamlFeaturesAreAccepted) {
  auto spec = load_model_spec(testutil::source_path("tests/data/configs/valid/yaml_features.yaml"));
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  EXPECT_EQ(spec->name, "micro & friends *");
  EXPECT_EQ(spec->arch.embed_dim, 64);
  EXPECT_EQ(fs::path(spec->weights_path).filename().string(), "it's.safetensors");
  EXPECT_EQ(fs::path(spec->weights_path).parent_path().filename().string(), "dir#1");
  EXPECT_EQ(fs::path(spec->labels_path).filename().string(), "*labels.txt");
}

TEST(ModelConfig, SaveLoadRoundTripsEveryShippedModel) {
  TempDir tmp;
  const fs::path out_dir = tmp.path() / "elsewhere" / "deeper";
  fs::create_directories(out_dir);
  const auto files = yaml_files(testutil::source_path("config/models"));
  ASSERT_GE(files.size(), 6u);  // an empty list would round-trip nothing and pass
  for (const auto& f : files) {
    SCOPED_TRACE(f.string());
    auto spec = load_model_spec(f.string());
    ASSERT_TRUE(spec.ok()) << spec.status().to_string();
    const std::string out = (out_dir / f.filename()).string();
    ASSERT_TRUE(save_model_spec(*spec, out).ok());
    auto back = load_model_spec(out);
    ASSERT_TRUE(back.ok()) << back.status().to_string() << "\n" << read_text(out);
    EXPECT_TRUE(same_model_spec(*spec, *back)) << read_text(out);
    // Saving the reloaded spec gives the same bytes: the writer is deterministic.
    const std::string out2 = (tmp.path() / "elsewhere" / "deeper" / ("again-" + f.filename().string())).string();
    ASSERT_TRUE(save_model_spec(*back, out2).ok());
    EXPECT_EQ(read_text(out), read_text(out2));
  }
}

TEST(ModelConfig, SaveWritesEveryKeyInSchemaOrderWithRelativePaths) {
  TempDir tmp;
  ModelSpec spec;
  spec.name = "written";
  spec.arch.img_h = spec.arch.img_w = 48;
  spec.arch.patch_size = 16;
  spec.arch.embed_dim = 96;
  spec.arch.num_heads = 3;
  spec.arch.depth = 2;
  spec.arch.mlp_ratio = 1.0 / 3.0;  // needs all 17 digits to round-trip
  spec.arch.layer_norm_eps = 1e-12;
  spec.arch.num_classes = 7;
  spec.weights_path = (tmp.path() / "weights" / "w.safetensors").string();
  spec.labels_path = (tmp.path() / "labels.txt").string();
  spec.preprocess.resize = 48;
  spec.preprocess.mean = {0.1, 0.2, 0.30000000000000004};
  const std::string out = (tmp.path() / "models" / "written.yaml").string();
  fs::create_directories(tmp.path() / "models");
  ASSERT_TRUE(save_model_spec(spec, out).ok());
  const std::string text = read_text(out);
  EXPECT_NE(text.find("path: ../weights/w.safetensors"), std::string::npos) << text;
  EXPECT_NE(text.find("labels: ../labels.txt"), std::string::npos) << text;
  const char* order[] = {"name:", "architecture:", "img_size:", "patch_size:", "in_chans:", "embed_dim:",
                         "depth:", "num_heads:", "mlp_ratio:", "qkv_bias:", "class_token:", "reg_tokens:",
                         "no_embed_class:", "global_pool:", "fc_norm:", "num_classes:", "layer_norm_eps:",
                         "act:", "weights:", "path:", "naming:", "runtime:", "precision:", "max_batch:",
                         "attention:", "preprocess:", "resize:", "mean:", "std:", "labels:"};
  size_t last = 0;
  for (const char* key : order) {
    const size_t at = text.find(key, last);
    ASSERT_NE(at, std::string::npos) << key << " missing or out of order in\n" << text;
    last = at;
  }
  auto back = load_model_spec(out);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  spec.weights_path = fs::path(spec.weights_path).lexically_normal().string();
  spec.labels_path = fs::path(spec.labels_path).lexically_normal().string();
  EXPECT_TRUE(same_model_spec(spec, *back)) << text;
  EXPECT_EQ(back->arch.mlp_ratio, 1.0 / 3.0);
}

// img_size takes N (a square) or [H, W]; the writer keeps N for a square, so existing configs and their plan
// hashes do not change, and writes [H, W] otherwise.
TEST(ModelConfig, NonSquareImgSizeReadsAndWritesAsAList) {
  const std::string arch = "patch_size: 8, embed_dim: 16, depth: 1, num_heads: 2, num_classes: 3}\n";
  const std::string rest = "weights: {path: w.safetensors}\n";
  auto spec = parse_model_spec("architecture: {img_size: [48, 32], " + arch + rest, "hw.yaml", "");
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  EXPECT_EQ(spec->arch.img_h, 48);
  EXPECT_EQ(spec->arch.img_w, 32);
  EXPECT_EQ(spec->arch.grid_h(), 6);
  EXPECT_EQ(spec->arch.grid_w(), 4);
  EXPECT_EQ(spec->arch.num_tokens(), 25);
  auto yaml = model_spec_to_yaml(*spec, "");
  ASSERT_TRUE(yaml.ok());
  EXPECT_NE(yaml->find("img_size: [48, 32]\n"), std::string::npos) << *yaml;
  auto back = parse_model_spec(*yaml, "hw.yaml", "");
  ASSERT_TRUE(back.ok()) << back.status().to_string() << "\n" << *yaml;
  EXPECT_TRUE(same_model_spec(*spec, *back)) << *yaml;
  // [N, N] is the square N, written back as N.
  auto square = parse_model_spec("architecture: {img_size: [48, 48], " + arch + rest, "sq.yaml", "");
  ASSERT_TRUE(square.ok()) << square.status().to_string();
  EXPECT_TRUE(square->arch.square());
  auto square_yaml = model_spec_to_yaml(*square, "");
  ASSERT_TRUE(square_yaml.ok());
  EXPECT_NE(square_yaml->find("img_size: 48\n"), std::string::npos) << *square_yaml;
  // Transposed sizes are different models.
  auto tall = parse_model_spec("architecture: {img_size: [32, 48], " + arch + rest, "wh.yaml", "");
  ASSERT_TRUE(tall.ok());
  EXPECT_FALSE(same_model_spec(*spec, *tall));
}

TEST(ModelConfig, SaveRefusesAnInvalidSpec) {
  TempDir tmp;
  ModelSpec spec;
  spec.weights_path = "w.safetensors";
  spec.arch.embed_dim = 65;  // not divisible by 3 heads
  const std::string out = (tmp.path() / "bad.yaml").string();
  const Status s = save_model_spec(spec, out);
  EXPECT_EQ(s.code(), StatusCode::kConfigError);
  EXPECT_NE(s.message().find("architecture.num_heads"), std::string::npos) << s.message();
  EXPECT_FALSE(fs::exists(out));
  spec.arch.embed_dim = 192;
  spec.weights_path.clear();
  EXPECT_EQ(save_model_spec(spec, out).code(), StatusCode::kConfigError);
}

TEST(ModelConfig, ValidateAcceptsTheDefaultSpec) {
  ModelSpec spec;
  spec.weights_path = "w.safetensors";
  EXPECT_TRUE(validate_model_spec(spec, "default").ok()) << validate_model_spec(spec, "default").message();
}

TEST(YamlGuard, FormatDoubleExactRoundTrips) {
  EXPECT_EQ(format_double_exact(4.0), "4.0");
  EXPECT_EQ(format_double_exact(0.5), "0.5");
  EXPECT_EQ(format_double_exact(1e-6), "1e-06");
  for (double v : {0.1, 1.0 / 3.0, 0.229, 1e-12, 123456789.125, -2.5e-300}) {
    EXPECT_EQ(std::stod(format_double_exact(v)), v) << format_double_exact(v);
  }
}

}  // namespace
}  // namespace edgevit
