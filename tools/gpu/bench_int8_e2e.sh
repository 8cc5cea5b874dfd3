#!/usr/bin/env bash
# INT8 end to end on the GPU machine (issue #25): a seeded timm ViT-B/16 (tools/gpu/make_timm_checkpoints.py),
# calibrated by `edgevit calibrate` on 16 random N(0, 1) images, then in the same run
#   - accuracy: `edgevit compare` (CPU, fp32 vs int8, per-layer SQNR) on 4 other images, and the GPU INT8
#     logits against the CPU INT8 path and against timm's float64 logits;
#   - speed: `edgevit bench --device-input` p50 at batch 1, 8, 64, fp16 vs int8, same engine build.
#   - INT8_METHOD=minmax|percentile|mse: the calibration method (default: calibrate's).
#   - INT8_PROFILE=1: also `bench --profile` per-op tables of both engines at batch 1 and 64 (prof_*.txt).
# Run from the repository root with build-e2e-bundle carried (tools/gpu/make_e2e_bundle.sh; B=another dir).   usage: tools/gpu/bench_int8_e2e.sh [OUT_DIR]
set -uo pipefail
out=${1:-${OUT:-/tmp/edgevit-out}}
B=${B:-$(pwd -P)/build-e2e-bundle}
bin=$B/bin/edgevit
[ -x "$bin" ] || tar xJf "$B/payload.tar.xz" -C "$B" || { echo "cannot unpack $B/payload.tar.xz"; exit 1; }
libdirs=$( (ls -d /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib 2>/dev/null;
            python3 -c 'import glob, site; [print(d) for p in site.getsitepackages() for d in glob.glob(p + "/nvidia/*/lib")]' 2>/dev/null) | paste -sd:)
export LD_LIBRARY_PATH="$B/lib:$libdirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
work=/tmp/edgevit-int8-e2e
mkdir -p "$work" "$out"
python3 tools/gpu/make_timm_checkpoints.py "$work" --models vit_base_patch16_224 >"$out/int8_make.log" 2>&1 || { cat "$out/int8_make.log"; exit 1; }
python3 - "$work" <<'PY'
import sys, torch
from safetensors.torch import save_file
g = torch.Generator().manual_seed(25)
for name, n in (("calib", 16), ("eval", 4)):
    save_file({"input": torch.randn(n, 3, 224, 224, generator=g)}, f"{sys.argv[1]}/{name}.safetensors")
PY
m=$work/vit_base_patch16_224
"$bin" calibrate "$m.yaml" --images "$work/calib.safetensors" ${INT8_METHOD:+--method "$INT8_METHOD"} -o "$m-int8.yaml" -t 16 >"$out/int8_calibrate.log" 2>&1
echo "calibrate: rc=$?"; tail -5 "$out/int8_calibrate.log"
"$bin" compare "$m-int8.yaml" -i "$work/eval.safetensors" -t 16 >"$out/int8_compare.log" 2>&1
echo "compare: rc=$?"; grep -E "logits|pre_logits|min" "$out/int8_compare.log" | tail -6
for dev in auto host-cpu; do
  "$bin" run "$m-int8.yaml" --device "$dev" --input "$m.input.safetensors" --output "$work/int8_$dev.safetensors" -t 16 \
    >"$out/int8_run_$dev.log" 2>&1
  echo "run int8 on $dev: rc=$?"
done
python3 - "$work" "$m" <<'PY'
import sys, torch
from safetensors.torch import load_file
w, m = sys.argv[1], sys.argv[2]
gpu, cpu = load_file(f"{w}/int8_auto.safetensors")["logits"], load_file(f"{w}/int8_host-cpu.safetensors")["logits"]
ref = load_file(f"{m}.golden.safetensors")["logits"].double()
rel = lambda a, b: float((a.double() - b).norm() / b.norm())
print(f"int8 logits: GPU vs CPU INT8 {rel(gpu, cpu.double()):.2e}; GPU vs timm float64 {rel(gpu, ref):.2e}; "
      f"CPU vs timm float64 {rel(cpu, ref):.2e}; top-1 GPU {gpu.argmax(1).tolist()} timm {ref.argmax(1).tolist()}")
PY
echo "| batch | fp16 p50 ms | int8 p50 ms | int8 speed-up |"
echo "|---|---|---|---|"
for b in 1 8 64; do
  it=$([ "$b" = 64 ] && echo 40 || echo 200)
  f16=$("$bin" bench "$m.yaml" --device auto --batch $b --iters $it --warmup 10 --device-input --json 2>>"$out/int8_bench.err" \
        | python3 -c 'import json,sys; print(json.load(sys.stdin)["p50_ms"])')
  i8=$("$bin" bench "$m-int8.yaml" --device auto --batch $b --iters $it --warmup 10 --device-input --json 2>>"$out/int8_bench.err" \
        | python3 -c 'import json,sys; print(json.load(sys.stdin)["p50_ms"])')
  python3 -c "import sys; a, b = float('$f16' or 'nan'), float('$i8' or 'nan'); print(f'| $b | {a:.3f} | {b:.3f} | {a / b:.2f}x |')"
done
if [ -n "${INT8_PROFILE:-}" ]; then
  # Per-op tables (`bench --profile`) of both engines at batch 1 and 64, for where the INT8 time goes.
  for b in 1 64; do
    for y in "$m.yaml" "$m-int8.yaml"; do
      tag=$(basename "$y" .yaml)_b$b
      "$bin" bench "$y" --device auto --batch $b --iters 20 --warmup 5 --device-input --profile >"$out/prof_$tag.txt" 2>&1
    done
  done
  echo "profiles: $(ls "$out"/prof_*.txt | wc -l) tables in $out"
fi
