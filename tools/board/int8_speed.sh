#!/bin/sh
# Issue #25's end-to-end speed targets, measured on the machine this runs on: made for an Orin board (where the
# fp16 engine and the INT8 engine both run SM80-class kernels and INT8 halves the weight traffic), runs on any
# machine with edgevit built or installed. By default seeded random ViT-B/16 weights as timm initialises them
# (tools/int8/random_vits.py: python3 and numpy only), calibrated by `edgevit calibrate` on 8 random images;
# then `edgevit bench` p50 (`--device-input` on a CUDA device) of the fp16 and the INT8 engine, alternately,
# twice, at batch 1, 8 and 64, and the speed-up against the targets (>= 1.0, 1.2, 1.35), with `edgevit plan`'s
# roofline beside (the floor on the profile `--device auto` picks). A batch that does not run (the device cannot
# hold it) is reported, not failed.
#   usage: tools/board/int8_speed.sh [EDGEVIT [WORK_DIR]]   (EDGEVIT: default build/bin/edgevit in a checkout,
#   bin/edgevit beside an installed share/edgevit, else PATH's)
#   environment: INT8_SPEED_MODEL=CONFIG.yaml and INT8_SPEED_IMAGES=FILE (another model and its calibration
#   images), INT8_SPEED_BATCHES="1 8 64", INT8_SPEED_ITERS (default 200; 40 from batch 64 on)
#   exit: 0 measured (targets met or not: the table says), 1 a step failed (its log is named), 2 usage
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:-}
if [ -z "$bin" ]; then
  for b in "$root/build/bin/edgevit" "$root/../../bin/edgevit" "$(command -v edgevit || true)"; do
    [ -n "$b" ] && [ -x "$b" ] && { bin=$b; break; }
  done
fi
[ -n "$bin" ] && [ -x "$bin" ] || { echo "int8_speed.sh: no edgevit binary (pass its path)" >&2; exit 2; }
work=${2:-/tmp/edgevit-int8-speed}
mkdir -p "$work" || exit 2
model=${INT8_SPEED_MODEL:-}
images=${INT8_SPEED_IMAGES:-$work/calib.safetensors}
if [ -z "$model" ]; then
  model=$work/vit-b16-timm.yaml
  if [ ! -f "$work/vit-b16-timm.safetensors" ]; then
    python3 "$root/tools/int8/random_vits.py" "$work" >"$work/random_vits.log" 2>&1 ||
      { echo "int8_speed.sh: random_vits.py failed (python3 and numpy needed): $work/random_vits.log" >&2; exit 1; }
  fi
fi
int8=$work/$(basename "$model" .yaml)-int8.yaml
"$bin" calibrate "$model" --images "$images" -o "$int8" >"$work/calibrate.log" 2>&1 ||
  { echo "int8_speed.sh: calibrate failed: $work/calibrate.log" >&2; exit 1; }
"$bin" plan "$model" --device auto --json >"$work/plan.json" 2>"$work/plan.err" ||
  { echo "int8_speed.sh: plan failed: $work/plan.err" >&2; exit 1; }
input=
grep -q '"device_kind": *"cuda"' "$work/plan.json" && input=--device-input
prec=$(sed -n 's/.*"precision": *"\([a-z0-9]*\)".*/\1/p' "$work/plan.json" | head -n 1)  # fp16 on CUDA, fp32 on a CPU
p50() {  # config batch iters -> the p50 in ms, or did-not-run
  "$bin" bench "$1" --device auto --batch "$2" --iters "$3" --warmup 10 $input --json >"$work/bench.json" \
    2>"$work/bench.err" || { echo did-not-run; return; }
  sed -n 's/.*"p50_ms": *\([0-9.eE+-]*\).*/\1/p' "$work/bench.json"
}
floor() {  # config batch -> the plan's predicted total in ms
  "$bin" plan "$1" --device auto --batch "$2" --json 2>/dev/null | tr ',' '\n' |
    sed -n 's/.*"predicted_total_us": *\([0-9.eE+-]*\).*/\1/p' | awk 'NR == 1 { printf "%.3f", $1 / 1000; p = 1 }
                                                                   END { if (!p) printf "-" }'
}
echo "edgevit: $bin"
echo "model: $model (INT8: $int8)"
"$bin" plan "$model" --device auto 2>/dev/null | head -n 2
printf '%-6s %-22s %-22s %-9s %-14s %s\n' batch "$prec p50 ms (2 runs)" "int8 p50 ms (2 runs)" speed-up target \
  "floor $prec / int8 ms"
for b in ${INT8_SPEED_BATCHES:-1 8 64}; do
  case $b in 1) target=1.0 ;; 8) target=1.2 ;; 64) target=1.35 ;; *) target= ;; esac
  iters=${INT8_SPEED_ITERS:-$([ "$b" -ge 64 ] && echo 40 || echo 200)}
  f1=$(p50 "$model" "$b" "$iters"); i1=$(p50 "$int8" "$b" "$iters")
  f2=$(p50 "$model" "$b" "$iters"); i2=$(p50 "$int8" "$b" "$iters")
  ratio=$(awk -v a="$f1" -v b="$f2" -v c="$i1" -v d="$i2" 'BEGIN {
    if (a b c d ~ /did-not-run/ || a == "" || c == "") { print "-"; exit }
    f = (a + 0 < b + 0 ? a : b); i = (c + 0 < d + 0 ? c : d); printf "%.3f", f / i }')
  verdict=$(awk -v r="$ratio" -v t="$target" 'BEGIN {
    if (r == "-" || t == "") print "-"; else print ">= " t (r + 0 >= t + 0 ? " met" : " missed") }')
  printf '%-6s %-22s %-22s %-9s %-14s %s / %s\n' "$b" "$f1 / $f2" "$i1 / $i2" "$ratio" "$verdict" \
    "$(floor "$model" "$b")" "$(floor "$int8" "$b")"
done
echo "(speed-up: the better $prec p50 over the better INT8 one; did-not-run: $work/bench.err says why)"
