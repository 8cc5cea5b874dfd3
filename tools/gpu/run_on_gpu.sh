#!/usr/bin/env bash
# Runs on the lent GPU machine, from the repository root, with .bundle/ carried (tools/gpu/make_bundle.sh):
#   1. the CUDA attention tests (.bundle/mha_cuda_test)
#   2. tools/gpu/bench_mha.py: fused / unfused vs torch SDPA backends
#   3. compute-sanitizer memcheck and racecheck on a reduced set of the same tests (200 s cap each)
#   profile (alone): .bundle/sm80_ceilings (mma.sync / ldmatrix / ex2 rates), then Nsight Compute over one launch of
#      each fused row, FA2 and cuDNN per shape (tools/gpu/profile_mha.py) into $OUT/ncu_mha.txt
# Logs go to $OUT (gpu.txt, mha_cuda_test.log, memcheck.log, racecheck.log, bench.log, bench.json); a summary is
# printed last.   usage: tools/gpu/run_on_gpu.sh [tests|bench|all|profile]   (default all)
set -uo pipefail
what=${1:-all}
out=${OUT:-/tmp/edgevit-out}
mkdir -p "$out"
# cudart / cublasLt of the machine: the toolkit's, then torch's wheels.
libdirs=$( (ls -d /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib 2>/dev/null;
            python3 -c 'import glob, site; [print(d) for p in site.getsitepackages() for d in glob.glob(p + "/nvidia/*/lib")]' 2>/dev/null) | paste -sd:)
export LD_LIBRARY_PATH="$libdirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw --format=csv \
  | tee "$out/gpu.txt"
summary=()
if [ "$what" = profile ]; then
  .bundle/sm80_ceilings | tee "$out/ceilings.txt"
  ncu --nvtx -k 'regex:flash|fmha|sdpa|cudnn' --cache-control all \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section Occupancy \
    --section LaunchStats --section SchedulerStats --section WarpStateStats --section InstructionStats \
    --metrics sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed \
    python3 tools/gpu/profile_mha.py --lib .bundle/libedgevit_mha_bench.so >"$out/ncu_mha.txt" 2>&1
  echo "ncu: rc=$? $(grep -c 'flash_fwd\|fmha\|sdpa' "$out/ncu_mha.txt") kernel lines"
  exit 0
fi
if [ "$what" != bench ]; then
  .bundle/mha_cuda_test --gtest_brief=1 >"$out/mha_cuda_test.log" 2>&1
  summary+=("mha_cuda_test: rc=$? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$out/mha_cuda_test.log" | paste -sd' ')")
  grep -E 'Failure|error|FAILED' "$out/mha_cuda_test.log" | head -40
fi
if [ "$what" != tests ]; then
  PYTHONUNBUFFERED=1 python3 tools/gpu/bench_mha.py --lib .bundle/libedgevit_mha_bench.so --json "$out/bench.json" \
    >"$out/bench.log" 2>&1
  summary+=("bench: rc=$?")
  cat "$out/bench.log"
fi
if [ "$what" != bench ]; then
  mem_filter='*Sq7_*:*Sq197_Skv577_D64*:*Sq64_Skv7_D128*:*masked*:*large*:*Launcher*'
  timeout 200 compute-sanitizer --tool memcheck --error-exitcode 99 .bundle/mha_cuda_test --gtest_brief=1 --gtest_filter="$mem_filter" \
    >"$out/memcheck.log" 2>&1
  summary+=("memcheck: rc=$? $(grep -E 'ERROR SUMMARY' "$out/memcheck.log" | tail -1)")
  race_filter='*Sq197_Skv577_D64_separate:*Sq64_Skv7_D128_separate:*B2_H2_Sq70_Skv131_D80_separate_masked'
  timeout 200 compute-sanitizer --tool racecheck --racecheck-report all --error-exitcode 99 .bundle/mha_cuda_test --gtest_brief=1 \
    --gtest_filter="$race_filter" >"$out/racecheck.log" 2>&1
  summary+=("racecheck: rc=$? $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$out/racecheck.log" | tail -1)")
fi
echo "==== summary"
printf '%s\n' "${summary[@]}"
