#!/bin/sh
# The INT8 measurements of docs/int8.md: for each model, calibrate with each method, then compare INT8 with
# fp32 on held-out images with each runtime.int8_activations (per_tensor and norm_per_token for each method,
# then per_token), and each method again with the RepQ-ViT LayerNorm fold (`calibrate --ln-fold`: per_tensor +
# fold, norm_per_token + fold), all without the bias correction, then mse with it (calibrate's default); prints per
# configuration the smallest SQNR of the block GEMM outputs (attn.qkv.out, mlp.hidden) and of every compared
# tensor, and the logits' relative error.
# Usage: tools/int8/measure.sh EDGEVIT_BINARY DIR MODEL.yaml CALIB.safetensors EVAL.safetensors [SAMPLES]
# (DIR: where the configs and scale files are written; the random ViTs: tools/int8/random_vits.py DIR)
set -eu
bin=$1 dir=$2 model=$3 calib=$4 eval=$5 samples=${6:-0}
cd "$dir"
summary() {
  awk -v name="$1" '
    $1 ~ /(attn\.qkv\.out|mlp\.hidden)$/ { if (g == "" || $3 < g) g = $3 }
    $1 ~ /^(blocks|pre_logits|logits|norm)/ { if (a == "" || $3 < a) a = $3 }
    $1 == "logits" { l = $2 }
    END { printf "%-34s min SQNR GEMM outputs %5.1f dB, all tensors %5.1f dB, logits rel. error %s\n", name, g, a, l }'
}
stem=$(basename "$model" .yaml)
mode() {  # the calibrated config $1 with runtime.int8_activations $2 -> $3
  sed "s/^runtime:\$/runtime:\n  int8_activations: $2/" "$1" > "$3"
}
for method in minmax percentile mse; do
  for fold in "" " + fold"; do
    cfg=$stem-$method${fold:+-fold}
    "$bin" calibrate "$model" --images "$calib" --samples "$samples" --method "$method" ${fold:+--ln-fold} \
      --no-bias-correction -o "$cfg.yaml" -t 2 >/dev/null 2>&1
    mode "$cfg.yaml" per_tensor "$cfg-per-tensor.yaml"
    "$bin" compare "$cfg-per-tensor.yaml" -i "$eval" -t 2 2>/dev/null | summary "$stem $method$fold (per tensor)"
    "$bin" compare "$cfg.yaml" -i "$eval" -t 2 2>/dev/null | summary "$stem $method$fold (norm_per_token)"
  done
done
cfg=$stem-mse-bias
"$bin" calibrate "$model" --images "$calib" --samples "$samples" --bias-correction -o "$cfg.yaml" -t 2 >/dev/null 2>&1
mode "$cfg.yaml" per_tensor "$cfg-per-tensor.yaml"
"$bin" compare "$cfg-per-tensor.yaml" -i "$eval" -t 2 2>/dev/null | summary "$stem mse + bias correction (per tensor)"
"$bin" compare "$cfg.yaml" -i "$eval" -t 2 2>/dev/null | summary "$stem mse + bias correction (norm_per_token)"
mode "$stem-percentile.yaml" per_token "$stem-per-token.yaml"
"$bin" compare "$stem-per-token.yaml" -i "$eval" -t 2 2>/dev/null | summary "$stem per token"
