// Checkpoint tensors under canonical (timm) names, whatever the checkpoint's own naming.
//
// Canonical names (timm VisionTransformer state_dict):
//   patch_embed.proj.{weight (E,C,p,p), bias (E)}   cls_token (1,1,E)   reg_token (1,R,E)   pos_embed (1,L,E)
//   blocks.N.norm1.{weight,bias} (E)                blocks.N.attn.qkv.{weight (3E,E), bias (3E)}
//   blocks.N.attn.proj.{weight (E,E), bias (E)}     blocks.N.norm2.{weight,bias} (E)
//   blocks.N.mlp.fc1.{weight (M,E), bias (M)}       blocks.N.mlp.fc2.{weight (E,M), bias (E)}
//   norm.{weight,bias} (E) unless fc_norm           fc_norm.{weight,bias} (E) when fc_norm
//   head.{weight (C,E), bias (C)} unless num_classes == 0
//   dist_token (1,1,E), head_dist.{weight (C,E), bias (C)}     DeiT distilled (arch.dist_token)
//   blocks.N.ls1.gamma (E), blocks.N.ls2.gamma (E)            LayerScale (arch.layer_scale)
//   blocks.N.attn.{q,k}_norm.{weight,bias} (D)                qk-norm (arch.qk_norm)
// qkv rows are ordered q, k, v, with heads contiguous inside each.
//
// Hugging Face ViTForImageClassification checkpoints are read in both naming conventions (detected from
// the names; a file mixing them is rejected):
//   transformers 4.x                                   transformers 5.x
//   vit.encoder.layer.N.layernorm_before               vit.layers.N.layernorm_before          -> norm1
//   vit.encoder.layer.N.attention.attention.query|key|value
//                                                      vit.layers.N.attention.q_proj|k_proj|v_proj -> attn.qkv
//   vit.encoder.layer.N.attention.output.dense         vit.layers.N.attention.o_proj          -> attn.proj
//   vit.encoder.layer.N.layernorm_after                vit.layers.N.layernorm_after           -> norm2
//   vit.encoder.layer.N.intermediate.dense             vit.layers.N.mlp.fc1                   -> mlp.fc1
//   vit.encoder.layer.N.output.dense                   vit.layers.N.mlp.fc2                   -> mlp.fc2
//   shared: vit.embeddings.cls_token -> cls_token, vit.embeddings.position_embeddings -> pos_embed,
//   vit.embeddings.patch_embeddings.projection -> patch_embed.proj, vit.layernorm -> norm,
//   classifier -> head.
// DeiT (deit.*: the same layer names as ViT) and DINOv2 (Dinov2Model's names, or dinov2.* inside
// Dinov2ForImageClassification; transformers 4.x layer names) map the same way, and additionally:
//   deit.embeddings.distillation_token -> dist_token     cls_classifier -> head, distillation_classifier -> head_dist
//   encoder.layer.N.norm1 / norm2 / mlp.fc1 / mlp.fc2 -> blocks.N.norm1 / norm2 / mlp.fc1 / mlp.fc2 (DINOv2)
//   encoder.layer.N.layer_scale1.lambda1 / layer_scale2.lambda1 -> blocks.N.ls1.gamma / ls2.gamma
//   embeddings.register_tokens -> reg_token;  embeddings.mask_token (masked image modeling): skipped
// CLIP (vision_model.*: CLIPVisionModel[WithProjection] or a full CLIPModel, whose text tower is skipped) and
// SigLIP (vision_model.* or SiglipVisionModel's names), transformers 4.x/5.x layer names:
//   encoder.layers.N.layer_norm1 / layer_norm2 / mlp.fc1 / mlp.fc2 -> blocks.N.norm1 / norm2 / mlp.fc1 / mlp.fc2
//   encoder.layers.N.self_attn.q_proj|k_proj|v_proj -> attn.qkv, self_attn.out_proj -> attn.proj
//   embeddings.class_embedding (E) -> cls_token (1,1,E), embeddings.position_embedding (L,E) -> pos_embed (1,L,E)
//   embeddings.patch_embedding -> patch_embed.proj, pre_layrnorm (sic) -> norm_pre, post_layernorm -> norm,
//   visual_projection -> head (no bias);  SigLIP's head.probe -> attn_pool.latent, head.attention.out_proj ->
//   attn_pool.proj, head.layernorm -> attn_pool.norm, head.mlp.* -> attn_pool.mlp.*
// HF's separate q/k/v tensors are packed into qkv at read time by concatenating along dim 0. ViTModel's
// pooler (add_pooling_layer: dense + tanh) keeps its name, pooler.dense.{weight (E,E), bias (E)} (arch.pooler;
// timm has no counterpart). No HF tensor is ignored: vit.embeddings.mask_token (masked image modeling) is
// reported as an extra tensor by check().
//
// Folds (derived tensors): the graph reads some weights the checkpoint does not hold as such; they are
// computed at load from checkpoint tensors, in fp32, then stored in the graph's precision:
//   blocks.N.attn.proj.{weight,bias} = ls1.gamma * proj  (row i scaled by gamma[i]; likewise mlp.fc2 with
//       ls2.gamma): LayerScale's y = x + gamma * (h W^T + b) = x + h (gamma W)^T + gamma b, exact up to
//       fp32 rounding, so LayerScale needs no op of its own
//   head_distilled.weight (C, 2E) = [head.weight, head_dist.weight] / 2, head_distilled.bias = (head.bias +
//       head_dist.bias) / 2: DeiT's (head(x0) + head_dist(x1)) / 2 as one GEMM over [x0, x1]
//   attn_pool.qkv.weight (3E, E) = [0; kv.weight], attn_pool.qkv.bias = [latent q.weight^T + q.bias; kv.bias]:
//       the MAP head's query does not depend on the image, so its projection is a constant folded into the
//       Q part of one packed qkv GEMM's bias (every token's Q = that constant; the attention reads token 0's)
//   attn_pool.{q,kv}.{weight,bias} = row slices of HF SigLIP's head.attention.in_proj_{weight,bias}
//   head.weight = classifier.weight[:, :E], head_mean.weight = classifier.weight[:, E:] (HF
//       Dinov2ForImageClassification: the classifier over [class token, mean of the patch tokens] as two GEMMs)
//   cls_token = cls + position_embeddings[:, 0], pos_embed = position_embeddings[:, 1:] (HF DINOv2 with
//       registers, whose position embeddings skip the registers: timm's no_embed_class form)
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "runtime/model_spec.h"
#include "runtime/safetensors.h"
#include "base/status.h"

namespace edgevit {

enum class HfConvention { kNone, kTransformers4, kTransformers5 };

// Canonical names a model with this architecture needs, in a stable order (embeddings, blocks, norms, head).
std::vector<std::string> expected_names(const VitArch& arch);
// Shape of a canonical tensor for this architecture; empty when `name` is not in expected_names(arch).
std::vector<int64_t> expected_shape(const VitArch& arch, const std::string& name);

class WeightSource {
 public:
  // Opens and validates the safetensors file and maps every tensor to a canonical name. Fails when the
  // names do not follow `naming` (for kHf: neither or both HF conventions).
  static Result<WeightSource> open(const std::string& path, WeightNaming naming);

  WeightNaming naming() const { return naming_; }
  HfConvention hf_convention() const { return hf_convention_; }
  const SafetensorsFile& file() const { return file_; }

  // Canonical names present in the checkpoint (sorted).
  std::vector<std::string> canonical_names() const;
  bool has(const std::string& canonical) const { return tensors_.count(canonical) != 0; }
  // Shape of a canonical tensor (q/k/v packed); not_found if absent.
  Result<std::vector<int64_t>> shape(const std::string& canonical) const;
  // Source tensor names with no canonical counterpart (always errors in check()).
  const std::vector<std::string>& unmapped() const { return unmapped_; }

  // Position embeddings for arch's patch grid: when the checkpoint's pos_embed (1, prefix + gh * gw, E) covers
  // another grid than arch's (grid_h x grid_w, square or not), pos_embed becomes a fold that resizes its
  // patch part from gh x gw to grid_h x grid_w (kernels/cpu resample_pos_embed_bicubic) and keeps the prefix
  // rows (class, distillation, register tokens unless no_embed_class) unchanged, as the checkpoint's own
  // library does it. The checkpoint's grid is arch.pos_grid_h x pos_grid_w when set (an HF checkpoint of a
  // non-square image_size), else the square g x g its length gives.
  //   timm naming: resample_abs_pos_embed as checkpoint_filter_fn calls it (timm 1.0: bicubic to
  //     size=grid_size, antialias=True), only when the token counts differ: a g x g table whose cell count
  //     equals grid_h * grid_w (e.g. 4x4 for 8x2) is loaded as it is, row-major, as timm loads it;
  //   HF naming: each family's interpolate_pos_encoding (transformers 5.x ViT, DeiT, DINOv2, CLIP, SigLIP:
  //     bicubic to size=(grid_h, grid_w), align_corners=False, no antialias; Dinov2WithRegisters passes
  //     antialias=True; older versions' scale_factor (new + 0.1) / old form is not it), unless the grid is the
  //     checkpoint's own. A non-square checkpoint grid is loaded only at its own grid (transformers reshapes
  //     the table to sqrt(length) x sqrt(length) and cannot resample it): another grid is a checkpoint error.
  // No-op when nothing is resampled or there is no pos_embed. Call before check().
  Status fit_pos_embed(const VitArch& arch);

  // Every expected tensor present with the expected shape, no extra tensors. The error lists all missing,
  // extra and mismatched tensors (the first kMaxListed of each).
  Status check(const VitArch& arch) const;
  static constexpr size_t kMaxListed = 20;

  // Converts a canonical tensor straight from the mapping into dst (count elements; must equal the
  // tensor's element count). No intermediate copies.
  Status read_f32(const std::string& canonical, float* dst, size_t count) const;
  Status read_f16(const std::string& canonical, uint16_t* dst, size_t count) const;

 private:
  struct Canonical {
    std::vector<const TensorInfo*> parts;  // concatenated along dim 0 (q, k, v for HF qkv)
    std::vector<std::string> part_names;   // source names, for messages
    std::vector<int64_t> shape;
    int64_t numel = 0;
  };

  explicit WeightSource(SafetensorsFile file) : file_(std::move(file)) {}
  Status build_timm();
  Status build_hf();
  Status add(const std::string& canonical, size_t part, size_t num_parts, const TensorInfo& info);
  Status finish();
  Result<const Canonical*> lookup(const std::string& canonical, size_t count) const;
  void read_parts_f32(const Canonical& c, float* dst) const;

  // A tensor computed at load from checkpoint tensors (the folds above).
  enum class FoldKind {
    kScaleRows,       // sources[0] (N, ...) with row i times sources[1][i]
    kHalfConcatCols,  // [sources[0], sources[1]] / 2 along the last dim (both (C, E))
    kHalfSum,         // (sources[0] + sources[1]) / 2
    kAddFirstRow,     // sources[0] (1, 1, E) + sources[1][:, 0] (1, L, E)
    kDropFirstRow,    // sources[0][:, 1:] (1, L, E) -> (1, L - 1, E)
    kRowSlice,        // rows [begin, begin + shape[0]) of sources[0]
    kMapQkvWeight,    // [0 (E, E); sources[0] (2E, E)]: the MAP head's packed qkv with the query folded out
    kMapQkvBias,      // [latent q.weight^T + q.bias; kv.bias] from sources {latent, q.weight, q.bias, kv.bias}
    kColSlice,        // columns [begin, begin + shape[1]) of sources[0] (C, K)
    kResampleGrid,    // sources[0] (1, begin + in_h * in_w, E): rows [0, begin) kept, the grid resized to out_h x out_w
  };
  struct Derived {
    FoldKind kind;
    std::vector<std::string> sources;  // canonical names of checkpoint tensors
    std::vector<int64_t> shape;
    int64_t begin = 0;  // kRowSlice, kColSlice; kResampleGrid: prefix rows
    int64_t grid[4] = {0, 0, 0, 0};  // kResampleGrid: in_h, in_w, out_h, out_w
    bool antialias = false;          // kResampleGrid: torch's antialias=True windows
  };
  void add_folds();
  Status read_derived_f32(const std::string& name, const Derived& d, float* dst, size_t count) const;
  // Shape of a canonical or derived tensor, nullptr when neither exists.
  const std::vector<int64_t>* find_shape(const std::string& name) const;

  SafetensorsFile file_;  // owns the mapping every Canonical points into
  WeightNaming naming_ = WeightNaming::kTimm;
  HfConvention hf_convention_ = HfConvention::kNone;
  std::map<std::string, Canonical> tensors_;
  std::vector<std::string> unmapped_;
  std::vector<std::string> ignored_;  // HF tensors inference never reads (DINOv2's mask_token)
  std::map<std::string, Derived> derived_;
  std::vector<std::string> incomplete_;  // messages for q/k/v groups with a part missing
};

}  // namespace edgevit
