// Test fixtures for checkpoints: golden architectures from NAME.json, whole checkpoints as float maps,
// timm -> Hugging Face renaming (written independently of runtime/weights.cpp's HF -> timm mapping, so
// tests of one check the other), random checkpoints for an architecture, temporary directories.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/model_spec.h"
#include "runtime/safetensors.h"
#include "runtime/weights.h"
#include "tests/testutil/testutil.h"

namespace edgevit::testutil {

struct TensorData {
  std::vector<int64_t> shape;
  std::vector<float> data;
};
using TensorMap = std::map<std::string, TensorData>;

// A fresh directory under gtest's temp dir; the caller removes it.
inline std::string make_temp_dir(const std::string& tag) {
  std::string templ = ::testing::TempDir() + "ev_" + tag + "_XXXXXX";
  if (::mkdtemp(templ.data()) == nullptr) ADD_FAILURE() << "mkdtemp failed for " << templ;
  return templ;
}

// Every tensor of a safetensors file, converted to f32.
inline TensorMap read_all_f32(const std::string& path) {
  TensorMap out;
  auto file = SafetensorsFile::open(path);
  if (!file.ok()) {
    ADD_FAILURE() << file.status().to_string();
    return out;
  }
  for (const TensorInfo& t : file->tensors()) {
    TensorData& d = out[t.name];
    d.shape = t.shape;
    d.data.resize(static_cast<size_t>(t.numel));
    convert_to_f32(t, file->data(t), d.data.data());
  }
  return out;
}

inline Status write_tensors(const std::string& path, const TensorMap& tensors) {
  std::vector<NamedTensorView> views;
  for (const auto& [name, t] : tensors) views.push_back({name, t.shape, t.data.data()});
  return write_safetensors(path, views, {{"format", "pt"}});
}

// The architecture a golden checkpoint was built with: NAME.json's constructor kwargs over timm's
// defaults. Fails the test on a kwarg it does not know (nothing is ignored silently).
inline VitArch golden_arch(const std::string& name) {
  std::ifstream in(golden_path(name + ".json"));
  const nlohmann::json meta = nlohmann::json::parse(in);
  VitArch a;  // VitArch's defaults are timm's (and vit_tiny_patch16_224's)
  bool fc_norm_given = false;
  for (auto it = meta["kwargs"].begin(); it != meta["kwargs"].end(); ++it) {
    const std::string k = it.key();
    const nlohmann::json& v = it.value();
    if (k == "timm_model") {
      EXPECT_EQ(v, "vit_tiny_patch16_224") << "add its architecture here";
      a.img_h = a.img_w = 224, a.patch_size = 16, a.embed_dim = 192, a.depth = 12, a.num_heads = 3;
    } else if (k == "img_size") a.img_h = a.img_w = v;
    else if (k == "patch_size") a.patch_size = v;
    else if (k == "embed_dim") a.embed_dim = v;
    else if (k == "depth") a.depth = v;
    else if (k == "num_heads") a.num_heads = v;
    else if (k == "mlp_ratio") a.mlp_ratio = v;
    else if (k == "num_classes") a.num_classes = v;
    else if (k == "class_token") a.class_token = v;
    else if (k == "global_pool") a.global_pool = v == "avg" ? GlobalPool::kAvg : GlobalPool::kToken;
    else if (k == "fc_norm") a.fc_norm = v, fc_norm_given = true;
    else ADD_FAILURE() << name << ".json: kwarg '" << k << "' not handled by golden_arch";
  }
  if (!fc_norm_given) a.fc_norm = a.global_pool == GlobalPool::kAvg;  // timm: fc_norm=None
  return a;
}

// timm canonical names -> Hugging Face ViTForImageClassification names (qkv split into q, k, v).
inline TensorMap to_hf(const TensorMap& timm, HfConvention convention) {
  const bool v5 = convention == HfConvention::kTransformers5;
  const std::map<std::string, std::string> shared = {
      {"patch_embed.proj.weight", "vit.embeddings.patch_embeddings.projection.weight"},
      {"patch_embed.proj.bias", "vit.embeddings.patch_embeddings.projection.bias"},
      {"cls_token", "vit.embeddings.cls_token"},
      {"pos_embed", "vit.embeddings.position_embeddings"},
      {"norm.weight", "vit.layernorm.weight"},
      {"norm.bias", "vit.layernorm.bias"},
      {"head.weight", "classifier.weight"},
      {"head.bias", "classifier.bias"}};
  const std::map<std::string, std::string> layer = {
      {"norm1", "layernorm_before"},
      {"norm2", "layernorm_after"},
      {"attn.proj", v5 ? "attention.o_proj" : "attention.output.dense"},
      {"mlp.fc1", v5 ? "mlp.fc1" : "intermediate.dense"},
      {"mlp.fc2", v5 ? "mlp.fc2" : "output.dense"}};
  const char* const qkv_names[3] = {v5 ? "attention.q_proj" : "attention.attention.query",
                                    v5 ? "attention.k_proj" : "attention.attention.key",
                                    v5 ? "attention.v_proj" : "attention.attention.value"};
  TensorMap hf;
  for (const auto& [name, t] : timm) {
    if (shared.count(name)) {
      hf[shared.at(name)] = t;
      continue;
    }
    // blocks.N.<module>.<param>
    const size_t n_end = name.find('.', 7);
    const std::string n = name.substr(7, n_end - 7);
    const size_t p = name.rfind('.');
    const std::string module = name.substr(n_end + 1, p - n_end - 1), param = name.substr(p + 1);
    const std::string prefix = (v5 ? "vit.layers." : "vit.encoder.layer.") + n + ".";
    if (module == "attn.qkv") {
      const size_t rows = static_cast<size_t>(t.shape[0] / 3);
      const size_t row_elems = t.data.size() / static_cast<size_t>(t.shape[0]);
      for (int part = 0; part < 3; ++part) {
        TensorData d;
        d.shape = t.shape;
        d.shape[0] /= 3;
        d.data.assign(t.data.begin() + part * rows * row_elems, t.data.begin() + (part + 1) * rows * row_elems);
        hf[prefix + qkv_names[part] + "." + param] = d;
      }
    } else {
      EXPECT_TRUE(layer.count(module)) << "no HF name for " << name;
      hf[prefix + layer.at(module) + "." + param] = t;
    }
  }
  return hf;
}

// Random values for every tensor an architecture expects.
inline TensorMap random_checkpoint(const VitArch& arch, uint32_t seed) {
  TensorMap out;
  for (const std::string& name : expected_names(arch)) {
    TensorData& d = out[name];
    d.shape = expected_shape(arch, name);
    size_t n = 1;
    for (int64_t s : d.shape) n *= static_cast<size_t>(s);
    d.data = random_floats(n, seed++);
  }
  return out;
}

}  // namespace edgevit::testutil
