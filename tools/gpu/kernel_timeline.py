#!/usr/bin/env python3
"""Summarises a kernel trace of tools/gpu/kernel_trace_inject.cpp (CSV: start_ns, end_ns, stream, graph_id,
graph_node_id, name) over its last graph replays: the replay's span, the GPU-busy time, the gaps between
consecutive kernels (negative: the next kernel started before the previous ended, i.e. overlapped launches),
and per kernel name its count, median duration and median gap before it.
usage: kernel_timeline.py TRACE.csv [KERNELS_PER_REPLAY] [REPLAYS]"""
import collections, csv, statistics, sys


def main():
    path = sys.argv[1]
    per = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    replays = int(sys.argv[3]) if len(sys.argv) > 3 else 10
    rows = [r for r in csv.DictReader(open(path)) if int(r["graph_id"]) != 0]
    rows.sort(key=lambda r: int(r["start_ns"]))
    if not rows:
        sys.exit(f"{path}: no kernel launched from a CUDA graph")
    if per == 0:  # kernels per replay: the nodes of the last graph
        last = rows[-1]["graph_id"]
        per = len({r["graph_node_id"] for r in rows if r["graph_id"] == last})
    tail = rows[-per * replays:]
    starts = [int(r["start_ns"]) for r in tail]
    ends = [int(r["end_ns"]) for r in tail]
    gaps = [s - e for s, e in zip(starts[1:], ends[:-1])]
    busy = sum(e - s for s, e in zip(starts, ends))
    span = ends[-1] - starts[0]
    print(f"{path}: last {replays} replays of {per} kernels: {span / replays / 1e3:.1f} us a replay, GPU busy "
          f"{busy / replays / 1e3:.1f} us, gaps median {statistics.median(gaps) / 1e3:.2f} us, "
          f"sum {sum(g for g in gaps if g > 0) / replays / 1e3:.1f} us a replay, overlapped {sum(g < 0 for g in gaps)}")
    by = collections.defaultdict(lambda: ([], []))
    for i, r in enumerate(tail):
        d, g = by[r["name"][:90]]
        d.append(ends[i] - starts[i])
        if i > 0:
            g.append(gaps[i - 1])
    print(f"  {'count':>6} {'med us':>8} {'gap us':>8}  kernel")
    for name, (d, g) in sorted(by.items(), key=lambda kv: -sum(kv[1][0])):
        gm = statistics.median(g) / 1e3 if g else float("nan")
        print(f"  {len(d):6d} {statistics.median(d) / 1e3:8.2f} {gm:8.2f}  {name}")


if __name__ == "__main__":
    main()
