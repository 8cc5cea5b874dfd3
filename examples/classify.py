#!/usr/bin/env python3
"""Classify images with the edgevit Python module (README.md, section "Python").

  python3 examples/classify.py [--model config/models/vit-digits.yaml] [--device auto] IMAGE...

Prints the plan's numbers once, then the top-3 classes of each image. All images go through the engine in
one infer() call (written straight into the engine's input buffer: no copy).
"""
import argparse
import sys

import numpy as np

import edgevit


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("images", nargs="+")
    ap.add_argument("--model", default="config/models/vit-digits.yaml")
    ap.add_argument("--device", default="auto")
    args = ap.parse_args()
    try:
        engine = edgevit.Engine(args.model, device=args.device, max_batch=len(args.images))
    except edgevit.Error as e:
        sys.exit(f"classify: {e}")
    p = engine.plan
    print(f"{p['model']} on {p['device']}: {p['precision']}, arena {p['arena_bytes']} bytes, "
          f"total {p['total_bytes']} of {p['budget_bytes']} bytes, plan {p['plan_hash']}")

    # run_image(path) does one image; for a batch, decode each into its slot of the input buffer, then
    # infer once on the buffer itself.
    n = len(args.images)
    try:
        for i, path in enumerate(args.images):
            engine.load_image(path, i)
    except edgevit.Error as e:
        sys.exit(f"classify: {e}")
    logits = engine.infer(engine.input_buffer[:n])["logits"]
    probs = np.exp(logits - logits.max(axis=1, keepdims=True))
    probs /= probs.sum(axis=1, keepdims=True)
    labels = engine.labels or [str(i) for i in range(logits.shape[1])]
    for path, row in zip(args.images, probs):
        top = np.argsort(row)[::-1][:3]
        print(f"{path}: " + ", ".join(f"{labels[k]} (p={row[k]:.4f})" for k in top))


if __name__ == "__main__":
    main()
