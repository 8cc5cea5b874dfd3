// The checkpoint's own preprocessing, read at `edgevit import` into ModelSpec::preprocess (docs/config.md,
// "Preprocessing"):
//   Hugging Face preprocessor_config.json: do_resize + size ({shortest_edge} | {height, width} | an int),
//     resample (PIL enum: 0 nearest, 2 bilinear, 3 bicubic), do_center_crop + crop_size, do_rescale +
//     rescale_factor, do_normalize + image_mean / image_std; the crop offset rounds down (HF's d // 2).
//   timm config.json (a hub folder): pretrained_cfg {input_size, interpolation, mean, std, crop_pct,
//     crop_mode}, or the same keys at the top level (older hub files); crop_pct defaults to timm's 0.875,
//     scale = (floor(H / crop_pct), floor(W / crop_pct)); crop_mode 'center' resizes the shorter side to it
//     (or, when its two sides differ, keeps the aspect ratio to cover it, bilinear, as timm's ResizeKeepRatio),
//     'squash' both sides; the crop offset rounds like torchvision's CenterCrop.
// Without either, the defaults (the config loader's: shorter side to img_size for a square input, else
// keep the ratio to cover img_h x img_w; bilinear, ImageNet mean/std) are kept and
// Preprocess::note says so: `import` prints it.
#pragma once

#include <string>

#include "base/status.h"
#include "runtime/model_spec.h"

namespace edgevit {

// Each fills *pre from one file and returns true, or false when the file is absent or (config.json)
// holds no timm preprocessing keys. img_h, img_w and in_chans are the model's: the pipeline must end at
// img_h x img_w, and 3 means/stds are averaged for a 1-channel model. kConfigError names the file and
// key of a malformed value, kUnsupported a pipeline edgevit does not reproduce (lanczos, crop_mode border).
Result<bool> read_hf_preprocessor_config(const std::string& path, int img_h, int img_w, int in_chans,
                                         Preprocess* pre);
Result<bool> read_timm_pretrained_cfg(const std::string& path, int img_h, int img_w, int in_chans, Preprocess* pre);

// spec->preprocess from the files beside spec->weights_path: preprocessor_config.json, else config.json's
// timm keys, else the defaults; spec->preprocess.note says which.
Status read_checkpoint_preprocess(ModelSpec* spec);

}  // namespace edgevit
