#!/usr/bin/env bash
# Runs the W8A8 GEMM bundle (tools/gpu/make_i8_bundle.sh, carried as BUNDLE/payload.tar.xz) on the lent GPU
# machine, logs under $OUT: the CPU reference test, the full CUDA test, the bench (all multiprocessors, then
# 8 of them as on Orin NX), compute-sanitizer memcheck (the small shapes and the deep-pipeline one, which
# overhang the tiles in M, N and K) and racecheck (the deep-pipeline shape), cuBLASLt IMMA's test and bench
# (imma: gemm_i8_lt_cuda_test, bench_gemm_i8 --imma); STEPS picks some ("test bench bench8 sanitize imma ncu";
# default all but ncu). Each step is capped; the
# summary line lists every step's exit code, and $OUT/logs.tar.gz holds the logs.
#   usage (device run): BUNDLE/run_i8_on_gpu.sh [BUNDLE]     (BUNDLE defaults to build-i8-bundle)
set -uo pipefail
out=${OUT:-/tmp/edgevit-out}
dir=/tmp/i8-bundle
mkdir -p "$out" "$dir"
bundle=${1:-build-i8-bundle}
steps=${STEPS:-test bench bench8 sanitize imma}
tar xJf "$bundle/payload.tar.xz" -C "$dir"
step_dir=$out
. tools/gpu/device_steps.sh
gpu_env "$dir"
has() { [[ " $steps " == *" $1 "* ]]; }
has bench && step bench 90 "$dir/bench_gemm_i8"
if has test; then
  step cpu_test 60 "$dir/gemm_i8_test" --gtest_brief=1
  step cuda_test 240 "$dir/gemm_i8_cuda_test" --gtest_brief=1
fi
has bench8 && CUDA_MODULE_LOADING=EAGER step bench8 150 "$dir/bench_gemm_i8" --sms 8
if has imma; then
  step imma_test 240 "$dir/gemm_i8_lt_cuda_test"
  step imma_bench 150 "$dir/bench_gemm_i8" --imma
fi
if has sass; then  # SASS_KERNEL: a substring of the mangled kernel name
  cuobjdump -sass "$dir/bench_gemm_i8" >"$out/sass_all.txt" 2>&1
  python3 - "$out/sass_all.txt" "${SASS_KERNEL:-}" >"$out/sass.log" <<'PY'
import re, sys, collections
text = open(sys.argv[1]).read().split("Function : ")
for block in text[1:]:
    name = block.split("\n", 1)[0]
    if sys.argv[2] not in name or "sm_90" not in block[:0] and False:
        continue
    ops = collections.Counter(m.group(1).split(".")[0] for m in re.finditer(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]+)", block))
    print(name, sum(ops.values()), dict(ops.most_common(40)))
    print(block[:60000])
    break
PY
  rm -f "$out/sass_all.txt"
fi
if has ncu; then  # NCU_ROWS: "ROW:GEMM:BATCH ..."
  for r in ${NCU_ROWS:-}; do
    IFS=: read -r row gemm batch <<<"$r"
    step "ncu_${row}_${gemm}_${batch}" 90 ncu --launch-skip 2 --launch-count 1 --set full --page raw --csv \
      "$dir/bench_gemm_i8" --profile "$row" "$gemm" "$batch"
  done
fi
if has sanitize; then
  step memcheck 100 compute-sanitizer --tool memcheck --error-exitcode 99 "$dir/gemm_i8_cuda_test" --gtest_brief=1 \
    --gtest_filter='*SmallShapes*:*DeepPipeline*:*Rejects*'
  step racecheck 110 compute-sanitizer --tool racecheck --racecheck-report all --error-exitcode 99 \
    "$dir/gemm_i8_cuda_test" --gtest_brief=1 --gtest_filter='*DeepPipeline*'
fi
for f in bench bench8 imma_bench; do [[ -f "$out/$f.log" ]] && cat "$out/$f.log"; done
echo "summary: ${summary[*]}" | tee "$out/summary.txt"
(cd "$out" && tar czf logs.tar.gz --exclude=logs.tar.gz ./*.log ./*.txt && rm -f ./*.log)
