#!/usr/bin/env bash
# Runs on the lent GPU machine, from the repository root: two builds side by side for a no-regression check.
# Carry build-e2e-before/ (payload.tar.xz of the build before, tools/gpu/make_e2e_bundle.sh's output copied
# there) and build-e2e-bundle/ (the build after). Then:
#   1. tools/gpu/make_timm_checkpoints.py: seeded timm ViT-Ti/S/B and their configs
#   2. GPU: tools/gpu/ab_bench.py, `edgevit bench` p50 of before vs after, alternated, batch 1, 8, 64
#   3. CPU: tools/bench/cpu_vs_ort.py with both builds as variants (ONNX Runtime as the anchor), 1 and all threads
# Logs and JSON under $OUT.
#   usage: tools/gpu/run_ab_on_gpu.sh [gpu|cpu|all]   (default all)
set -uo pipefail
what=${1:-all}
out=${OUT:-/tmp/edgevit-out}
mkdir -p "$out"
repo=$(pwd -P)
A=$repo/build-e2e-before
B=$repo/build-e2e-bundle
for d in "$A" "$B"; do tar xJf "$d/payload.tar.xz" -C "$d" || { echo "cannot unpack $d/payload.tar.xz"; exit 1; }; done
libdirs=$( (ls -d /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib 2>/dev/null;
            python3 -c 'import glob, site; [print(d) for p in site.getsitepackages() for d in glob.glob(p + "/nvidia/*/lib")]' 2>/dev/null) | paste -sd:)
export LD_LIBRARY_PATH="$B/lib:$libdirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$out/gpu.txt"
models=/tmp/edgevit-models
PYTHONUNBUFFERED=1 python3 tools/gpu/make_timm_checkpoints.py "$models" >"$out/checkpoints.log" 2>&1 || { tail "$out/checkpoints.log"; exit 1; }
if [ "$what" != cpu ]; then
  PYTHONUNBUFFERED=1 python3 tools/gpu/ab_bench.py --a before="$A/bin/edgevit" --b after="$B/bin/edgevit" \
    --models-dir "$models" --device auto --batches 1,8,64 --rounds 5 --iters 200 --json "$out/ab_gpu.json" 2>&1 | tee "$out/ab_gpu.log"
fi
if [ "$what" != gpu ]; then
  PYTHONUNBUFFERED=1 python3 tools/bench/cpu_vs_ort.py --variant before="$A/bin/edgevit" --variant after="$B/bin/edgevit" \
    --work /tmp/cpubench --rounds 3 --threads 1,16 --iters 20 2>&1 | tee "$out/ab_cpu.log"
fi
