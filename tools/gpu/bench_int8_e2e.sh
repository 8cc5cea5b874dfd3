#!/usr/bin/env bash
# INT8 end to end on the GPU machine (issue #25): seeded timm ViT-B/16 and ViT-S/16
# (tools/gpu/make_timm_checkpoints.py), each calibrated by `edgevit calibrate` on 16 random N(0, 1) images, then
# in the same run
#   - accuracy, per model: `edgevit compare` (CPU, fp32 vs int8, per-layer SQNR) on 4 other images, and the GPU
#     INT8 logits of both float modes (`--int8-float fp16`, the default, and `fp32`, the CPU path's twin:
#     docs/int8.md "fp32 mode") against the CPU INT8 path and against timm's float64 logits; the CPU INT8 path's
#     time at batch 1 (and, when the bundle has bin/edgevit-old, the earlier build's, for the cost of a change);
#   - speed (ViT-B): `edgevit bench --device-input` p50 at batch 1, 8, 64, fp16 vs int8 (both float modes).
#   - INT8_METHOD=minmax|percentile|mse: the calibration method (default: calibrate's).
#   - INT8_NO_BIAS_CORRECTION=1: calibrate with --no-bias-correction (docs/int8.md "Bias correction").
#   - INT8_ACCURACY_ONLY=1: stop after the accuracy part; INT8_SKIP_ACCURACY=1: only the speed part, on the
#     checkpoints and scales an earlier run left in /tmp/edgevit-int8-e2e.
#   - INT8_PROFILE=1: also `bench --profile` per-op tables of both engines at batch 1 and 64 (prof_*.txt).
#   - INT8_ATTENTION=1: also the config with `runtime.int8_attention: int8` (docs/int8.md "INT8 attention"): its
#     compare, its GPU logits against its CPU INT8 path and timm, a speed column, and (with INT8_PROFILE) its tables.
# Run from the repository root with build-e2e-bundle carried (tools/gpu/make_e2e_bundle.sh; B=another dir).
#   usage: tools/gpu/bench_int8_e2e.sh [OUT_DIR]
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
[ -n "${INT8_SKIP_ACCURACY:-}" ] || { python3 tools/gpu/make_timm_checkpoints.py "$work" \
  --models vit_base_patch16_224,vit_small_patch16_224 >"$out/int8_make.log" 2>&1 || { cat "$out/int8_make.log"; exit 1; }; }
[ -n "${INT8_SKIP_ACCURACY:-}" ] || python3 - "$work" <<'PY'
import sys, torch
from safetensors.torch import save_file
g = torch.Generator().manual_seed(25)
for name, n in (("calib", 16), ("eval", 4)):
    save_file({"input": torch.randn(n, 3, 224, 224, generator=g)}, f"{sys.argv[1]}/{name}.safetensors")
PY
# Accuracy of one model (ViT-B, then ViT-S): calibrate, compare, the GPU INT8 logits of both float modes and the
# CPU INT8 path's, the CPU INT8 path's time at batch 1 (this build; and $B/bin/edgevit-old's, the build before
# the twin rows, when the bundle has it).
accuracy() {
  local m=$work/$1 t=$1
  "$bin" calibrate "$m.yaml" --images "$work/calib.safetensors" ${INT8_METHOD:+--method "$INT8_METHOD"} \
    ${INT8_NO_BIAS_CORRECTION:+--no-bias-correction} -o "$m-int8.yaml" -t 16 \
    >"$out/int8_calibrate_$t.log" 2>&1
  echo "$t calibrate: rc=$?"; tail -3 "$out/int8_calibrate_$t.log"
  "$bin" compare "$m-int8.yaml" -i "$work/eval.safetensors" -t 16 >"$out/int8_compare_$t.log" 2>&1
  echo "$t compare: rc=$?"; grep -E "logits|pre_logits|min" "$out/int8_compare_$t.log" | tail -6
  for dev in auto host-cpu; do
    "$bin" run "$m-int8.yaml" --device "$dev" --input "$m.input.safetensors" --output "$work/int8_${t}_$dev.safetensors" -t 16 \
      >"$out/int8_run_${t}_$dev.log" 2>&1
    echo "$t run int8 on $dev: rc=$?"
  done
  "$bin" run "$m-int8.yaml" --device auto --int8-float fp32 --input "$m.input.safetensors" \
    --output "$work/int8_${t}_auto_f32.safetensors" -t 16 -v >"$out/int8_run_${t}_auto_f32.log" 2>&1
  echo "$t run int8 --int8-float fp32 on auto: rc=$?"
  python3 - "$work" "$m" "$t" <<'PY'
import sys, torch
from safetensors.torch import load_file
w, m, t = sys.argv[1], sys.argv[2], sys.argv[3]
gpu, cpu = load_file(f"{w}/int8_{t}_auto.safetensors")["logits"], load_file(f"{w}/int8_{t}_host-cpu.safetensors")["logits"]
g32 = load_file(f"{w}/int8_{t}_auto_f32.safetensors")["logits"]
ref = load_file(f"{m}.golden.safetensors")["logits"].double()
rel = lambda a, b: float((a.double() - b).norm() / b.norm())
print(f"{t} int8 logits (int8_float fp16): GPU vs CPU INT8 {rel(gpu, cpu.double()):.2e}; GPU vs timm float64 "
      f"{rel(gpu, ref):.2e}; CPU vs timm float64 {rel(cpu, ref):.2e}; top-1 GPU {gpu.argmax(1).tolist()} "
      f"timm {ref.argmax(1).tolist()}")
print(f"{t} int8 logits (int8_float fp32): GPU vs CPU INT8 {rel(g32, cpu.double()):.2e} (max abs "
      f"{float((g32.double() - cpu.double()).abs().max()):.2e}, bit-equal {bool(torch.equal(g32, cpu))}); GPU vs timm "
      f"float64 {rel(g32, ref):.2e}; top-1 GPU {g32.argmax(1).tolist()} CPU INT8 {cpu.argmax(1).tolist()}")
PY
  if [ -n "${INT8_ATTENTION:-}" ]; then  # the same scales with int8 Q/K and the INT8 attention
    sed 's/^runtime:$/runtime:\n  int8_attention: int8/' "$m-int8.yaml" >"$m-int8ia.yaml"
    "$bin" compare "$m-int8ia.yaml" -i "$work/eval.safetensors" -t 16 >"$out/int8ia_compare_$t.log" 2>&1
    echo "$t compare (int8 attention): rc=$?"; grep -E "logits|pre_logits" "$out/int8ia_compare_$t.log" | tail -2
    for dev in auto host-cpu; do
      "$bin" run "$m-int8ia.yaml" --device "$dev" --input "$m.input.safetensors" \
        --output "$work/int8ia_${t}_$dev.safetensors" -t 16 -v >"$out/int8ia_run_${t}_$dev.log" 2>&1
      echo "$t run int8 (int8 attention) on $dev: rc=$?"
    done
    grep -m3 -E "attention:|FALLBACK" "$out/int8ia_run_${t}_auto.log"
    python3 - "$work" "$m" "$t" <<'PY'
import sys, torch
from safetensors.torch import load_file
w, m, t = sys.argv[1], sys.argv[2], sys.argv[3]
gpu, cpu = load_file(f"{w}/int8ia_{t}_auto.safetensors")["logits"], load_file(f"{w}/int8ia_{t}_host-cpu.safetensors")["logits"]
ref = load_file(f"{m}.golden.safetensors")["logits"].double()
rel = lambda a, b: float((a.double() - b).norm() / b.norm())
print(f"{t} int8 logits (int8 attention): GPU vs CPU INT8 {rel(gpu, cpu.double()):.2e}; GPU vs timm float64 "
      f"{rel(gpu, ref):.2e}; CPU vs timm float64 {rel(cpu, ref):.2e}; top-1 GPU {gpu.argmax(1).tolist()} "
      f"timm {ref.argmax(1).tolist()}")
PY
  fi
  for b in "$bin" "$B/bin/edgevit-old"; do
    [ -x "$b" ] || continue
    "$b" bench "$m-int8.yaml" --device host-cpu --batch 1 --iters 3 --warmup 1 -t 16 --json 2>>"$out/int8_bench.err" \
      | python3 -c "import json,sys; print('$t CPU INT8 batch 1, 16 threads, $(basename "$b"): p50', json.load(sys.stdin)['p50_ms'], 'ms')"
  done
}
if [ -z "${INT8_SKIP_ACCURACY:-}" ]; then
  accuracy vit_base_patch16_224
  accuracy vit_small_patch16_224
fi
[ -n "${INT8_ACCURACY_ONLY:-}" ] && exit 0
m=$work/vit_base_patch16_224
echo "| batch | fp16 p50 ms | int8 p50 ms | int8 speed-up | int8 (int8_float fp32) p50 ms | its speed-up | int8 (int8 attention) p50 ms | its speed-up |"
echo "|---|---|---|---|---|---|---|---|"
p50() { "$bin" bench "$@" --device auto --iters $it --warmup 10 --device-input --json 2>>"$out/int8_bench.err" \
        | python3 -c 'import json,sys; print(json.load(sys.stdin)["p50_ms"])'; }
for b in 1 8 64; do
  it=$([ "$b" = 64 ] && echo 40 || echo 200)
  f16=$(p50 "$m.yaml" --batch $b)
  i8=$(p50 "$m-int8.yaml" --batch $b)
  i8f32=$(p50 "$m-int8.yaml" --batch $b --int8-float fp32)
  i8ia=""
  [ -f "$m-int8ia.yaml" ] && i8ia=$(p50 "$m-int8ia.yaml" --batch $b)
  python3 -c "a, b, c, d = (float(v or 'nan') for v in ('$f16', '$i8', '$i8f32', '$i8ia'))
print(f'| $b | {a:.3f} | {b:.3f} | {a / b:.2f}x | {c:.3f} | {a / c:.2f}x | {d:.3f} | {a / d:.2f}x |')"
done
if [ -n "${INT8_PROFILE:-}" ]; then
  # Per-op tables (`bench --profile`) of both engines at batch 1 and 64, for where the INT8 time goes.
  for b in 1 64; do
    for y in "$m.yaml" "$m-int8.yaml" $([ -f "$m-int8ia.yaml" ] && echo "$m-int8ia.yaml"); do
      tag=$(basename "$y" .yaml)_b$b
      "$bin" bench "$y" --device auto --batch $b --iters 20 --warmup 5 --device-input --profile >"$out/prof_$tag.txt" 2>&1
    done
  done
  echo "profiles: $(ls "$out"/prof_*.txt | wc -l) tables in $out"
fi
