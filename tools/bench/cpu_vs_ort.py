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

Several builds at once: each `--variant LABEL=PATH` is one more edgevit binary (`--edgevit PATH` is the
same as `--variant edgevit=PATH`, listed first). The first one imports the model (once); every one's logits
are checked against timm and against the first's. Each round times ORT, then every variant in an order
rotated by one per round (so no variant always runs right after ORT); the table gives, per variant, the
median p50 over rounds, the median of its per-round ratios to ORT and to the first variant.
--gemm-profile runs the benches with --profile and adds the per-inference sum of the linear layers (every
op whose kernel is a GEMM: qkv, proj, fc1, fc2, patch embedding, head) and of the attention.
tools/bench/make_cpu_variants_bundle.sh builds such a set of variants.

usage: python3 tools/bench/cpu_vs_ort.py --edgevit .bundle-cpu/edgevit --work /tmp/cpubench [--iters 30] [--op-profile]
       [--rounds 3] [--threads 1,2,16] [--models vit_base_patch16_224] [--pin 4,5] [--concurrent --pin 4,5,6,7]
       python3 tools/bench/cpu_vs_ort.py --variant base=B/edgevit-base --variant pf=B/edgevit-pf --rounds 3
       [--gemm-profile]
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


def concurrent_pair(path, x, binary, cfg, threads, warmup, iters, ort_cpus, ev_cpus):
    """ORT (in this process, on ort_cpus) and `edgevit bench` (a child on ev_cpus) at the same time, so that
    both meet the same host: ORT times inferences for as long as the edgevit process runs. Returns (ORT
    median ms over those inferences, edgevit p50 ms, ORT inference count)."""
    os.sched_setaffinity(0, set(ort_cpus))
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    for _ in range(warmup):
        sess.run(None, {name: x})
    cmd = [binary, "bench", cfg, "--device", "host-cpu", "--batch", "1", "--threads", str(threads), "--iters",
           str(iters), "--warmup", str(warmup), "--json"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: os.sched_setaffinity(0, set(ev_cpus)))
    ts = []
    while proc.poll() is None:
        t0 = time.perf_counter()
        sess.run(None, {name: x})
        ts.append((time.perf_counter() - t0) * 1e3)
    out, err = proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: rc {proc.returncode}: {err.strip()[-300:]}")
    return statistics.median(ts) if ts else float("nan"), json.loads(out)["p50_ms"], len(ts)


def bench_json(binary, cfg, threads, warmup, iters, profile):
    """`edgevit bench --json` at batch 1 (with --profile when asked), parsed."""
    cmd = [binary, "bench", cfg, "--device", "host-cpu", "--batch", "1", "--threads", str(threads), "--iters",
           str(iters), "--warmup", str(warmup), "--json"] + (["--profile"] if profile else [])
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)


def edgevit_bench(binary, cfg, threads, warmup, iters, profile):
    """p50 ms of `edgevit bench`, and with profile the per-inference ms of the GEMMs and the attention."""
    j = bench_json(binary, cfg, threads, warmup, iters, profile)
    ops = j.get("ops", [])
    gemm = sum(o["ms"] for o in ops if "gemm" in o["kernel"] or "linear" in o["kernel"])
    attn = sum(o["ms"] for o in ops if o["name"].endswith(".sdpa"))
    return j["p50_ms"], gemm, attn


# Categories shared by both per-op profiles: (label, substrings of an edgevit op name, of an ORT node name).
# ORT fuses each residual add into the next LayerNorm (SkipLayerNormalization): those count as layernorm.
# First match wins: proj before the attention's catch-all. ORT names its fused Gelu nodes "Gelu_token_N", not
# after the module: they go to "gelu" and edgevit's fc1 (GELU in the GEMM's epilogue) compares with fc1 + gelu.
CATEGORIES = [("qkv", [".attn.qkv"], ["/attn/qkv/"]), ("proj", [".attn.proj"], ["/attn/proj/"]),
              ("attention", [".attn.sdpa"], ["/attn/"]), ("fc1", [".mlp.fc1"], ["/mlp/fc1/"]),
              ("gelu", [], ["/mlp/act/", "Gelu"]),
              ("fc2", [".mlp.fc2"], ["/mlp/fc2/"]), ("layernorm", ["norm"], ["norm", "SkipLayerNorm"]),
              ("patch_embed", ["patch_embed"], ["patch_embed"]), ("head", ["head"], ["head"])]


def categorize(name, edgevit):
    for label, ev, on in CATEGORIES:
        if any(s in name for s in (ev if edgevit else on)):
            return label
    return "other"


def edgevit_ops(binary, cfg, threads, warmup, iters):
    """Per-inference ms of `edgevit bench --profile` by category."""
    j = bench_json(binary, cfg, threads, warmup, iters, True)
    cats = {}
    for o in j.get("ops", []):
        c = categorize(o["name"], True)
        cats[c] = cats.get(c, 0.0) + o["ms"]
    return j["p50_ms"], cats


def ort_ops(path, x, threads, warmup, iters, work):
    """Per-inference ms of ORT's own node profile (SessionOptions.enable_profiling) by category, and the
    unmatched node names with their ms, largest first."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.enable_profiling = True
    so.profile_file_prefix = os.path.join(work, "ort_profile")
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    for _ in range(warmup):
        sess.run(None, {name: x})
    ts = []
    for _ in range(iters):
        t0 = time.perf_counter()
        sess.run(None, {name: x})
        ts.append((time.perf_counter() - t0) * 1e3)
    prof = sess.end_profiling()
    with open(prof) as f:
        events = json.load(f)
    os.remove(prof)
    # Node events carry dur in us. The warm-up runs are in the file too: keep the nodes of the last `iters`
    # model_run events (ts in us since the session started).
    node = [e for e in events if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time")]
    model_runs = sorted(e["ts"] for e in events if e.get("cat") == "Session" and e.get("name") == "model_run")
    cut = model_runs[-iters] if len(model_runs) >= iters else 0
    cats, other = {}, {}
    for e in node:
        if e["ts"] < cut:
            continue
        n = e["name"][: -len("_kernel_time")]
        c = categorize(n, False)
        cats[c] = cats.get(c, 0.0) + e["dur"] / 1e3 / iters
        if c == "other":
            key = e.get("args", {}).get("op_name", "?") + " " + n
            other[key] = other.get(key, 0.0) + e["dur"] / 1e3 / iters
    return statistics.median(ts), cats, sorted(other.items(), key=lambda kv: -kv[1])[:8]


def op_compare(args, onnx_path, xo, binary, cfg, threads):
    """--op-profile: ORT's node profile and edgevit's op profile, alternated for --rounds rounds; medians per
    category, so the gap to ORT can be read op by op."""
    for t in threads:
        o_rows, e_rows, o_p50, e_p50 = [], [], [], []
        for rnd in range(args.rounds):
            op50, ocats, other = ort_ops(onnx_path, xo, t, args.warmup, args.iters, args.work)
            ep50, ecats = edgevit_ops(binary, cfg, t, args.warmup, args.iters)
            o_rows.append(ocats); e_rows.append(ecats); o_p50.append(op50); e_p50.append(ep50)
            print(f"  op profile, threads {t} round {rnd + 1}: ORT p50 {op50:.2f} (node sum {sum(ocats.values()):.2f})"
                  f"   edgevit p50 {ep50:.2f} (op sum {sum(ecats.values()):.2f})", flush=True)
            if rnd == 0:
                print("  ORT's largest unmatched nodes (ms per inference): " +
                      "; ".join(f"{k} {v:.3f}" for k, v in other), flush=True)
        labels = [c[0] for c in CATEGORIES] + ["other"]
        print(f"\nper-op profile, threads {t}, {args.rounds} round(s), medians, ms per inference")
        print("| op | ORT | edgevit | edgevit / ORT |")
        print("|---|---|---|---|")
        for c in labels:
            o = statistics.median(r.get(c, 0.0) for r in o_rows)
            e = statistics.median(r.get(c, 0.0) for r in e_rows)
            print(f"| {c} | {o:.2f} | {e:.2f} | {(e / o if o else float('nan')):.3f} |")
        o = statistics.median(sum(r.values()) for r in o_rows)
        e = statistics.median(sum(r.values()) for r in e_rows)
        print(f"| sum | {o:.2f} | {e:.2f} | {e / o:.3f} |")
        print(f"| p50 (profiled runs) | {statistics.median(o_p50):.2f} | {statistics.median(e_p50):.2f} | "
              f"{statistics.median(e_p50) / statistics.median(o_p50):.3f} |\n", flush=True)


def parse_variants(args):
    variants = [("edgevit", args.edgevit)] if args.edgevit else []
    for v in args.variant:
        label, sep, path = v.partition("=")
        if not sep or not label or not path:
            sys.exit(f"--variant wants LABEL=PATH, got {v!r}")
        variants.append((label, path))
    if not variants:
        sys.exit("give --edgevit PATH or at least one --variant LABEL=PATH")
    if len({label for label, _ in variants}) != len(variants):
        sys.exit("variant labels must differ")
    for label, path in variants:
        if not os.access(path, os.X_OK):
            sys.exit(f"variant {label}: {path} is not an executable file")
    return variants


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--edgevit", help="edgevit binary (same as --variant edgevit=PATH, listed first)")
    ap.add_argument("--variant", action="append", default=[], metavar="LABEL=PATH",
                    help="one more edgevit binary to time, under LABEL (repeatable)")
    ap.add_argument("--gemm-profile", action="store_true",
                    help="bench --profile: also report the GEMMs' and the attention's ms per inference")
    ap.add_argument("--work", default="/tmp/cpubench")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--models", default=",".join(m for m, _ in MODELS))
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--threads", help="comma-separated thread counts (default: 1, 2 and all cores)")
    ap.add_argument("--op-profile", action="store_true",
                    help="instead of timing: ORT's node profile beside edgevit's op profile, by op category")
    ap.add_argument("--concurrent", action="store_true",
                    help="run ORT and the first variant at the same time on two disjoint CPU sets from --pin "
                         "(swapped every round), so a host whose speed drifts between seconds slows both alike")
    ap.add_argument("--pin", help="comma-separated CPU ids: at T threads both ORT and edgevit run on the first T "
                                  "(sched_setaffinity, inherited by ORT's session threads and the edgevit process), "
                                  "so neither migrates between cores during a round")
    args = ap.parse_args()
    variants = parse_variants(args)
    importer = variants[0][1]
    os.makedirs(args.work, exist_ok=True)
    cores = len(os.sched_getaffinity(0))
    threads = sorted({int(t) for t in args.threads.split(",")}) if args.threads else sorted({1, 2, cores})
    try:
        pin = [int(c) for c in args.pin.split(",")] if args.pin else []
    except ValueError:
        sys.exit(f"--pin wants comma-separated CPU ids, got {args.pin!r}")
    if len(set(pin)) != len(pin) or any(c < 0 for c in pin):
        sys.exit(f"--pin: CPU ids must be distinct and >= 0, got {args.pin!r}")
    if args.concurrent and len(pin) < 2 * max(threads):
        sys.exit(f"--concurrent needs --pin with 2 x {max(threads)} CPUs (two disjoint sets)")
    if pin and len(pin) < max(threads):
        sys.exit(f"--pin lists {len(pin)} CPUs, fewer than the largest thread count {max(threads)}")
    if pin:
        print(f"pinned: T threads run on CPUs {pin[:max(threads)]}[:T]")
    print(f"cpu: {cores} cores; torch {torch.__version__}, timm {timm.__version__}, onnxruntime {ort.__version__}")
    print("variants: " + ", ".join(f"{label}={path}" for label, path in variants))
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
        subprocess.run([importer, "import", "--from", "timm", st, "--heads", str(heads), "-o", cfg], check=True)
        inp = os.path.join(args.work, name + ".input.safetensors")
        save_file({"input": x.contiguous()}, inp)
        from safetensors.numpy import load_file
        errs, first, measured = {}, None, []
        for label, binary in variants:
            out = os.path.join(args.work, f"{name}.{label}.out.safetensors")
            r = subprocess.run([binary, "run", cfg, "--device", "host-cpu", "--input", inp, "--output", out],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            if r.returncode != 0:  # one broken build must not cost the others' measurement
                print(f"{name} [{label}]: run failed ({r.returncode}): {r.stderr.strip()[-300:]}; not timed")
                continue
            got = load_file(out)["logits"]
            first = got if first is None else first
            errs[label] = float(np.linalg.norm(got - ref) / np.linalg.norm(ref))
            vs_first = float(np.linalg.norm(got - first) / np.linalg.norm(first))
            same = " (bit-identical)" if np.array_equal(got, first) else " MISMATCH (> 1e-5)" if vs_first > 1e-5 else ""
            print(f"{name} [{label}]: edgevit logits vs timm float64: rel err {errs[label]:.2e}; vs the first "
                  f"variant: {vs_first:.2e}{same}")
            measured.append((label, binary))
        xo = x.numpy()
        check = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
        ort_ref = check.run(None, {check.get_inputs()[0].name: xo})[0]
        ort_err = float(np.linalg.norm(ort_ref - ref) / np.linalg.norm(ref))
        print(f"{name}: ORT logits vs timm float64: rel err {ort_err:.2e}", flush=True)
        if args.op_profile:
            op_compare(args, onnx_path, xo, measured[0][1], cfg, threads)
            continue
        for t in threads:
            if pin:
                os.sched_setaffinity(0, set(pin[:t]))  # ORT's new session threads and edgevit inherit it
            os_ = []
            per = {label: {"ms": [], "ratio": [], "vs_first": [], "gemm": [], "attn": []} for label, _ in measured}
            for rnd in range(args.rounds):
                if args.concurrent:
                    # Both at once on disjoint CPU sets, swapped every round; the first variant only.
                    a, b = pin[:t], pin[t:2 * t]
                    ort_cpus, ev_cpus = (a, b) if rnd % 2 == 0 else (b, a)
                    label, binary = measured[0]
                    o, e, count = concurrent_pair(onnx_path, xo, binary, cfg, t, args.warmup, args.iters,
                                                  ort_cpus, ev_cpus)
                    os_.append(o)
                    p = per[label]
                    p["ms"].append(e); p["ratio"].append(e / o); p["vs_first"].append(1.0)
                    p["gemm"].append(0.0); p["attn"].append(0.0)
                    print(f"  threads {t:3d} round {rnd + 1}: ORT {o:8.2f} ms on CPUs {ort_cpus} ({count} runs)   "
                          f"{label} {e:.2f} on CPUs {ev_cpus} ({e / o:.2f}), at the same time", flush=True)
                    continue
                o = ort_median_ms(onnx_path, xo, t, args.warmup, args.iters)
                os_.append(o)
                shift = rnd % max(1, len(measured))
                order = measured[shift:] + measured[:shift]
                got = {}
                for label, binary in order:
                    try:
                        got[label] = edgevit_bench(binary, cfg, t, args.warmup, args.iters, args.gemm_profile)
                    except subprocess.CalledProcessError as e:
                        print(f"  [{label}] bench failed ({e.returncode}): {e.stderr.strip()[-300:]}")
                line = f"  threads {t:3d} round {rnd + 1}: ORT {o:8.2f} ms"
                base = got.get(measured[0][0], (float("nan"),))[0] if measured else float("nan")
                for label, _ in order:
                    if label not in got:
                        continue
                    e, gemm, attn = got[label]
                    p = per[label]
                    p["ms"].append(e); p["ratio"].append(e / o); p["vs_first"].append(e / base)
                    p["gemm"].append(gemm); p["attn"].append(attn)
                    line += f"   {label} {e:.2f} ({e / o:.2f})"
                print(line, flush=True)
            o = statistics.median(os_)
            block = []
            for label, _ in measured:
                p = per[label]
                if not p["ms"]:
                    continue
                med = {k: statistics.median(v) for k, v in p.items()}
                block.append((name, t, label, o, med["ms"], med["ratio"], min(p["ratio"]), max(p["ratio"]),
                              med["vs_first"], med["gemm"], med["attn"], errs[label]))
            print_table(block, args, measured[0][0] if measured else "-")  # now, in case a later part is cut off
            rows += block
    print("\nall:")
    print_table(rows, args, variants[0][0])


def print_table(rows, args, first):
    print(f"{args.rounds} round(s) per row, medians; ratios = medians of the per-round ratios (ORT: min-max)")
    print(f"| model | threads | variant | ORT p50 (ms) | edgevit p50 (ms) | edgevit / ORT | ratio range | / {first} |"
          + (" GEMMs (ms) | attention (ms) |" if args.gemm_profile else "") + " logits rel err vs timm |")
    print("|---|---|---|---|---|---|---|---|" + ("---|---|" if args.gemm_profile else "") + "---|")
    for name, t, label, o, e, ratio, lo, hi, vs_first, gemm, attn, err in rows:
        print(f"| {name} | {t} | {label} | {o:.2f} | {e:.2f} | {ratio:.3f} | {lo:.2f}-{hi:.2f} | {vs_first:.3f} |"
              + (f" {gemm:.2f} | {attn:.2f} |" if args.gemm_profile else "") + f" {err:.1e} |", flush=True)

if __name__ == "__main__":
    sys.exit(main())
