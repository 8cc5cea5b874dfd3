#!/usr/bin/env python3
"""edgevit (CPU, fp32) vs ONNX Runtime's CPU provider on the same timm models, side by side in one run.

Needs torch, timm, onnx, onnxruntime, safetensors, numpy (the lent GPU machine has them) and an edgevit
binary (tools/bench/make_cpu_bundle.sh builds a portable one into .bundle-cpu/).
For each model (ViT-Ti/16, ViT-B/16; seeded random weights, batch 1) it exports the timm model to ONNX,
writes the state_dict as safetensors, imports it with `edgevit import`, checks edgevit's logits against
timm's (fp32, normwise), then times ORT (intra-op threads = T) and `edgevit bench --threads T` for
T in {1, 2, all cores}, medians over the same number of runs after warm-up. With --rounds R the two are
timed alternately R times per (model, T) (ORT, edgevit, ORT, edgevit, ...): the table reports the median
over rounds of each and of the per-round ratios, so a host whose speed drifts between minutes (a shared
VM) moves both sides of each ratio alike.

usage: python3 tools/bench/cpu_vs_ort.py --edgevit .bundle-cpu/edgevit --work /tmp/cpubench [--iters 30]
       [--rounds 3] [--threads 1,2,16]
"""
import argparse, json, os, statistics, subprocess, sys, time

import numpy as np
import onnxruntime as ort
import timm
import torch
from safetensors.torch import save_file

MODELS = [("vit_tiny_patch16_224", 3), ("vit_base_patch16_224", 12)]


def ort_median_ms(path, x, threads, warmup, iters):
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    for _ in range(warmup):
        sess.run(None, {name: x})
    ts = []
    for _ in range(iters):
        t0 = time.perf_counter()
        sess.run(None, {name: x})
        ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--edgevit", required=True)
    ap.add_argument("--work", default="/tmp/cpubench")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--models", default=",".join(m for m, _ in MODELS))
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--threads", help="comma-separated thread counts (default: 1, 2 and all cores)")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    cores = len(os.sched_getaffinity(0))
    threads = sorted({int(t) for t in args.threads.split(",")}) if args.threads else sorted({1, 2, cores})
    print(f"cpu: {cores} cores; torch {torch.__version__}, timm {timm.__version__}, onnxruntime {ort.__version__}")
    rows = []
    for name, heads in MODELS:
        if name not in args.models.split(","):
            continue
        torch.manual_seed(0)
        m = timm.create_model(name, pretrained=False).eval()
        st = os.path.join(args.work, name + ".safetensors")
        save_file({k: v.contiguous() for k, v in m.state_dict().items()}, st)
        x = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(1))
        onnx_path = os.path.join(args.work, name + ".onnx")
        with torch.no_grad():
            ref = m.double()(x.double()).float().numpy()
            m.float()
            try:
                torch.onnx.export(m, (x,), onnx_path, opset_version=17, dynamo=False)
            except TypeError:
                torch.onnx.export(m, (x,), onnx_path, opset_version=17)
        cfg = os.path.join(args.work, name + ".yaml")
        subprocess.run([args.edgevit, "import", "--from", "timm", st, "--heads", str(heads), "-o", cfg], check=True)
        inp = os.path.join(args.work, name + ".input.safetensors")
        save_file({"input": x.contiguous()}, inp)
        out = os.path.join(args.work, name + ".out.safetensors")
        subprocess.run([args.edgevit, "run", cfg, "--device", "host-cpu", "--input", inp, "--output", out],
                       check=True, stdout=subprocess.DEVNULL)
        from safetensors.numpy import load_file
        got = load_file(out)["logits"]
        err = float(np.linalg.norm(got - ref) / np.linalg.norm(ref))
        xo = x.numpy()
        check = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
        ort_ref = check.run(None, {check.get_inputs()[0].name: xo})[0]
        ort_err = float(np.linalg.norm(ort_ref - ref) / np.linalg.norm(ref))
        print(f"{name}: edgevit logits vs timm float64: rel err {err:.2e} (ORT: {ort_err:.2e})")
        for t in threads:
            os_, es, ratios = [], [], []
            for rnd in range(args.rounds):
                o = ort_median_ms(onnx_path, xo, t, args.warmup, args.iters)
                r = subprocess.run([args.edgevit, "bench", cfg, "--device", "host-cpu", "--batch", "1", "--threads",
                                    str(t), "--iters", str(args.iters), "--warmup", str(args.warmup), "--json"],
                                   check=True, capture_output=True, text=True)
                e = json.loads(r.stdout)["p50_ms"]
                os_.append(o); es.append(e); ratios.append(e / o)
                print(f"  threads {t:3d} round {rnd + 1}: ORT {o:8.2f} ms   edgevit {e:8.2f} ms   ratio {e / o:.2f}",
                      flush=True)
            o, e, ratio = statistics.median(os_), statistics.median(es), statistics.median(ratios)
            rows.append((name, t, o, e, ratio, min(ratios), max(ratios), err))
    print(f"\n{args.rounds} round(s) per row, medians; ratio = median of the per-round ratios (min-max)")
    print("| model | threads | ORT p50 (ms) | edgevit p50 (ms) | edgevit / ORT | ratio range | logits rel err vs timm |")
    print("|---|---|---|---|---|---|---|")
    for name, t, o, e, ratio, lo, hi, err in rows:
        print(f"| {name} | {t} | {o:.2f} | {e:.2f} | {ratio:.2f} | {lo:.2f}-{hi:.2f} | {err:.1e} |")


if __name__ == "__main__":
    sys.exit(main())
