#!/usr/bin/env python3
"""Outputs of the tests/data/families checkpoints at input sizes other than their own (32 x 32), as timm and
transformers compute them (issue #24: the input size is the user's): timm resamples pos_embed once when a
model is built at another img_size (timm.layers.resample_abs_pos_embed, bicubic, through checkpoint_filter_fn);
Hugging Face DINOv2 (with and without registers) interpolates its position embeddings in every forward;
ViT (ViTModel, ViTForImageClassification), DeiT (distilled), CLIP and SigLIP vision towers when the forward is
given interpolate_pos_encoding=True, each through its own embeddings' interpolate_pos_encoding.

Writes OUT_DIR/<case>.size<H>x<W>.golden.safetensors: `input` [2, 3, H, W], the outputs in float64 stored f32,
and `pos_embed` (timm: the resampled table the model holds; HF: what interpolate_pos_encoding returns).
Beside each HF golden: <case>.interpolate_pos_encoding.py, the source of the method the golden used.
usage: make_resize_goldens.py FAMILIES_DIR OUT_DIR [CASE...]   (default: every case)
"""
import json, os, sys, traceback

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


# Hugging Face cases: (checkpoint folder relative to FAMILIES_DIR, class, whether the forward needs
# interpolate_pos_encoding=True, outputs). Dinov2[WithRegisters]Model interpolates in every forward; ViT, DeiT,
# CLIP and SigLIP only when asked, each with its own embeddings' interpolate_pos_encoding.
def _tokens(o, m):
    return o.last_hidden_state


def _pooler(o, m):
    return o.pooler_output


def _logits(o, m):
    return o.logits


HF_CASES = {
    "hf_dinov2": ("hf_dinov2", "Dinov2Model", False, {"tokens": _tokens, "embedding": _pooler}),
    "hf_dinov2_reg4": ("hf_dinov2_reg4", "Dinov2WithRegistersModel", False, {"tokens": _tokens, "embedding": _pooler}),
    "hf_vit_model": ("hf_vit_model", "ViTModel", True, {"tokens": _tokens, "embedding": _pooler}),
    "vit-hf-micro": ("../hf/vit-hf-micro", "ViTForImageClassification", True, {"logits": _logits}),
    "hf_deit_distilled": ("hf_deit_distilled", "DeiTForImageClassificationWithTeacher", True, {"logits": _logits}),
    "hf_clip_vision": ("hf_clip_vision", "CLIPVisionModelWithProjection", True,
                       {"tokens": lambda o, m: m.vision_model.post_layernorm(o.last_hidden_state),
                        "embedding": lambda o, m: o.image_embeds}),
    "hf_siglip_vision": ("hf_siglip_vision", "SiglipVisionModel", True, {"tokens": _tokens, "embedding": _pooler}),
}


def hf_case(fam, out_dir, case):
    """The forward at each size, and `pos_embed`: what the embeddings' interpolate_pos_encoding returns for that
    size (the prefix rows it keeps, then the grid_h x grid_w patch rows). The method's source is written beside
    (<case>.interpolate_pos_encoding.py) as a record of the rule the golden follows."""
    import inspect
    import transformers as tf
    folder, cls, ask, outputs = HF_CASES[case]
    model = getattr(tf, cls).from_pretrained(os.path.join(fam, folder)).eval().double()
    emb = next(m for m in model.modules()
               if type(m).__name__.endswith("Embeddings") and hasattr(type(m), "interpolate_pos_encoding"))
    with open(os.path.join(out_dir, f"{case}.interpolate_pos_encoding.py"), "w") as f:
        f.write(f"# transformers {tf.__version__}, {type(emb).__module__}.{type(emb).__name__}\n")
        f.write(inspect.getsource(type(emb).interpolate_pos_encoding))
    cfg = getattr(model.config, "vision_config", model.config)
    p, e = cfg.patch_size, cfg.hidden_size
    table = next(t for n, t in emb.named_parameters() if "position_embedding" in n)
    rows = table.shape[-2]
    prefix = rows - (cfg.image_size // p) ** 2
    for h, w in SIZES:
        g = torch.Generator().manual_seed(h * 1000 + w)
        x = torch.randn((2, 3, h, w), generator=g, dtype=torch.float64)
        with torch.no_grad():
            o = model(pixel_values=x, interpolate_pos_encoding=True) if ask else model(pixel_values=x)
            shaped = torch.zeros((1, prefix + (h // p) * (w // p), e), dtype=torch.float64)
            pos = emb.interpolate_pos_encoding(shaped, h, w)
            out = {"input": x, "pos_embed": pos.reshape(1, -1, e)}
            out.update({name: fn(o, model) for name, fn in outputs.items()})
        save(out_dir, f"{case}.size{h}x{w}.golden.safetensors", out)


TIMM_CASES = ["timm_vit_nohead", "timm_dinov2", "timm_dinov2_reg4", "timm_clip"]


def main():
    fam, out_dir = sys.argv[1], sys.argv[2]
    os.makedirs(out_dir, exist_ok=True)
    import timm, transformers
    print(f"torch {torch.__version__}, timm {timm.__version__}, transformers {transformers.__version__}", flush=True)
    cases = sys.argv[3:] or TIMM_CASES + list(HF_CASES)
    for case in cases:
        try:
            (hf_case if case in HF_CASES else timm_case)(fam, out_dir, case)
        except Exception:  # one case failing must not stop the others
            print(f"{case}: FAILED\n{traceback.format_exc()}", flush=True)


if __name__ == "__main__":
    main()
