// Is a timm checkpoint's `head` a classifier or a CLIP tower's image projection? (`edgevit import`, the rule
// in docs/models.md "A timm CLIP tower's head".) timm loads OpenAI / OpenCLIP image towers (`vit_*_clip_*`)
// with their projection as `head` (timm's _convert_openai_clip: weight = proj^T, bias = zeros) and
// num_classes = the embedding width; the same architectures fine-tuned on ImageNet (`*_ft_in1k`, ...) carry a
// trained classifier there. Evidence, in order:
//   1. config.json beside the checkpoint (a timm hub folder): `architecture` names the model; a name that is
//      not `vit_*_clip_*` is a classifier; a CLIP one whose pretrained tag (`pretrained_cfg.tag`, or the part
//      after a '.' in `architecture`) is fine-tuned (holds "ft_") is a classifier;
//   2. otherwise (a CLIP name without a fine-tuned tag, or no timm config.json) the checkpoint: a CLIP-style
//      tower (norm_pre present) whose head has no bias or an all-zero one is the projection; a head with a
//      non-zero (trained) bias is a classifier; a tower without norm_pre is not CLIP.
// Internal to the importer.
#pragma once

#include <string>

#include "base/status.h"
#include "runtime/model_spec.h"
#include "runtime/weights.h"

namespace edgevit {

struct TimmHead {
  bool projection = false;
  std::string note;  // what decided it, for import's output; empty for a model without a head
};

// `arch` is the architecture read from the tensors (num_classes, pre_norm, head_bias set). kConfigError names
// config.json and the key when `architecture` or `pretrained_cfg.tag` is not a string.
Result<TimmHead> detect_timm_head(const WeightSource& weights, const std::string& checkpoint, const VitArch& arch);

}  // namespace edgevit
