#!/usr/bin/env python3
"""Train edgevit's embedded default model, a tiny timm ViT, on scikit-learn's handwritten digits.

The data set is `sklearn.datasets.load_digits()` (1,797 8x8 grayscale images, values 0..16, 10 classes,
shipped inside scikit-learn: nothing is downloaded). Everything the C++ runtime and its tests need is
written into one output directory:

  vit-digits.safetensors        fp32 state_dict, tensor names exactly as timm names them
  vit-digits.yaml               model config (the contract read by runtime/config)
  vit-digits.labels.txt         "0".."9", one per line
  digits/digit-0.png .. -9.png  8-bit grayscale PNGs, one correctly classified test image per class
  digits/test_split.safetensors F32 tensors over the whole test split (N = 360):
                                  pixels [N,8,8] (PNG pixel values 0..240), input [N,1,8,8] (normalized),
                                  labels [N], logits [N,10] (float64 forward of the saved weights, stored
                                  as float32), predictions [N] (argmax of logits);
                                  metadata: accuracy, torch, timm, mean, std, png_rows, ...
  train_log.txt                 per-epoch loss / accuracy and the final test accuracy

Pixel scaling, exact end to end:
  PNG pixel      p = 15 * v                     (v in 0..16 -> p in 0..240, an exact uint8)
  model input    x = float32((p / 255.0 - mean) / std), computed in float64, mean = 0.5, std = 0.5
  resize         identity (8 -> 8)
The runtime computes exactly `(float)((p / 255.0 - mean) / std)` in double, so it sees the same floats.

Split and determinism: sklearn `train_test_split(test_size=0.2, random_state=0, stratify=y)` (1,437 train,
360 test images); torch seed 0; by default training runs on the CPU in one thread with
`torch.use_deterministic_algorithms(True)`, so a rerun with the same versions gives the same tensors
(checked; the order of the safetensors metadata keys may differ between runs).
`--device cuda` trains on the GPU (TF32 off, deterministic cuBLAS/cuDNN, same CPU-drawn shuffles and
shifts); that should repeat on the same GPU model and software (not verified byte for byte), while another
GPU or the CPU gives a different model (its accuracy not checked: rerun and read the log).
Training: AdamW (lr 2e-3, weight decay 0.05), batch 64, 5 warm-up epochs then cosine decay, cross-entropy
with label smoothing 0.1, random shifts of up to one pixel in each direction (zero-padded, i.e.
background) as the only augmentation.

Reproduce (the shipped files were made this way, 300 epochs, ~2 min on an NVIDIA H200; versions are
recorded in the safetensors metadata and the log; test accuracy 0.9889, 356/360):
  python3 tools/train_digits.py --device cuda --out OUTDIR
  # PyTorch 2.11.0+cu130, timm 1.0.29, scikit-learn 1.9.1, numpy 2.5.2, safetensors 0.8.0, pillow 12.3.0
then copy OUTDIR/vit-digits.{safetensors,yaml,labels.txt} to config/models/ and OUTDIR/digits/* to
tests/data/digits/. See docs/digits.md.
"""

import argparse
import json
import math
import os
import sys
import time

import numpy as np
import sklearn
import timm
import torch
import torch.nn.functional as F
from PIL import Image
from safetensors.torch import load_file, save_file
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from timm.models.vision_transformer import VisionTransformer

PIXEL_SCALE = 15  # v in 0..16 -> p in 0..240
MEAN = 0.5
STD = 0.5
NUM_CLASSES = 10
MIN_ACCURACY = 0.97

ARCH = dict(img_size=8, patch_size=2, in_chans=1, num_classes=NUM_CLASSES, embed_dim=64, depth=4,
            num_heads=2, mlp_ratio=4.0)

MODEL_YAML = """\
# edgevit's embedded default model: a timm ViT trained on scikit-learn's 8x8 handwritten digits.
# Made by tools/train_digits.py (see docs/digits.md); test accuracy {accuracy} on the 360-image test split.
# Input: an 8x8 grayscale image, pixel p in 0..255; x = (p / 255 - 0.5) / 0.5.
name: vit-digits
architecture:
  img_size: 8
  patch_size: 2
  in_chans: 1
  embed_dim: 64
  depth: 4
  num_heads: 2
  mlp_ratio: 4.0
  qkv_bias: true
  class_token: true
  reg_tokens: 0
  no_embed_class: false
  global_pool: token
  fc_norm: false
  num_classes: 10
  layer_norm_eps: 1.0e-6
  act: gelu
weights:
  path: vit-digits.safetensors      # relative to this YAML's directory
  naming: timm
runtime:
  precision: fp32
  max_batch: 64
  attention: auto
preprocess:
  resize: 8
  mean: [{mean}]
  std: [{std}]
labels: vit-digits.labels.txt
"""


def normalize(pixels: np.ndarray) -> np.ndarray:
    """pixels: uint8 (..., 8, 8) in 0..240 -> float32, computed in float64 like the runtime does."""
    return ((pixels.astype(np.float64) / 255.0 - MEAN) / STD).astype(np.float32)


def make_model() -> VisionTransformer:
    return VisionTransformer(**ARCH)


def shift_batch(x: torch.Tensor, gen: torch.Generator, background: float) -> torch.Tensor:
    """Random shift of each image by -1..1 pixels in y and x; x: (B, 1, 8, 8)."""
    b, _, h, w = x.shape
    padded = F.pad(x, (1, 1, 1, 1), value=background)
    offsets = torch.randint(0, 3, (b, 2), generator=gen).to(x.device)
    rows = offsets[:, 0, None] + torch.arange(h, device=x.device)  # (B, 8)
    cols = offsets[:, 1, None] + torch.arange(w, device=x.device)  # (B, 8)
    batch = torch.arange(b, device=x.device)[:, None, None]
    return padded[batch, 0, rows[:, :, None], cols[:, None, :]][:, None]


def evaluate(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    model.eval()
    with torch.no_grad():
        pred = model(x).argmax(dim=1)
    model.train()
    return float((pred == y).double().mean())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--epochs", type=int, default=300)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--weight-decay", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cpu", help="training device: cpu (one thread) or cuda")
    args = ap.parse_args()

    os.makedirs(os.path.join(args.out, "digits"), exist_ok=True)
    log_path = os.path.join(args.out, "train_log.txt")
    log_file = open(log_path, "w")

    def log(msg: str) -> None:
        print(msg)
        log_file.write(msg + "\n")
        log_file.flush()

    if args.device == "cuda":
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cudnn.benchmark = False
        torch.backends.cudnn.deterministic = True
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    # On CUDA a missing deterministic kernel warns (and shows in the log) rather than stopping the run.
    torch.use_deterministic_algorithms(True, warn_only=args.device != "cpu")
    timm.layers.set_fused_attn(False)  # plain matmul + softmax attention: deterministic everywhere
    device = torch.device(args.device)
    versions = {"torch": torch.__version__, "timm": timm.__version__, "sklearn": sklearn.__version__,
                "numpy": np.__version__}
    log(f"versions: {json.dumps(versions)}")
    log(f"args: {json.dumps(vars(args))}")

    digits = load_digits()
    values = digits.images  # (1797, 8, 8) float64, integers 0..16
    assert np.array_equal(values, np.round(values)) and values.min() >= 0 and values.max() <= 16
    pixels = (values.astype(np.int64) * PIXEL_SCALE).astype(np.uint8)  # (1797, 8, 8) 0..240
    labels = digits.target.astype(np.int64)
    idx_train, idx_test = train_test_split(np.arange(len(labels)), test_size=0.2, random_state=0,
                                           stratify=labels)
    log(f"split: {len(idx_train)} train, {len(idx_test)} test")

    x_train = torch.from_numpy(normalize(pixels[idx_train])[:, None])  # (Ntr, 1, 8, 8)
    y_train = torch.from_numpy(labels[idx_train])
    x_test = torch.from_numpy(normalize(pixels[idx_test])[:, None])  # (N, 1, 8, 8)
    y_test = torch.from_numpy(labels[idx_test])
    background = float(normalize(np.zeros((1,), np.uint8))[0])

    model = make_model().to(device)
    model.train()
    x_train, y_train = x_train.to(device), y_train.to(device)
    x_test_dev, y_test_dev = x_test.to(device), y_test.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    steps_per_epoch = math.ceil(len(x_train) / args.batch)
    total_steps = args.epochs * steps_per_epoch
    warmup = 5 * steps_per_epoch
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(s, total_steps) / total_steps)))
    gen = torch.Generator().manual_seed(args.seed)  # CPU generator: same draws on every device
    start = time.time()
    for epoch in range(args.epochs):
        perm = torch.randperm(len(x_train), generator=gen)
        total_loss = 0.0
        for s in range(steps_per_epoch):
            bi = perm[s * args.batch:(s + 1) * args.batch].to(device)
            xb = shift_batch(x_train[bi], gen, background)
            loss = F.cross_entropy(model(xb), y_train[bi], label_smoothing=0.1)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            total_loss += float(loss.detach()) * len(bi)
        if epoch % 10 == 9 or epoch == args.epochs - 1:
            log(f"epoch {epoch + 1:4d}  loss {total_loss / len(x_train):.4f}  "
                f"train_acc {evaluate(model, x_train, y_train):.4f}  test_acc {evaluate(model, x_test_dev, y_test_dev):.4f}  "
                f"({time.time() - start:.0f} s)")

    model = model.cpu().eval()
    weights_path = os.path.join(args.out, "vit-digits.safetensors")
    state = {k: v.detach().to(torch.float32).contiguous() for k, v in model.state_dict().items()}
    save_file(state, weights_path, metadata={"format": "pt", "producer": "tools/train_digits.py",
                                             "arch": json.dumps(ARCH), **versions})

    # Reference outputs come from the saved bytes, run in float64 on the CPU.
    ref = make_model()
    ref.load_state_dict(load_file(weights_path), strict=True)
    ref = ref.double().eval()
    with torch.no_grad():
        logits64 = ref(x_test.double())  # (N, 10)
    predictions = logits64.argmax(dim=1)
    correct = predictions == y_test
    accuracy = float(correct.double().mean())
    log(f"test accuracy (float64 forward of the saved weights): {accuracy:.4f} "
        f"({int(correct.sum())}/{len(y_test)})")
    with torch.no_grad():
        fp32_pred = model(x_test).argmax(dim=1)
    log(f"fp32 vs float64 prediction mismatches: {int((fp32_pred != predictions).sum())}")

    # One correctly classified test image per class: the first in test-split order.
    png_rows = []
    for c in range(NUM_CLASSES):
        rows = torch.nonzero((y_test == c) & correct)
        if len(rows) == 0:
            log(f"error: no test image of class {c} is classified correctly; train longer")
            return 1
        row = int(rows[0, 0])
        png_rows.append(row)
        png_path = os.path.join(args.out, "digits", f"digit-{c}.png")
        Image.fromarray(pixels[idx_test[row]], mode="L").save(png_path)
        back = np.asarray(Image.open(png_path))
        assert back.dtype == np.uint8 and np.array_equal(back, pixels[idx_test[row]]), png_path
    log(f"png rows in the test split (digit-0..9): {png_rows}")

    split = {
        "pixels": torch.from_numpy(pixels[idx_test].astype(np.float32)),  # (N, 8, 8)
        "input": x_test.contiguous(),  # (N, 1, 8, 8)
        "labels": y_test.to(torch.float32),  # (N,)
        "logits": logits64.to(torch.float32).contiguous(),  # (N, 10)
        "predictions": predictions.to(torch.float32),  # (N,)
    }
    meta = {"accuracy": f"{accuracy:.6f}", "mean": repr(MEAN), "std": repr(STD),
            "pixel_scale": str(PIXEL_SCALE), "png_rows": json.dumps(png_rows),
            "dataset_index": json.dumps([int(i) for i in idx_test]),
            "formula": "input = float32((pixels / 255.0 - mean) / std) in float64", **versions}
    save_file(split, os.path.join(args.out, "digits", "test_split.safetensors"), metadata=meta)

    with open(os.path.join(args.out, "vit-digits.yaml"), "w") as f:
        f.write(MODEL_YAML.format(accuracy=f"{accuracy:.4f}", mean=MEAN, std=STD))
    with open(os.path.join(args.out, "vit-digits.labels.txt"), "w") as f:
        f.write("".join(f"{c}\n" for c in range(NUM_CLASSES)))

    if accuracy < MIN_ACCURACY:
        log(f"error: accuracy {accuracy:.4f} is below the required {MIN_ACCURACY}")
        return 1
    log("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
