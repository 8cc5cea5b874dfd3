#!/usr/bin/env python3
"""Per-call overhead of the Python module over the C++ API (docs/benchmarks.md, "Python module").

Times one model at batch 1, one thread, on the CPU, in rounds that alternate the two sides so that both see
the same machine load:
  C++     `edgevit bench --json` (Engine::infer): from the engine's input buffer, and --pageable-input
          (a separate host array infer() copies from)
  Python  Engine.infer(e.input_buffer[:1]) (no copy) and Engine.infer(x) with a float32 (1, C, H, W) array
          (read in place, copied by the engine: the --pageable-input path), each call timed alone
and prints the medians of the rounds' p50s and the differences, and each side's least disturbed round.

Usage: PYTHONPATH=build/python python3 tools/bench/python_overhead.py
         [--model config/models/vit-tiny-golden.yaml] [--edgevit build/bin/edgevit] [--iters 300] [--rounds 5]
"""
import argparse
import json
import statistics
import subprocess
import time

import numpy as np

import edgevit


def cpp_p50_us(args, pageable):
    cmd = [args.edgevit, "bench", args.model, "--device", "host-cpu", "--batch", "1", "--threads", "1",
           "--iters", str(args.iters), "--warmup", "20", "--json"]
    if pageable:
        cmd.append("--pageable-input")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)["p50_ms"] * 1e3


def py_p50_us(call, iters):
    for _ in range(20):
        call()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter_ns()
        call()
        times.append(time.perf_counter_ns() - t0)
    return statistics.median(times) / 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="config/models/vit-tiny-golden.yaml")
    ap.add_argument("--edgevit", default="build/bin/edgevit")
    ap.add_argument("--iters", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()

    e = edgevit.Engine(args.model, device="host-cpu", max_batch=1, threads=1)
    shape = e.plan["input_shape"]
    x = np.random.default_rng(0).standard_normal((1,) + tuple(shape[1:]), dtype=np.float32)
    e.input_buffer[:1] = x
    view = e.input_buffer[:1]
    rows = {"cpp_buffer": [], "py_buffer": [], "cpp_pageable": [], "py_array": []}
    for _ in range(args.rounds):
        rows["cpp_buffer"].append(cpp_p50_us(args, pageable=False))
        rows["py_buffer"].append(py_p50_us(lambda: e.infer(view), args.iters))
        rows["cpp_pageable"].append(cpp_p50_us(args, pageable=True))
        rows["py_array"].append(py_p50_us(lambda: e.infer(x), args.iters))
    med = {k: statistics.median(v) for k, v in rows.items()}
    low = {k: min(v) for k, v in rows.items()}  # the least disturbed round, for loaded machines
    print(f"model {args.model}, batch 1, 1 thread, {args.rounds} rounds x {args.iters} calls; medians of p50 (us)")
    print(f"  from the input buffer: C++ {med['cpp_buffer']:9.1f}  Python {med['py_buffer']:9.1f}  "
          f"overhead {med['py_buffer'] - med['cpp_buffer']:+7.1f} us")
    print(f"  from a separate array: C++ {med['cpp_pageable']:9.1f}  Python {med['py_array']:9.1f}  "
          f"overhead {med['py_array'] - med['cpp_pageable']:+7.1f} us")
    print(f"  least disturbed round: buffer C++ {low['cpp_buffer']:.1f} Python {low['py_buffer']:.1f}; "
          f"array C++ {low['cpp_pageable']:.1f} Python {low['py_array']:.1f}")
    print("  per round:", json.dumps({k: [round(t, 1) for t in v] for k, v in rows.items()}))


if __name__ == "__main__":
    main()
