#include "runtime/importer.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <utility>

#include <nlohmann/json.hpp>

#include "runtime/config.h"
#include "runtime/preprocess_config.h"
#include "runtime/timm_head.h"
#include "runtime/weights.h"

namespace edgevit {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr double kTimmLayerNormEps = 1e-6;
constexpr int64_t kMaxDim = 1 << 24;  // far above any ViT dimension; keeps int arithmetic safe

std::string absolute_path(const std::string& path) {
  std::error_code ec;
  fs::path p = fs::absolute(path, ec);
  if (ec) return path;
  p = p.lexically_normal();
  if (!p.has_filename()) p = p.parent_path();  // "dir/" and "." name the directory itself
  return p.string();
}

// Integer square root when n is a positive perfect square, else 0.
int64_t exact_sqrt(int64_t n) {
  if (n <= 0) return 0;
  int64_t r = static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(n))));
  return r * r == n ? r : 0;
}

// The smallest double r with int(embed * r) == hidden (VitArch::mlp_hidden), or an error.
Result<double> mlp_ratio_for(int embed, int64_t hidden, const std::string& where) {
  double r = static_cast<double>(hidden) / embed;
  for (int i = 0; i < 4 && static_cast<int64_t>(embed * r) != hidden; ++i) r = std::nextafter(r, INFINITY);
  if (static_cast<int64_t>(embed * r) != hidden)
    return checkpoint_error(where + ": MLP width " + std::to_string(hidden) + " is not expressible as " +
                            std::to_string(embed) + " x mlp_ratio");
  return r;
}

Result<std::vector<int64_t>> need_shape(const WeightSource& w, const std::string& name, size_t rank) {
  auto shape = w.shape(name);
  if (!shape.ok())
    return checkpoint_error(w.file().path() + ": cannot infer the architecture: tensor '" + name + "' is missing");
  if (shape->size() != rank)
    return checkpoint_error(w.file().path() + ": tensor '" + name + "' has rank " + std::to_string(shape->size()) +
                            ", expected " + std::to_string(rank));
  for (int64_t d : *shape)
    if (d <= 0 || d > kMaxDim)
      return checkpoint_error(w.file().path() + ": tensor '" + name + "' has an implausible dimension " +
                              std::to_string(d));
  return shape;
}

// --image-size: the user's input size (height, width); the checkpoint's position embeddings are resampled to
// its grid.
Status apply_image_size(const ImportOptions& options, ModelSpec& spec, WeightSource& weights) {
  if (!options.image_size) return Status::Ok();
  const auto [h, w] = *options.image_size;
  const std::string given = "--image-size " + std::to_string(h) + (h == w ? "" : "x" + std::to_string(w));
  const int p = spec.arch.patch_size;
  for (const auto& [side, value] : {std::make_pair("height", h), std::make_pair("width", w)}) {
    if (value > 0 && value % p == 0) continue;
    return invalid_argument(given + ": " + (h == w ? std::string("the size ") : std::string(side) + " ") +
                            std::to_string(value) + " is not a positive multiple of the patch size " +
                            std::to_string(p));
  }
  spec.arch.img_h = h;
  spec.arch.img_w = w;
  return weights.fit_pos_embed(spec.arch);
}

Status finish_spec(ModelSpec& spec, WeightSource& weights, const ImportOptions& options) {
  EV_RETURN_IF_ERROR(apply_image_size(options, spec, weights));
  EV_RETURN_IF_ERROR(weights.check(spec.arch));
  EV_RETURN_IF_ERROR(read_checkpoint_preprocess(&spec));  // runtime/preprocess_config.h
  return validate_model_spec(spec, spec.weights_path);
}

// Default normalization for non-RGB inputs: one value per channel, the average of the RGB defaults (edit
// the YAML if the model was trained with other statistics).
void fit_default_normalization(Preprocess* pre, int in_chans) {
  for (std::vector<double>* v : {&pre->mean, &pre->std}) {
    if (static_cast<int>(v->size()) == in_chans) continue;
    double sum = 0;
    for (double x : *v) sum += x;
    v->assign(static_cast<size_t>(in_chans), sum / static_cast<double>(v->size()));
  }
}

// ---- config.json -----------------------------------------------------------------------------------------

Result<json> read_json_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return not_found(path + ": cannot open");
  std::stringstream text;
  text << in.rdbuf();
  try {
    json j = json::parse(text.str());
    if (!j.is_object()) return config_error(path + ": expected a JSON object");
    return j;
  } catch (const json::exception& e) {
    return config_error(path + ": not valid JSON: " + e.what());
  }
}

Result<int> positive_int(const json& cfg, const std::string& file, const char* key, int fallback) {
  if (!cfg.contains(key)) return fallback;
  const json& v = cfg[key];
  if (!v.is_number_unsigned() || v.get<uint64_t>() == 0 || v.get<uint64_t>() > static_cast<uint64_t>(kMaxDim))
    return config_error(file + ": key '" + key + "': expected a positive integer, got " + v.dump());
  return static_cast<int>(v.get<uint64_t>());
}

// One side of config.json's image_size or patch_size: a positive integer.
Result<int> size_side(const json& v, const std::string& file, const std::string& key, const char* side) {
  if (!v.is_number_unsigned() || v.get<uint64_t>() == 0 || v.get<uint64_t>() > static_cast<uint64_t>(kMaxDim))
    return config_error(file + ": key '" + key + "': " + side + " must be a positive integer, got " + v.dump());
  return static_cast<int>(v.get<uint64_t>());
}

// image_size / patch_size as ViTConfig, Dinov2Config, CLIPVisionConfig and SiglipVisionConfig take them: an int
// (a square) or [height, width] (a list of two positive integers). `key` names it in messages (with
// "vision_config." inside a full CLIP / SigLIP config).
Result<std::pair<int, int>> hf_size(const json& cfg, const std::string& file, const char* name, const std::string& key,
                                    int fallback) {
  if (!cfg.contains(name)) return std::make_pair(fallback, fallback);
  const json& v = cfg[name];
  if (v.is_array()) {
    if (v.size() != 2)
      return config_error(file + ": key '" + key + "': expected an integer or [height, width], got a list of " +
                          std::to_string(v.size()) + " entries: " + v.dump());
    EV_ASSIGN_OR_RETURN(const int h, size_side(v[0], file, key, "height"));
    EV_ASSIGN_OR_RETURN(const int w, size_side(v[1], file, key, "width"));
    return std::make_pair(h, w);
  }
  if (!v.is_number_unsigned() || v.get<uint64_t>() == 0 || v.get<uint64_t>() > static_cast<uint64_t>(kMaxDim))
    return config_error(file + ": key '" + key + "': expected a positive integer or [height, width], got " + v.dump());
  const int side = static_cast<int>(v.get<uint64_t>());
  return std::make_pair(side, side);
}

// The checkpoint's input size (img_h, img_w) and patch from config.json; a non-square size also records the
// position table's grid (VitArch::pos_grid_h/w), which its length alone cannot tell.
Status hf_image_geometry(const json& cfg, const std::string& file, const std::string& keys, int default_patch,
                         VitArch* a) {
  EV_ASSIGN_OR_RETURN(const auto patch, hf_size(cfg, file, "patch_size", keys + "patch_size", default_patch));
  if (patch.first != patch.second)
    return unsupported(file + ": key '" + keys + "patch_size': non-square patches " + cfg["patch_size"].dump() +
                       " are not supported");
  a->patch_size = patch.first;
  EV_ASSIGN_OR_RETURN(const auto size, hf_size(cfg, file, "image_size", keys + "image_size", 224));
  for (const auto& [side, value] : {std::make_pair("height", size.first), std::make_pair("width", size.second)}) {
    if (value % a->patch_size == 0) continue;
    return config_error(file + ": key '" + keys + "image_size': " +
                        (size.first == size.second ? std::string("size ") : std::string(side) + " ") +
                        std::to_string(value) + " is not a multiple of patch_size " + std::to_string(a->patch_size));
  }
  a->img_h = size.first;  // the checkpoint's size; import --image-size HxW sets another
  a->img_w = size.second;
  if (!a->square()) {
    a->pos_grid_h = a->grid_h();
    a->pos_grid_w = a->grid_w();
  }
  return Status::Ok();
}

// The transformer blocks present (the N of blocks.N.* tensor names), in ascending order.
Result<std::set<int>> timm_block_indices(const WeightSource& w, const std::string& path) {
  std::set<int> blocks;
  for (const std::string& name : w.canonical_names()) {
    if (name.compare(0, 7, "blocks.") != 0) continue;
    const size_t dot = name.find('.', 7);
    const std::string index = name.substr(7, dot == std::string::npos ? std::string::npos : dot - 7);
    if (index.empty() || index.size() > 6 || index.find_first_not_of("0123456789") != std::string::npos) continue;
    blocks.insert(std::stoi(index));
  }
  if (blocks.empty()) return checkpoint_error(path + ": cannot infer the architecture: no blocks.N.* tensors");
  return blocks;
}

// The prefix tokens (class, register) and, from pos_embed's length, the patch grid and whether the prefix
// tokens have position embeddings; a->patch_size must be set.
Status infer_timm_tokens(const WeightSource& w, const std::string& path, VitArch* a) {
  a->class_token = w.has("cls_token");
  a->dist_token = w.has("dist_token");  // DeiT distilled (VisionTransformerDistilled)
  if (w.has("reg_token")) {
    EV_ASSIGN_OR_RETURN(auto reg, need_shape(w, "reg_token", 3));
    a->reg_tokens = static_cast<int>(reg[1]);
  } else {
    a->reg_tokens = 0;
  }
  EV_ASSIGN_OR_RETURN(auto pos, need_shape(w, "pos_embed", 3));
  const int64_t prefix = a->num_prefix_tokens();
  const int64_t grid_with_prefix = exact_sqrt(pos[1] - prefix);  // pos_embed covers the prefix tokens
  const int64_t grid_patches_only = prefix > 0 ? exact_sqrt(pos[1]) : 0;  // timm no_embed_class
  if (grid_with_prefix && grid_patches_only)
    return checkpoint_error(path + ": pos_embed length " + std::to_string(pos[1]) + " fits both a " +
                            std::to_string(grid_with_prefix) + "x" + std::to_string(grid_with_prefix) +
                            " grid plus " + std::to_string(prefix) + " prefix tokens and a " +
                            std::to_string(grid_patches_only) + "x" + std::to_string(grid_patches_only) +
                            " grid alone (no_embed_class); write the config by hand");
  if (!grid_with_prefix && !grid_patches_only)
    return checkpoint_error(path + ": pos_embed length " + std::to_string(pos[1]) + " is not a square patch grid " +
                            (prefix ? "with or without " + std::to_string(prefix) + " prefix token(s)" : ""));
  a->no_embed_class = grid_with_prefix == 0;
  a->img_h = a->img_w = static_cast<int>((grid_with_prefix ? grid_with_prefix : grid_patches_only) * a->patch_size);
  return Status::Ok();
}

// Checkpoints of ViT families edgevit does not run yet, recognised by tensors only they have: the error names
// what is missing (docs/models.md lists the families).
Status reject_unsupported_family(const WeightSource& w, const std::string& path) {
  struct Marker {
    const char* fragment;  // part of a canonical tensor name
    const char* what;
  };
  static const Marker kMarkers[] = {
      {"mlp.fc1_g.", "the SwiGLU MLP (fc1_g / fc1_x)"},
      {"mlp.w12.", "the SwiGLU MLP (w12 / w3)"},
      {"mlp.weights_in.", "the SwiGLU MLP (DINOv2 use_swiglu_ffn)"},
      {"rope", "rotary position embeddings (EVA / RoPE ViTs)"},
      {"attn.q_proj.", "separate q/k/v projections with q/v-only bias (EVA / BEiT)"},
      {"gamma_1", "BEiT/EVA-style layer scale (gamma_1 / gamma_2)"},
      {"relative_position", "relative position bias (BEiT)"},
      {"mlp.norm.", "a LayerNorm inside the MLP (EVA-02 / scale_mlp_norm)"},
      {"attn.norm.", "a LayerNorm after attention (scale_attn_norm)"},
  };
  for (const std::string& name : w.canonical_names())
    for (const Marker& m : kMarkers)
      if (name.find(m.fragment) != std::string::npos)
        return unsupported(path + ": tensor '" + name + "': " + m.what +
                           " is not supported yet (docs/models.md lists the ViT families edgevit runs)");
  for (const std::string& name : w.unmapped())
    for (const Marker& m : kMarkers)
      if (name.find(m.fragment) != std::string::npos)
        return unsupported(path + ": tensor '" + name + "': " + m.what +
                           " is not supported yet (docs/models.md lists the ViT families edgevit runs)");
  return Status::Ok();
}

// The architecture fields the checkpoint cannot tell, from the command line or timm's defaults.
Status apply_timm_options(const ImportOptions& options, const std::string& path, VitArch* a) {
  if (!options.heads)
    return invalid_argument(path + ": num_heads cannot be inferred from a timm checkpoint; pass --heads N");
  if (*options.heads <= 0 || a->embed_dim % *options.heads != 0)
    return invalid_argument(path + ": --heads " + std::to_string(*options.heads) + " does not divide embed_dim " +
                            std::to_string(a->embed_dim));
  a->num_heads = *options.heads;
  // timm's defaults: fc_norm exists only with average-style pooling; 'token' needs a class token.
  a->global_pool = options.pool ? *options.pool
                                : (a->class_token && !a->fc_norm ? GlobalPool::kToken : GlobalPool::kAvg);
  if (a->global_pool == GlobalPool::kToken && !a->class_token)
    return invalid_argument(path + ": --pool token needs a class token and this checkpoint has no cls_token");
  a->layer_norm_eps = options.eps ? *options.eps : kTimmLayerNormEps;
  if (!(a->layer_norm_eps > 0)) return invalid_argument(path + ": --eps must be positive");
  if (options.act) a->act = *options.act;
  return Status::Ok();
}

}  // namespace

Result<ModelSpec> infer_model_spec_timm(const std::string& checkpoint, const ImportOptions& options) {
  EV_ASSIGN_OR_RETURN(WeightSource w, WeightSource::open(checkpoint, WeightNaming::kTimm));
  const std::string& path = w.file().path();
  EV_RETURN_IF_ERROR(reject_unsupported_family(w, path));
  VitArch a;

  EV_ASSIGN_OR_RETURN(auto patch, need_shape(w, "patch_embed.proj.weight", 4));
  if (patch[2] != patch[3])
    return unsupported(path + ": patch_embed.proj.weight " + std::to_string(patch[2]) + "x" +
                       std::to_string(patch[3]) + ": only square patches are supported");
  a.embed_dim = static_cast<int>(patch[0]);
  a.in_chans = static_cast<int>(patch[1]);
  a.patch_size = static_cast<int>(patch[2]);

  EV_ASSIGN_OR_RETURN(const std::set<int> blocks, timm_block_indices(w, path));
  a.depth = *blocks.rbegin() + 1;  // gaps are reported as missing tensors by check()
  const std::string first_block = "blocks." + std::to_string(*blocks.begin()) + ".";

  EV_RETURN_IF_ERROR(infer_timm_tokens(w, path, &a));

  a.qkv_bias = w.has(first_block + "attn.qkv.bias");
  a.fc_norm = w.has("fc_norm.weight") || w.has("fc_norm.bias");
  a.layer_scale = w.has(first_block + "ls1.gamma");  // timm init_values (DINOv2)
  a.pre_norm = w.has("norm_pre.weight");              // CLIP
  a.qk_norm = w.has(first_block + "attn.q_norm.weight");
  a.patch_bias = w.has("patch_embed.proj.bias");
  if (w.has("head.weight")) {
    EV_ASSIGN_OR_RETURN(auto head, need_shape(w, "head.weight", 2));
    a.num_classes = static_cast<int>(head[0]);
    a.head_bias = w.has("head.bias");
  } else {
    a.num_classes = 0;
  }
  EV_ASSIGN_OR_RETURN(auto fc1, need_shape(w, first_block + "mlp.fc1.weight", 2));
  EV_ASSIGN_OR_RETURN(a.mlp_ratio, mlp_ratio_for(a.embed_dim, fc1[0], path));

  EV_RETURN_IF_ERROR(apply_timm_options(options, path, &a));
  if (!options.pool && w.has("attn_pool.latent")) a.global_pool = GlobalPool::kMap;  // timm global_pool='map'
  EV_ASSIGN_OR_RETURN(const TimmHead head, detect_timm_head(w, checkpoint, a));  // a CLIP tower's projection?
  a.projection_head = head.projection;

  ModelSpec spec;
  spec.name = fs::path(checkpoint).stem().string();
  spec.weights_path = absolute_path(checkpoint);
  spec.weights_naming = WeightNaming::kTimm;
  spec.arch = a;
  spec.head_note = head.note;
  fit_default_normalization(&spec.preprocess, a.in_chans);
  EV_RETURN_IF_ERROR(finish_spec(spec, w, options));
  return spec;
}

namespace {

// The family's flags, from model_type (docs/models.md).
struct HfKind {
  std::string model_type;
  bool dinov2 = false, clip = false, siglip = false;
  std::string keys;  // where the architecture keys sit, for messages: "" or "vision_config."
};

// config.json's hidden_act (the family's default when absent) as an Activation.
Status hf_activation(const json& cfg, const std::string& config_path, const HfKind& k, VitArch* out) {
  VitArch& a = *out;
  const std::string act = cfg.contains("hidden_act") && cfg["hidden_act"].is_string()
                              ? cfg["hidden_act"].get<std::string>()
                              : (cfg.contains("hidden_act") ? cfg["hidden_act"].dump()
                                 : k.clip                     ? "quick_gelu"
                                 : k.siglip                   ? "gelu_pytorch_tanh"
                                                              : "gelu");
  if (act == "gelu") {
    a.act = Activation::kGelu;
  } else if (act == "quick_gelu") {
    a.act = Activation::kQuickGelu;
  } else if (act == "gelu_pytorch_tanh" || act == "gelu_new") {
    a.act = Activation::kGeluTanh;
  } else {
    return unsupported(config_path + ": key 'hidden_act': '" + act +
                       "' is not supported (gelu, quick_gelu, gelu_pytorch_tanh, gelu_new)");
  }

  return Status::Ok();
}

// Sizes, LayerNorm eps and the MLP's hidden width, with the family's config-class defaults.
Status hf_dimensions(const json& cfg, const std::string& config_path, const HfKind& k, VitArch* out, int* hidden) {
  VitArch& a = *out;
  const bool dinov2 = k.dinov2, clip = k.clip, siglip = k.siglip;
  // Defaults are the family's config class's (ViTConfig, DeiTConfig, Dinov2Config, CLIPVisionConfig), for keys a
  // config.json may omit.
  EV_ASSIGN_OR_RETURN(a.embed_dim, positive_int(cfg, config_path, "hidden_size", 768));
  EV_ASSIGN_OR_RETURN(a.depth, positive_int(cfg, config_path, "num_hidden_layers", 12));
  EV_ASSIGN_OR_RETURN(a.num_heads, positive_int(cfg, config_path, "num_attention_heads", 12));
  EV_ASSIGN_OR_RETURN(*hidden, positive_int(cfg, config_path, "intermediate_size", 3072));
  if (dinov2) {  // Dinov2Config sizes the MLP by mlp_ratio (intermediate_size is unused)
    if (cfg.contains("mlp_ratio") && !(cfg["mlp_ratio"].is_number() && cfg["mlp_ratio"].get<double>() > 0))
      return config_error(config_path + ": key 'mlp_ratio': expected a positive number");
    const double ratio = cfg.contains("mlp_ratio") ? cfg["mlp_ratio"].get<double>() : 4.0;
    *hidden = static_cast<int>(a.embed_dim * ratio);
  }
  EV_RETURN_IF_ERROR(hf_image_geometry(cfg, config_path, k.keys, clip ? 32 : dinov2 ? 14 : 16, &a));
  EV_ASSIGN_OR_RETURN(a.in_chans, positive_int(cfg, config_path, "num_channels", 3));
  a.qkv_bias = true;
  if (cfg.contains("qkv_bias")) {
    if (!cfg["qkv_bias"].is_boolean()) return config_error(config_path + ": key 'qkv_bias': expected true or false");
    a.qkv_bias = cfg["qkv_bias"].get<bool>();
  }
  a.layer_norm_eps = clip ? 1e-5 : dinov2 || siglip ? 1e-6 : 1e-12;
  if (cfg.contains("layer_norm_eps")) {
    if (!cfg["layer_norm_eps"].is_number() || !(cfg["layer_norm_eps"].get<double>() > 0))
      return config_error(config_path + ": key 'layer_norm_eps': expected a positive number");
    a.layer_norm_eps = cfg["layer_norm_eps"].get<double>();
  }
  return Status::Ok();
}

// Class token, registers, pooling and norms as the family lays them out.
Status hf_layout(const json& cfg, const std::string& config_path, const HfKind& k, VitArch* out) {
  VitArch& a = *out;
  const bool siglip = k.siglip, clip = k.clip;
  const std::string& model_type = k.model_type;
  // HF ViT: class token, position embeddings covering it, CLS pooling, final LayerNorm before the head.
  a.class_token = true;
  a.reg_tokens = 0;
  a.no_embed_class = false;
  a.global_pool = GlobalPool::kToken;
  a.fc_norm = false;
  if (model_type == "dinov2_with_registers") {
    // Registers after the class token without position embeddings: timm's no_embed_class form (the loader
    // folds the class token's position embedding into it: runtime/weights.h).
    EV_ASSIGN_OR_RETURN(a.reg_tokens, positive_int(cfg, config_path, "num_register_tokens", 4));
    a.no_embed_class = true;
  }
  if (siglip) {  // SiglipVisionTransformer: no class token, the MAP head (vision_use_head) on the normed tokens
    a.class_token = false;
    a.global_pool = GlobalPool::kMap;
  }
  if (clip) {  // CLIPVisionTransformer: pre_layrnorm, a bias-free patch embedding and projection
    a.pre_norm = true;
    a.patch_bias = false;
    a.head_bias = false;
  }
  return Status::Ok();
}

// What only the tensors say (distillation token, LayerScale, classifier, MAP head), and the checks against them.
Status hf_from_weights(const WeightSource& w, const json& cfg, const std::string& config_path,
                       const std::string& weights_path, const HfKind& k, VitArch* out) {
  VitArch& a = *out;
  const bool siglip = k.siglip, clip = k.clip;
  a.dist_token = w.has("dist_token");
  if (siglip && !w.has("attn_pool.latent"))
    return unsupported(weights_path + ": a SigLIP vision tower without its MAP head (vision_use_head false) is not "
                       "supported");
  a.layer_scale = w.has("blocks.0.ls1.gamma");
  a.num_classes = 0;
  if (w.shape("head.weight").ok()) {
    EV_ASSIGN_OR_RETURN(auto head, need_shape(w, "head.weight", 2));
    a.num_classes = static_cast<int>(head[0]);
    a.head_mean_tokens = w.shape("head_mean.weight").ok();  // Dinov2ForImageClassification
  }
  a.projection_head = clip && a.num_classes > 0;  // visual_projection: CLIP's image embedding, not a classifier
  a.pooler = w.has("pooler.dense.weight");        // ViTModel's add_pooling_layer (dense + tanh)
  if (a.pooler && cfg.contains("pooler_act") && cfg["pooler_act"] != "tanh")
    return unsupported(config_path + ": key 'pooler_act': " + cfg["pooler_act"].dump() +
                       " is not supported (the pooler runs dense + tanh)");
  if (a.pooler && cfg.contains("pooler_output_size") && cfg["pooler_output_size"] != a.embed_dim)
    return unsupported(config_path + ": key 'pooler_output_size': " + cfg["pooler_output_size"].dump() +
                       " is not supported (the pooler's output is hidden_size wide)");
  if (a.dist_token && a.num_classes > 0 && !w.has("head_dist.weight"))
    return unsupported(weights_path + ": DeiTForImageClassification (the class token's classifier alone, with a "
                       "distillation token) is not supported; DeiTForImageClassificationWithTeacher is");
  if (siglip && a.num_classes > 0)
    return unsupported(weights_path + ": SiglipForImageClassification's classifier (over the mean of the tokens) is "
                       "not supported yet (SiglipVisionModel is)");
  if (!clip && !siglip && cfg.contains("id2label") && cfg["id2label"].is_object() &&
      cfg["id2label"].size() != static_cast<size_t>(a.num_classes))
    return checkpoint_error(config_path + ": id2label has " + std::to_string(cfg["id2label"].size()) +
                            " labels but " + weights_path + " classifies into " + std::to_string(a.num_classes));

  return Status::Ok();
}

}  // namespace

Result<ModelSpec> infer_model_spec_hf(const std::string& dir, const ImportOptions& options) {
  if (options.act)
    return invalid_argument((fs::path(dir) / "config.json").string() +
                            ": --act applies to timm checkpoints; a Hugging Face config.json names hidden_act");
  const std::string config_path = (fs::path(dir) / "config.json").string();
  const std::string weights_path = (fs::path(dir) / "model.safetensors").string();
  EV_ASSIGN_OR_RETURN(json top, read_json_file(config_path));

  // The family (docs/models.md): ViT, DeiT, DINOv2 (with registers), CLIP's vision tower (alone or inside a
  // full CLIP checkpoint, whose architecture keys sit under vision_config).
  const std::string model_type =
      top.contains("model_type") && top["model_type"].is_string() ? top["model_type"].get<std::string>() : "vit";
  static const std::set<std::string> kTypes = {"vit",  "deit", "dinov2", "dinov2_with_registers", "clip_vision_model",
                                               "clip", "siglip_vision_model", "siglip"};
  if (!kTypes.count(model_type))
    return unsupported(config_path + ": key 'model_type': \"" + model_type +
                       "\" is not supported; supported: vit, deit, dinov2, dinov2_with_registers, clip_vision_model, "
                       "clip, siglip_vision_model, siglip (docs/models.md)");
  const bool dinov2 = model_type.rfind("dinov2", 0) == 0;
  const bool clip = model_type.rfind("clip", 0) == 0;
  const bool siglip = model_type.rfind("siglip", 0) == 0;
  const bool full = model_type == "clip" || model_type == "siglip";  // architecture keys under vision_config
  if (full && !(top.contains("vision_config") && top["vision_config"].is_object()))
    return config_error(config_path + ": a '" + model_type + "' config needs a 'vision_config' object");
  const json& cfg = full ? top["vision_config"] : top;
  if (dinov2 && cfg.contains("use_swiglu_ffn") && cfg["use_swiglu_ffn"] == true)
    return unsupported(config_path + ": key 'use_swiglu_ffn': the SwiGLU MLP is not supported yet");
  VitArch a;
  const HfKind kind{model_type, dinov2, clip, siglip, full ? "vision_config." : ""};
  EV_RETURN_IF_ERROR(hf_activation(cfg, config_path, kind, &a));
  int intermediate = 0;
  EV_RETURN_IF_ERROR(hf_dimensions(cfg, config_path, kind, &a, &intermediate));
  if (a.embed_dim % a.num_heads != 0)
    return config_error(config_path + ": hidden_size " + std::to_string(a.embed_dim) +
                        " is not divisible by num_attention_heads " + std::to_string(a.num_heads));
  if (options.heads && *options.heads != a.num_heads)
    return invalid_argument(config_path + ": --heads " + std::to_string(*options.heads) +
                            " contradicts num_attention_heads " + std::to_string(a.num_heads));
  if (options.eps && *options.eps != a.layer_norm_eps)
    return invalid_argument(config_path + ": --eps contradicts layer_norm_eps " + cfg["layer_norm_eps"].dump());
  if (options.pool && *options.pool != GlobalPool::kToken)
    return invalid_argument(config_path + ": ViTForImageClassification classifies the class token; only --pool "
                            "token matches it");
  EV_ASSIGN_OR_RETURN(a.mlp_ratio, mlp_ratio_for(a.embed_dim, intermediate, config_path));
  EV_RETURN_IF_ERROR(hf_layout(cfg, config_path, kind, &a));

  EV_ASSIGN_OR_RETURN(WeightSource w, WeightSource::open(weights_path, WeightNaming::kHf));
  EV_RETURN_IF_ERROR(reject_unsupported_family(w, weights_path));
  EV_RETURN_IF_ERROR(hf_from_weights(w, cfg, config_path, weights_path, kind, &a));
  ModelSpec spec;
  spec.name = fs::path(absolute_path(dir)).filename().string();
  spec.weights_path = absolute_path(weights_path);
  spec.weights_naming = WeightNaming::kHf;
  spec.arch = a;
  fit_default_normalization(&spec.preprocess, a.in_chans);
  EV_RETURN_IF_ERROR(finish_spec(spec, w, options));
  return spec;
}

Result<ModelSpec> infer_model_spec(const std::string& path, const ImportOptions& options) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) return infer_model_spec_hf(path, options);
  return infer_model_spec_timm(path, options);
}

Status save_imported_spec(const ModelSpec& spec, const std::string& yaml_path) {
  return save_model_spec(spec, absolute_path(yaml_path));
}

}  // namespace edgevit
