#!/usr/bin/env python3
"""End-to-end check and benchmark of the edgevit CUDA backend against timm, on the GPU machine.

Needs the models written by tools/gpu/make_timm_checkpoints.py (MODELS_DIR) and an edgevit binary built with
CUDA. tools/gpu/run_e2e_on_gpu.sh runs it; it prints a markdown table last and writes everything as JSON.

  1. ceilings, measured here: device-to-device copy (bytes read + written), an 8192^3 fp16 matmul on random
     data, and host-to-device copies of fp32 from pinned and from pageable memory;
  2. correctness: `edgevit run` logits vs timm's float64 logits (fp16 plan: <= 1e-2 normwise and the same
     top-1; fp32 plan: <= 1e-4);
  3. latency at batch 1, 8, 64, medians (CUDA events for timm, `edgevit bench` p50 for edgevit):
       edgevit        `edgevit bench`: input written once into the engine's pinned staging buffer
                      (Engine::input_buffer()), so infer() = graph replay (input read over the link by the
                      first kernel) + fp32 logits written back into pinned memory, no host copy
       edgevit-pageable  `bench --pageable-input`: infer() from a separate pageable fp32 array, copied into
                      the staging buffer by one host thread first (the edgevit column before 2026-11-22)
       edgevit-devin  `bench --device-input`: the images already in the engine's device input tensor
                      (Engine::device_input(), fp16), infer_device() = graph replay without the input cast,
                      fp32 logits written back into pinned memory: the input where timm's columns have it
       edgevit-dev    sum of per-op CUDA-event times of `edgevit bench --profile` (op by op, no graph:
                      device time of the kernels, no launch gaps, no input upload)
       timm-eager     timm fp16, input already on the GPU
       timm-graph     the same captured in a CUDA graph (torch.cuda.CUDAGraph), input on the GPU
       timm-graph-h2d timm-graph plus a pageable fp32 host input copied in and fp32 logits copied out
                      (what edgevit-pageable's number includes)
       compile        torch.compile(model) default mode, fp16, input on the GPU (--compile-models)
  4. floors: FLOPs / measured matmul rate and minimal bytes / measured copy bandwidth per batch.

usage: bench_e2e.py --edgevit BIN --models-dir DIR [--json OUT.json] [--compile-models vit_base_patch16_224]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import timm
from safetensors.torch import load_file

BATCHES = (1, 8, 64)
# ViT-B first: it carries the targets, and results are saved after every batch.
ARCH = {"vit_base_patch16_224": (768, 12), "vit_small_patch16_224": (384, 6), "vit_tiny_patch16_224": (192, 3)}
T, P, K_PATCH, CLASSES, DEPTH, IMG_ELEMS = 197, 196, 768, 1000, 12, 3 * 224 * 224


def flops_per_image(e):
    gemm = DEPTH * 2 * T * (3 * e * e + e * e + 4 * e * e + 4 * e * e) + 2 * P * K_PATCH * e + 2 * e * CLASSES
    attn = DEPTH * 4 * T * T * e
    return gemm + attn


def weight_bytes_fp16(e):
    per_block = 12 * e * e + 13 * e
    return 2 * (DEPTH * per_block + K_PATCH * e + e + (T + 1) * e + 2 * e + CLASSES * e + CLASSES)


def op_bytes_fp16(e, b):
    """Sum over ops of each op's inputs read once and outputs written once (fp16 activations)."""
    te = b * T * e
    per_block = 2 * (2 * te) + (te + 3 * te) + 4 * te + (te + 2 * te) + (te + 4 * te) + (4 * te + 2 * te)
    head = 2 * b * IMG_ELEMS + 2 * b * P * K_PATCH + b * P * e + 2 * te + 2 * te + b * e + b * CLASSES
    return weight_bytes_fp16(e) + 2 * (DEPTH * per_block + head) + 4 * b * IMG_ELEMS


def cuda_time_ms(fn, iters, warmup):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    return statistics.median(times)


def wall_time_ms(fn, iters, warmup):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def ceilings():
    n = 1 << 28  # 512 MiB of fp16
    a = torch.randn(n, device="cuda", dtype=torch.float16)
    b = torch.empty_like(a)
    ms = cuda_time_ms(lambda: b.copy_(a), 20, 5)
    bw = 2 * a.numel() * 2 / (ms * 1e-3)
    m = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
    m2 = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
    ms_mm = cuda_time_ms(lambda: m @ m2, 20, 5)
    tflops = 2 * 8192 ** 3 / (ms_mm * 1e-3) / 1e12
    host = torch.randn(64 * IMG_ELEMS)
    pinned = host.pin_memory()
    dev = torch.empty(64 * IMG_ELEMS, device="cuda")
    ms_pin = cuda_time_ms(lambda: dev.copy_(pinned, non_blocking=True), 20, 3)
    ms_page = wall_time_ms(lambda: dev.copy_(host), 20, 3)
    nbytes = host.numel() * 4
    del a, b, m, m2, dev
    torch.cuda.empty_cache()
    return {"copy_GBps": bw / 1e9, "fp16_mm_TFLOPs": tflops, "h2d_pinned_GBps": nbytes / (ms_pin * 1e-3) / 1e9,
            "h2d_pageable_GBps": nbytes / (ms_page * 1e-3) / 1e9}


def rel_err(x, ref):
    return float((x.double() - ref.double()).norm() / ref.double().norm())


def check(edgevit, models_dir, name):
    golden = load_file(os.path.join(models_dir, f"{name}.golden.safetensors"))
    res = {}
    for prec, tol in (("fp16", 1e-2), ("fp32", 1e-4)):
        out = os.path.join(tempfile.gettempdir(), f"{name}.{prec}.out.safetensors")
        cmd = [edgevit, "run", os.path.join(models_dir, f"{name}.yaml"), "--device", "auto", "--precision", prec,
               "--input", os.path.join(models_dir, f"{name}.input.safetensors"), "--output", out]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            res[prec] = {"ok": False, "error": p.stderr.strip()[-500:], "rc": p.returncode}
            continue
        ours = load_file(out)
        e = rel_err(ours["logits"], golden["logits"])
        same = bool(torch.equal(ours["logits"].argmax(1), golden["logits"].argmax(1)))
        res[prec] = {"ok": e <= tol and same, "rel_err": e, "same_top1": same, "tol": tol,
                     "timm_fp32_gpu_rel_err": rel_err(golden["logits_fp32_gpu"], golden["logits"])}
    return res


def edgevit_bench(edgevit, yaml_path, batch, iters, warmup, extra=()):
    cmd = [edgevit, "bench", yaml_path, "--device", "auto", "--batch", str(batch), "--iters", str(iters),
           "--warmup", str(warmup), "--json", *extra]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: rc {p.returncode}: {p.stderr.strip()[-800:]}")
    return json.loads(p.stdout)


def edgevit_profile(edgevit, yaml_path, batch, iters, out_txt):
    """`edgevit bench --profile` (op by op, CUDA events): the per-op table, saved; returns the sum of op ms."""
    cmd = [edgevit, "bench", yaml_path, "--device", "auto", "--batch", str(batch), "--iters", str(iters),
           "--warmup", "3", "--profile"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: rc {p.returncode}: {p.stderr.strip()[-800:]}")
    with open(out_txt, "w") as f:
        f.write(p.stdout)
    total, in_table = 0.0, False
    for line in p.stdout.splitlines():
        if line.startswith("per-op profile"):
            in_table = True
            continue
        tok = line.split()
        if in_table and len(tok) == 6 and tok[0] != "op":
            total += float(tok[2])
    return total


def capture_graph(model, static_x):
    """model(static_x) captured in a CUDA graph after 3 warm-up calls on a side stream: (graph, output)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            model(static_x)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_y = model(static_x)
    return graph, static_y


def timm_benches(name, batch, iters, warmup, do_compile):
    model = timm.create_model(name, pretrained=False, num_classes=1000).eval().half().cuda()
    x = torch.randn(batch, 3, 224, 224, device="cuda", dtype=torch.float16)
    out = {}
    with torch.inference_mode():
        out["timm-eager"] = cuda_time_ms(lambda: model(x), iters, warmup)
        static_x = x.clone()
        graph, static_y = capture_graph(model, static_x)
        out["timm-graph"] = cuda_time_ms(graph.replay, iters, warmup)
        host = torch.randn(batch, 3, 224, 224)  # pageable fp32, like edgevit's caller

        def host_path():
            static_x.copy_(host.cuda().half())
            graph.replay()
            return static_y.float().cpu()

        out["timm-graph-h2d"] = wall_time_ms(host_path, iters, warmup)
        if do_compile:
            t0 = time.perf_counter()
            compiled = torch.compile(model, dynamic=False)
            compiled(x)
            torch.cuda.synchronize()
            out["compile_s"] = time.perf_counter() - t0
            out["compile"] = cuda_time_ms(lambda: compiled(x), iters, warmup)
    del model
    torch.cuda.empty_cache()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--edgevit", required=True)
    ap.add_argument("--models-dir", required=True)
    ap.add_argument("--json", default="bench_e2e.json")
    ap.add_argument("--models", default=",".join(ARCH))
    ap.add_argument("--compile-models", default="vit_base_patch16_224")
    ap.add_argument("--compile-batches", default="1,64", help="torch.compile is slow to build: these batches only")
    ap.add_argument("--profile-models", default="vit_base_patch16_224")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    out_dir = os.path.dirname(os.path.abspath(args.json))
    report = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "timm": timm.__version__,
              "date": time.strftime("%Y-%m-%d"), "ceilings": ceilings(), "models": {}}
    c = report["ceilings"]
    print(f"ceilings: copy {c['copy_GBps']:.0f} GB/s, fp16 matmul {c['fp16_mm_TFLOPs']:.0f} TFLOP/s, H2D pinned "
          f"{c['h2d_pinned_GBps']:.1f} GB/s, pageable {c['h2d_pageable_GBps']:.1f} GB/s", flush=True)
    for name in args.models.split(","):
        e, _ = ARCH[name]
        m = {"check": check(args.edgevit, args.models_dir, name), "batches": {}}
        print(name, "check:", json.dumps(m["check"]), flush=True)
        yaml_path = os.path.join(args.models_dir, f"{name}.yaml")
        for b in BATCHES:
            iters, warmup = (200, 20) if b == 1 else (100, 10) if b == 8 else (40, 5)
            row = {}
            ev = edgevit_bench(args.edgevit, yaml_path, b, iters, warmup)
            row["edgevit"] = ev["p50_ms"]
            row["edgevit-pageable"] = edgevit_bench(args.edgevit, yaml_path, b, iters, warmup,
                                                    ("--pageable-input",))["p50_ms"]
            row["edgevit-devin"] = edgevit_bench(args.edgevit, yaml_path, b, iters, warmup,
                                                 ("--device-input",))["p50_ms"]
            row["attention_kernel"] = ev.get("attention_kernel")
            if name in args.profile_models.split(","):
                row["edgevit-dev"] = edgevit_profile(args.edgevit, yaml_path, b, max(10, iters // 4),
                                                     os.path.join(out_dir, f"profile_{name}_b{b}.txt"))
            row.update(timm_benches(name, b, iters, warmup, name in args.compile_models.split(",") and
                                    str(b) in args.compile_batches.split(",")))
            fl = flops_per_image(e) * b
            row["gflop"] = fl / 1e9
            row["floor_compute_ms"] = fl / (c["fp16_mm_TFLOPs"] * 1e12) * 1e3
            row["floor_weights_io_ms"] = (weight_bytes_fp16(e) + 4 * b * IMG_ELEMS) / (c["copy_GBps"] * 1e9) * 1e3
            row["floor_op_bytes_ms"] = op_bytes_fp16(e, b) / (c["copy_GBps"] * 1e9) * 1e3
            row["upload_pinned_ms"] = 4 * b * IMG_ELEMS / (c["h2d_pinned_GBps"] * 1e9) * 1e3
            m["batches"][b] = row
            print(name, b, json.dumps(row), flush=True)
            report["models"][name] = m
            with open(args.json, "w") as f:
                json.dump(report, f, indent=1)

    cols = ["edgevit", "edgevit-pageable", "edgevit-devin", "edgevit-dev", "timm-eager", "timm-graph", "timm-graph-h2d", "compile"]
    print(f"\n{report['gpu']}, torch {report['torch']}, timm {report['timm']}, {report['date']}; ms (median)")
    print("| model | batch | " + " | ".join(cols) + " | floor compute / weights+io / op bytes | check fp16, fp32 |")
    print("|---|---|" + "---|" * len(cols) + "---|---|")
    for name, m in report["models"].items():
        ck = m["check"]
        cks = ", ".join(f"{ck[p].get('rel_err', float('nan')):.1e}{'' if ck[p]['ok'] else ' FAIL'}" for p in ("fp16", "fp32"))
        for b, r in m["batches"].items():
            vals = " | ".join(f"{r[k]:.3f}" if k in r else "-" for k in cols)
            print(f"| {name} | {b} | {vals} | {r['floor_compute_ms']:.3f} / {r['floor_weights_io_ms']:.3f} / "
                  f"{r['floor_op_bytes_ms']:.3f} | {cks} |")
    ok = all(m["check"][p]["ok"] for m in report["models"].values() for p in ("fp16", "fp32"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
