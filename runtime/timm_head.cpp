#include "runtime/timm_head.h"

#include <filesystem>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/file_io.h"

namespace edgevit {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr int64_t kMaxConfigBytes = int64_t{4} << 20;  // a hub config.json is a few kilobytes

// What a timm config.json names: the architecture without its tag, and the pretrained tag ("" when absent).
struct TimmName {
  std::string architecture, tag;
};

// The names in the config.json beside the checkpoint when it is timm's (it has `architecture`); an empty
// architecture when there is no such file or it is not timm's (a Hugging Face config.json has none).
Result<TimmName> read_timm_name(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return TimmName{};
  EV_ASSIGN_OR_RETURN(const std::string text,
                      read_regular_file(path, "timm config", kMaxConfigBytes, StatusCode::kConfigError));
  json cfg;
  try {
    cfg = json::parse(text);
  } catch (const json::exception& e) {
    return config_error(path + ": not valid JSON: " + e.what());
  }
  if (!cfg.is_object() || !cfg.contains("architecture")) return TimmName{};
  const json& arch = cfg["architecture"];
  if (!arch.is_string() || arch.get<std::string>().empty())
    return config_error(path + ": key 'architecture': expected a timm model name, got " + arch.dump());
  TimmName n;
  n.architecture = arch.get<std::string>();
  const size_t dot = n.architecture.find('.');
  if (dot != std::string::npos) {
    n.tag = n.architecture.substr(dot + 1);
    n.architecture.resize(dot);
  }
  if (cfg.contains("pretrained_cfg") && cfg["pretrained_cfg"].is_object() && cfg["pretrained_cfg"].contains("tag")) {
    const json& tag = cfg["pretrained_cfg"]["tag"];
    if (!tag.is_string() && !tag.is_null())
      return config_error(path + ": key 'pretrained_cfg.tag': expected a string, got " + tag.dump());
    if (tag.is_string()) n.tag = tag.get<std::string>();
  }
  return n;
}

bool is_clip_tower_name(const std::string& architecture) {
  return architecture.rfind("vit_", 0) == 0 && architecture.find("_clip_") != std::string::npos;
}

// What the head's bias says: "absent", "zero" or "trained".
Result<std::string> head_bias_kind(const WeightSource& w, const VitArch& a) {
  if (!a.head_bias) return std::string("absent");
  std::vector<float> bias(static_cast<size_t>(a.num_classes));
  EV_RETURN_IF_ERROR(w.read_f32("head.bias", bias.data(), bias.size()));
  for (float b : bias)
    if (b != 0.0f) return std::string("trained");
  return std::string("zero");
}

}  // namespace

Result<TimmHead> detect_timm_head(const WeightSource& weights, const std::string& checkpoint, const VitArch& arch) {
  TimmHead h;
  if (arch.num_classes == 0) return h;
  const std::string config = (fs::path(checkpoint).parent_path() / "config.json").string();
  EV_ASSIGN_OR_RETURN(const TimmName name, read_timm_name(config));
  const std::string named = name.architecture + (name.tag.empty() ? "" : "." + name.tag);
  if (!name.architecture.empty() && !is_clip_tower_name(name.architecture)) {
    h.note = "a classifier (logits): " + config + " names " + named + ", not a CLIP tower (vit_*_clip_*)";
    return h;
  }
  if (!name.architecture.empty() && name.tag.find("ft_") != std::string::npos) {
    h.note = "a classifier (logits): " + config + " names " + named + ", a CLIP tower fine-tuned as a classifier";
    return h;
  }
  const std::string by = name.architecture.empty() ? "no timm config.json beside the checkpoint; "
                                                   : config + " names " + named + ", a CLIP tower; ";
  if (!arch.pre_norm) {
    h.note = "a classifier (logits): " + by + "the checkpoint has no norm_pre, so it is not a CLIP tower";
    return h;
  }
  EV_ASSIGN_OR_RETURN(const std::string bias, head_bias_kind(weights, arch));
  if (bias == "trained") {
    h.note = "a classifier (logits): " + by + "norm_pre and a head with a trained (non-zero) bias";
    return h;
  }
  h.projection = true;
  h.note = "the CLIP image projection (embedding, no logits): " + by + "norm_pre and a head with " +
           (bias == "zero" ? "an all-zero bias (timm's OpenAI/OpenCLIP conversion writes one)" : "no bias");
  return h;
}

}  // namespace edgevit
