#!/usr/bin/env bash
# Runs the CUTLASS yardstick bundle (tools/gpu/make_cutlass_bundle.sh) on the lent GPU machine, logs under $OUT
# ($OUT/logs.tar.gz): bench_gemm_i8 (our rows with the blocks' epilogues, cuBLASLt fp16, the mma.sync
# ceilings), bench_cutlass_i8 (CUTLASS's SM80 configs and our rows, cheapest epilogue), then ncu (sections below)
# on the fastest CUTLASS int8-out config and our fastest row at NCU_SHAPE (default "qkv 64"), both read off
# bench_cutlass_i8's summary lines; STEPS picks some ("bench cutlass ncu", default all).
#   usage (device run): BUNDLE/run_cutlass_on_gpu.sh [BUNDLE]     (BUNDLE defaults to build-cutlass-bundle)
set -uo pipefail
out=${OUT:-/tmp/edgevit-out}
dir=/tmp/cutlass-bundle
mkdir -p "$out" "$dir"
bundle=${1:-build-cutlass-bundle}
steps=${STEPS:-bench cutlass ncu}
tar xJf "$bundle/payload.tar.xz" -C "$dir"
tar xJf "$bundle/cutlass.tar.xz" -C "$dir"
step_dir=$out
. tools/gpu/device_steps.sh
gpu_env "$dir"
cp "$dir/ptxas.log" "$out/cutlass_ptxas.log"
has() { [[ " $steps " == *" $1 "* ]]; }
has bench && step bench_gemm_i8 150 "$dir/bench_gemm_i8"
has cutlass && step bench_cutlass_i8 240 "$dir/bench_cutlass_i8"
if has ncu && [[ -f "$out/bench_cutlass_i8.log" ]]; then
  ncu_bin=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)
  read -r gemm batch <<<"${NCU_SHAPE:-qkv 64}"
  line=$(grep "^summary batch $batch $gemm .*i8  out" "$out/bench_cutlass_i8.log")
  cl=$(awk '{for (i = 1; i <= NF; ++i) if ($i == "cutlass") {print $(i + 1); exit}}' <<<"$line")
  row=$(awk '{for (i = 1; i <= NF; ++i) if ($i == "ours") {print $(i + 2); exit}}' <<<"$line")
  echo "ncu at $gemm batch $batch: cutlass $cl, our row $row ($ncu_bin)"
  for who in "$cl" "row:$row"; do
    tag=${who//:/_}
    profiled=("$dir/bench_cutlass_i8" --profile "$who" "$gemm" "$batch")
    step "ncu_$tag" 150 "$ncu_bin" --section SpeedOfLight --section Occupancy --section LaunchStats \
      --section WarpStateStats --section SchedulerStats --section InstructionStats --section ComputeWorkloadAnalysis \
      --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --launch-skip 2 --launch-count 1 \
      -f -o "$out/ncu_$tag" "${profiled[@]}" ||
      step "ncu_${tag}_full" 150 "$ncu_bin" --set full --launch-skip 2 --launch-count 1 -f -o "$out/ncu_$tag" \
        "${profiled[@]}"
    "$ncu_bin" -i "$out/ncu_$tag.ncu-rep" --page details >"$out/ncu_${tag}_details.log" 2>&1
    "$ncu_bin" -i "$out/ncu_$tag.ncu-rep" --page raw --csv >"$out/ncu_${tag}_raw.csv" 2>&1
  done
fi
grep "^summary" "$out/bench_cutlass_i8.log" 2>/dev/null
echo "summary: ${summary[*]}" | tee "$out/summary.txt"
(cd "$out" && tar czf logs.tar.gz --exclude=logs.tar.gz ./*.log ./*.txt ./*.csv ./*.ncu-rep 2>/dev/null;
 rm -f ./*.log ./*.csv ./*.ncu-rep)
