#!/usr/bin/env python3
"""Writes tests/data/digits/calib_split.safetensors: the INT8 calibration images of vit-digits (docs/int8.md).

The images are the first N (default 256) of the TRAINING split that tools/train_digits.py makes
(sklearn load_digits, train_test_split(test_size=0.2, random_state=0, stratify=y)), in that split's order,
preprocessed exactly as the training and test inputs are: pixels p = v * 15 (0..240), x = float32((p / 255
- 0.5) / 0.5) computed in float64. Disjoint from test_split.safetensors by construction; the metadata
`dataset_index` (load_digits index of each row) lets tests/runtime/int8_calib_split_test.cpp check it
against the test split's own `dataset_index`.

Tensors: `input` F32 [N,1,8,8], `labels` F32 [N]. Deterministic: same sklearn data -> same bytes.
Needs numpy and scikit-learn (no torch); the file is written here with sorted header keys, so its bytes
do not depend on a hash order. Usage: tools/make_calib_split.py [--count N] [--out DIR]
"""
import argparse
import json
import os

import numpy as np
import sklearn
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

PIXEL_SCALE = 15  # as tools/train_digits.py
MEAN = 0.5
STD = 0.5


def save_file(tensors, path, metadata):
    """safetensors with sorted keys (the safetensors package orders metadata by hash: bytes vary run to run)."""
    header, offset, blobs = {"__metadata__": dict(sorted(metadata.items()))}, 0, []
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name], dtype="<f4")
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
        blobs.append(a.tobytes())
    text = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text + b"".join(blobs))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--count", type=int, default=256)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "data", "digits"))
    args = ap.parse_args()
    digits = load_digits()
    labels = digits.target.astype(np.int64)
    pixels = (digits.images.astype(np.int64) * PIXEL_SCALE).astype(np.uint8)
    idx_train, idx_test = train_test_split(np.arange(len(labels)), test_size=0.2, random_state=0, stratify=labels)
    rows = idx_train[: args.count]
    assert not set(rows.tolist()) & set(idx_test.tolist())
    x = ((pixels[rows].astype(np.float64) / 255.0 - MEAN) / STD).astype(np.float32)[:, None]
    tensors = {"input": np.ascontiguousarray(x), "labels": labels[rows].astype(np.float32)}
    meta = {"dataset_index": json.dumps([int(i) for i in rows]), "split": "train (tools/train_digits.py)",
            "formula": "input = float32((pixels / 255.0 - 0.5) / 0.5) in float64, pixels = load_digits * 15",
            "sklearn": sklearn.__version__, "numpy": np.__version__}
    out = os.path.join(args.out, "calib_split.safetensors")
    save_file(tensors, out, metadata=meta)
    print(f"{out}: {len(rows)} training images")


if __name__ == "__main__":
    main()
