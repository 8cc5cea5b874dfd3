#include "runtime/config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <system_error>
#include <utility>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "base/yaml_guard.h"
#include "runtime/graph.h"

namespace edgevit {

namespace fs = std::filesystem;

const char* to_string(GlobalPool v) {
  return v == GlobalPool::kToken ? "token" : v == GlobalPool::kMap ? "map" : "avg";
}
const char* to_string(WeightNaming v) { return v == WeightNaming::kTimm ? "timm" : "hf"; }
const char* to_string(Precision v) {
  return v == Precision::kFp32 ? "fp32" : v == Precision::kFp16 ? "fp16" : "int8";
}
const char* to_string(Int8Activations v) {
  return v == Int8Activations::kPerTensor ? "per_tensor" : v == Int8Activations::kPerToken ? "per_token" : "norm_per_token";
}
const char* to_string(Activation v) {
  return v == Activation::kGeluTanh ? "gelu_tanh" : v == Activation::kQuickGelu ? "quick_gelu" : "gelu";
}
const char* to_string(Interpolation v) {
  switch (v) {
    case Interpolation::kBilinear: return "bilinear";
    case Interpolation::kBicubic: return "bicubic";
    case Interpolation::kNearest: return "nearest";
  }
  return "bilinear";
}
const char* to_string(CropRounding v) { return v == CropRounding::kFloor ? "floor" : "half_even"; }
const char* to_string(AttentionImpl v) {
  switch (v) {
    case AttentionImpl::kAuto: return "auto";
    case AttentionImpl::kFused: return "fused";
    case AttentionImpl::kExplicit: return "explicit";
  }
  return "auto";
}

namespace {

// Ranges of the schema (docs/config.md). Upper bounds keep every derived size (tokens, hidden width,
// arena offsets) far from int overflow; none of them is close to a real ViT.
constexpr int kMaxImgSize = 4096;
constexpr int kMaxInChans = 16;
constexpr int kMaxEmbedDim = 16384;
constexpr int kMaxDepth = 256;
constexpr int kMaxHeads = 1024;
constexpr double kMaxMlpRatio = 64.0;
constexpr int kMaxRegTokens = 64;
constexpr int kMaxClasses = 1 << 20;
constexpr int kMaxTokens = 1 << 16;  // attention scores are S*S per head
constexpr int kMaxBatch = 4096;
constexpr double kMaxMeanStd = 1e3;  // mean/std apply to pixel/255 in [0, 1]
constexpr double kMinCropPct = 0.05;  // keeps floor(img_h / crop_pct) within 20 x kMaxImgSize

const std::vector<std::pair<const char*, GlobalPool>> kPools = {{"token", GlobalPool::kToken},
                                                                 {"avg", GlobalPool::kAvg},
                                                                 {"map", GlobalPool::kMap}};
const std::vector<std::pair<const char*, WeightNaming>> kNamings = {{"timm", WeightNaming::kTimm},
                                                                     {"hf", WeightNaming::kHf}};
const std::vector<std::pair<const char*, Precision>> kPrecisions = {{"fp32", Precision::kFp32},
                                                                     {"fp16", Precision::kFp16},
                                                                     {"int8", Precision::kInt8}};
const std::vector<std::pair<const char*, Int8Activations>> kInt8Activations = {
    {"norm_per_token", Int8Activations::kNormPerToken},
    {"per_tensor", Int8Activations::kPerTensor},
    {"per_token", Int8Activations::kPerToken}};
const std::vector<std::pair<const char*, bool>> kInt8Attention = {{"float", false}, {"int8", true}};
const std::vector<std::pair<const char*, Precision>> kInt8Float = {{"fp16", Precision::kFp16},
                                                                   {"fp32", Precision::kFp32}};
const std::vector<std::pair<const char*, AttentionImpl>> kAttention = {
    {"auto", AttentionImpl::kAuto}, {"fused", AttentionImpl::kFused}, {"explicit", AttentionImpl::kExplicit}};
const std::vector<std::pair<const char*, Activation>> kActivations = {{"gelu", Activation::kGelu},
                                                                       {"gelu_tanh", Activation::kGeluTanh},
                                                                       {"quick_gelu", Activation::kQuickGelu}};
const std::vector<std::pair<const char*, Interpolation>> kInterpolations = {
    {"bilinear", Interpolation::kBilinear}, {"bicubic", Interpolation::kBicubic}, {"nearest", Interpolation::kNearest}};
const std::vector<std::pair<const char*, CropRounding>> kCropRoundings = {{"half_even", CropRounding::kHalfEven},
                                                                           {"floor", CropRounding::kFloor}};

std::string resolve_path(const std::string& base_dir, const std::string& p) {
  const fs::path q(p);
  if (q.is_absolute() || base_dir.empty()) return q.lexically_normal().string();
  return (fs::path(base_dir) / q).lexically_normal().string();
}

std::string relative_path(const std::string& base_dir, const std::string& p) {
  if (base_dir.empty() || p.empty()) return p;
  const fs::path q(p);
  const fs::path base(base_dir);
  if (q.is_absolute() != base.is_absolute()) return p;
  const fs::path rel = q.lexically_normal().lexically_relative(base.lexically_normal());
  return rel.empty() ? p : rel.string();
}

// "[H, W]" as the YAML writes a non-square size, "N" for a square one.
std::string size_text(const VitArch& a) {
  return a.square() ? std::to_string(a.img_h) : "[" + std::to_string(a.img_h) + ", " + std::to_string(a.img_w) + "]";
}

// img_size: N (a square input) or [H, W] (height, width), each side a multiple of patch_size.
Status read_img_size(ConfigMap& m, VitArch* a) {
  if (!m.is_sequence("img_size")) {
    int side = a->img_h;
    EV_RETURN_IF_ERROR(m.get_int("img_size", true, 1, kMaxImgSize, &side));
    a->img_h = a->img_w = side;
  } else {
    std::vector<double> hw;
    EV_RETURN_IF_ERROR(m.get_double_list("img_size", true, 1, kMaxImgSize, false, &hw));
    if (hw.size() != 2 || hw[0] != std::floor(hw[0]) || hw[1] != std::floor(hw[1]))
      return m.error("img_size", "expected N or [height, width], two integers; got a list of " +
                                     std::to_string(hw.size()) + (hw.size() == 2 ? " numbers not both integers" : ""));
    a->img_h = static_cast<int>(hw[0]);
    a->img_w = static_cast<int>(hw[1]);
  }
  EV_RETURN_IF_ERROR(m.get_int("patch_size", true, 1, kMaxImgSize, &a->patch_size));
  if (a->square() && a->img_h % a->patch_size != 0) {
    return m.error("patch_size", "img_size " + std::to_string(a->img_h) + " is not divisible by patch_size " +
                                     std::to_string(a->patch_size));
  }
  for (const auto& [side, value] : {std::make_pair("height", a->img_h), std::make_pair("width", a->img_w)}) {
    if (value % a->patch_size == 0) continue;
    return m.error("patch_size", "img_size [" + std::to_string(a->img_h) + ", " + std::to_string(a->img_w) + "]: " +
                                     side + " " + std::to_string(value) + " is not divisible by patch_size " +
                                     std::to_string(a->patch_size));
  }
  return Status::Ok();
}

// pos_embed_grid: [rows, columns] of the checkpoint's non-square position table (VitArch::pos_grid_h/w).
Status read_pos_embed_grid(ConfigMap& m, VitArch* a) {
  std::vector<double> grid;
  EV_RETURN_IF_ERROR(m.get_double_list("pos_embed_grid", false, 1, kMaxImgSize, false, &grid));
  if (!m.has("pos_embed_grid")) return Status::Ok();
  if (grid.size() != 2 || grid[0] != std::floor(grid[0]) || grid[1] != std::floor(grid[1]))
    return m.error("pos_embed_grid", "expected [rows, columns], two positive integers");
  a->pos_grid_h = static_cast<int>(grid[0]);
  a->pos_grid_w = static_cast<int>(grid[1]);
  return Status::Ok();
}

Status read_architecture(ConfigMap& m, VitArch* a) {
  EV_RETURN_IF_ERROR(read_img_size(m, a));
  EV_RETURN_IF_ERROR(m.get_int("in_chans", false, 1, kMaxInChans, &a->in_chans));
  EV_RETURN_IF_ERROR(m.get_int("embed_dim", true, 1, kMaxEmbedDim, &a->embed_dim));
  EV_RETURN_IF_ERROR(m.get_int("depth", true, 1, kMaxDepth, &a->depth));
  EV_RETURN_IF_ERROR(m.get_int("num_heads", true, 1, kMaxHeads, &a->num_heads));
  if (a->embed_dim % a->num_heads != 0) {
    return m.error("num_heads", "embed_dim " + std::to_string(a->embed_dim) + " is not divisible by num_heads " +
                                    std::to_string(a->num_heads));
  }
  EV_RETURN_IF_ERROR(m.get_double("mlp_ratio", false, 0.0, kMaxMlpRatio, &a->mlp_ratio, /*lo_open=*/true));
  if (a->mlp_hidden() < 1) {
    return m.error("mlp_ratio", "embed_dim * mlp_ratio must be at least 1 (hidden width is int(E * mlp_ratio))");
  }
  EV_RETURN_IF_ERROR(m.get_bool("qkv_bias", false, &a->qkv_bias));
  EV_RETURN_IF_ERROR(m.get_bool("class_token", false, &a->class_token));
  EV_RETURN_IF_ERROR(m.get_int("reg_tokens", false, 0, kMaxRegTokens, &a->reg_tokens));
  EV_RETURN_IF_ERROR(m.get_bool("no_embed_class", false, &a->no_embed_class));
  a->global_pool = a->class_token ? GlobalPool::kToken : GlobalPool::kAvg;
  EV_RETURN_IF_ERROR(m.get_enum("global_pool", false, kPools, &a->global_pool));
  if (a->global_pool == GlobalPool::kToken && !a->class_token) {
    return m.error(m.has("global_pool") ? "global_pool" : "class_token",
                   "global_pool 'token' needs class_token: true (timm asserts the same)");
  }
  a->fc_norm = a->global_pool == GlobalPool::kAvg;
  EV_RETURN_IF_ERROR(m.get_bool("fc_norm", false, &a->fc_norm));
  EV_RETURN_IF_ERROR(m.get_int("num_classes", true, 0, kMaxClasses, &a->num_classes));
  EV_RETURN_IF_ERROR(m.get_double("layer_norm_eps", false, 0.0, 1.0, &a->layer_norm_eps, /*lo_open=*/true));
  a->act = Activation::kGelu;
  EV_RETURN_IF_ERROR(m.get_enum("act", false, kActivations, &a->act));
  EV_RETURN_IF_ERROR(m.get_bool("dist_token", false, &a->dist_token));
  if (a->dist_token && (!a->class_token || a->reg_tokens > 0 || a->global_pool != GlobalPool::kToken || a->fc_norm)) {
    return m.error("dist_token", "a distillation token (DeiT distilled) needs class_token: true, reg_tokens: 0, "
                                 "global_pool: token and fc_norm: false");
  }
  EV_RETURN_IF_ERROR(m.get_bool("layer_scale", false, &a->layer_scale));
  EV_RETURN_IF_ERROR(m.get_bool("pre_norm", false, &a->pre_norm));
  a->patch_bias = !a->pre_norm;  // timm: PatchEmbed(bias=not pre_norm)
  EV_RETURN_IF_ERROR(m.get_bool("patch_bias", false, &a->patch_bias));
  EV_RETURN_IF_ERROR(m.get_bool("head_bias", false, &a->head_bias));
  EV_RETURN_IF_ERROR(m.get_bool("qk_norm", false, &a->qk_norm));
  EV_RETURN_IF_ERROR(m.get_bool("head_mean_tokens", false, &a->head_mean_tokens));
  if (a->head_mean_tokens && (!a->class_token || a->global_pool != GlobalPool::kToken || a->fc_norm || a->dist_token))
    return m.error("head_mean_tokens", "needs class_token: true, global_pool: token, fc_norm: false, no dist_token");
  EV_RETURN_IF_ERROR(m.get_bool("pooler", false, &a->pooler));
  if (a->pooler && (!a->class_token || a->global_pool != GlobalPool::kToken || a->fc_norm || a->dist_token))
    return m.error("pooler", "HF ViTModel's pooler needs class_token: true, global_pool: token, fc_norm: false, no "
                             "dist_token");
  EV_RETURN_IF_ERROR(m.get_bool("projection_head", false, &a->projection_head));
  if (a->projection_head && a->num_classes == 0)
    return m.error("projection_head", "needs a head (num_classes > 0: the projection's output width)");
  EV_RETURN_IF_ERROR(read_pos_embed_grid(m, a));
  if (a->num_tokens() > kMaxTokens) {
    return m.error("img_size", "sequence of " + std::to_string(a->num_tokens()) + " tokens is longer than " +
                                   std::to_string(kMaxTokens) + " ((img_h/patch_size) * (img_w/patch_size) + prefix tokens)");
  }
  return m.finish();
}

// resize_exact / resize_keep_ratio: [height, width], each >= the input's side; *given false when absent.
Status read_resize_pair(ConfigMap& m, const char* key, const VitArch& arch, bool* given, int* h, int* w) {
  std::vector<double> hw;
  EV_RETURN_IF_ERROR(m.get_double_list(key, false, 1, kMaxImgSize, false, &hw));
  *given = m.has(key);
  if (!*given) return Status::Ok();
  if (hw.size() != 2 || hw[0] != std::floor(hw[0]) || hw[1] != std::floor(hw[1]))
    return m.error(key, "expected [height, width], two integers");
  *h = static_cast<int>(hw[0]);
  *w = static_cast<int>(hw[1]);
  if (*h >= arch.img_h && *w >= arch.img_w) return Status::Ok();
  if (arch.square()) {
    return m.error(key, "must be >= architecture.img_size " + std::to_string(arch.img_h) +
                            " on both sides (the centre img_size square is cropped)");
  }
  return m.error(key, "must be >= architecture.img_size " + size_text(arch) +
                          " side by side (the centre img_size is cropped)");
}

// The resize with none of resize, resize_exact and resize_keep_ratio given: timm's eval transform with
// crop_pct (default 1), scale (floor(img_h / crop_pct), floor(img_w / crop_pct)): the shorter side to it when
// the two agree (torchvision Resize(int)), else ResizeKeepRatio to it.
void default_resize(const VitArch& arch, Preprocess* p) {
  const double pct = p->crop_pct > 0 ? p->crop_pct : 1.0;
  p->resize_h = static_cast<int>(std::floor(arch.img_h / pct));  // timm's arithmetic
  p->resize_w = static_cast<int>(std::floor(arch.img_w / pct));
  p->resize = std::min(p->resize_h, p->resize_w);
  p->resize_mode = p->resize_h == p->resize_w ? ResizeMode::kShortestEdge : ResizeMode::kKeepRatio;
}

// At most one of resize (shorter side), crop_pct (timm's scale), resize_exact and resize_keep_ratio
// ([H, W]); none: as crop_pct 1.
Status read_resize(ConfigMap& m, const VitArch& arch, Preprocess* p) {
  int given = 0;
  for (const char* key : {"resize", "resize_exact", "resize_keep_ratio", "crop_pct"}) given += m.has(key) ? 1 : 0;
  if (given > 1) {
    return m.error(m.has("crop_pct") ? "crop_pct" : m.has("resize_keep_ratio") ? "resize_keep_ratio" : "resize_exact",
                   "give one of resize, resize_exact, resize_keep_ratio and crop_pct (each sets the resize)");
  }
  p->crop_pct = 0;
  int resize = 0;
  EV_RETURN_IF_ERROR(m.get_int("resize", false, 1, kMaxImgSize, &resize));
  EV_RETURN_IF_ERROR(m.get_double("crop_pct", false, kMinCropPct, 1.0, &p->crop_pct));
  default_resize(arch, p);
  if (resize > 0) {
    p->resize_mode = ResizeMode::kShortestEdge;
    p->resize = p->resize_h = p->resize_w = resize;
  }
  for (const auto& [key, mode] : {std::make_pair("resize_exact", ResizeMode::kExact),
                                  std::make_pair("resize_keep_ratio", ResizeMode::kKeepRatio)}) {
    bool pair = false;
    EV_RETURN_IF_ERROR(read_resize_pair(m, key, arch, &pair, &p->resize_h, &p->resize_w));
    if (!pair) continue;
    p->resize_mode = mode;
    p->resize = std::min(p->resize_h, p->resize_w);
    return Status::Ok();
  }
  const int need = std::max(arch.img_h, arch.img_w);
  if (p->resize_mode == ResizeMode::kShortestEdge && p->resize < need) {
    const char* key = p->crop_pct > 0 ? "crop_pct" : "resize";
    if (arch.square()) {
      return m.error(key, "must be >= architecture.img_size " + std::to_string(arch.img_h) +
                              " (the shorter side is resized to it, then the centre img_size square is cropped)");
    }
    return m.error(key, "must be >= " + std::to_string(need) + ", the longer side of architecture.img_size " +
                            size_text(arch) + " (the shorter side is resized to it, then the centre is cropped)");
  }
  return Status::Ok();
}

Status read_preprocess(ConfigMap& m, const VitArch& arch, Preprocess* p) {
  EV_RETURN_IF_ERROR(read_resize(m, arch, p));
  p->interpolation = Interpolation::kBilinear;
  EV_RETURN_IF_ERROR(m.get_enum("interpolation", false, kInterpolations, &p->interpolation));
  p->crop_rounding = CropRounding::kHalfEven;
  EV_RETURN_IF_ERROR(m.get_enum("crop_rounding", false, kCropRoundings, &p->crop_rounding));
  p->rescale = 1.0 / 255;
  EV_RETURN_IF_ERROR(m.get_double("rescale", false, 0.0, 1.0, &p->rescale, /*lo_open=*/true));
  EV_RETURN_IF_ERROR(m.get_double_list("mean", false, -kMaxMeanStd, kMaxMeanStd, false, &p->mean));
  EV_RETURN_IF_ERROR(m.get_double_list("std", false, 0.0, kMaxMeanStd, /*lo_open=*/true, &p->std));
  const size_t chans = static_cast<size_t>(arch.in_chans);
  for (const char* key : {"mean", "std"}) {
    const auto& values = std::string(key) == "mean" ? p->mean : p->std;
    if (values.size() == chans) continue;
    if (!m.has(key)) {
      return m.error(key, "required when architecture.in_chans is " + std::to_string(chans) +
                              " (the default has 3 values)");
    }
    return m.error(key, "has " + std::to_string(values.size()) + " values, expected in_chans = " +
                            std::to_string(chans));
  }
  return m.finish();
}

// runtime.int8_scales (the scale file, docs/int8.md), runtime.int8_activations (norm_per_token, the default:
// the LayerNorm outputs' scales per row at run time, the others the file's; per_tensor: the file's calibrated
// scales; per_token: dynamic per-row scales, no file needed), runtime.int8_float (fp16 | fp32: the other
// ops' precision on CUDA) and runtime.int8_attention (float | int8: Q and K of the attention).
Status read_int8_keys(ConfigMap& runtime, const std::string& base_dir, ModelSpec* spec) {
  std::string scales;
  EV_RETURN_IF_ERROR(runtime.get_string("int8_scales", false, &scales));
  spec->int8_scales_path = scales.empty() ? "" : resolve_path(base_dir, scales);
  EV_RETURN_IF_ERROR(runtime.get_enum("int8_activations", false, kInt8Activations, &spec->int8_activations));
  EV_RETURN_IF_ERROR(runtime.get_enum("int8_float", false, kInt8Float, &spec->int8_float));
  EV_RETURN_IF_ERROR(runtime.get_enum("int8_attention", false, kInt8Attention, &spec->int8_attention));
  if (spec->int8_attention && spec->int8_float == Precision::kFp32)
    return runtime.error("int8_attention", "int8 needs runtime.int8_float: fp16 (the fp32 mode is the CPU INT8 "
                                           "path's float64 twin and has no INT8 attention twin; docs/int8.md)");
  if (spec->precision == Precision::kInt8 && spec->int8_activations != Int8Activations::kPerToken &&
      spec->int8_scales_path.empty())
    return runtime.error("precision", std::string("int8 with ") + to_string(spec->int8_activations) +
                                          " activations needs runtime.int8_scales (the scale file `edgevit "
                                          "calibrate` writes, docs/int8.md)");
  return Status::Ok();
}

// runtime.outputs (runtime/outputs.h): a non-empty list of the outputs the model has.
Status read_outputs(ConfigMap& runtime, const VitArch& arch, OutputSet* out) {
  std::vector<const char*> names;
  for (int i = 0; i < kOutputKinds; ++i) names.push_back(to_string(static_cast<OutputKind>(i)));
  std::vector<size_t> picked;
  EV_RETURN_IF_ERROR(runtime.get_enum_list("outputs", false, names, &picked));
  if (!runtime.has("outputs")) return Status::Ok();
  if (picked.empty())
    return runtime.error("outputs", "must name at least one output (" + std::string(output_kind_names()) + ")");
  OutputSet set;
  for (size_t i : picked) set.add(static_cast<OutputKind>(i));
  if (set.has(OutputKind::kLogits) && !available_outputs(arch).has(OutputKind::kLogits))
    return runtime.error("outputs", "'logits' needs a classifier head (num_classes > 0, not a projection_head); "
                                    "this model's outputs are " + available_outputs(arch).to_string());
  *out = set;
  return Status::Ok();
}

Status parse_into(const YAML::Node& root, const std::string& display_name, const std::string& base_dir,
                  ModelSpec* spec) {
  ConfigMap top(root, display_name, "");
  spec->name = fs::path(display_name).stem().string();
  EV_RETURN_IF_ERROR(top.get_string("name", false, &spec->name));

  ConfigMap arch;
  EV_RETURN_IF_ERROR(top.get_map("architecture", true, &arch));
  EV_RETURN_IF_ERROR(read_architecture(arch, &spec->arch));

  ConfigMap weights;
  EV_RETURN_IF_ERROR(top.get_map("weights", true, &weights));
  std::string weights_path;
  EV_RETURN_IF_ERROR(weights.get_string("path", true, &weights_path));
  spec->weights_path = resolve_path(base_dir, weights_path);
  EV_RETURN_IF_ERROR(weights.get_enum("naming", false, kNamings, &spec->weights_naming));
  EV_RETURN_IF_ERROR(weights.finish());

  ConfigMap runtime;
  EV_RETURN_IF_ERROR(top.get_map("runtime", false, &runtime));
  EV_RETURN_IF_ERROR(runtime.get_enum("precision", false, kPrecisions, &spec->precision));
  EV_RETURN_IF_ERROR(runtime.get_int("max_batch", false, 1, kMaxBatch, &spec->max_batch));
  EV_RETURN_IF_ERROR(runtime.get_enum("attention", false, kAttention, &spec->attention));
  EV_RETURN_IF_ERROR(read_int8_keys(runtime, base_dir, spec));
  EV_RETURN_IF_ERROR(read_outputs(runtime, spec->arch, &spec->outputs));
  EV_RETURN_IF_ERROR(runtime.finish());

  ConfigMap preprocess;
  EV_RETURN_IF_ERROR(top.get_map("preprocess", false, &preprocess));
  EV_RETURN_IF_ERROR(read_preprocess(preprocess, spec->arch, &spec->preprocess));

  std::string labels;
  EV_RETURN_IF_ERROR(top.get_string("labels", false, &labels));
  spec->labels_path = labels.empty() ? "" : resolve_path(base_dir, labels);
  return top.finish();
}

}  // namespace

Result<ModelSpec> parse_model_spec(const std::string& yaml_text, const std::string& display_name,
                                   const std::string& base_dir) {
  EV_ASSIGN_OR_RETURN(YAML::Node root, parse_yaml_mapping(yaml_text, display_name));
  ModelSpec spec;
  try {
    EV_RETURN_IF_ERROR(parse_into(root, display_name, base_dir, &spec));
  } catch (const YAML::Exception& e) {
    return yaml_error(display_name, e.mark, "", std::string("YAML error: ") + e.msg);
  }
  return spec;
}

Result<ModelSpec> load_model_spec(const std::string& path) {
  EV_ASSIGN_OR_RETURN(std::string text, read_config_file(path));
  std::error_code ec;
  const fs::path abs = fs::absolute(fs::path(path), ec);
  if (ec) return io_error(path + ": cannot make the path absolute: " + ec.message());
  EV_ASSIGN_OR_RETURN(ModelSpec spec, parse_model_spec(text, path, abs.parent_path().string()));
  spec.source_path = path;
  return spec;
}

namespace {

// The `architecture` section of a model config (model_spec_to_yaml).
void emit_architecture(YAML::Emitter& e, const VitArch& a) {
  e << YAML::Key << "architecture" << YAML::Value << YAML::BeginMap;
  // A square input is written as one number, as configs always had it (their text and plan hashes stay).
  if (a.square())
    e << YAML::Key << "img_size" << YAML::Value << a.img_h;
  else
    e << YAML::Key << "img_size" << YAML::Value << YAML::Flow << YAML::BeginSeq << a.img_h << a.img_w << YAML::EndSeq;
  e << YAML::Key << "patch_size" << YAML::Value << a.patch_size;
  e << YAML::Key << "in_chans" << YAML::Value << a.in_chans;
  e << YAML::Key << "embed_dim" << YAML::Value << a.embed_dim;
  e << YAML::Key << "depth" << YAML::Value << a.depth;
  e << YAML::Key << "num_heads" << YAML::Value << a.num_heads;
  e << YAML::Key << "mlp_ratio" << YAML::Value << format_double_exact(a.mlp_ratio);
  e << YAML::Key << "qkv_bias" << YAML::Value << a.qkv_bias;
  e << YAML::Key << "class_token" << YAML::Value << a.class_token;
  e << YAML::Key << "reg_tokens" << YAML::Value << a.reg_tokens;
  e << YAML::Key << "no_embed_class" << YAML::Value << a.no_embed_class;
  e << YAML::Key << "global_pool" << YAML::Value << to_string(a.global_pool);
  e << YAML::Key << "fc_norm" << YAML::Value << a.fc_norm;
  e << YAML::Key << "num_classes" << YAML::Value << a.num_classes;
  e << YAML::Key << "layer_norm_eps" << YAML::Value << format_double_exact(a.layer_norm_eps);
  e << YAML::Key << "act" << YAML::Value << to_string(a.act);
  // Family keys are written only when set, so configs of plain ViTs read as before.
  if (a.dist_token) e << YAML::Key << "dist_token" << YAML::Value << true;
  if (a.layer_scale) e << YAML::Key << "layer_scale" << YAML::Value << true;
  if (a.pre_norm) e << YAML::Key << "pre_norm" << YAML::Value << true;
  if (a.patch_bias == a.pre_norm) e << YAML::Key << "patch_bias" << YAML::Value << a.patch_bias;
  if (!a.head_bias) e << YAML::Key << "head_bias" << YAML::Value << false;
  if (a.qk_norm) e << YAML::Key << "qk_norm" << YAML::Value << true;
  if (a.head_mean_tokens) e << YAML::Key << "head_mean_tokens" << YAML::Value << true;
  if (a.pooler) e << YAML::Key << "pooler" << YAML::Value << true;
  if (a.projection_head) e << YAML::Key << "projection_head" << YAML::Value << true;
  if (a.pos_grid_h > 0)
    e << YAML::Key << "pos_embed_grid" << YAML::Value << YAML::Flow << YAML::BeginSeq << a.pos_grid_h << a.pos_grid_w
      << YAML::EndSeq;
  e << YAML::EndMap;
}

// The `preprocess` section of a model config (model_spec_to_yaml).
void emit_preprocess(YAML::Emitter& e, const Preprocess& pp) {
  e << YAML::Key << "preprocess" << YAML::Value << YAML::BeginMap;
  if (pp.crop_pct > 0) {
    e << YAML::Key << "crop_pct" << YAML::Value << format_double_exact(pp.crop_pct);
  } else if (pp.resize_mode == ResizeMode::kExact || pp.resize_mode == ResizeMode::kKeepRatio) {
    e << YAML::Key << (pp.resize_mode == ResizeMode::kExact ? "resize_exact" : "resize_keep_ratio") << YAML::Value
      << YAML::Flow << YAML::BeginSeq << pp.resize_h << pp.resize_w << YAML::EndSeq;
  } else {
    e << YAML::Key << "resize" << YAML::Value << pp.resize;
  }
  e << YAML::Key << "interpolation" << YAML::Value << to_string(pp.interpolation);
  e << YAML::Key << "crop_rounding" << YAML::Value << to_string(pp.crop_rounding);
  e << YAML::Key << "rescale" << YAML::Value << format_double_exact(pp.rescale);
  for (const char* key : {"mean", "std"}) {
    const auto& values = std::string(key) == "mean" ? pp.mean : pp.std;
    e << YAML::Key << key << YAML::Value << YAML::Flow << YAML::BeginSeq;
    for (double v : values) e << format_double_exact(v);
    e << YAML::EndSeq;
  }
  e << YAML::EndMap;
}

}  // namespace

Result<std::string> model_spec_to_yaml(const ModelSpec& spec, const std::string& base_dir) {
  YAML::Emitter e;
  e << YAML::BeginMap;
  if (!spec.name.empty()) e << YAML::Key << "name" << YAML::Value << spec.name;  // else the file stem
  emit_architecture(e, spec.arch);
  e << YAML::Key << "weights" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "path" << YAML::Value << relative_path(base_dir, spec.weights_path);
  e << YAML::Key << "naming" << YAML::Value << to_string(spec.weights_naming);
  e << YAML::EndMap;
  e << YAML::Key << "runtime" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "precision" << YAML::Value << to_string(spec.precision);
  e << YAML::Key << "max_batch" << YAML::Value << spec.max_batch;
  e << YAML::Key << "attention" << YAML::Value << to_string(spec.attention);
  if (!spec.int8_scales_path.empty())
    e << YAML::Key << "int8_scales" << YAML::Value << relative_path(base_dir, spec.int8_scales_path);
  if (spec.int8_activations != Int8Activations::kNormPerToken)
    e << YAML::Key << "int8_activations" << YAML::Value << to_string(spec.int8_activations);
  if (spec.int8_float != Precision::kFp16) e << YAML::Key << "int8_float" << YAML::Value << to_string(spec.int8_float);
  if (spec.int8_attention) e << YAML::Key << "int8_attention" << YAML::Value << "int8";
  if (!spec.outputs.empty()) {
    e << YAML::Key << "outputs" << YAML::Value << YAML::Flow << YAML::BeginSeq;
    for (OutputKind k : spec.outputs.kinds()) e << to_string(k);
    e << YAML::EndSeq;
  }
  e << YAML::EndMap;
  emit_preprocess(e, spec.preprocess);
  if (!spec.labels_path.empty()) {
    e << YAML::Key << "labels" << YAML::Value << relative_path(base_dir, spec.labels_path);
  }
  e << YAML::EndMap;
  if (!e.good()) return internal_error("model spec '" + spec.name + "': YAML emitter failed: " + e.GetLastError());
  return "# edgevit model config (schema: docs/config.md)\n" + std::string(e.c_str()) + "\n";
}

Status validate_model_spec(const ModelSpec& spec, const std::string& origin) {
  if (spec.weights_path.empty()) return config_error(origin + ": weights.path: must not be empty");
  // One set of rules: the spec is written as YAML and read back by the loader. Positions in a message
  // refer to that emitted text, the key path to the field.
  EV_ASSIGN_OR_RETURN(std::string text, model_spec_to_yaml(spec, ""));
  auto parsed = parse_model_spec(text, origin, "");
  if (!parsed.ok()) return parsed.status();
  return Status::Ok();
}

Status save_model_spec(const ModelSpec& spec, const std::string& path) {
  EV_RETURN_IF_ERROR(validate_model_spec(spec, "model spec '" + spec.name + "'"));
  std::error_code ec;
  const fs::path abs = fs::absolute(fs::path(path), ec);
  if (ec) return io_error(path + ": cannot make the path absolute: " + ec.message());
  ModelSpec absolute_spec = spec;
  absolute_spec.weights_path = fs::absolute(fs::path(spec.weights_path), ec).lexically_normal().string();
  if (!spec.int8_scales_path.empty())
    absolute_spec.int8_scales_path = fs::absolute(fs::path(spec.int8_scales_path), ec).lexically_normal().string();
  if (!spec.labels_path.empty()) {
    absolute_spec.labels_path = fs::absolute(fs::path(spec.labels_path), ec).lexically_normal().string();
  }
  EV_ASSIGN_OR_RETURN(std::string text, model_spec_to_yaml(absolute_spec, abs.parent_path().string()));
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return io_error(path + ": cannot open for writing");
  out << text;
  out.close();
  if (!out) return io_error(path + ": write failed");
  return Status::Ok();
}

bool same_model_spec(const ModelSpec& x, const ModelSpec& y) {
  const VitArch& a = x.arch;
  const VitArch& b = y.arch;
  const bool arch_equal = a.img_h == b.img_h && a.img_w == b.img_w && a.patch_size == b.patch_size && a.in_chans == b.in_chans &&
                          a.embed_dim == b.embed_dim && a.depth == b.depth && a.num_heads == b.num_heads &&
                          a.mlp_ratio == b.mlp_ratio && a.qkv_bias == b.qkv_bias &&
                          a.class_token == b.class_token && a.reg_tokens == b.reg_tokens &&
                          a.no_embed_class == b.no_embed_class && a.global_pool == b.global_pool &&
                          a.fc_norm == b.fc_norm && a.num_classes == b.num_classes &&
                          a.layer_norm_eps == b.layer_norm_eps && a.act == b.act &&
                          a.dist_token == b.dist_token && a.layer_scale == b.layer_scale &&
                          a.pre_norm == b.pre_norm && a.patch_bias == b.patch_bias && a.head_bias == b.head_bias &&
                          a.qk_norm == b.qk_norm && a.head_mean_tokens == b.head_mean_tokens &&
                          a.pooler == b.pooler && a.projection_head == b.projection_head &&
                          a.pos_grid_h == b.pos_grid_h && a.pos_grid_w == b.pos_grid_w;
  return arch_equal && x.name == y.name && x.weights_path == y.weights_path &&
         x.weights_naming == y.weights_naming && x.precision == y.precision && x.attention == y.attention &&
         x.max_batch == y.max_batch && x.preprocess.resize == y.preprocess.resize &&
         x.preprocess.resize_mode == y.preprocess.resize_mode &&
         (x.preprocess.resize_mode == ResizeMode::kShortestEdge || (x.preprocess.resize_h == y.preprocess.resize_h &&
                                                             x.preprocess.resize_w == y.preprocess.resize_w)) &&
         x.preprocess.crop_pct == y.preprocess.crop_pct &&
         x.preprocess.interpolation == y.preprocess.interpolation &&
         x.preprocess.crop_rounding == y.preprocess.crop_rounding && x.preprocess.rescale == y.preprocess.rescale &&
         x.preprocess.mean == y.preprocess.mean && x.preprocess.std == y.preprocess.std &&
         x.labels_path == y.labels_path && x.outputs == y.outputs && x.int8_float == y.int8_float &&
         x.int8_attention == y.int8_attention;
}

}  // namespace edgevit
