#!/usr/bin/env python3
"""Writes tests/data/preprocess/: test images, the preprocessing configs of six checkpoint families and what
their own pipelines make of each image, the ground truth for runtime/inputs.cpp and
runtime/preprocess_config.cpp (tests/runtime/preprocess_test.cpp).

Pipelines (one folder each, holding the config file the importer reads; targets are 32 px instead of 224 to
keep the files small, the arithmetic is the same):
  timm_bicubic_875     timm config.json pretrained_cfg: bicubic, crop_pct 0.875 (ViT default), 0.5 mean/std
  timm_bilinear_100    timm config.json, top-level keys: bilinear, crop_pct 1.0, ImageNet mean/std
  timm_nearest_squash  timm: nearest, crop_pct 0.9, crop_mode squash (35x35, then crop: odd offsets)
  hf_vit               ViTImageProcessor: 32x32 bilinear, rescale 1/255, mean/std 0.5
  hf_clip              CLIPImageProcessor: shortest_edge 32 bicubic, centre crop 32, CLIP mean/std
  hf_siglip            SiglipImageProcessor: 32x32 bicubic, mean/std 0.5
  hf_dinov2            BitImageProcessor (DINOv2): shortest_edge 37 bicubic, centre crop 32, ImageNet
timm's eval transform is replicated without torch on PIL images: torchvision's Resize (the other side
int(size * long / short); an image already that size is returned as is) and CenterCrop
(top = int(round((h - crop) / 2.0))), ToTensor (float32 / 255) and Normalize (float32). Hugging Face's
processors: PIL resize of the uint8 image, center_crop with (h - crop) // 2, rescale in float64 then
float32, normalize in float32. EXIF: ImageOps.exif_transpose, then convert("RGB").

Images (images/): two PNGs (landscape 97x61, portrait 45x80) and grey JPEGs with EXIF orientations 1..8
made of flat 8x8 blocks at quality 100, so that every JPEG decoder (libjpeg-turbo here, stb_image in
edgevit) reconstructs the same pixels.
Output: goldens.safetensors, tensor "<pipeline>/<image file>" (3, 32, 32) float32.
Usage: /tmp/pil12env/bin/python tools/make_preprocess_golden.py [OUTDIR]  (Pillow 12.x and numpy;
seeded, so reruns are identical).
"""
import io
import json
import math
import os
import struct
import sys

import numpy as np
from PIL import Image, ImageOps

OUT = sys.argv[1] if len(sys.argv) > 1 else "tests/data/preprocess"
rng = np.random.default_rng(20261126)
IMAGENET = ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
HALF = ([0.5, 0.5, 0.5], [0.5, 0.5, 0.5])
CLIP = ([0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711])
PIL_INTERP = {"bilinear": Image.BILINEAR, "bicubic": Image.BICUBIC, "nearest": Image.NEAREST}


def images():
    yy, xx = np.mgrid[0:61, 0:97]
    photo = np.stack([xx * 255 // 96, yy * 255 // 60, (128 + 100 * np.sin(xx / 5.0) * np.cos(yy / 7.0))], -1)
    photo = np.clip(photo + rng.normal(0, 12, photo.shape), 0, 255).astype(np.uint8)
    photo[20:30, 40:60] = [255, 0, 0]  # hard edges: bicubic overshoot clips
    yield "photo_97x61.png", photo, None
    yield "portrait_45x80.png", rng.integers(0, 256, (80, 45, 3), dtype=np.uint8), None
    blocks = rng.integers(0, 256, (4, 6), dtype=np.uint8)
    grey = np.kron(blocks, np.ones((8, 8), np.uint8))  # 32 x 48, flat 8x8 blocks
    for o in range(1, 9):
        yield f"grey_exif{o}_48x32.jpg", grey, o


def save(name, arr, orientation):
    path = os.path.join(OUT, "images", name)
    if orientation is None:
        Image.fromarray(arr, "RGB").save(path)
    else:
        exif = Image.Exif()
        exif[0x0112] = orientation
        Image.fromarray(arr, "L").save(path, quality=100, subsampling=0, exif=exif.tobytes())
    with Image.open(path) as im:
        im = ImageOps.exif_transpose(im)
        return im.convert("RGB")


def tv_resize(img, size, interp):
    w, h = img.size
    if isinstance(size, int):
        short, long = (w, h) if w <= h else (h, w)
        new_short, new_long = size, int(size * long / short)
        new_w, new_h = (new_short, new_long) if w <= h else (new_long, new_short)
    else:
        new_h, new_w = size
    if (new_w, new_h) == (w, h):
        return img
    return img.resize((new_w, new_h), PIL_INTERP[interp])


def tv_center_crop(img, size):
    w, h = img.size
    top, left = int(round((h - size) / 2.0)), int(round((w - size) / 2.0))
    return img.crop((left, top, left + size, top + size))


def timm_eval(img, cfg):
    size = cfg["input_size"][1]
    crop_pct = cfg.get("crop_pct", 0.875)
    scale = math.floor(size / crop_pct)
    if cfg.get("crop_mode", "center") == "squash":
        img = tv_resize(img, (scale, scale), cfg["interpolation"])
    else:
        img = tv_resize(img, scale, cfg["interpolation"])
    img = tv_center_crop(img, size)
    x = np.asarray(img, np.uint8).astype(np.float32) / np.float32(255)
    x = (x - np.array(cfg["mean"], np.float32)) / np.array(cfg["std"], np.float32)
    return x.transpose(2, 0, 1)


def hf_process(img, cfg):
    arr = np.asarray(img, np.uint8)
    size = cfg["size"]
    h, w = arr.shape[:2]
    if "shortest_edge" in size:
        short, long = (w, h) if w <= h else (h, w)
        s = size["shortest_edge"]
        new_short, new_long = s, int(s * long / short)
        new_h, new_w = (new_long, new_short) if w <= h else (new_short, new_long)
    else:
        new_h, new_w = size["height"], size["width"]
    arr = np.asarray(Image.fromarray(arr).resize((new_w, new_h), resample=cfg["resample"]))
    if cfg.get("do_center_crop", False):
        ch, cw = cfg["crop_size"]["height"], cfg["crop_size"]["width"]
        top, left = (arr.shape[0] - ch) // 2, (arr.shape[1] - cw) // 2
        arr = arr[top:top + ch, left:left + cw]
    x = (arr.astype(np.float64) * cfg["rescale_factor"]).astype(np.float32)
    x = (x - np.array(cfg["image_mean"], np.float32)) / np.array(cfg["image_std"], np.float32)
    return x.transpose(2, 0, 1)


def hf_cfg(kind, size, resample, mean_std, crop=None):
    cfg = {"image_processor_type": kind, "do_resize": True, "size": size, "resample": resample,
           "do_rescale": True, "rescale_factor": 0.00392156862745098, "do_normalize": True,
           "image_mean": mean_std[0], "image_std": mean_std[1]}
    if crop is not None:  # a side, or {"height": h, "width": w}
        crop_size = crop if isinstance(crop, dict) else {"height": crop, "width": crop}
        cfg.update(do_center_crop=True, crop_size=crop_size, do_convert_rgb=True)
    return cfg


PIPELINES = {
    "timm_bicubic_875": ("config.json", {"architecture": "vit_micro_patch16_32", "num_classes": 10,
                                         "pretrained_cfg": {"input_size": [3, 32, 32], "interpolation": "bicubic",
                                                            "mean": HALF[0], "std": HALF[1], "crop_pct": 0.875,
                                                            "crop_mode": "center"}}),
    "timm_bilinear_100": ("config.json", {"input_size": [3, 32, 32], "interpolation": "bilinear",
                                          "mean": IMAGENET[0], "std": IMAGENET[1], "crop_pct": 1.0}),
    "timm_nearest_squash": ("config.json", {"architecture": "vit_micro_patch16_32",
                                            "pretrained_cfg": {"input_size": [3, 32, 32], "interpolation": "nearest",
                                                               "mean": IMAGENET[0], "std": IMAGENET[1],
                                                               "crop_pct": 0.9, "crop_mode": "squash"}}),
    "hf_vit": ("preprocessor_config.json", hf_cfg("ViTImageProcessor", {"height": 32, "width": 32}, 2, HALF)),
    "hf_clip": ("preprocessor_config.json", hf_cfg("CLIPImageProcessor", {"shortest_edge": 32}, 3, CLIP, 32)),
    "hf_siglip": ("preprocessor_config.json", hf_cfg("SiglipImageProcessor", {"height": 32, "width": 32}, 3, HALF)),
    "hf_dinov2": ("preprocessor_config.json", hf_cfg("BitImageProcessor", {"shortest_edge": 37}, 3, IMAGENET, 32)),
}

def write_goldens(tensors, path, generator):
    """tensors (name -> float32 array) as one safetensors file, names sorted, with the generator's name."""
    header, blobs, offset = {"__metadata__": {"generator": generator, "pillow": Image.__version__}}, [], 0
    for key in sorted(tensors):
        data = tensors[key].astype("<f4").tobytes()
        header[key] = {"dtype": "F32", "shape": list(tensors[key].shape),
                       "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    print(f"{len(tensors)} tensors, {offset} bytes")


def main():
    os.makedirs(os.path.join(OUT, "images"), exist_ok=True)
    upright = {name: save(name, arr, o) for name, arr, o in images()}
    tensors = {}
    for pipe, (fname, cfg) in PIPELINES.items():
        os.makedirs(os.path.join(OUT, pipe), exist_ok=True)
        with open(os.path.join(OUT, pipe, fname), "w") as f:
            json.dump(cfg, f, indent=2)
            f.write("\n")
        for name, img in upright.items():
            if name.startswith("grey_exif") and pipe not in ("timm_bicubic_875", "hf_clip"):
                continue  # orientation is the decoder's business: two pipelines suffice
            if fname == "config.json":
                t = timm_eval(img, cfg.get("pretrained_cfg", cfg))
            else:
                t = hf_process(img, cfg)
            tensors[f"{pipe}/{name}"] = np.ascontiguousarray(t, np.float32)
    write_goldens(tensors, os.path.join(OUT, "goldens.safetensors"), "tools/make_preprocess_golden.py")


if __name__ == "__main__":
    main()
