#!/usr/bin/env python3
"""Tiny seeded checkpoints of the ViT families people deploy, from timm and Hugging Face transformers, with
their outputs computed in float64 (issue #24's ground truth). Runs where torch, timm and transformers are
installed (the lent GPU machine; CPU is enough). Writes into OUT_DIR (tests/data/families/ in the repo):

  <case>.safetensors            timm: the state_dict (float32)
  <case>/                       Hugging Face: config.json + model.safetensors (float32), save_pretrained
  <case>.json                   what was built: library, class or timm kwargs, the outputs written
  <case>.golden.safetensors     input [2, 3, H, W] and the outputs as applicable, float64 results stored f32:
                                  logits      the model's classification output
                                  pre_logits  timm forward_head(pre_logits=True)
                                  embedding   HF pooler_output / image_embeds (CLIP projection)
                                  tokens      the final normed tokens [N, S, E] (timm forward_features;
                                              HF last_hidden_state, CLIP: post_layernorm applied to it)

Every parameter is perturbed from its init (LayerNorm weights around 1, LayerScale gammas, biases) so that
each one matters to the outputs. usage: make_family_goldens.py OUT_DIR
"""
import json, os, sys, traceback

import torch
from safetensors.torch import save_file

SEED = 20261126
IMG, PATCH, EMBED, DEPTH, HEADS, CLASSES = 32, 8, 64, 2, 2, 10


def perturb(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, p in sorted(model.named_parameters()):
            p.add_(0.05 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return model


def golden_input(seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn((2, 3, IMG, IMG), generator=g, dtype=torch.float64)


def save_golden(out_dir, case, tensors, meta):
    save_file({k: v.detach().to(torch.float32).contiguous() for k, v in tensors.items()},
              os.path.join(out_dir, f"{case}.golden.safetensors"))
    meta["outputs"] = sorted(tensors)
    with open(os.path.join(out_dir, f"{case}.json"), "w") as f:
        json.dump(meta, f, indent=1, sort_keys=True)
    print(f"{case}: " + ", ".join(f"{k} {list(v.shape)}" for k, v in sorted(tensors.items())), flush=True)


# ---- timm -----------------------------------------------------------------------------------------------

def timm_case(out_dir, case, builder, kwargs, seed):
    import timm  # noqa: F401
    model = perturb(builder(**kwargs).eval(), seed)
    sd = {k: v.detach().to(torch.float32).contiguous() for k, v in model.state_dict().items()}
    save_file(sd, os.path.join(out_dir, f"{case}.safetensors"))
    model = model.double()
    x = golden_input(seed + 1)
    with torch.no_grad():
        tokens = model.forward_features(x)
        pre = model.forward_head(tokens, pre_logits=True)
        logits = model(x)
    out = {"input": x, "tokens": tokens, "pre_logits": pre}
    if kwargs.get("num_classes", 1000) > 0:
        out["logits"] = logits
    save_golden(out_dir, case, out, {"library": "timm", "class": builder.__name__,
                                     "kwargs": {k: (v if isinstance(v, (int, float, str, bool)) else repr(v))
                                                for k, v in kwargs.items()}})


def timm_cases(out_dir):
    from torch import nn
    from timm.models.vision_transformer import VisionTransformer
    from timm.models.deit import VisionTransformerDistilled
    base = dict(img_size=IMG, patch_size=PATCH, embed_dim=EMBED, depth=DEPTH, num_heads=HEADS, num_classes=CLASSES)
    cases = [
        ("timm_vit_nohead", VisionTransformer, dict(base, num_classes=0)),
        ("timm_deit_distilled", VisionTransformerDistilled, dict(base)),
        ("timm_dinov2", VisionTransformer, dict(base, init_values=1e-5)),
        ("timm_dinov2_reg4", VisionTransformer, dict(base, init_values=1e-5, reg_tokens=4, no_embed_class=True)),
        ("timm_clip", VisionTransformer, dict(base, pre_norm=True, num_classes=16, norm_layer=nn.LayerNorm)),
        ("timm_clip_quickgelu", VisionTransformer, dict(base, pre_norm=True, num_classes=16, norm_layer=nn.LayerNorm,
                                                        act_layer="quick_gelu")),
        ("timm_qknorm", VisionTransformer, dict(base, qk_norm=True)),
        ("timm_siglip", VisionTransformer, dict(base, class_token=False, global_pool="map", act_layer="gelu_tanh",
                                                num_classes=0)),
        ("timm_gelu_tanh", VisionTransformer, dict(base, act_layer="gelu_tanh")),
    ]
    for i, (case, builder, kwargs) in enumerate(cases):
        kwargs = {k: v for k, v in kwargs.items() if v is not None}
        try:
            timm_case(out_dir, case, builder, kwargs, SEED + 100 * i)
        except Exception:  # one family failing must not stop the others
            print(f"{case}: FAILED\n{traceback.format_exc()}", flush=True)


# ---- Hugging Face ----------------------------------------------------------------------------------------

def hf_case(out_dir, case, model, seed, outputs):
    perturb(model.eval(), seed)
    folder = os.path.join(out_dir, case)
    model.float().save_pretrained(folder, safe_serialization=True)
    model = model.double()
    x = golden_input(seed + 1)
    with torch.no_grad():
        o = model(pixel_values=x)
    out = {"input": x}
    out.update({name: fn(o, model, x) for name, fn in outputs.items()})
    save_golden(out_dir, case, out, {"library": "transformers", "class": type(model).__name__,
                                     "model_type": model.config.model_type})


def hf_cases(out_dir):
    import transformers as tf
    common = dict(image_size=IMG, patch_size=PATCH, hidden_size=EMBED, num_hidden_layers=DEPTH,
                  num_attention_heads=HEADS, intermediate_size=2 * EMBED)
    last = lambda o, m, x: o.last_hidden_state
    pooler = lambda o, m, x: o.pooler_output
    logits = lambda o, m, x: o.logits
    cases = [
        ("hf_vit_model", lambda: tf.ViTModel(tf.ViTConfig(**common)), {"tokens": last, "embedding": pooler}),
        ("hf_deit_distilled", lambda: tf.DeiTForImageClassificationWithTeacher(tf.DeiTConfig(**common, num_labels=CLASSES)),
         {"logits": logits}),
        ("hf_dinov2", lambda: tf.Dinov2Model(tf.Dinov2Config(**common, layerscale_value=0.5)),
         {"tokens": last, "embedding": pooler}),
        ("hf_dinov2_cls", lambda: tf.Dinov2ForImageClassification(tf.Dinov2Config(**common, layerscale_value=0.5,
                                                                                    num_labels=CLASSES)),
         {"logits": logits}),
        ("hf_dinov2_reg4", lambda: tf.Dinov2WithRegistersModel(tf.Dinov2WithRegistersConfig(
            **common, layerscale_value=0.5, num_register_tokens=4)), {"tokens": last, "embedding": pooler}),
        ("hf_clip_vision", lambda: tf.CLIPVisionModelWithProjection(tf.CLIPVisionConfig(
            **common, projection_dim=16, hidden_act="quick_gelu")),
         {"tokens": lambda o, m, x: m.vision_model.post_layernorm(o.last_hidden_state), "embedding":
          lambda o, m, x: o.image_embeds}),
        ("hf_siglip_vision", lambda: tf.SiglipVisionModel(tf.SiglipVisionConfig(**common)),
         {"tokens": last, "embedding": pooler}),
    ]
    for i, (case, make, outputs) in enumerate(cases):
        try:
            torch.manual_seed(SEED + 1000 + i)
            hf_case(out_dir, case, make(), SEED + 1000 + 100 * i, outputs)
        except Exception:
            print(f"{case}: FAILED\n{traceback.format_exc()}", flush=True)


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    import timm, transformers
    print(f"torch {torch.__version__}, timm {timm.__version__}, transformers {transformers.__version__}", flush=True)
    torch.manual_seed(SEED)
    timm_cases(out_dir)
    hf_cases(out_dir)


if __name__ == "__main__":
    main()
