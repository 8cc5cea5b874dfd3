#!/usr/bin/env bash
# Runs the W8A8 GEMM bundle (tools/gpu/make_i8_bundle.sh, carried as build-i8-bundle/payload.tar.xz) on the
# lent GPU machine, logs under $OUT: the CPU reference test, compute-sanitizer memcheck (small shapes) and
# racecheck (one deep-pipeline shape), the full CUDA test, then the bench. Each step is capped; the
# summary line lists every step's exit code.
#   usage (device run): tools/gpu/run_i8_on_gpu.sh
set -uo pipefail
out=${OUT:-/tmp/edgevit-out}
dir=/tmp/i8-bundle
mkdir -p "$out" "$dir"
tar xJf build-i8-bundle/payload.tar.xz -C "$dir"
libdirs=$( (ls -d /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib 2>/dev/null;
            python3 -c 'import glob, site; [print(d) for p in site.getsitepackages() for d in glob.glob(p + "/nvidia/*/lib")]' 2>/dev/null) | paste -sd:)
export LD_LIBRARY_PATH="$dir/lib:$libdirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$out/gpu.txt"
summary=()
step() {  # name, timeout, command...
  local name=$1 cap=$2
  shift 2
  local t0=$SECONDS
  timeout "$cap" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  summary+=("$name=$rc($((SECONDS - t0))s)")
  tail -n 4 "$out/$name.log"
}
step cpu_test 60 "$dir/gemm_i8_test" --gtest_brief=1
step memcheck 70 compute-sanitizer --tool memcheck --error-exitcode 99 "$dir/gemm_i8_cuda_test" --gtest_brief=1 \
  --gtest_filter='*SmallShapes*:*DeepPipeline*:*Rejects*'
step racecheck 60 compute-sanitizer --tool racecheck --racecheck-report all --error-exitcode 99 \
  "$dir/gemm_i8_cuda_test" --gtest_brief=1 --gtest_filter='*DeepPipeline*'
step cuda_test 100 "$dir/gemm_i8_cuda_test" --gtest_brief=1
step bench 60 "$dir/bench_gemm_i8"
cat "$out/bench.log"
echo "summary: ${summary[*]}" | tee "$out/summary.txt"
