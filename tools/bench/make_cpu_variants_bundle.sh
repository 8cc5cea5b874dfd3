#!/usr/bin/env bash
# Builds CPU-only edgevit variants (EDGEVIT_CUDA=OFF, Release) that differ only by experiment switches
# (EDGEVIT_EXP_DEFS: compile definitions that reach kernels/cpu/gemm_packed.cpp and runtime/backend_cpu.cpp
# only; docs/journal/cpu-gemm-history.md) and bundles them for the lent machine's 16-core host, where
# tools/bench/cpu_vs_ort.py --variant LABEL=PATH times them against ONNX Runtime, alternated per round.
# The switches are an experiment, not product code: they live in tools/bench/cpu_gemm_variants.patch
# (session 4's cpu-exp branch), which this script applies to a throw-away worktree of HEAD
# (build-exp-tree/, git-ignored) when the tree it runs from does not have them.
# One Ninja build directory: switching variants recompiles the two files and relinks.
# Writes DEST/variants.tar.gz (edgevit-LABEL for each variant and lib/, the non-glibc shared libraries as
# tools/lib/bundle_libs.sh copies them: ~20 MB packed, ~58 MB unpacked, OpenBLAS alone 36 MB),
# DEST/variants.txt (label, definitions, source revision, sha256 prefix) and DEST/run.sh (the device-side command, which
# unpacks into /tmp/cpuexp/bundle).
# Usage: tools/bench/make_cpu_variants_bundle.sh [DEST]   (default: this tree's .bundle-cpuexp)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
dest=${1:-$root/.bundle-cpuexp}
cd "$root"
. tools/lib/bundle_libs.sh
if ! grep -q EDGEVIT_EXP_DEFS kernels/CMakeLists.txt; then
  tree=$root/build-exp-tree
  git worktree remove --force "$tree" 2>/dev/null || rm -rf "$tree"
  git worktree prune
  git worktree add --detach "$tree" HEAD >/dev/null
  git -C "$tree" apply "$root/tools/bench/cpu_gemm_variants.patch" ||
    { echo "tools/bench/cpu_gemm_variants.patch no longer applies to HEAD: refresh it" >&2; exit 2; }
  cd "$tree"
fi
variants=(
  "base="
  "thp=EDGEVIT_EXP_THP"
  "pf=EDGEVIT_EXP_PF=1"
  "pf2=EDGEVIT_EXP_PF=2"
  "thp_pf=EDGEVIT_EXP_THP;EDGEVIT_EXP_PF=1"
  "xsmm_pf=EDGEVIT_EXP_XSMM_PF=1"
  "xsmm_pfs=EDGEVIT_EXP_XSMM_PF=2"
  "kc128=EDGEVIT_EXP_KCHUNK=128"
)
build=build-exp
rev=$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . || echo "+dirty")
stage=$build/variants-stage
rm -rf "$dest" "$stage" && mkdir -p "$dest" "$stage/lib"
: >"$dest/variants.txt"
for v in "${variants[@]}"; do
  label=${v%%=*} defs=${v#*=}
  cmake -S . -B "$build" -G Ninja -DEDGEVIT_CUDA=OFF -DEDGEVIT_TESTS=OFF -DCMAKE_BUILD_TYPE=Release \
    "-DEDGEVIT_EXP_DEFS=$defs" >/dev/null
  cmake --build "$build" -j2 --target edgevit | tail -n 1
  cp "$build/bin/edgevit" "$stage/edgevit-$label"
  printf '%s\t%s\t%s\t%s\n' "$label" "${defs:-none}" "$rev" "$(sha256sum <"$stage/edgevit-$label" | cut -c1-12)" \
    >>"$dest/variants.txt"
done
# Back to the base build, so the directory's binary is the default one.
cmake -S . -B "$build" -DEDGEVIT_EXP_DEFS= >/dev/null
bundle_libs "$stage/lib" "$stage/edgevit-base"
tar -C "$stage" -czf "$dest/variants.tar.gz" .
rm -rf "$stage"

cat >"$dest/run.sh" <<'EOF'
#!/usr/bin/env bash
# On the lent machine, from the repository root (its tools/bench/cpu_vs_ort.py must know --variant):
#   bash .bundle-cpuexp/run.sh     (writes $OUT/cpu_variants.log)
# ViT-B/16 at 1 and 2 threads: ORT, then every variant in an order rotated per round; then ViT-Ti at
# 1 thread if the time allows. Budget: ~6 minutes on the 16-core host (ViT-B ~300 ms at 1 thread).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bundle=/tmp/cpuexp/bundle
rm -rf "$bundle" && mkdir -p "$bundle"
tar -C "$bundle" -xzf "$here/variants.tar.gz" && cp "$here/variants.txt" "$bundle/"
export LD_LIBRARY_PATH="$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
out=${OUT:-/tmp/cpuexp-out}
mkdir -p "$out"
log=$out/cpu_variants.log
start=$(date +%s)
args=()
while IFS=$'\t' read -r label _; do args+=(--variant "$label=$bundle/edgevit-$label"); done <"$bundle/variants.txt"
{
  echo "== host"; date -u; uname -r; uptime; nproc
  lscpu | grep -E '^(Model name|CPU\(s\)|Thread|Core|Socket|NUMA node\(s\)|L1d|L2|L3|Hypervisor)' || true
  for f in enabled defrag; do echo "THP $f: $(cat /sys/kernel/mm/transparent_hugepage/$f 2>/dev/null)"; done
  echo "== variants (label, definitions, source revision, sha256)"; cat "$bundle/variants.txt"
} >"$log" 2>&1
echo "== ViT-B/16, 1 and 2 threads" >>"$log"
timeout 420 python3 tools/bench/cpu_vs_ort.py --work /tmp/cpuexp --models vit_base_patch16_224 --threads 1,2 \
  --rounds 3 --iters 10 --warmup 2 --gemm-profile "${args[@]}" >>"$log" 2>&1
echo "exit $? after $(( $(date +%s) - start )) s" >>"$log"
# Huge pages actually given to the arena (the process sampled mid-run), base and thp.
cfg=/tmp/cpuexp/vit_base_patch16_224.yaml
for label in base thp; do
  [ -f "$cfg" ] || break
  "$bundle/edgevit-$label" bench "$cfg" --device host-cpu --threads 1 --iters 20 --warmup 0 >/dev/null 2>&1 &
  pid=$!
  sleep 3
  proc=$(grep AnonHugePages /proc/$pid/smaps_rollup 2>/dev/null || echo 'AnonHugePages: n/a')
  echo "$label: process $proc; system $(grep AnonHugePages /proc/meminfo)" >>"$log"
  wait $pid
done
if [ $(( $(date +%s) - start )) -lt 330 ]; then
  echo "== ViT-Ti/16, 1 thread" >>"$log"
  timeout $(( 400 - ($(date +%s) - start) )) python3 tools/bench/cpu_vs_ort.py --work /tmp/cpuexp \
    --models vit_tiny_patch16_224 --threads 1 --rounds 3 --iters 20 --warmup 3 --gemm-profile "${args[@]}" \
    >>"$log" 2>&1
  echo "exit $? after $(( $(date +%s) - start )) s" >>"$log"
else
  echo "ViT-Ti skipped: $(( $(date +%s) - start )) s spent" >>"$log"
fi
# For the caller's output tail: the host, the checks and the tables, each line once.
grep -E '^(==|Model name|L2|L3|THP|base:|thp:|exit|ViT-Ti skipped|vit_|\||  threads)' "$log" |
  awk '!seen[$0]++' | tail -c 11500
EOF
chmod +x "$dest/run.sh"
cat "$dest/variants.txt"
du -sh "$dest"
