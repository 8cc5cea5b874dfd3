#!/usr/bin/env python3
"""Two edgevit builds side by side on the same machine in the same run: `edgevit bench` p50 of A and B,
alternated (A, B, B, A, ...) over several rounds per (model, device, batch), so drift of a shared machine
moves both alike. Reports per case the median p50 of each and the median of the per-round ratios B/A.

Used for "no speed regression" checks of a refactor: A = the build before, B = the build after.

usage: ab_bench.py --a before=PATH/edgevit --b after=PATH/edgevit --models-dir DIR
                   [--device auto|host-cpu] [--batches 1,8,64] [--models vit_tiny_patch16_224,vit_base_patch16_224]
                   [--rounds 5] [--iters 200] [--threads 0] [--json OUT]
Model configs are DIR/<model>.yaml (tools/gpu/make_timm_checkpoints.py writes them).
"""
import argparse, json, statistics, subprocess, sys


def bench(binary, yaml_path, device, batch, iters, threads):
    cmd = [binary, "bench", yaml_path, "--device", device, "--batch", str(batch), "--iters", str(iters),
           "--warmup", str(max(3, iters // 10)), "--json"]
    if threads:
        cmd += ["--threads", str(threads)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: rc {p.returncode}: {p.stderr.strip()[-600:]}")
    return json.loads(p.stdout)["p50_ms"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", required=True)
    ap.add_argument("--b", required=True)
    ap.add_argument("--models-dir", required=True)
    ap.add_argument("--models", default="vit_tiny_patch16_224,vit_base_patch16_224")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--batches", default="1,8,64")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--json")
    args = ap.parse_args()
    (la, pa), (lb, pb) = args.a.split("=", 1), args.b.split("=", 1)
    rows = []
    print(f"| model | device | batch | {la} p50 ms | {lb} p50 ms | {lb}/{la} (median of rounds) |")
    print("|---|---|---|---|---|---|")
    for model in args.models.split(","):
        yaml_path = f"{args.models_dir}/{model}.yaml"
        for batch in [int(b) for b in args.batches.split(",")]:
            ta, tb, ratios = [], [], []
            for r in range(args.rounds):
                order = [(pa, ta), (pb, tb)] if r % 2 == 0 else [(pb, tb), (pa, ta)]
                for binary, times in order:
                    times.append(bench(binary, yaml_path, args.device, batch, args.iters, args.threads))
                ratios.append(tb[-1] / ta[-1])
            row = {"model": model, "device": args.device, "batch": batch, la: statistics.median(ta),
                   lb: statistics.median(tb), "ratio": statistics.median(ratios), "rounds": args.rounds}
            rows.append(row)
            print(f"| {model} | {args.device} | {batch} | {row[la]:.4f} | {row[lb]:.4f} | {row['ratio']:.3f} |",
                  flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
