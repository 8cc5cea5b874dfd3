#!/usr/bin/env python3
"""Per position in a CUDA graph replay: the median duration of the kernel at each node position over the last 10
replays of the last graph in a kernel trace (tools/gpu/kernel_trace_inject.cpp's CSV), with a short name that
keeps what tells the rows apart (gemm_i8: tile, warps, stages, epilogue, uint8 input; the INT8 producers: kVec,
norm, row per block), then the same grouped by that short name. Position k is the k-th op of the forward, so
e.g. fc2 of every block can be read off (kernel_timeline.py groups by the mangled name's first 90 characters,
which merges the gemm_i8 rows). Called by tools/gpu/kernel_timeline.sh trace.
usage: kernel_positions.py TRACE.csv"""
import csv, re, statistics, sys


def short(name):
    m = re.search(r"(gemm_i8_kernel|rows_i8_vec_kernel|flash_fwd_kernel|layernorm_regs_kernel|nvjet\w*)", name)
    if not m:
        return re.sub(r"^.*_cu_[0-9a-f]+\d+", "", name)[:40]
    kind = m.group(1)
    if kind == "gemm_i8_kernel":  # GemmI8Traits<M, N, K, warps M, warps N, stages, blocks, lean>, epilogue, uint8 input
        g = re.findall(r"Li(\d+)E", name)
        b = re.findall(r"Lb(\d)E", name)  # lean (when 8 traits), then uint8 input
        lean = len(b) > 1 and b[0] == "1"
        return (f"gemm_i8 {g[0]}x{g[1]}x{g[2]} w{int(g[3]) * int(g[4])} s{g[5]}{' lean' if lean else ''} "
                f"ep{g[7] if len(g) > 7 else '?'}{' u8' if b and b[-1] == '1' else ''}")
    if kind == "rows_i8_vec_kernel":  # <In, kVec, kNorm, kBlock>
        return "rows_i8 " + ",".join(re.findall(r"L(?:i|b)(\d+)E", name))
    return kind


def main():
    rows = [r for r in csv.DictReader(open(sys.argv[1])) if int(r["graph_id"]) != 0]
    if not rows:
        sys.exit(f"{sys.argv[1]}: no kernel launched from a CUDA graph")
    rows.sort(key=lambda r: int(r["start_ns"]))
    last = rows[-1]["graph_id"]
    per = len({r["graph_node_id"] for r in rows if r["graph_id"] == last})
    replays = min(10, len(rows) // per)
    tail = rows[-per * replays:]
    out = []
    for k in range(per):
        d = [int(tail[i * per + k]["end_ns"]) - int(tail[i * per + k]["start_ns"]) for i in range(replays)]
        out.append((k, statistics.median(d) / 1e3, short(tail[k]["name"])))
    print(f"{sys.argv[1]}: {per} kernels a replay, medians over the last {replays} replays")
    for k, d, n in out:
        print(f"{k:4d} {d:8.2f}  {n}")
    groups = {}
    for _, d, n in out:
        groups.setdefault(n, []).append(d)
    print("by kernel: count, sum us, median us")
    for n, v in sorted(groups.items(), key=lambda kv: -sum(kv[1])):
        print(f"{len(v):4d} {sum(v):9.2f} {statistics.median(v):8.2f}  {n}")


if __name__ == "__main__":
    main()
