// ModelSpec: a validated ViT description (what config/models/*.yaml holds). Plain data; the YAML loader
// (runtime/config.h) and the checkpoint importer (runtime/importer.h) produce it, graph/plan consume it.
// Field meanings follow timm's VisionTransformer constructor.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/outputs.h"

namespace edgevit {

// kMap: timm's global_pool='map' (AttentionPoolLatent; SigLIP's MAP head): one learned latent query attends
// over the normed tokens, then proj and x + mlp(norm(x)).
enum class GlobalPool { kToken, kAvg, kMap };
enum class WeightNaming { kTimm, kHf };
// kInt8: W8A8 on the block GEMMs, everything else fp32 (CPU) / fp16 or fp32 (CUDA: runtime.int8_float):
// docs/int8.md.
enum class Precision { kFp32, kFp16, kInt8 };
// runtime.int8_activations: where an INT8 graph's activation scales come from (docs/int8.md "The scheme").
// kNormPerToken (the default): the LayerNorm outputs (qkv's and fc1's inputs) take each row's own scale at
// run time, the attention's output (proj's input) and GELU's output (fc2's input) the scale file's calibrated
// per-tensor scales; kPerTensor: every input the file's; kPerToken: every input its rows' own (no file; CPU).
enum class Int8Activations { kNormPerToken, kPerTensor, kPerToken };
// Attention path request: kAuto lets the planner choose from the device profile; the others force one.
enum class AttentionImpl { kAuto, kFused, kExplicit };

const char* to_string(GlobalPool v);    // "token" | "avg" | "map"
const char* to_string(WeightNaming v);  // "timm" | "hf"
const char* to_string(Precision v);     // "fp32" | "fp16" | "int8"
const char* to_string(AttentionImpl v); // "auto" | "fused" | "explicit"
const char* to_string(Int8Activations v);  // "norm_per_token" | "per_tensor" | "per_token"

// The MLP's activation: exact (erf) GELU (timm's default, nn.GELU()), its tanh approximation
// (nn.GELU(approximate='tanh'): timm's `gelu_tanh`, SigLIP's `gelu_pytorch_tanh`), or QuickGELU
// (x * sigmoid(1.702 x): OpenAI CLIP, timm's `quick_gelu`, HF's `quick_gelu`).
enum class Activation { kGelu, kGeluTanh, kQuickGelu };
const char* to_string(Activation v);    // "gelu" | "gelu_tanh" | "quick_gelu"

struct VitArch {
  // Input height and width in pixels, each a multiple of patch_size (YAML `img_size`: N for a square, or
  // [H, W]); the patch grid is grid_h() x grid_w(), row-major (timm's and HF's flatten(2) order).
  int img_h = 224;
  int img_w = 224;
  int patch_size = 16;    // square patches
  int in_chans = 3;
  int embed_dim = 192;    // E
  int depth = 12;
  int num_heads = 3;      // H; embed_dim % num_heads == 0
  double mlp_ratio = 4.0; // hidden = int(E * mlp_ratio)
  bool qkv_bias = true;
  bool class_token = true;
  int reg_tokens = 0;
  bool no_embed_class = false;   // pos_embed covers patches only
  GlobalPool global_pool = GlobalPool::kToken;
  bool fc_norm = false;          // LayerNorm after pooling instead of before (timm fc_norm)
  int num_classes = 1000;        // 0 = features only (logits are the pooled features)
  double layer_norm_eps = 1e-6;
  Activation act = Activation::kGelu;
  // DeiT distilled (timm VisionTransformerDistilled, HF DeiTForImageClassificationWithTeacher): a
  // distillation token after the class token (pos_embed covers both), a second head `head_dist` on it, and
  // the output (head(x[:, 0]) + head_dist(x[:, 1])) / 2. Needs class_token, token pooling, no fc_norm and no
  // register tokens. pre_logits is timm's forward_head(pre_logits=True): (x[:, 0] + x[:, 1]) / 2.
  bool dist_token = false;
  // LayerScale (timm init_values: blocks.N.ls1.gamma, ls2.gamma; DINOv2): x += gamma * branch(x). The
  // checkpoint holds gamma; the loader folds it into attn.proj and mlp.fc2 (runtime/weights.h), so the graph
  // is the plain ViT's.
  bool layer_scale = false;
  // CLIP / OpenCLIP vision towers (timm pre_norm=True; HF CLIPVisionModel): a LayerNorm `norm_pre` over the
  // assembled tokens before the first block; the patch embedding has no bias (timm: bias = not pre_norm).
  bool pre_norm = false;
  bool patch_bias = true;
  bool head_bias = true;  // false: HF CLIP's visual_projection (no bias)
  // qk-norm (timm qk_norm=True): LayerNorm over head_dim of each head's q and k (attn.q_norm, attn.k_norm) after
  // the qkv projection, before attention (OpKind::kQkNorm, in place on the packed qkv).
  bool qk_norm = false;
  // HF Dinov2ForImageClassification: the classifier reads [class token, mean of the patch tokens] (2E) of the
  // normed tokens; edgevit splits it into `head` (class token, with the bias) and `head_mean` (the mean, no
  // bias, accumulated into the logits). Needs class_token and token pooling; pre_logits is the class token.
  bool head_mean_tokens = false;
  // HF ViTModel's pooler (add_pooling_layer): pooler.dense (E, E) + tanh over the class token of the normed
  // tokens; its output is the `embedding` output (runtime/outputs.h). Needs class_token and token pooling.
  bool pooler = false;
  // The head is an embedding projection, not a classifier (HF CLIP's visual_projection; a timm CLIP tower's
  // head as import reads it, runtime/timm_head.h): its output is the `embedding` output and the model has no
  // `logits` output.
  bool projection_head = false;
  // The checkpoint's position-embedding grid (rows x columns of its pos_embed patch part) when it is not a
  // square: a Hugging Face checkpoint trained at a non-square image_size [H, W] (H / patch x W / patch). 0: a
  // square g x g table, g read from its length. The loader resamples from it (runtime/weights.h fit_pos_embed).
  int pos_grid_h = 0, pos_grid_w = 0;

  int grid_h() const { return img_h / patch_size; }
  int grid_w() const { return img_w / patch_size; }
  bool square() const { return img_h == img_w; }
  int num_patches() const { return grid_h() * grid_w(); }
  // Tokens between the class token and the patches: the distillation token or the register tokens.
  int extra_prefix_tokens() const { return (dist_token ? 1 : 0) + reg_tokens; }
  int num_prefix_tokens() const { return (class_token ? 1 : 0) + extra_prefix_tokens(); }
  int num_tokens() const { return num_patches() + num_prefix_tokens(); }
  int head_dim() const { return embed_dim / num_heads; }
  int mlp_hidden() const { return static_cast<int>(embed_dim * mlp_ratio); }
  int pos_embed_len() const { return no_embed_class ? num_patches() : num_tokens(); }
};

// How an image becomes the network input (runtime/inputs.cpp; docs/config.md "Preprocessing"): decode,
// EXIF orientation, RGB (or grey), resize as Pillow's Image.resize does on 8-bit images, centre crop to
// img_h x img_w, then x = (p * rescale - mean[c]) / std[c]. This is timm's eval transform
// (torchvision Resize + CenterCrop on a PIL image) and Hugging Face's PIL image processors.
// kKeepRatio: timm's ResizeKeepRatio (its eval transform for a non-square input_size): the image scaled by
// 1 / min(h / resize_h, w / resize_w), each side round()ed half to even, so it covers resize_h x resize_w.
enum class ResizeMode { kShortestEdge, kExact, kKeepRatio };
enum class Interpolation { kBilinear, kBicubic, kNearest };
// The centre crop's offset when (side - crop) is odd: torchvision's int(round(d / 2.0)) (Python rounds
// half to even) or Hugging Face's d // 2.
enum class CropRounding { kHalfEven, kFloor };
const char* to_string(Interpolation v);  // "bilinear" | "bicubic" | "nearest"
const char* to_string(CropRounding v);   // "half_even" | "floor"

struct Preprocess {
  ResizeMode resize_mode = ResizeMode::kShortestEdge;
  int resize = 224;                 // kShortestEdge: the shorter side becomes this, the longer int(resize * long / short)
  int resize_h = 224, resize_w = 224;  // kExact: the image becomes resize_w x resize_h, aspect ratio ignored;
                                       // kKeepRatio: the size it covers
  double crop_pct = 0;              // > 0: given as timm's crop_pct; the loader set the resize from timm's
                                    // scale (floor(img_h / crop_pct), floor(img_w / crop_pct)): the shorter
                                    // side to it when the two agree, else kKeepRatio to it
  Interpolation interpolation = Interpolation::kBilinear;
  CropRounding crop_rounding = CropRounding::kHalfEven;
  double rescale = 1.0 / 255;       // pixel (0..255) * rescale, then normalized
  std::vector<double> mean{0.485, 0.456, 0.406};  // one per channel
  std::vector<double> std{0.229, 0.224, 0.225};
  std::string note;                 // import only, not in the YAML: where these values came from
};

struct ModelSpec {
  std::string name;               // from the YAML `name`, else the file stem
  std::string source_path;        // the YAML file this came from ("" when built in memory)
  VitArch arch;
  std::string weights_path;       // absolute or relative to the current directory (resolved by the loader)
  WeightNaming weights_naming = WeightNaming::kTimm;
  Precision precision = Precision::kFp32;  // requested; a device may override (see plan)
  AttentionImpl attention = AttentionImpl::kAuto;
  int max_batch = 1;
  Preprocess preprocess;
  std::string head_note;          // import only, not in the YAML: how a timm head was read (runtime/timm_head.h)
  std::string labels_path;        // optional; one label per line; resolved like weights_path
  OutputSet outputs;              // runtime.outputs; empty: the model's default (every output it has but tokens)
  // precision int8 (docs/int8.md): the scale file (runtime.int8_scales, resolved like weights_path) and where
  // the block GEMMs' activation scales come from (runtime.int8_activations).
  std::string int8_scales_path;
  Int8Activations int8_activations = Int8Activations::kNormPerToken;
  // runtime.int8_float: the floating-point precision of a CUDA INT8 graph's other ops (Graph::int8_rest):
  // kFp16 (the fast mode) or kFp32 (the CPU INT8 path's twin: the residual stream, LayerNorms, attention
  // and qkv's output in fp32). The CPU's INT8 graphs are always fp32.
  Precision int8_float = Precision::kFp16;
  // runtime.int8_attention (docs/int8.md "INT8 attention"): `float` (the default) keeps qkv's output and the
  // attention in the float precision; `int8` (true) has qkv's epilogue write Q and K as int8 with a scale per
  // (token, head) and V as float, read by the INT8 attention (kernels/cuda/mha_i8, reference mha_i8_ref).
  bool int8_attention = false;
};

}  // namespace edgevit
