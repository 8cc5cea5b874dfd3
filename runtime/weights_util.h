// Internal to runtime/weights*.cpp: helpers and the internal tensor names the weight mapping shares.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace edgevit {
namespace weights_detail {

inline std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

// "a, b, c and 7 more"
inline std::string list_names(const std::vector<std::string>& names, size_t max_listed) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < max_listed; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > max_listed) s += " and " + std::to_string(names.size() - max_listed) + " more";
  return s;
}

inline bool starts_with(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

// Parses "<N>.<rest>" where N is a canonical decimal (no sign, no leading zeros).
inline bool split_layer_index(const std::string& s, int* index, std::string* rest) {
  const size_t dot = s.find('.');
  if (dot == std::string::npos || dot == 0 || dot > 6) return false;
  if (s[0] == '0' && dot > 1) return false;
  int n = 0;
  for (size_t i = 0; i < dot; ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
    n = n * 10 + (s[i] - '0');
  }
  *index = n;
  *rest = s.substr(dot + 1);
  return true;
}

// DINOv2 with registers: HF's position embeddings cover the class token and the patches, not the registers.
// timm's equivalent (its _convert_dinov2) is no_embed_class with the class token's position added to it; the
// source tensors keep these internal names and the canonical ones are derived (WeightSource::Derived).
constexpr const char* kHfLayerPrefix4 = "vit.encoder.layer.";
constexpr const char* kHfLayerPrefix5 = "vit.layers.";

constexpr const char* kHfClsWithPos = "hf.cls_token";
constexpr const char* kHfPosWithCls = "hf.position_embeddings";

}  // namespace weights_detail
}  // namespace edgevit
