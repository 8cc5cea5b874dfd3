#include "runtime/weights.h"

#include <algorithm>
#include <set>

namespace edgevit {
namespace {

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

// "a, b, c and 7 more"
std::string list_names(const std::vector<std::string>& names, size_t max_listed) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < max_listed; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > max_listed) s += " and " + std::to_string(names.size() - max_listed) + " more";
  return s;
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

// Parses "<N>.<rest>" where N is a canonical decimal (no sign, no leading zeros).
bool split_layer_index(const std::string& s, int* index, std::string* rest) {
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

struct LayerRename {
  const char* hf_module;         // relative to the layer, without ".weight"/".bias"
  const char* canonical_module;  // relative to blocks.N
  int qkv_part;                  // 0/1/2 for q/k/v packed into attn.qkv; -1 otherwise
};

constexpr LayerRename kTransformers4Layer[] = {
    {"layernorm_before", "norm1", -1},
    {"attention.attention.query", "attn.qkv", 0},
    {"attention.attention.key", "attn.qkv", 1},
    {"attention.attention.value", "attn.qkv", 2},
    {"attention.output.dense", "attn.proj", -1},
    {"layernorm_after", "norm2", -1},
    {"intermediate.dense", "mlp.fc1", -1},
    {"output.dense", "mlp.fc2", -1},
};

constexpr LayerRename kTransformers5Layer[] = {
    {"layernorm_before", "norm1", -1},
    {"attention.q_proj", "attn.qkv", 0},
    {"attention.k_proj", "attn.qkv", 1},
    {"attention.v_proj", "attn.qkv", 2},
    {"attention.o_proj", "attn.proj", -1},
    {"layernorm_after", "norm2", -1},
    {"mlp.fc1", "mlp.fc1", -1},
    {"mlp.fc2", "mlp.fc2", -1},
};

constexpr const char* kHfLayerPrefix4 = "vit.encoder.layer.";
constexpr const char* kHfLayerPrefix5 = "vit.layers.";

// Whole-model HF names (same in 4.x and 5.x) -> canonical.
const std::pair<const char*, const char*> kHfShared[] = {
    {"vit.embeddings.cls_token", "cls_token"},
    {"vit.embeddings.position_embeddings", "pos_embed"},
    {"vit.embeddings.patch_embeddings.projection.weight", "patch_embed.proj.weight"},
    {"vit.embeddings.patch_embeddings.projection.bias", "patch_embed.proj.bias"},
    {"vit.layernorm.weight", "norm.weight"},
    {"vit.layernorm.bias", "norm.bias"},
    {"classifier.weight", "head.weight"},
    {"classifier.bias", "head.bias"},
};

}  // namespace

std::vector<std::string> expected_names(const VitArch& a) {
  std::vector<std::string> n = {"patch_embed.proj.weight", "patch_embed.proj.bias"};
  if (a.class_token) n.push_back("cls_token");
  if (a.reg_tokens > 0) n.push_back("reg_token");
  n.push_back("pos_embed");
  for (int i = 0; i < a.depth; ++i) {
    const std::string b = "blocks." + std::to_string(i) + ".";
    for (const char* m : {"norm1.weight", "norm1.bias", "attn.qkv.weight"}) n.push_back(b + m);
    if (a.qkv_bias) n.push_back(b + "attn.qkv.bias");
    for (const char* m : {"attn.proj.weight", "attn.proj.bias", "norm2.weight", "norm2.bias", "mlp.fc1.weight",
                          "mlp.fc1.bias", "mlp.fc2.weight", "mlp.fc2.bias"})
      n.push_back(b + m);
  }
  const std::string final_norm = a.fc_norm ? "fc_norm." : "norm.";
  n.push_back(final_norm + "weight");
  n.push_back(final_norm + "bias");
  if (a.num_classes > 0) {
    n.push_back("head.weight");
    n.push_back("head.bias");
  }
  return n;
}

std::vector<int64_t> expected_shape(const VitArch& a, const std::string& name) {
  const auto names = expected_names(a);
  if (std::find(names.begin(), names.end(), name) == names.end()) return {};
  const int64_t e = a.embed_dim, m = a.mlp_hidden();
  if (name == "patch_embed.proj.weight") return {e, a.in_chans, a.patch_size, a.patch_size};
  if (name == "cls_token") return {1, 1, e};
  if (name == "reg_token") return {1, a.reg_tokens, e};
  if (name == "pos_embed") return {1, a.pos_embed_len(), e};
  if (name == "head.weight") return {a.num_classes, e};
  if (name == "head.bias") return {a.num_classes};
  const size_t last_dot = name.rfind('.');
  const std::string module = name.substr(0, last_dot);
  const bool weight = name.compare(last_dot + 1, std::string::npos, "weight") == 0;
  const auto ends_with = [&](const char* suffix) {
    const std::string s(suffix);
    return module.size() >= s.size() && module.compare(module.size() - s.size(), s.size(), s) == 0;
  };
  if (ends_with("attn.qkv")) return weight ? std::vector<int64_t>{3 * e, e} : std::vector<int64_t>{3 * e};
  if (ends_with("attn.proj")) return weight ? std::vector<int64_t>{e, e} : std::vector<int64_t>{e};
  if (ends_with("mlp.fc1")) return weight ? std::vector<int64_t>{m, e} : std::vector<int64_t>{m};
  if (ends_with("mlp.fc2")) return weight ? std::vector<int64_t>{e, m} : std::vector<int64_t>{e};
  return {e};  // patch_embed.proj.bias and every LayerNorm parameter
}

Result<WeightSource> WeightSource::open(const std::string& path, WeightNaming naming) {
  EV_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::open(path));
  WeightSource source(std::move(file));
  source.naming_ = naming;
  EV_RETURN_IF_ERROR(naming == WeightNaming::kHf ? source.build_hf() : source.build_timm());
  EV_RETURN_IF_ERROR(source.finish());
  return source;
}

Status WeightSource::add(const std::string& canonical, size_t part, size_t num_parts, const TensorInfo& info) {
  Canonical& c = tensors_[canonical];
  if (c.parts.empty()) {
    c.parts.assign(num_parts, nullptr);
    c.part_names.assign(num_parts, "");
  }
  if (c.parts[part] != nullptr)
    return checkpoint_error(file_.path() + ": tensors '" + c.part_names[part] + "' and '" + info.name +
                            "' both map to '" + canonical + "'");
  c.parts[part] = &info;
  c.part_names[part] = info.name;
  return Status::Ok();
}

Status WeightSource::build_timm() {
  bool any_timm = false, any_hf = false;
  for (const TensorInfo& t : file_.tensors()) {
    any_timm = any_timm || starts_with(t.name, "blocks.");
    any_hf = any_hf || starts_with(t.name, kHfLayerPrefix4) || starts_with(t.name, kHfLayerPrefix5);
    EV_RETURN_IF_ERROR(add(t.name, 0, 1, t));
  }
  if (any_hf && !any_timm)
    return checkpoint_error(file_.path() + ": tensor names follow Hugging Face ViT naming (vit.*), not timm; "
                            "set weights_naming: hf");
  return Status::Ok();
}

Status WeightSource::build_hf() {
  bool any4 = false, any5 = false, any_timm = false;
  for (const TensorInfo& t : file_.tensors()) {
    any4 = any4 || starts_with(t.name, kHfLayerPrefix4);
    any5 = any5 || starts_with(t.name, kHfLayerPrefix5);
    any_timm = any_timm || starts_with(t.name, "blocks.");
  }
  if (any4 && any5)
    return checkpoint_error(file_.path() + ": mixes transformers 4.x (" + kHfLayerPrefix4 + "N.*) and 5.x (" +
                            kHfLayerPrefix5 + "N.*) Hugging Face ViT names");
  if (!any4 && !any5) {
    if (any_timm)
      return checkpoint_error(file_.path() + ": tensor names follow timm naming (blocks.N.*), not Hugging Face; "
                              "set weights_naming: timm");
    return checkpoint_error(file_.path() + ": not a Hugging Face ViT checkpoint: no tensor named " +
                            kHfLayerPrefix4 + "N.* (transformers 4.x) or " + kHfLayerPrefix5 +
                            "N.* (transformers 5.x)");
  }
  hf_convention_ = any4 ? HfConvention::kTransformers4 : HfConvention::kTransformers5;
  const std::string layer_prefix = any4 ? kHfLayerPrefix4 : kHfLayerPrefix5;

  for (const TensorInfo& t : file_.tensors()) {
    bool mapped = false;
    for (const auto& [hf, canonical] : kHfShared) {
      if (t.name == hf) {
        EV_RETURN_IF_ERROR(add(canonical, 0, 1, t));
        mapped = true;
      }
    }
    int layer = 0;
    std::string rest;
    if (starts_with(t.name, layer_prefix) && split_layer_index(t.name.substr(layer_prefix.size()), &layer, &rest)) {
      const size_t dot = rest.rfind('.');
      const std::string module = dot == std::string::npos ? "" : rest.substr(0, dot);
      const std::string param = dot == std::string::npos ? "" : rest.substr(dot + 1);
      if (param == "weight" || param == "bias") {
        for (const LayerRename& r : any4 ? kTransformers4Layer : kTransformers5Layer) {
          if (module != r.hf_module) continue;
          const std::string canonical = "blocks." + std::to_string(layer) + "." + r.canonical_module + "." + param;
          EV_RETURN_IF_ERROR(r.qkv_part < 0 ? add(canonical, 0, 1, t)
                                            : add(canonical, static_cast<size_t>(r.qkv_part), 3, t));
          mapped = true;
        }
      }
    }
    if (!mapped) unmapped_.push_back(t.name);
  }
  return Status::Ok();
}

Status WeightSource::finish() {
  for (auto it = tensors_.begin(); it != tensors_.end();) {
    Canonical& c = it->second;
    std::vector<std::string> present, absent;
    static const char* const kPartNames[] = {"q", "k", "v"};
    for (size_t i = 0; i < c.parts.size(); ++i)
      (c.parts[i] ? present : absent).push_back(c.parts.size() == 3 ? kPartNames[i] : "");
    std::string problem;
    if (!absent.empty()) {
      problem = it->first + ": checkpoint has the " + list_names(present, 3) + " part(s) but not " +
                list_names(absent, 3);
    } else {
      c.shape = c.parts[0]->shape;
      for (size_t i = 1; i < c.parts.size() && problem.empty(); ++i) {
        const auto& s = c.parts[i]->shape;
        if (s.empty() || c.shape.empty() || s.size() != c.shape.size() ||
            !std::equal(s.begin() + 1, s.end(), c.shape.begin() + 1))
          problem = it->first + ": parts " + c.part_names[0] + " " + shape_string(c.parts[0]->shape) + " and " +
                    c.part_names[i] + " " + shape_string(s) + " cannot be concatenated along dim 0";
        else
          c.shape[0] += s[0];
      }
      c.numel = 0;
      for (const TensorInfo* p : c.parts) c.numel += p->numel;
    }
    if (!problem.empty()) {
      for (const std::string& n : c.part_names)
        if (!n.empty()) unmapped_.push_back(n);
      incomplete_.push_back(problem);
      it = tensors_.erase(it);
    } else {
      ++it;
    }
  }
  std::sort(unmapped_.begin(), unmapped_.end());
  return Status::Ok();
}

std::vector<std::string> WeightSource::canonical_names() const {
  std::vector<std::string> names;
  for (const auto& kv : tensors_) names.push_back(kv.first);
  return names;
}

Result<std::vector<int64_t>> WeightSource::shape(const std::string& canonical) const {
  auto it = tensors_.find(canonical);
  if (it == tensors_.end()) return not_found(file_.path() + ": tensor '" + canonical + "' is not in the checkpoint");
  return it->second.shape;
}

Status WeightSource::check(const VitArch& arch) const {
  const std::vector<std::string> expected = expected_names(arch);
  const std::set<std::string> expected_set(expected.begin(), expected.end());
  std::vector<std::string> missing, extra, mismatched;
  for (const std::string& name : expected) {
    auto it = tensors_.find(name);
    if (it == tensors_.end()) {
      missing.push_back(name);
      continue;
    }
    const std::vector<int64_t> want = expected_shape(arch, name);
    if (it->second.shape != want)
      mismatched.push_back(name + ": expected " + shape_string(want) + ", checkpoint has " +
                           shape_string(it->second.shape));
  }
  for (const auto& kv : tensors_) {
    if (expected_set.count(kv.first)) continue;
    std::string label = kv.first;
    if (naming_ == WeightNaming::kHf) label += " (from " + list_names(kv.second.part_names, 3) + ")";
    extra.push_back(label);
  }
  for (const std::string& n : unmapped_) extra.push_back(n + " (no timm counterpart)");
  if (missing.empty() && extra.empty() && mismatched.empty() && incomplete_.empty()) return Status::Ok();

  std::string msg = file_.path() + ": checkpoint does not match the model";
  if (!missing.empty())
    msg += "; missing " + std::to_string(missing.size()) + " tensor(s): " + list_names(missing, kMaxListed);
  if (!extra.empty())
    msg += "; unexpected " + std::to_string(extra.size()) + " tensor(s): " + list_names(extra, kMaxListed);
  if (!mismatched.empty())
    msg += "; " + std::to_string(mismatched.size()) + " shape mismatch(es): " + list_names(mismatched, kMaxListed);
  if (!incomplete_.empty()) msg += "; " + list_names(incomplete_, kMaxListed);
  return checkpoint_error(msg);
}

Result<const WeightSource::Canonical*> WeightSource::lookup(const std::string& canonical, size_t count) const {
  auto it = tensors_.find(canonical);
  if (it == tensors_.end()) return not_found(file_.path() + ": tensor '" + canonical + "' is not in the checkpoint");
  if (static_cast<int64_t>(count) != it->second.numel)
    return invalid_argument(file_.path() + ": tensor '" + canonical + "' " + shape_string(it->second.shape) + " has " +
                            std::to_string(it->second.numel) + " elements, destination holds " +
                            std::to_string(count));
  return &it->second;
}

Status WeightSource::read_f32(const std::string& canonical, float* dst, size_t count) const {
  EV_ASSIGN_OR_RETURN(const Canonical* c, lookup(canonical, count));
  for (const TensorInfo* part : c->parts) {
    convert_to_f32(*part, file_.data(*part), dst);
    dst += part->numel;
  }
  return Status::Ok();
}

Status WeightSource::read_f16(const std::string& canonical, uint16_t* dst, size_t count) const {
  EV_ASSIGN_OR_RETURN(const Canonical* c, lookup(canonical, count));
  for (const TensorInfo* part : c->parts) {
    convert_to_f16(*part, file_.data(*part), dst);
    dst += part->numel;
  }
  return Status::Ok();
}

}  // namespace edgevit
