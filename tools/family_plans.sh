#!/usr/bin/env bash
# The plan of each ViT family config in config/models on the Orin profiles: memory, verdict and the roofline
# prediction, as the markdown table in docs/models.md ("Plans on the Orin boards"). No weights are needed.
#   usage: tools/family_plans.sh [EDGEVIT_BIN]    (default build/bin/edgevit)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$root/build/bin/edgevit}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# DINOv2-S/14 at 224 as well as its native 518: the same config with img_size changed.
sed 's/^  img_size: 518/  img_size: 224/; s/^name: dinov2-vits14/name: dinov2-vits14-224/' \
  "$root/config/models/dinov2-vits14.yaml" >"$tmp/dinov2-vits14-224.yaml"
models=("$root/config/models/dinov2-vits14.yaml" "$tmp/dinov2-vits14-224.yaml" "$root/config/models/dinov2-vitb14-reg4.yaml"
        "$root/config/models/clip-vitb16.yaml" "$root/config/models/clip-vitl14.yaml" "$root/config/models/siglip-vitb16.yaml"
        "$root/config/models/vit-base-patch16-224.yaml")
row='
import json, sys
d = json.load(sys.stdin)
mib = lambda x: "%.0f" % (x / 2**20)
h, w = d["image_size"]
cells = [d["model"], "%dx%d (%d)" % (h, w, d["tokens"]), d["device"], str(d["batch"]), mib(d["weights_bytes"]) + " MiB",
         mib(d["total_bytes"]) + " / " + mib(d["budget_bytes"]), "FITS" if d["fits"] else "DOES NOT FIT",
         "%.2f" % (d["predicted_total_us"] / 1e3), d["attention_kernel"].replace("cuda.", "")]
print("| " + " | ".join(cells) + " |")'
echo "| model | input (tokens) | device | batch | fp16 weights | total / budget (MiB) | verdict | predicted (ms) | attention |"
echo "|---|---|---|---|---|---|---|---|---|"
for m in "${models[@]}"; do
  for dev in orin-nx-16gb orin-nano-8gb; do
    for b in 1 8; do
      "$bin" plan "$m" --device "$dev" --batch "$b" --json | python3 -c "$row"
    done
  done
done
