#!/usr/bin/env python3
"""Write a tiny Hugging Face ViT checkpoint and its float64 golden outputs for edgevit's HF name mapping.

Model: transformers `ViTForImageClassification(ViTConfig(image_size=32, patch_size=8, num_channels=3,
hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256, num_labels=5,
qkv_bias=True, hidden_act="gelu"))` with seeded random weights (torch seed 0). Every weight is redrawn
with a scale that keeps attention far from uniform, and every bias and LayerNorm parameter is perturbed
so none is a trivial 0 or 1.

Outputs, under --out (tests/data/hf/ in the repo):
  vit-hf-micro/{config.json,model.safetensors}     save_pretrained with transformers' own current names
                                                    (5.x: vit.layers.N.attention.q_proj..., when that
                                                    version can write them; see tensor_names.json)
  vit-hf-micro-v4/{config.json,model.safetensors}  the same weights under the legacy 4.x names
                                                    (vit.encoder.layer.N.attention.attention.query...),
                                                    written only if this transformers can write both
  vit-hf-micro.golden.safetensors                   F32: input [2,3,32,32], logits [2,5],
                                                    pre_logits [2,64] (final LayerNorm'd CLS token);
                                                    computed in float64 on the CPU (model.double()) from
                                                    the weights reloaded from vit-hf-micro/
  tensor_names.json                                 tensor names and shapes each variant holds

Reproduce: python3 tools/make_hf_golden.py --out tests/data/hf   (transformers 5.17, PyTorch 2.11)
"""

import argparse
import inspect
import json
import os
import shutil
import struct
import sys

import torch
import transformers
from safetensors.torch import save_file
from transformers import ViTConfig, ViTForImageClassification

CONFIG = dict(image_size=32, patch_size=8, num_channels=3, hidden_size=64, num_hidden_layers=2,
              num_attention_heads=4, intermediate_size=256, num_labels=5, qkv_bias=True, hidden_act="gelu")


def safetensors_names(path: str) -> dict:
    """Tensor name -> [dtype, shape], read from the file's JSON header."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    return {k: [v["dtype"], v["shape"]] for k, v in sorted(header.items()) if k != "__metadata__"}


def is_legacy(names) -> bool:
    return any(".encoder.layer." in k for k in names)


@torch.no_grad()
def randomize(model: torch.nn.Module, gen: torch.Generator) -> None:
    for name, p in model.named_parameters():
        if "layernorm" in name or "layer_norm" in name:
            if name.endswith("weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(0.2 * torch.randn(p.shape, generator=gen))
        elif name.endswith("bias"):
            p.copy_(0.2 * torch.randn(p.shape, generator=gen))
        elif name.endswith("cls_token") or name.endswith("position_embeddings"):
            p.copy_(0.5 * torch.randn(p.shape, generator=gen))
        else:  # linear and patch-projection weights: unit-ish activations, peaked attention
            fan_in = p[0].numel()
            p.copy_(1.5 / fan_in ** 0.5 * torch.randn(p.shape, generator=gen))


@torch.no_grad()
def forward64(model_dir: str, x: torch.Tensor):
    model = ViTForImageClassification.from_pretrained(model_dir, attn_implementation="eager")
    model = model.double().eval()
    hidden = model.vit(pixel_values=x.double()).last_hidden_state  # (B, 17, 64), after vit.layernorm
    pre_logits = hidden[:, 0]  # (B, 64)
    logits = model(pixel_values=x.double()).logits  # (B, 5)
    assert torch.allclose(logits, model.classifier(pre_logits), rtol=0, atol=1e-12)
    return logits, pre_logits


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    model = ViTForImageClassification(ViTConfig(**CONFIG)).float().eval()
    randomize(model, gen)
    x = torch.randn((2, 3, 32, 32), generator=gen, dtype=torch.float32)

    main_dir = os.path.join(args.out, "vit-hf-micro")
    v4_dir = os.path.join(args.out, "vit-hf-micro-v4")
    can_choose = "save_original_format" in inspect.signature(model.save_pretrained).parameters
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, "
          f"save_pretrained(save_original_format=...) available: {can_choose}")
    variants = {}
    if can_choose:
        model.save_pretrained(main_dir, save_original_format=False)
        model.save_pretrained(v4_dir, save_original_format=True)
        variants = {"vit-hf-micro": main_dir, "vit-hf-micro-v4": v4_dir}
    else:
        model.save_pretrained(main_dir)
        variants = {"vit-hf-micro": main_dir}

    names = {k: safetensors_names(os.path.join(d, "model.safetensors")) for k, d in variants.items()}
    if can_choose and names["vit-hf-micro"].keys() == names["vit-hf-micro-v4"].keys():
        print("note: this transformers writes one naming only; vit-hf-micro-v4 is not kept")
        shutil.rmtree(v4_dir)
        del variants["vit-hf-micro-v4"], names["vit-hf-micro-v4"]
    for k, n in names.items():
        print(f"{k}: {len(n)} tensors, legacy 4.x names: {is_legacy(n)}")
        for name, (dtype, shape) in n.items():
            print(f"  {name} {dtype} {shape}")
    with open(os.path.join(args.out, "tensor_names.json"), "w") as f:
        json.dump({"transformers": transformers.__version__, "torch": torch.__version__, "variants": names},
                  f, indent=1)
        f.write("\n")

    logits, pre_logits = forward64(main_dir, x)
    for k, d in variants.items():  # every variant must load back to the same model
        other_logits, other_pre = forward64(d, x)
        if not (torch.equal(other_logits, logits) and torch.equal(other_pre, pre_logits)):
            print(f"error: {k} does not reproduce the golden outputs")
            return 1
    with torch.no_grad():
        fp32_logits = model(pixel_values=x).logits
    rel = float((fp32_logits.double() - logits).norm() / logits.norm())
    print(f"fp32 model vs float64 golden: normwise rel. error {rel:.3e}")
    print(f"logits:\n{logits}")
    golden = {"input": x.contiguous(), "logits": logits.float().contiguous(),
              "pre_logits": pre_logits.float().contiguous()}
    save_file(golden, os.path.join(args.out, "vit-hf-micro.golden.safetensors"),
              metadata={"transformers": transformers.__version__, "torch": torch.__version__,
                        "producer": "tools/make_hf_golden.py", "config": json.dumps(CONFIG)})
    print("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
