#!/usr/bin/env bash
# What one transformer block costs inside edgevit's CUDA graph replay: the same seeded timm ViT-B/16 checkpoint
# truncated to depth 1, 2 and 4 (and the full 12), each benched at batch 1 from device input, alternated over
# rounds; latency = intercept + slope x depth, where the slope is one full block and the depth-1 model is
# everything else (patch embedding, the class-token tail block, head, output casts).
# Runs on the lent GPU machine from the repository root with build-e2e-bundle/ carried
# (tools/gpu/make_e2e_bundle.sh); needs torch, timm and safetensors there.
#   usage: tools/gpu/block_cost.sh [ROUNDS] [BATCH]     (default 3 rounds, batch 1)
set -uo pipefail
rounds=${1:-3}
batch=${2:-1}
B=$(pwd -P)/build-e2e-bundle
[ -x "$B/bin/edgevit" ] || tar xJf "$B/payload.tar.xz" -C "$B" || { echo "cannot unpack $B/payload.tar.xz"; exit 1; }
libdirs=$( (ls -d /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib 2>/dev/null;
            python3 -c 'import glob, site; [print(d) for p in site.getsitepackages() for d in glob.glob(p + "/nvidia/*/lib")]' 2>/dev/null) | paste -sd:)
export LD_LIBRARY_PATH="$B/lib:$libdirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
models=/tmp/edgevit-models
[ -f $models/vit_base_patch16_224.yaml ] ||
  PYTHONUNBUFFERED=1 python3 tools/gpu/make_timm_checkpoints.py "$models" --models vit_base_patch16_224 || exit 1
python3 - "$models" <<'PY' || exit 1
import re, sys
from safetensors.torch import load_file, save_file
d = sys.argv[1]
st = load_file(f"{d}/vit_base_patch16_224.safetensors")
y = open(f"{d}/vit_base_patch16_224.yaml").read()
for depth in (1, 2, 4):
    keep = {k: v for k, v in st.items() if not k.startswith("blocks.") or int(k.split(".")[1]) < depth}
    save_file(keep, f"{d}/vitb_d{depth}.safetensors")
    yy = re.sub(r"depth: *\d+", f"depth: {depth}", y)
    open(f"{d}/vitb_d{depth}.yaml", "w").write(yy.replace("vit_base_patch16_224.safetensors", f"vitb_d{depth}.safetensors"))
PY
log=$(mktemp)
for r in $(seq 1 "$rounds"); do
  for d in 1 2 4 12; do
    y=$models/vitb_d$d.yaml
    [ "$d" = 12 ] && y=$models/vit_base_patch16_224.yaml
    "$B/bin/edgevit" bench "$y" --device auto --batch "$batch" --iters 1000 --device-input >"$log" 2>&1
    echo "round $r depth $d rc=$? $(grep -oE 'p50 [0-9.]+ ms' "$log" | head -1)"
  done
done
rm -f "$log"
