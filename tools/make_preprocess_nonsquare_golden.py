#!/usr/bin/env python3
"""Writes tests/data/preprocess/nonsquare/: the preprocessing of a model whose input is NOT square (48 high,
32 wide), as timm's eval transform and the Hugging Face image processors do it, for the test images of
tools/make_preprocess_golden.py (read from tests/data/preprocess/images, not rewritten). The ground truth for
runtime/inputs.cpp and runtime/preprocess_config.cpp at a non-square size (tests/runtime/preprocess_test.cpp).

Pipelines (one folder each, holding the config file the importer reads):
  timm_bicubic_875   pretrained_cfg input_size [3, 48, 32], bicubic, crop_pct 0.875, crop_mode center:
                     scale_size (floor(48 / 0.875), floor(32 / 0.875)) = (54, 36) differ, so
                     transforms_imagenet_eval uses ResizeKeepRatio(scale_size) -- built without the
                     interpolation, so bilinear (timm 0.8 to 1.0.x) -- then CenterCrop((48, 32))
  timm_bilinear_100  input_size [3, 48, 32], bilinear, crop_pct 1.0: ResizeKeepRatio((48, 32)), crop
  timm_nearest_squash  nearest, crop_pct 0.9, crop_mode squash: Resize((53, 35)), CenterCrop((48, 32))
  hf_vit             ViTImageProcessor: size {height 48, width 32} bilinear, mean/std 0.5
  hf_clip            CLIPImageProcessor: shortest_edge 48 bicubic, centre crop {height 48, width 32}
ResizeKeepRatio.get_params (longest 0): ratio = min(h / target_h, w / target_w), size = [round(h / ratio),
round(w / ratio)] (Python's round); torchvision F.resize returns an image already that size as is; CenterCrop:
top = int(round((h - 48) / 2.0)), left = int(round((w - 32) / 2.0)). HF: PIL resize, (h - crop) // 2.
Output: goldens.safetensors, tensor "<pipeline>/<image file>" (3, 48, 32) float32.
Usage: /tmp/pil12env/bin/python tools/make_preprocess_nonsquare_golden.py [PREPROCESS_DIR]  (Pillow 12.x, numpy)
"""
import json
import math
import os
import sys

import numpy as np
from PIL import Image, ImageOps

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_preprocess_golden import hf_cfg, hf_process, write_goldens  # noqa: E402

ROOT = sys.argv[1] if len(sys.argv) > 1 else "tests/data/preprocess"
OUT = os.path.join(ROOT, "nonsquare")
H, W = 48, 32
IMAGENET = ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
HALF = ([0.5, 0.5, 0.5], [0.5, 0.5, 0.5])
CLIP = ([0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711])
PIL_INTERP = {"bilinear": Image.BILINEAR, "bicubic": Image.BICUBIC, "nearest": Image.NEAREST}
IMAGES = ["photo_97x61.png", "portrait_45x80.png", "grey_exif1_48x32.jpg", "grey_exif6_48x32.jpg"]


def load(name):
    with Image.open(os.path.join(ROOT, "images", name)) as im:
        return ImageOps.exif_transpose(im).convert("RGB")


def tv_resize_hw(img, new_h, new_w, interp):
    if (new_w, new_h) == img.size:
        return img
    return img.resize((new_w, new_h), PIL_INTERP[interp])


def resize_keep_ratio(img, target_h, target_w):
    w, h = img.size
    ratio = min(h / target_h, w / target_w)
    return tv_resize_hw(img, round(h * 1.0 / ratio), round(w * 1.0 / ratio), "bilinear")


def tv_center_crop(img, ch, cw):
    w, h = img.size
    top, left = int(round((h - ch) / 2.0)), int(round((w - cw) / 2.0))
    return img.crop((left, top, left + cw, top + ch))


def timm_eval(img, cfg):
    h, w = cfg["input_size"][1:]
    crop_pct = cfg.get("crop_pct", 0.875)
    sh, sw = math.floor(h / crop_pct), math.floor(w / crop_pct)
    if cfg.get("crop_mode", "center") == "squash":
        img = tv_resize_hw(img, sh, sw, cfg["interpolation"])
    else:
        assert sh != sw
        img = resize_keep_ratio(img, sh, sw)
    img = tv_center_crop(img, h, w)
    x = np.asarray(img, np.uint8).astype(np.float32) / np.float32(255)
    x = (x - np.array(cfg["mean"], np.float32)) / np.array(cfg["std"], np.float32)
    return x.transpose(2, 0, 1)


def timm_cfg(interp, mean_std, crop_pct, mode):
    return {"architecture": "vit_micro_patch8_48x32", "pretrained_cfg": {
        "input_size": [3, H, W], "interpolation": interp, "mean": mean_std[0], "std": mean_std[1],
        "crop_pct": crop_pct, "crop_mode": mode}}


PIPELINES = {
    "timm_bicubic_875": ("config.json", timm_cfg("bicubic", HALF, 0.875, "center")),
    "timm_bilinear_100": ("config.json", timm_cfg("bilinear", IMAGENET, 1.0, "center")),
    "timm_nearest_squash": ("config.json", timm_cfg("nearest", IMAGENET, 0.9, "squash")),
    "hf_vit": ("preprocessor_config.json", hf_cfg("ViTImageProcessor", {"height": H, "width": W}, 2, HALF)),
    "hf_clip": ("preprocessor_config.json",
                hf_cfg("CLIPImageProcessor", {"shortest_edge": H}, 3, CLIP, {"height": H, "width": W})),
}

tensors = {}
for pipe, (fname, cfg) in PIPELINES.items():
    os.makedirs(os.path.join(OUT, pipe), exist_ok=True)
    with open(os.path.join(OUT, pipe, fname), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    for name in IMAGES:
        img = load(name)
        t = timm_eval(img, cfg["pretrained_cfg"]) if fname == "config.json" else hf_process(img, cfg)
        assert t.shape == (3, H, W), (pipe, name, t.shape)
        tensors[f"{pipe}/{name}"] = np.ascontiguousarray(t, np.float32)

write_goldens(tensors, os.path.join(OUT, "goldens.safetensors"), "tools/make_preprocess_nonsquare_golden.py")
