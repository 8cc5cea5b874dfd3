// WeightSource: canonical names, check() against an architecture, reads straight from the mapping, and the
// Hugging Face (transformers 4.x and 5.x) name mapping, on the golden timm checkpoints and files derived
// from them.
#include "runtime/weights.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "tests/runtime/checkpoint_fixtures.h"

namespace edgevit {
namespace {

namespace fs = std::filesystem;
using testutil::TensorMap;

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// check() must fail with kCheckpointError naming every fragment.
void expect_check_fails(const WeightSource& w, const VitArch& arch, const std::vector<std::string>& fragments) {
  Status s = w.check(arch);
  ASSERT_EQ(s.code(), StatusCode::kCheckpointError) << s.to_string();
  for (const auto& f : fragments) EXPECT_TRUE(contains(s.message(), f)) << "'" << f << "' not in: " << s.message();
}

class WeightsTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testutil::make_temp_dir("weights"); }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const TensorMap& tensors) {
    const std::string path = dir_ + "/" + name;
    EXPECT_TRUE(testutil::write_tensors(path, tensors).ok());
    return path;
  }
  std::string dir_;
};

TEST(ExpectedNames, FollowTheArchitecture) {
  VitArch a = testutil::golden_arch("vit-micro");
  auto names = expected_names(a);
  EXPECT_EQ(names.size(), 2u + 1 + 1 + 2 * 12 + 2 + 2);
  EXPECT_EQ(names.front(), "patch_embed.proj.weight");
  EXPECT_EQ(expected_shape(a, "blocks.1.attn.qkv.weight"), (std::vector<int64_t>{192, 64}));
  EXPECT_EQ(expected_shape(a, "blocks.1.mlp.fc2.weight"), (std::vector<int64_t>{64, 256}));
  EXPECT_EQ(expected_shape(a, "pos_embed"), (std::vector<int64_t>{1, 17, 64}));
  EXPECT_TRUE(expected_shape(a, "blocks.2.norm1.weight").empty());

  a.qkv_bias = false;
  a.fc_norm = true;
  a.num_classes = 0;
  a.reg_tokens = 4;
  a.no_embed_class = true;
  names = expected_names(a);
  auto has = [&](const std::string& n) { return std::find(names.begin(), names.end(), n) != names.end(); };
  EXPECT_FALSE(has("blocks.0.attn.qkv.bias"));
  EXPECT_FALSE(has("norm.weight"));
  EXPECT_TRUE(has("fc_norm.bias"));
  EXPECT_FALSE(has("head.weight"));
  EXPECT_EQ(expected_shape(a, "reg_token"), (std::vector<int64_t>{1, 4, 64}));
  EXPECT_EQ(expected_shape(a, "pos_embed"), (std::vector<int64_t>{1, 16, 64}));
}

TEST(GoldenCheckpoints, PassCheckAndReadExactly) {
  for (const std::string name : {"vit-micro", "vit-tiny-patch16-224", "vit-avgpool"}) {
    SCOPED_TRACE(name);
    const VitArch arch = testutil::golden_arch(name);
    auto w = WeightSource::open(testutil::golden_path(name + ".safetensors"), WeightNaming::kTimm);
    ASSERT_TRUE(w.ok()) << w.status().to_string();
    ASSERT_TRUE(w->check(arch).ok()) << w->check(arch).to_string();
    for (const std::string& tensor : expected_names(arch)) {
      const TensorInfo* raw = w->file().find(tensor);
      ASSERT_NE(raw, nullptr) << tensor;
      const size_t n = static_cast<size_t>(raw->numel);
      const uint8_t* bytes = w->file().data(*raw);
      std::vector<float> f32(n);
      std::vector<uint16_t> f16(n);
      ASSERT_TRUE(w->read_f32(tensor, f32.data(), n).ok());
      ASSERT_TRUE(w->read_f16(tensor, f16.data(), n).ok());
      if (raw->dtype == DType::kF32) {
        EXPECT_EQ(std::memcmp(f32.data(), bytes, n * 4), 0) << tensor;
        for (size_t i = 0; i < n; ++i) {
          float v;
          std::memcpy(&v, bytes + 4 * i, 4);
          ASSERT_EQ(f16[i], f32_to_f16(v)) << tensor << "[" << i << "]";
        }
      } else {
        ASSERT_EQ(raw->dtype, DType::kF16);
        EXPECT_EQ(std::memcmp(f16.data(), bytes, n * 2), 0) << tensor;
        for (size_t i = 0; i < n; ++i) {
          uint16_t h;
          std::memcpy(&h, bytes + 2 * i, 2);
          ASSERT_EQ(f32[i], f16_to_f32(h)) << tensor << "[" << i << "]";
        }
      }
    }
  }
}

TEST(GoldenCheckpoints, TinyIsStoredAsF16) {
  auto w = WeightSource::open(testutil::golden_path("vit-tiny-patch16-224.safetensors"), WeightNaming::kTimm);
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->file().find("blocks.0.attn.qkv.weight")->dtype, DType::kF16);
}

TEST(CheckAgainstArch, NamesMissingExtraAndMismatchedTensors) {
  auto w = WeightSource::open(testutil::golden_path("vit-micro.safetensors"), WeightNaming::kTimm);
  ASSERT_TRUE(w.ok());
  const VitArch micro = testutil::golden_arch("vit-micro");

  VitArch deeper = micro;
  deeper.depth = 3;
  expect_check_fails(*w, deeper, {"missing 12 tensor(s)", "blocks.2.norm1.weight", "blocks.2.mlp.fc2.bias"});

  VitArch narrower_mlp = micro;
  narrower_mlp.mlp_ratio = 2.0;
  expect_check_fails(
      *w, narrower_mlp,
      {"6 shape mismatch(es)", "blocks.0.mlp.fc1.weight: expected [128,64], checkpoint has [256,64]",
       "blocks.1.mlp.fc2.weight: expected [64,128], checkpoint has [64,256]"});

  VitArch fc_norm = micro;
  fc_norm.fc_norm = true;
  expect_check_fails(*w, fc_norm, {"missing 2 tensor(s): fc_norm.weight, fc_norm.bias",
                                                "unexpected 2 tensor(s): norm.bias, norm.weight"});

  VitArch features = micro;
  features.num_classes = 0;
  expect_check_fails(*w, features, {"unexpected 2 tensor(s): head.bias, head.weight"});

  VitArch much_deeper = micro;
  much_deeper.depth = 10;
  expect_check_fails(*w, much_deeper, {"missing 96 tensor(s)", "and 76 more"});
}

TEST_F(WeightsTest, ExtraTensorInFileIsReported) {
  TensorMap t = testutil::read_all_f32(testutil::golden_path("vit-micro.safetensors"));
  t["blocks.0.attn.q_norm.weight"] = {{64}, std::vector<float>(64, 1.f)};
  auto w = WeightSource::open(write("extra.safetensors", t), WeightNaming::kTimm);
  ASSERT_TRUE(w.ok());
  expect_check_fails(*w, testutil::golden_arch("vit-micro"), {"unexpected 1 tensor(s): blocks.0.attn.q_norm.weight"});
}

TEST(ReadErrors, WrongCountAndUnknownName) {
  auto w = WeightSource::open(testutil::golden_path("vit-micro.safetensors"), WeightNaming::kTimm);
  ASSERT_TRUE(w.ok());
  std::vector<float> buf(100);
  Status s = w->read_f32("norm.weight", buf.data(), 100);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(s.message(), "'norm.weight' [64] has 64 elements, destination holds 100")) << s.message();
  s = w->read_f32("blocks.7.norm1.weight", buf.data(), 64);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
}

// ---- Hugging Face ---------------------------------------------------------------------------------------

TEST_F(WeightsTest, HfBothConventionsReadBackAsTheTimmOriginal) {
  const TensorMap timm = testutil::read_all_f32(testutil::golden_path("vit-micro.safetensors"));
  const VitArch arch = testutil::golden_arch("vit-micro");
  for (HfConvention convention : {HfConvention::kTransformers4, HfConvention::kTransformers5}) {
    const bool v5 = convention == HfConvention::kTransformers5;
    SCOPED_TRACE(v5 ? "transformers 5.x" : "transformers 4.x");
    const TensorMap hf = testutil::to_hf(timm, convention);
    EXPECT_TRUE(hf.count(v5 ? "vit.layers.1.attention.k_proj.weight" : "vit.encoder.layer.1.attention.attention.key.weight"));
    auto w = WeightSource::open(write(v5 ? "hf5.safetensors" : "hf4.safetensors", hf), WeightNaming::kHf);
    ASSERT_TRUE(w.ok()) << w.status().to_string();
    EXPECT_EQ(w->hf_convention(), convention);
    ASSERT_TRUE(w->check(arch).ok()) << w->check(arch).to_string();
    EXPECT_EQ(w->canonical_names().size(), timm.size());
    for (const auto& [name, t] : timm) {
      SCOPED_TRACE(name);
      auto shape = w->shape(name);
      ASSERT_TRUE(shape.ok());
      EXPECT_EQ(*shape, t.shape);
      std::vector<float> f32(t.data.size());
      ASSERT_TRUE(w->read_f32(name, f32.data(), f32.size()).ok());
      EXPECT_EQ(f32, t.data);
      std::vector<uint16_t> f16(t.data.size());
      ASSERT_TRUE(w->read_f16(name, f16.data(), f16.size()).ok());
      for (size_t i = 0; i < f16.size(); ++i) ASSERT_EQ(f16[i], f32_to_f16(t.data[i]));
    }
  }
}

TEST_F(WeightsTest, HfWithoutQkvBias) {
  TensorMap hf = testutil::to_hf(testutil::read_all_f32(testutil::golden_path("vit-micro.safetensors")),
                                 HfConvention::kTransformers5);
  for (int l = 0; l < 2; ++l)
    for (const char* p : {"q_proj", "k_proj", "v_proj"})
      hf.erase("vit.layers." + std::to_string(l) + ".attention." + p + ".bias");
  auto w = WeightSource::open(write("nobias.safetensors", hf), WeightNaming::kHf);
  ASSERT_TRUE(w.ok());
  VitArch arch = testutil::golden_arch("vit-micro");
  arch.qkv_bias = false;
  EXPECT_TRUE(w->check(arch).ok()) << w->check(arch).to_string();
}

TEST_F(WeightsTest, HfMissingKeyPartIsReported) {
  TensorMap hf = testutil::to_hf(testutil::read_all_f32(testutil::golden_path("vit-micro.safetensors")),
                                 HfConvention::kTransformers4);
  ASSERT_EQ(hf.erase("vit.encoder.layer.0.attention.attention.key.weight"), 1u);
  auto w = WeightSource::open(write("nokey.safetensors", hf), WeightNaming::kHf);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  expect_check_fails(*w, testutil::golden_arch("vit-micro"),
                     {"missing 1 tensor(s): blocks.0.attn.qkv.weight",
                      "blocks.0.attn.qkv.weight: checkpoint has the q, v part(s) but not k",
                      "vit.encoder.layer.0.attention.attention.query.weight (no timm counterpart)"});
}

TEST_F(WeightsTest, HfPoolerAndMaskTokenAreRejected) {
  TensorMap hf = testutil::to_hf(testutil::read_all_f32(testutil::golden_path("vit-micro.safetensors")),
                                 HfConvention::kTransformers5);
  hf["vit.pooler.dense.weight"] = {{64, 64}, std::vector<float>(64 * 64)};
  hf["vit.pooler.dense.bias"] = {{64}, std::vector<float>(64)};
  hf["vit.embeddings.mask_token"] = {{1, 1, 64}, std::vector<float>(64)};
  auto w = WeightSource::open(write("pooler.safetensors", hf), WeightNaming::kHf);
  ASSERT_TRUE(w.ok());
  expect_check_fails(*w, testutil::golden_arch("vit-micro"),
                     {"unexpected 3 tensor(s)", "vit.pooler.dense.weight", "vit.embeddings.mask_token"});
}

TEST_F(WeightsTest, HfConventionDetection) {
  const TensorMap timm = testutil::read_all_f32(testutil::golden_path("vit-micro.safetensors"));
  TensorMap mixed = testutil::to_hf(timm, HfConvention::kTransformers4);
  mixed["vit.layers.0.mlp.fc1.weight"] = {{256, 64}, std::vector<float>(256 * 64)};
  auto r = WeightSource::open(write("mixed.safetensors", mixed), WeightNaming::kHf);
  ASSERT_EQ(r.status().code(), StatusCode::kCheckpointError);
  EXPECT_TRUE(contains(r.status().message(), "mixes transformers 4.x")) << r.status().message();

  r = WeightSource::open(testutil::golden_path("vit-micro.safetensors"), WeightNaming::kHf);
  ASSERT_EQ(r.status().code(), StatusCode::kCheckpointError);
  EXPECT_TRUE(contains(r.status().message(), "set weights_naming: timm")) << r.status().message();

  r = WeightSource::open(write("other.safetensors", {{"encoder.weight", {{2}, {1.f, 2.f}}}}), WeightNaming::kHf);
  ASSERT_EQ(r.status().code(), StatusCode::kCheckpointError);
  EXPECT_TRUE(contains(r.status().message(), "not a Hugging Face ViT checkpoint")) << r.status().message();

  r = WeightSource::open(write("hf.safetensors", testutil::to_hf(timm, HfConvention::kTransformers5)),
                         WeightNaming::kTimm);
  ASSERT_EQ(r.status().code(), StatusCode::kCheckpointError);
  EXPECT_TRUE(contains(r.status().message(), "set weights_naming: hf")) << r.status().message();
}

TEST_F(WeightsTest, HfNonCanonicalLayerIndexIsNotMapped) {
  TensorMap hf = testutil::to_hf(testutil::read_all_f32(testutil::golden_path("vit-micro.safetensors")),
                                 HfConvention::kTransformers5);
  hf["vit.layers.01.layernorm_before.weight"] = {{64}, std::vector<float>(64)};
  auto w = WeightSource::open(write("index.safetensors", hf), WeightNaming::kHf);
  ASSERT_TRUE(w.ok());
  expect_check_fails(*w, testutil::golden_arch("vit-micro"), {"vit.layers.01.layernorm_before.weight (no timm counterpart)"});
}

}  // namespace
}  // namespace edgevit
