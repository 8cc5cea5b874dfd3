#!/usr/bin/env bash
# Runs the INT8 fused attention bundle (tools/gpu/bench_mha_i8_bundle.sh, carried as BUNDLE_DIR/payload.tar.xz)
# on the lent GPU machine, logs tarred to $OUT/attn8-logs.tar.xz (bench.log and summary.txt also as files): the CPU test, compute-sanitizer
# memcheck and racecheck on small cases, the full CUDA test, the benchmark, then Nsight Compute (when present)
# on the B64 H12 S197 D64 launch of the fp16 table's row and the INT8 row beside it. Each step is capped; the
# summary line lists every step's exit code.
#   usage (device run): tools/gpu/bench_mha_i8_run.sh [BUNDLE_DIR] [bench arguments...]
set -uo pipefail
bundle=${1:-build-attn8-bundle}
shift || true
out=${OUT:-/tmp/edgevit-out}
dir=/tmp/attn8-bundle
logs=/tmp/attn8-logs/attn8  # tarred into $OUT at the end (at most 8 files come back from a run)
mkdir -p "$logs" "$dir"
tar xJf "$bundle/payload.tar.xz" -C "$dir"
step_dir=$logs
step_tail=3
. tools/gpu/device_steps.sh
gpu_env "$dir"
small='*B2_H3_Sq7_*:*B3_H5_Sq131_*:*B3_H4_Sq70_*:*B3_H2_Sq1_*:*Launcher*:*ScaleMax*'
step cpu_test 15 "$dir/mha_i8_test" --gtest_brief=1
step memcheck 50 compute-sanitizer --tool memcheck --error-exitcode 99 "$dir/mha_i8_cuda_test" --gtest_brief=1 \
  --gtest_filter="$small"
step racecheck 30 compute-sanitizer --tool racecheck --racecheck-report all --error-exitcode 99 \
  "$dir/mha_i8_cuda_test" --gtest_brief=1 --gtest_filter='*B3_H5_Sq131_*:*B3_H4_Sq70_*'
step cuda_test 80 "$dir/mha_i8_cuda_test" --gtest_brief=1
grep '^\[i8attn\]' "$logs/cuda_test.log" | sort -k5 -g | tail -n 5
step bench 110 "$dir/bench_mha_i8" "$@"
grep -E 'summary|device' "$logs/bench.log"
# Nsight Compute on B64 H12 S197 D64: the fp16 table's row and the INT8 row beside it (first launch of each).
if command -v ncu >/dev/null; then
  step profile 90 ncu --kernel-name-base mangled -c 2 \
    -k 'regex:FlashFwdTraitsILi64ELi128ELi4ELi32ELi2ELb1ELi1E|I8TraitsILi64ELi128ELi4ELi32ELi2ELb0ELb0E' \
    --section SpeedOfLight --section Occupancy --section WarpStateStats --section InstructionStats \
    --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
    --metrics sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,sm__inst_executed.sum \
    "$dir/bench_mha_i8" --shapes '64,12,197,197,64' --calls 1 --reps 1
fi
echo "summary: ${summary[*]}" | tee "$logs/summary.txt"
tar cJf "$out/attn8-logs.tar.xz" -C /tmp/attn8-logs attn8
cp "$logs/bench.log" "$logs/summary.txt" "$out/"
