#!/usr/bin/env python3
"""Seeded random-weight ViT-S/16 and ViT-B/16 (timm names) and random images, for the INT8 measurements of
docs/int8.md (`edgevit calibrate` / `edgevit compare` on models with no trained weights).

Weights follow timm's VisionTransformer init (trunc_normal std 0.02 for Linear weights and pos_embed, cls_token
std 1e-6) with every bias and LayerNorm parameter perturbed so none is a trivial 0 or 1 (as the goldens in
shared/testdata/golden): biases N(0, 0.02), LayerNorm gamma 1 + N(0, 0.1), beta N(0, 0.02). Images: N(0, 1)
per pixel (already normalized), `calib.safetensors` (tensor `input`, 8 images) and `eval.safetensors` (4 other
images). numpy only; seed 0. Also `vit-s16-outliers` (seed 1): ViT-S/16 as above, then in every block's norm1 and
norm2 the gamma and beta of the same 6 channels times 20, the systematic post-LayerNorm outlier channels of trained
ViTs (RepQ-ViT, FQ-ViT) made by hand, for the LayerNorm fold's measurement (docs/int8.md "Measured"). And
`vit-s16-timm`, `vit-b16-timm` (seed 2): the block GEMMs' weights a plain N(0, 0.02) and the patch embedding
U(+-1/sqrt(768)), as timm's own init makes them (its trunc_normal_ cuts at +-2, absolute: nowhere), like the
seeded timm checkpoints of tools/gpu/make_timm_checkpoints.py (which need torch); the outputs above unchanged.
Usage: tools/int8/random_vits.py OUT_DIR
"""
import json
import os
import sys

import numpy as np


def save(tensors, path, metadata=None):
    header, offset, blobs = {}, 0, []
    if metadata:
        header["__metadata__"] = metadata
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name], dtype="<f4")
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
        blobs.append(a.tobytes())
    text = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text + b"".join(blobs))


def tn(rng, shape, std):
    return np.clip(rng.standard_normal(shape), -2, 2) * std


def vit(rng, e, depth, classes=1000, img=224, patch=16, timm_init=False):
    t, m = (img // patch) ** 2 + 1, 4 * e
    w = {"patch_embed.proj.weight": tn(rng, (e, 3, patch, patch), 0.02), "patch_embed.proj.bias": tn(rng, (e,), 0.02),
         "cls_token": tn(rng, (1, 1, e), 1e-6), "pos_embed": tn(rng, (1, t, e), 0.02)}
    if timm_init:  # PyTorch's Conv2d init, as timm leaves it: U(-1/sqrt(fan_in), 1/sqrt(fan_in))
        bound = 1 / np.sqrt(3 * patch * patch)
        w["patch_embed.proj.weight"] = rng.uniform(-bound, bound, (e, 3, patch, patch))
    for i in range(depth):
        b = f"blocks.{i}."
        for n, shape in (("attn.qkv", (3 * e, e)), ("attn.proj", (e, e)), ("mlp.fc1", (m, e)), ("mlp.fc2", (e, m))):
            # timm's trunc_normal_(std=.02) cuts at +-2 absolute, i.e. not at all: a plain normal
            w[b + n + ".weight"] = rng.standard_normal(shape) * 0.02 if timm_init else tn(rng, shape, 0.02)
            w[b + n + ".bias"] = rng.standard_normal(shape[0]) * 0.02
        for n in ("norm1", "norm2"):
            w[b + n + ".weight"] = 1 + rng.standard_normal(e) * 0.1
            w[b + n + ".bias"] = rng.standard_normal(e) * 0.02
    w["norm.weight"] = 1 + rng.standard_normal(e) * 0.1
    w["norm.bias"] = rng.standard_normal(e) * 0.02
    w["head.weight"] = tn(rng, (classes, e), 0.02)
    w["head.bias"] = rng.standard_normal(classes) * 0.02
    return w


YAML = """name: {name}
architecture: {{img_size: 224, patch_size: 16, in_chans: 3, embed_dim: {e}, depth: {d}, num_heads: {h}, mlp_ratio: 4.0,
  num_classes: 1000}}
weights: {{path: {name}.safetensors, naming: timm}}
runtime: {{max_batch: 8}}
"""


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(0)
    for name, e, d, h in (("vit-s16-random", 384, 12, 6), ("vit-b16-random", 768, 12, 12)):
        save(vit(rng, e, d), os.path.join(out, name + ".safetensors"))
        with open(os.path.join(out, name + ".yaml"), "w") as f:
            f.write(YAML.format(name=name, e=e, d=d, h=h))
    save({"input": rng.standard_normal((8, 3, 224, 224))}, os.path.join(out, "calib.safetensors"))
    save({"input": rng.standard_normal((4, 3, 224, 224))}, os.path.join(out, "eval.safetensors"))
    rng = np.random.default_rng(1)
    w = vit(rng, 384, 12)
    outliers = rng.choice(384, size=6, replace=False)
    for k in w:
        if k.startswith("blocks.") and (".norm1." in k or ".norm2." in k):
            w[k][outliers] *= 20
    save(w, os.path.join(out, "vit-s16-outliers.safetensors"))
    with open(os.path.join(out, "vit-s16-outliers.yaml"), "w") as f:
        f.write(YAML.format(name="vit-s16-outliers", e=384, d=12, h=6))
    rng = np.random.default_rng(2)
    for name, e, d, h in (("vit-s16-timm", 384, 12, 6), ("vit-b16-timm", 768, 12, 12)):
        save(vit(rng, e, d, timm_init=True), os.path.join(out, name + ".safetensors"))
        with open(os.path.join(out, name + ".yaml"), "w") as f:
            f.write(YAML.format(name=name, e=e, d=d, h=h))


if __name__ == "__main__":
    main()
