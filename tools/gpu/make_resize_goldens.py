#!/usr/bin/env python3
"""Outputs of the tests/data/families checkpoints at input sizes other than their own (32 x 32), as timm and
transformers compute them (issue #24: the input size is the user's): timm resamples pos_embed once when a
model is built at another img_size (timm.layers.resample_abs_pos_embed, bicubic, through checkpoint_filter_fn);
Hugging Face DINOv2 interpolates its position embeddings in the forward (interpolate_pos_encoding).

Writes OUT_DIR/<case>.size<H>x<W>.golden.safetensors: `input` [2, 3, H, W], the outputs in float64 stored f32,
and `pos_embed` (timm: the resampled table the model holds; HF: what interpolate_pos_encoding returns).
usage: make_resize_goldens.py FAMILIES_DIR OUT_DIR
"""
import json, os, sys

import torch
from safetensors.torch import load_file, save_file

SIZES = [(48, 48), (48, 32)]


def save(out_dir, name, tensors):
    save_file({k: v.detach().to(torch.float32).contiguous() for k, v in tensors.items()},
              os.path.join(out_dir, name))
    print(name + ": " + ", ".join(f"{k} {list(v.shape)}" for k, v in sorted(tensors.items())), flush=True)


def timm_case(fam, out_dir, case):
    from timm.models.vision_transformer import VisionTransformer, checkpoint_filter_fn
    meta = json.load(open(os.path.join(fam, f"{case}.json")))
    kwargs = dict(meta["kwargs"])
    if "LayerNorm" in str(kwargs.get("norm_layer", "")):
        kwargs["norm_layer"] = torch.nn.LayerNorm
    sd = load_file(os.path.join(fam, f"{case}.safetensors"))
    for h, w in SIZES:
        model = VisionTransformer(**dict(kwargs, img_size=(h, w))).eval()
        model.load_state_dict(checkpoint_filter_fn(sd, model))
        model = model.double()
        g = torch.Generator().manual_seed(h * 1000 + w)
        x = torch.randn((2, 3, h, w), generator=g, dtype=torch.float64)
        with torch.no_grad():
            tokens = model.forward_features(x)
            out = {"input": x, "tokens": tokens, "pre_logits": model.forward_head(tokens, pre_logits=True),
                   "pos_embed": model.pos_embed}
            if kwargs.get("num_classes", 1000) > 0:
                out["logits"] = model(x)
        save(out_dir, f"{case}.size{h}x{w}.golden.safetensors", out)


def hf_case(fam, out_dir, case):
    import transformers as tf
    model = tf.Dinov2Model.from_pretrained(os.path.join(fam, case)).eval().double()
    for h, w in SIZES:
        g = torch.Generator().manual_seed(h * 1000 + w)
        x = torch.randn((2, 3, h, w), generator=g, dtype=torch.float64)
        with torch.no_grad():
            o = model(pixel_values=x)
            emb = model.embeddings
            patches = (h // emb.patch_size) * (w // emb.patch_size)
            shaped = torch.zeros((1, 1 + patches, emb.position_embeddings.shape[-1]), dtype=torch.float64)
            pos = emb.interpolate_pos_encoding(shaped, h, w)
        save(out_dir, f"{case}.size{h}x{w}.golden.safetensors",
             {"input": x, "tokens": o.last_hidden_state, "embedding": o.pooler_output, "pos_embed": pos})


def main():
    fam, out_dir = sys.argv[1], sys.argv[2]
    os.makedirs(out_dir, exist_ok=True)
    for case in ["timm_vit_nohead", "timm_dinov2", "timm_dinov2_reg4", "timm_clip"]:
        try:
            timm_case(fam, out_dir, case)
        except Exception as e:  # noqa: BLE001
            print(f"{case}: FAILED {e!r}", flush=True)
    for case in ["hf_dinov2"]:
        try:
            hf_case(fam, out_dir, case)
        except Exception as e:  # noqa: BLE001
            print(f"{case}: FAILED {e!r}", flush=True)


if __name__ == "__main__":
    main()
