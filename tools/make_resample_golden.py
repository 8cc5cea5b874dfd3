#!/usr/bin/env python3
"""Writes tests/data/resample/pil_resize.safetensors: 8-bit images and what Pillow's Image.resize makes of
them (the resampling timm's and Hugging Face's eval transforms run), the ground truth for
kernels/cpu/resample.cpp (tests/kernels/resample_test.cpp). Values are stored as float32 (exact integers
0..255) because edgevit's safetensors reader takes float tensors.

Tensors: "src.<name>" (H, W, C) and "out.<name>.<W>x<H>.<filter>" (H', W', C), filter bilinear | bicubic.
Usage: python3 tools/make_resample_golden.py [OUT]   (needs Pillow 12.x and numpy; seeded, so reruns are
identical). The checked-in file was made with Pillow 12.0.0: Pillow 13.0 runs the vertical pass first for
some shapes, which edgevit does not reproduce (docs: kernels/cpu/resample.cpp).
"""
import json
import struct
import sys

import numpy as np
from PIL import Image

OUT = sys.argv[1] if len(sys.argv) > 1 else "tests/data/resample/pil_resize.safetensors"
rng = np.random.default_rng(20261126)


def sources():
    yield "noise_rgb_37x23", rng.integers(0, 256, (23, 37, 3), dtype=np.uint8)
    yy, xx = np.mgrid[0:40, 0:29]
    grad = np.stack([(xx * 255 // 28), (yy * 255 // 39), ((xx + yy) * 4) % 256], axis=-1).astype(np.uint8)
    yield "gradient_rgb_29x40", grad
    edges = np.zeros((17, 17, 1), np.uint8)
    edges[::2, :, 0] = 255  # stripes: the filters' negative lobes overshoot and clip here
    yield "stripes_grey_17x17", edges
    yield "noise_grey_40x30", rng.integers(0, 256, (30, 40, 1), dtype=np.uint8)


SIZES = [(16, 16), (8, 5), (11, 30), (45, 52), (37, 23), (3, 3)]
FILTERS = {"bilinear": Image.BILINEAR, "bicubic": Image.BICUBIC}

tensors = {}
for name, img in sources():
    tensors[f"src.{name}"] = img
    mode = "RGB" if img.shape[2] == 3 else "L"
    pil = Image.fromarray(img[:, :, 0] if mode == "L" else img, mode)
    for w, h in SIZES:
        for fname, f in FILTERS.items():
            out = np.asarray(pil.resize((w, h), f))
            tensors[f"out.{name}.{w}x{h}.{fname}"] = out.reshape(h, w, img.shape[2])

header, blobs, offset = {"__metadata__": {"generator": "tools/make_resample_golden.py",
                                          "pillow": Image.__version__}}, [], 0
for key in sorted(tensors):
    data = tensors[key].astype("<f4").tobytes()
    header[key] = {"dtype": "F32", "shape": list(tensors[key].shape), "data_offsets": [offset, offset + len(data)]}
    blobs.append(data)
    offset += len(data)
h = json.dumps(header, separators=(",", ":")).encode()
h += b" " * (-len(h) % 8)
with open(OUT, "wb") as f:
    f.write(struct.pack("<Q", len(h)))
    f.write(h)
    for b in blobs:
        f.write(b)
print(f"{OUT}: {len(tensors)} tensors, {offset} bytes of data, Pillow {Image.__version__}")
