#!/usr/bin/env python3
"""The ViT families people deploy, at their real sizes, on the GPU machine: edgevit vs timm (issue #24).

For each model below: timm builds it with seeded random weights (timm's init under a fixed seed, every bias
and norm parameter then perturbed by tools/gpu/make_timm_checkpoints.py's perturb(); nothing is downloaded), saves
the state_dict; `edgevit import --from timm` writes the model YAML (max_batch raised to 64, mean 0 / std 1:
the inputs are given normalized); then
  1. correctness: `edgevit run --precision fp16|fp32 --input x.safetensors --output` (CUDA fp16 and fp32,
     CPU fp32) against timm's output in float64: fp16 <= 5e-3 normwise, fp32 <= 1e-4, and the same top-1
     wherever the reference's top-1 leads its runner-up by more than twice our largest difference (these
     outputs are embeddings of random weights, whose top two entries can be a rounding apart: such a tie is
     reported, not failed);
  2. latency (median ms): edgevit `bench --device-input` (images already in the engine's device input, as
     timm's are) and plain `bench` (input in pinned host memory), against timm fp16 in a CUDA graph at batch 1
     and torch.compile (default mode, dynamic=False) at batch 64, each in this same run.
Targets (issue #24): batch 1 <= 0.6x timm's CUDA graph; batch 64 >= 1.3x torch.compile's throughput.

With --yaml-out DIR: the YAMLs `import` wrote (for `plan` on the Orin profiles).
With --profile-dir DIR: `edgevit bench --profile` (per-op CUDA-event table) at batch 1 and 64, and
torch.profiler's kernel table of timm's CUDA graph (batch 1) and torch.compile (batch 64), per model.

usage: bench_families.py --edgevit BIN --work DIR --json OUT.json [--models a,b] [--profile-dir DIR]
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time

import torch
import timm
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_e2e import capture_graph, cuda_time_ms, edgevit_bench, rel_err  # noqa: E402
from make_timm_checkpoints import perturb  # noqa: E402

# name: (timm model, create kwargs, import flags)
MODELS = {
    "dinov2_s14_224": ("vit_small_patch14_dinov2", {"img_size": 224}, ["--heads", "6", "--eps", "1e-6"]),
    "dinov2_s14_518": ("vit_small_patch14_dinov2", {"img_size": 518}, ["--heads", "6", "--eps", "1e-6"]),
    "dinov2_b14_reg4_518": ("vit_base_patch14_reg4_dinov2", {"img_size": 518}, ["--heads", "12", "--eps", "1e-6"]),
    "clip_b16_224": ("vit_base_patch16_clip_224", {}, ["--heads", "12", "--eps", "1e-5"]),
    "clip_l14_224": ("vit_large_patch14_clip_224", {}, ["--heads", "16", "--eps", "1e-5"]),
    # timm builds this SigLIP with nn.GELU (erf), not the tanh form of Hugging Face's SiglipVisionModel.
    "siglip_b16_224": ("vit_base_patch16_siglip_224", {}, ["--heads", "12", "--eps", "1e-6", "--pool", "map"]),
}
SEED = 1234


def build(timm_name, kwargs):
    torch.manual_seed(SEED)
    model = timm.create_model(timm_name, pretrained=False, **kwargs).eval()
    perturb(model, torch.Generator().manual_seed(SEED + 1))
    return model


def prepare(edgevit, work, key, args_yaml_out=""):
    timm_name, kwargs, flags = MODELS[key]
    model = build(timm_name, kwargs)
    ckpt = os.path.join(work, f"{key}.safetensors")
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, ckpt)
    yaml_path = os.path.join(work, f"{key}.yaml")
    p = subprocess.run([edgevit, "import", "--from", "timm", ckpt, *flags, "-o", yaml_path],
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"import {key}: rc {p.returncode}: {p.stderr.strip()[-800:]}")
    text = open(yaml_path).read()
    text = re.sub(r"max_batch: \d+", "max_batch: 64", text)
    text = re.sub(r"mean: \[[^\]]*\]", "mean: [0.0, 0.0, 0.0]", text)
    text = re.sub(r"std: \[[^\]]*\]", "std: [1.0, 1.0, 1.0]", text)
    open(yaml_path, "w").write(text)
    if args_yaml_out:
        shutil.copy(yaml_path, os.path.join(args_yaml_out, f"{key}.yaml"))
    size = model.patch_embed.img_size
    g = torch.Generator().manual_seed(SEED + 2)
    x = torch.randn(2, 3, size[0], size[1], generator=g)
    save_file({"input": x}, os.path.join(work, f"{key}.input.safetensors"))
    with torch.inference_mode():
        ref = model.double().cuda()(x.double().cuda()).cpu()
    model.float().cpu()
    return model, yaml_path, ref, size, p.stderr.strip()


def top1_agrees(ours, ref):
    """Same argmax per image, unless the reference's lead over its runner-up is within 2x our difference."""
    ties = 0
    for o, r in zip(ours.double(), ref.double()):
        top2 = torch.topk(r, 2).values
        if int(o.argmax()) != int(r.argmax()):
            if float(top2[0] - top2[1]) > 2 * float((o - r).abs().max()):
                return False, ties
            ties += 1
    return True, ties


def check(edgevit, work, key, yaml_path, ref):
    res = {}
    for name, device, prec, tol in (("fp16", "auto", "fp16", 5e-3), ("fp32", "auto", "fp32", 1e-4),
                                    ("cpu-fp32", "host-cpu", "fp32", 1e-4)):
        out = os.path.join(work, f"{key}.{name}.out.safetensors")
        p = subprocess.run([edgevit, "run", yaml_path, "--device", device, "--precision", prec, "--input",
                            os.path.join(work, f"{key}.input.safetensors"), "--output", out],
                           capture_output=True, text=True)
        if p.returncode != 0:
            res[name] = {"ok": False, "rc": p.returncode, "error": p.stderr.strip()[-600:]}
            continue
        outs = load_file(out)
        # Backbones without a head (timm's DINOv2 with num_classes=0) write no logits; timm's forward returns
        # their pooled feature, which is our `embedding`.
        ours = outs["logits"] if "logits" in outs else outs["embedding"]
        e = rel_err(ours, ref)
        same, ties = top1_agrees(ours, ref)
        res[name] = {"ok": e <= tol and same, "rel_err": e, "same_top1": same, "top1_ties": ties, "tol": tol}
    return res


def profile(args, key, model, size, yaml_path):
    """Per-op tables: edgevit's own (bench --profile) and torch.profiler's kernels of timm graph / compile."""
    d = args.profile_dir
    for b in (1, 64):
        p = subprocess.run([args.edgevit, "bench", yaml_path, "--device", "auto", "--batch", str(b), "--iters",
                            "20", "--warmup", "3", "--profile"], capture_output=True, text=True)
        with open(os.path.join(d, f"{key}.edgevit.b{b}.txt"), "w") as f:
            f.write(p.stdout + p.stderr[-3000:])
    acts = [torch.profiler.ProfilerActivity.CUDA]
    for b, fn in ((1, "graph"), (64, "compile")):
        x = torch.randn(b, 3, size[0], size[1], device="cuda", dtype=torch.float16)
        with torch.inference_mode():
            run = torch.compile(model, dynamic=False) if fn == "compile" else model
            for _ in range(3):
                run(x)
            torch.cuda.synchronize()
            with torch.profiler.profile(activities=acts) as prof:
                for _ in range(5):
                    run(x)
                torch.cuda.synchronize()
        with open(os.path.join(d, f"{key}.timm-{fn}.b{b}.txt"), "w") as f:
            f.write(prof.key_averages().table(sort_by="cuda_time_total", row_limit=30, max_name_column_width=90))


def timm_graph_ms(model, batch, size, iters, warmup):
    x = torch.randn(batch, 3, size[0], size[1], device="cuda", dtype=torch.float16)
    with torch.inference_mode():
        graph, _ = capture_graph(model, x)
        return cuda_time_ms(graph.replay, iters, warmup)


def compile_ms(model, batch, size, iters, warmup):
    x = torch.randn(batch, 3, size[0], size[1], device="cuda", dtype=torch.float16)
    with torch.inference_mode():
        t0 = time.perf_counter()
        compiled = torch.compile(model, dynamic=False)
        compiled(x)
        torch.cuda.synchronize()
        build_s = time.perf_counter() - t0
        return cuda_time_ms(lambda: compiled(x), iters, warmup), build_s


def run_model(args, key, report):
    model, yaml_path, ref, size, import_log = prepare(args.edgevit, args.work, key, args.yaml_out)
    m = {"timm": MODELS[key][0], "size": list(size), "import": import_log[-400:],
         "check": check(args.edgevit, args.work, key, yaml_path, ref)}
    print(key, "check:", json.dumps(m["check"]), flush=True)
    for b, (iters, warmup) in ((1, (200, 20)), (64, (30, 5))):
        m[f"b{b}"] = {"edgevit-devin": edgevit_bench(args.edgevit, yaml_path, b, iters, warmup, ("--device-input",))["p50_ms"],
                      "edgevit": edgevit_bench(args.edgevit, yaml_path, b, iters, warmup)["p50_ms"]}
    model = model.half().cuda()
    if args.profile_dir:
        profile(args, key, model, size, yaml_path)
    m["b1"]["timm-graph"] = timm_graph_ms(model, 1, size, 200, 20)
    m["b64"]["compile"], m["b64"]["compile_build_s"] = compile_ms(model, 64, size, 30, 5)
    m["b1_ratio_vs_timm_graph"] = m["b1"]["edgevit-devin"] / m["b1"]["timm-graph"]
    m["b64_speedup_vs_compile"] = m["b64"]["compile"] / m["b64"]["edgevit-devin"]
    print(key, json.dumps(m), flush=True)
    del model
    torch._dynamo.reset()
    torch.cuda.empty_cache()
    report["models"][key] = m
    with open(args.json, "w") as f:
        json.dump(report, f, indent=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--edgevit", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--json", required=True)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--profile-dir", default="")
    ap.add_argument("--yaml-out", default="", help="copy each imported model YAML here")
    args = ap.parse_args()
    if args.profile_dir:
        os.makedirs(args.profile_dir, exist_ok=True)
    os.makedirs(args.work, exist_ok=True)
    report = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "timm": timm.__version__,
              "date": time.strftime("%Y-%m-%d"), "models": {}}
    ok = True
    for key in args.models.split(","):
        try:
            run_model(args, key, report)
            ok = ok and all(c["ok"] for c in report["models"][key]["check"].values())
        except Exception as e:  # one model's failure is reported; the others still run
            print(key, "ERROR", repr(e)[-800:], flush=True)
            report["models"][key] = {"error": repr(e)[-800:]}
            ok = False
    print(f"\n{report['gpu']}, torch {report['torch']}, timm {report['timm']}, {report['date']}; ms (median)")
    print("| model | size | check fp16 / fp32 / cpu fp32 | b1 edgevit (devin / pinned) | b1 timm graph | ratio (<= 0.6) "
          "| b64 edgevit (devin / pinned) | b64 compile | speed-up (>= 1.3) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for key, m in report["models"].items():
        if "error" in m:
            print(f"| {key} | error: {m['error'][:120]} |")
            continue
        ck = " / ".join(f"{m['check'][p].get('rel_err', float('nan')):.1e}{'' if m['check'][p]['ok'] else ' FAIL'}"
                        for p in ("fp16", "fp32", "cpu-fp32"))
        b1, b64 = m["b1"], m["b64"]
        print(f"| {key} | {m['size'][0]}x{m['size'][1]} | {ck} | {b1['edgevit-devin']:.3f} / {b1['edgevit']:.3f} | "
              f"{b1['timm-graph']:.3f} | {m['b1_ratio_vs_timm_graph']:.2f}x | {b64['edgevit-devin']:.2f} / "
              f"{b64['edgevit']:.2f} | {b64['compile']:.2f} | {m['b64_speedup_vs_compile']:.2f}x |")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
