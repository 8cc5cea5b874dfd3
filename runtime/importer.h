// `edgevit import`: infer a ModelSpec from a checkpoint, so a model config never has to be written by hand.
//
// timm (one .safetensors file): everything but num_heads comes from the tensors:
//   patch_embed.proj.weight (E,C,p,p) -> embed_dim, in_chans, patch_size
//   blocks.N.*                         -> depth
//   cls_token / reg_token (1,R,E)      -> class_token, reg_tokens
//   pos_embed (1,L,E)                  -> img_size, a square (L = patches + prefix tokens, or = patches:
//                                         no_embed_class); --image-size H[xW] sets another
//   blocks.N.attn.qkv.bias present     -> qkv_bias (N: the first block)
//   fc_norm.* vs norm.*                -> fc_norm
//   head.weight (C,E)                  -> num_classes (0 when absent); a CLIP tower's image projection or a
//                                         classifier (projection_head) from config.json beside it and the
//                                         head's bias (runtime/timm_head.h); ModelSpec::head_note says which
//   blocks.N.mlp.fc1.weight (M,E)      -> mlp_ratio = M / E
//   num_heads must be given (--heads); global_pool defaults to timm's: 'token' with a class token and no
//   fc_norm, else 'avg'; LayerNorm eps defaults to timm's 1e-6.
//   dist_token, blocks.N.ls1.gamma, norm_pre.*, blocks.N.attn.q_norm.*, attn_pool.* -> dist_token,
//   layer_scale, pre_norm, qk_norm, global_pool 'map' (DeiT distilled, DINOv2, CLIP, qk-norm, SigLIP); the
//   activation cannot be inferred (gelu unless the YAML says otherwise). Checkpoints of families not supported
//   (EVA/RoPE, SwiGLU, BEiT) are refused naming what is missing (docs/models.md).
// Hugging Face (a directory with config.json + model.safetensors; model_type vit, deit, dinov2,
// dinov2_with_registers, clip_vision_model, clip, siglip_vision_model, siglip): the architecture comes from
// config.json (clip / siglip: its vision_config) and is cross-checked against every tensor shape.
// In both cases the result has passed WeightSource::check() and validate_model_spec().
#pragma once

#include <optional>
#include <string>
#include <utility>

#include "runtime/model_spec.h"
#include "base/status.h"

namespace edgevit {

struct ImportOptions {
  std::optional<int> heads;        // required for timm; must agree with config.json for HF
  std::optional<GlobalPool> pool;  // overrides the default (HF classifies the class token: token only)
  std::optional<double> eps;       // timm: overrides 1e-6; HF: must agree with config.json
  std::optional<Activation> act;   // timm only (the checkpoint cannot say it; default gelu): HF's config.json
                                   // names hidden_act, so an HF import refuses it
  // The model's input (height, width) in pixels, instead of the checkpoint's: each a multiple of the patch
  // size, square or not; the position embeddings are resampled to its grid at load (WeightSource::fit_pos_embed).
  std::optional<std::pair<int, int>> image_size;
};

// weights_path in the result is absolute; name is the checkpoint's file stem.
Result<ModelSpec> infer_model_spec_timm(const std::string& checkpoint, const ImportOptions& options);
// Reads DIR/config.json, DIR/model.safetensors and, when present, DIR/preprocessor_config.json
// (image_mean / image_std). name is the directory's name.
Result<ModelSpec> infer_model_spec_hf(const std::string& dir, const ImportOptions& options);
// A directory is read as Hugging Face, a file as timm.
Result<ModelSpec> infer_model_spec(const std::string& path, const ImportOptions& options);

// save_model_spec() with the YAML path made absolute first, so the weights path is written relative to
// the YAML's directory.
Status save_imported_spec(const ModelSpec& spec, const std::string& yaml_path);

}  // namespace edgevit
