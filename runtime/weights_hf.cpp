// Hugging Face tensor names -> edgevit's canonical (timm) names: the families (ViT, DeiT, DINOv2 with and
// without registers, CLIP vision towers, SigLIP), their base-model prefixes and layer names, transformers 4.x
// and 5.x conventions (WeightSource::build_hf), and the timm naming check (WeightSource::build_timm).
#include <iterator>

#include "runtime/weights.h"
#include "runtime/weights_util.h"

namespace edgevit {

using namespace weights_detail;

namespace {

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

// DINOv2 (transformers 4.x layer names under "encoder.layer.N."; LayerScale's lambda1 is its gamma).
constexpr LayerRename kDinov2Layer[] = {
    {"norm1", "norm1", -1},
    {"attention.attention.query", "attn.qkv", 0},
    {"attention.attention.key", "attn.qkv", 1},
    {"attention.attention.value", "attn.qkv", 2},
    {"attention.output.dense", "attn.proj", -1},
    {"norm2", "norm2", -1},
    {"mlp.fc1", "mlp.fc1", -1},
    {"mlp.fc2", "mlp.fc2", -1},
};
// CLIP vision tower (CLIPVisionModel[WithProjection], or vision_model.* of a full CLIPModel).
constexpr LayerRename kClipLayer[] = {
    {"layer_norm1", "norm1", -1},
    {"self_attn.q_proj", "attn.qkv", 0},
    {"self_attn.k_proj", "attn.qkv", 1},
    {"self_attn.v_proj", "attn.qkv", 2},
    {"self_attn.out_proj", "attn.proj", -1},
    {"layer_norm2", "norm2", -1},
    {"mlp.fc1", "mlp.fc1", -1},
    {"mlp.fc2", "mlp.fc2", -1},
};
const std::pair<const char*, const char*> kDinov2LayerScale[] = {{"layer_scale1.lambda1", "ls1.gamma"},
                                                                 {"layer_scale2.lambda1", "ls2.gamma"}};

// A Hugging Face model family: the prefix of its base model's tensors ("vit." inside
// ViTForImageClassification, "" in a saved ViTModel / Dinov2Model), its layer names, and its whole-model
// names (relative to the prefix, except those marked absolute: the classifiers sit outside the base model).
struct HfName {
  const char* hf;
  const char* canonical;  // nullptr: a tensor inference never uses (DINOv2's mask_token), accepted and skipped
  bool absolute;          // hf is not under the base model's prefix
};
struct HfFamily {
  const char* name;  // for messages: "ViT", "DeiT", "DINOv2"
  std::vector<const char*> prefixes;
  bool has_v5;  // has a transformers 5.x layer naming (`<prefix>layers.N.`)
  const LayerRename* layer4;
  size_t layer4_count;
  std::vector<HfName> shared;
  const char* layers4 = "encoder.layer.";  // after the prefix: transformers 4.x layer names
  const char* required = nullptr;          // a tensor (after the prefix) the family must have
  // Tensors of a full checkpoint that the vision tower does not use (CLIPModel's text tower), skipped.
  std::vector<const char*> skipped_prefixes = {};
};

// ViT's whole-model names (ViTForImageClassification under "vit.", a saved ViTModel without a prefix).
std::vector<HfName> vit_shared() {
  return {{"embeddings.cls_token", "cls_token", false},
          {"embeddings.position_embeddings", "pos_embed", false},
          {"embeddings.patch_embeddings.projection.weight", "patch_embed.proj.weight", false},
          {"embeddings.patch_embeddings.projection.bias", "patch_embed.proj.bias", false},
          {"layernorm.weight", "norm.weight", false},
          {"layernorm.bias", "norm.bias", false},
          {"pooler.dense.weight", "pooler.dense.weight", false},  // ViTModel's pooler (arch.pooler)
          {"pooler.dense.bias", "pooler.dense.bias", false},
          {"classifier.weight", "head.weight", true},
          {"classifier.bias", "head.bias", true}};
}

const std::vector<HfFamily>& hf_families() {
  static const std::vector<HfFamily> families = {
      {"ViT", {"vit."}, true, kTransformers4Layer, std::size(kTransformers4Layer), vit_shared()},
      {"DeiT", {"deit."}, true, kTransformers4Layer, std::size(kTransformers4Layer),
       {{"embeddings.cls_token", "cls_token", false},
        {"embeddings.distillation_token", "dist_token", false},
        {"embeddings.position_embeddings", "pos_embed", false},
        {"embeddings.patch_embeddings.projection.weight", "patch_embed.proj.weight", false},
        {"embeddings.patch_embeddings.projection.bias", "patch_embed.proj.bias", false},
        {"layernorm.weight", "norm.weight", false},
        {"layernorm.bias", "norm.bias", false},
        {"classifier.weight", "head.weight", true},  // DeiTForImageClassification (no distillation head)
        {"classifier.bias", "head.bias", true},
        {"cls_classifier.weight", "head.weight", true},  // ...WithTeacher
        {"cls_classifier.bias", "head.bias", true},
        {"distillation_classifier.weight", "head_dist.weight", true},
        {"distillation_classifier.bias", "head_dist.bias", true}}},
      {"CLIP", {"vision_model."}, false, kClipLayer, std::size(kClipLayer),
       {{"embeddings.class_embedding", "cls_token", false},
        {"embeddings.position_embedding.weight", "pos_embed", false},
        {"embeddings.patch_embedding.weight", "patch_embed.proj.weight", false},
        {"pre_layrnorm.weight", "norm_pre.weight", false},  // sic
        {"pre_layrnorm.bias", "norm_pre.bias", false},
        {"post_layernorm.weight", "norm.weight", false},
        {"post_layernorm.bias", "norm.bias", false},
        {"visual_projection.weight", "head.weight", true}},
       "encoder.layers.",
       "embeddings.class_embedding",
       {"text_model.", "text_projection.", "logit_scale", "vision_model.embeddings.position_ids"}},
      {"SigLIP", {"vision_model.", ""}, false, kClipLayer, std::size(kClipLayer),
       {{"embeddings.position_embedding.weight", "pos_embed", false},
        {"embeddings.patch_embedding.weight", "patch_embed.proj.weight", false},
        {"embeddings.patch_embedding.bias", "patch_embed.proj.bias", false},
        {"post_layernorm.weight", "norm.weight", false},
        {"post_layernorm.bias", "norm.bias", false},
        {"head.probe", "attn_pool.latent", false},
        {"head.attention.in_proj_weight", "hf.attn_pool.in_proj.weight", false},
        {"head.attention.in_proj_bias", "hf.attn_pool.in_proj.bias", false},
        {"head.attention.out_proj.weight", "attn_pool.proj.weight", false},
        {"head.attention.out_proj.bias", "attn_pool.proj.bias", false},
        {"head.layernorm.weight", "attn_pool.norm.weight", false},
        {"head.layernorm.bias", "attn_pool.norm.bias", false},
        {"head.mlp.fc1.weight", "attn_pool.mlp.fc1.weight", false},
        {"head.mlp.fc1.bias", "attn_pool.mlp.fc1.bias", false},
        {"head.mlp.fc2.weight", "attn_pool.mlp.fc2.weight", false},
        {"head.mlp.fc2.bias", "attn_pool.mlp.fc2.bias", false}},
       "encoder.layers.",
       nullptr,
       {"text_model.", "logit_scale", "logit_bias", "vision_model.embeddings.position_ids"}},
      // A saved ViTModel (no prefix; its pooler, when it has one, is arch.pooler): told from a bare Dinov2Model,
      // whose layers have the same prefix, by ViT's layer names.
      {"ViT", {""}, false, kTransformers4Layer, std::size(kTransformers4Layer), vit_shared(), "encoder.layer.",
       "encoder.layer.0.layernorm_before.weight"},
      {"DINOv2", {"dinov2.", ""}, false, kDinov2Layer, std::size(kDinov2Layer),
       {{"embeddings.cls_token", "cls_token", false},
        {"embeddings.mask_token", nullptr, false},
        {"embeddings.register_tokens", "reg_token", false},
        {"embeddings.position_embeddings", "pos_embed", false},
        {"embeddings.patch_embeddings.projection.weight", "patch_embed.proj.weight", false},
        {"embeddings.patch_embeddings.projection.bias", "patch_embed.proj.bias", false},
        {"layernorm.weight", "norm.weight", false},
        {"layernorm.bias", "norm.bias", false},
        {"classifier.weight", "hf.classifier_cls_mean.weight", true},  // (C, 2E): folded, see add_folds
        {"classifier.bias", "head.bias", true}}},
  };
  return families;
}

}  // namespace

// A timm checkpoint maps name for name; one that carries a Hugging Face family's layer names instead says so.
Status WeightSource::build_timm() {
  bool any_timm = false;
  std::string hf_family;
  for (const TensorInfo& t : file_.tensors()) {
    any_timm = any_timm || starts_with(t.name, "blocks.");
    for (const HfFamily& f : hf_families())
      for (const char* prefix : f.prefixes)
        if (hf_family.empty() && (starts_with(t.name, std::string(prefix) + f.layers4) ||
                                  (f.has_v5 && starts_with(t.name, std::string(prefix) + "layers."))))
          hf_family = std::string(f.name) + ", " + (*prefix ? prefix : "") + "*";
    EV_RETURN_IF_ERROR(add(t.name, 0, 1, t));
  }
  if (!hf_family.empty() && !any_timm)
    return checkpoint_error(file_.path() + ": tensor names follow Hugging Face naming (" + hf_family +
                            "), not timm; set weights_naming: hf");
  return Status::Ok();
}

namespace {

// The family and base-model prefix whose layer names the file uses (family == nullptr: none).
struct HfMatch {
  const HfFamily* family = nullptr;
  std::string prefix;
  bool any4 = false, any5 = false;  // transformers 4.x / 5.x layer names present
};

HfMatch find_hf_family(const SafetensorsFile& file) {
  HfMatch m;
  for (const HfFamily& f : hf_families()) {
    for (const char* p : f.prefixes) {
      bool f4 = false, f5 = false, has_required = f.required == nullptr;
      for (const TensorInfo& t : file.tensors()) {
        has_required = has_required || t.name == std::string(p) + f.required;
        f4 = f4 || starts_with(t.name, std::string(p) + f.layers4);
        f5 = f5 || (f.has_v5 && starts_with(t.name, std::string(p) + "layers."));
      }
      if ((f4 || f5) && has_required && m.family == nullptr) m = HfMatch{&f, p, f4, f5};
    }
  }
  return m;
}

// One canonical destination of a source tensor: name, and its part of a packed tensor (q/k/v).
struct Dest {
  std::string canonical;
  size_t part = 0, parts = 1;
};

// The canonical names of layer tensor `rest` ("attention.query.weight", after "<layers>N.") of block `block`.
std::vector<Dest> layer_dests(const std::string& rest, const std::string& block, const LayerRename* renames,
                              size_t rename_count, bool dinov2) {
  std::vector<Dest> out;
  if (dinov2)
    for (const auto& [hf, canonical] : kDinov2LayerScale)
      if (rest == hf) out.push_back({block + canonical, 0, 1});
  const size_t dot = rest.rfind('.');
  const std::string module = dot == std::string::npos ? "" : rest.substr(0, dot);
  const std::string param = dot == std::string::npos ? "" : rest.substr(dot + 1);
  if (param != "weight" && param != "bias") return out;
  for (size_t i = 0; i < rename_count; ++i) {
    const LayerRename& r = renames[i];
    if (module != r.hf_module) continue;
    const std::string canonical = block + r.canonical_module + "." + param;
    out.push_back(r.qkv_part < 0 ? Dest{canonical, 0, 1} : Dest{canonical, static_cast<size_t>(r.qkv_part), 3});
  }
  return out;
}

}  // namespace

Status WeightSource::build_hf() {
  const HfMatch m = find_hf_family(file_);
  const HfFamily* family = m.family;
  const std::string& prefix = m.prefix;
  bool any_timm = false;
  for (const TensorInfo& t : file_.tensors()) any_timm = any_timm || starts_with(t.name, "blocks.");
  const std::string prefix4 = prefix + (family ? family->layers4 : ""), prefix5 = prefix + "layers.";
  if (m.any4 && m.any5)
    return checkpoint_error(file_.path() + ": mixes transformers 4.x (" + prefix4 + "N.*) and 5.x (" + prefix5 +
                            "N.*) Hugging Face " + family->name + " names");
  if (family == nullptr) {
    if (any_timm)
      return checkpoint_error(file_.path() + ": tensor names follow timm naming (blocks.N.*), not Hugging Face; "
                              "set weights_naming: timm");
    return checkpoint_error(file_.path() + ": not a Hugging Face ViT checkpoint: no tensor named " +
                            kHfLayerPrefix4 + "N.* (transformers 4.x) or " + kHfLayerPrefix5 +
                            "N.* (transformers 5.x), nor DeiT (deit.encoder.layer.N.*), DINOv2 "
                            "([dinov2.]encoder.layer.N.*) or CLIP (vision_model.encoder.layers.N.*) names");
  }
  hf_convention_ = m.any4 ? HfConvention::kTransformers4 : HfConvention::kTransformers5;
  const std::string layer_prefix = m.any4 ? prefix4 : prefix5;
  const LayerRename* renames = m.any4 ? family->layer4 : kTransformers5Layer;
  const size_t rename_count = m.any4 ? family->layer4_count : std::size(kTransformers5Layer);
  const bool dinov2 = std::string(family->name) == "DINOv2";
  bool registers = false;
  for (const TensorInfo& t : file_.tensors()) registers = registers || t.name == prefix + "embeddings.register_tokens";

  for (const TensorInfo& t : file_.tensors()) {
    bool mapped = false;
    for (const char* skip : family->skipped_prefixes) {
      if (!starts_with(t.name, skip)) continue;
      ignored_.push_back(t.name);
      mapped = true;
    }
    for (const HfName& n : family->shared) {
      if (t.name != (n.absolute ? std::string() : prefix) + n.hf) continue;
      mapped = true;
      if (n.canonical == nullptr) {
        ignored_.push_back(t.name);
        continue;
      }
      std::string canonical = n.canonical;
      if (registers && canonical == "cls_token") canonical = kHfClsWithPos;
      if (registers && canonical == "pos_embed") canonical = kHfPosWithCls;
      EV_RETURN_IF_ERROR(add(canonical, 0, 1, t));
    }
    int layer = 0;
    std::string rest;
    if (starts_with(t.name, layer_prefix) && split_layer_index(t.name.substr(layer_prefix.size()), &layer, &rest)) {
      for (const Dest& d : layer_dests(rest, "blocks." + std::to_string(layer) + ".", renames, rename_count, dinov2)) {
        EV_RETURN_IF_ERROR(add(d.canonical, d.part, d.parts, t));
        mapped = true;
      }
    }
    if (!mapped) unmapped_.push_back(t.name);
  }
  return Status::Ok();
}

}  // namespace edgevit
