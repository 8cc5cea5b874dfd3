#!/usr/bin/env bash
# Runs on the lent GPU machine, from the repository root, with build-e2e-bundle/ carried
# (tools/gpu/make_e2e_bundle.sh):
#   1. the CUDA tests: ops_cuda_test, cuda_engine_test, mha_cuda_test, gemm_lt_cuda_test, op_cases_cuda_test,
#      families_cuda_test, gemm_i8_cuda_test, mha_i8_cuda_test, quantize_i8_cuda_test, int8_cuda_test,
#      layernorm_i8_f64_cuda_test
#   2. compute-sanitizer memcheck on a reduced filter of cuda_engine_test (200 s cap, GEMM tuning off), then on
#      its tuned-engine test alone (300 s cap)
#   3. edgevit-selftest on the GPU: --quick, full, --json, and both injected faults (must exit 1)
#   4. tools/gpu/make_timm_checkpoints.py (seeded ViT-Ti/S/B + timm float64 goldens), then
#      tools/gpu/bench_e2e.py (edgevit run vs timm, edgevit bench vs timm eager / CUDA graph / torch.compile)
# Logs go to $OUT (gpu.txt, *.log, bench_e2e.json); a summary is printed last.
#   5. footprint_cuda_test: the plan's host and device totals against a fresh process's measured footprint
#   6. (families only) tools/gpu/bench_families.py: DINOv2, CLIP and SigLIP at real sizes vs timm's CUDA graph
#      and torch.compile (issue #24's targets); FAMILY_MODELS=a,b picks models; FAMILY_PROFILE=1 adds the
#      per-op/kernel tables (profiles.tar.gz)
#   usage: tools/gpu/run_e2e_on_gpu.sh [tests|check|bench|quick|selftest|footprint|families|all]   (default all;
#          check: steps 1, 3 and 5, no sanitizer, no benchmark;
#          quick: ops_cuda_test and cuda_engine_test, no sanitizer, no attention tests, then the benchmark;
#          selftest: step 3 only; footprint: step 5 only; families: step 6 only;
#          B=DIR: another bundle; TESTS="a b": only those CUDA tests in step 1)
set -uo pipefail
what=${1:-all}
out=${OUT:-/tmp/edgevit-out}
mkdir -p "$out"
repo=$(pwd -P)
B=${B:-$repo/build-e2e-bundle}
tar xJf "$B/payload.tar.xz" -C "$B" || { echo "cannot unpack $B/payload.tar.xz"; exit 1; }
libdirs=$( (ls -d /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib 2>/dev/null;
            python3 -c 'import glob, site; [print(d) for p in site.getsitepackages() for d in glob.glob(p + "/nvidia/*/lib")]' 2>/dev/null) | paste -sd:)
export LD_LIBRARY_PATH="$B/lib:$libdirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# The test binaries have the build host's paths compiled in: the repository at /work/main and the goldens at
# /work/shared/testdata/golden; model YAMLs name their weights as ../../../shared/... from config/models.
if [ "$repo" != /work/main ] && [ ! -e /work/main ]; then mkdir -p /work && ln -s "$repo" /work/main; fi
mkdir -p /work/shared/testdata "$(dirname "$repo")/shared/testdata"
[ -e /work/shared/testdata/golden ] || ln -s "$B/golden" /work/shared/testdata/golden
[ -e "$(dirname "$repo")/shared/testdata/golden" ] || ln -s "$B/golden" "$(dirname "$repo")/shared/testdata/golden"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw --format=csv \
  | tee "$out/gpu.txt"
summary=()
selftest_on_gpu() {  # the on-target self-test, as an engineer runs it on a fresh board: here on this GPU
  local st=$B/bin/edgevit-selftest rc
  (cd "$repo" && "$st" --quick) >"$out/selftest_quick.log" 2>&1; rc=$?
  summary+=("edgevit-selftest --quick: rc=$rc (want 0) $(grep -cE '^ *PASS' "$out/selftest_quick.log") PASS, $(grep -cE '^ *FAIL' "$out/selftest_quick.log") FAIL")
  cat "$out/selftest_quick.log"
  (cd "$repo" && "$st") >"$out/selftest_full.log" 2>&1; rc=$?
  summary+=("edgevit-selftest (full): rc=$rc (want 0) $(grep -cE '^ *PASS' "$out/selftest_full.log") PASS, $(grep -cE '^ *FAIL' "$out/selftest_full.log") FAIL")
  (cd "$repo" && "$st" --quick --json) >"$out/selftest_quick.json" 2>"$out/selftest_json.err"; rc=$?
  summary+=("edgevit-selftest --quick --json: rc=$rc (want 0)")
  for f in attention-scale corrupt-weight; do
    (cd "$repo" && "$st" --quick --inject-fault="$f") >"$out/selftest_fault_$f.log" 2>&1; rc=$?
    summary+=("edgevit-selftest --inject-fault=$f: rc=$rc (want 1): $(grep -E '^ *FAIL' "$out/selftest_fault_$f.log" | cut -c1-90 | paste -sd';')")
  done
}
footprint_on_gpu() {  # plan's memory totals against the process's real footprint (issue: exact bytes)
  "$B/bin/footprint_cuda_test" --gtest_brief=0 >"$out/footprint.log" 2>&1
  summary+=("footprint_cuda_test: rc=$? $(grep -E '^\[  (PASSED|FAILED) ' "$out/footprint.log" | paste -sd' ')")
  grep -E 'device: plan|^  (host|device) |Failure|vs measured' "$out/footprint.log"
}
if [ "$what" = footprint ]; then
  footprint_on_gpu
  echo "==== summary"; printf '%s\n' "${summary[@]}"; exit 0
fi
if [ "$what" = families ]; then
  mkdir -p /tmp/edgevit-families-yaml
  PYTHONUNBUFFERED=1 python3 tools/gpu/bench_families.py --edgevit "$B/bin/edgevit" --work /tmp/edgevit-families \
    --json "$out/bench_families.json" ${FAMILY_MODELS:+--models "$FAMILY_MODELS"} \
    ${FAMILY_PROFILE:+--profile-dir /tmp/edgevit-families-prof} --yaml-out /tmp/edgevit-families-yaml 2>&1 | tee "$out/families.log"
  summary+=("bench_families: rc=${PIPESTATUS[0]}")
  tar czf "$out/yamls.tar.gz" -C /tmp edgevit-families-yaml
  [ -n "${FAMILY_PROFILE:-}" ] && tar czf "$out/profiles.tar.gz" -C /tmp edgevit-families-prof
  echo "==== summary"; printf '%s\n' "${summary[@]}"; exit 0
fi
if [ "$what" = selftest ]; then
  selftest_on_gpu
  echo "==== summary"; printf '%s\n' "${summary[@]}"; exit 0
fi
if [ "$what" != bench ]; then
  selftest_on_gpu
  tests="ops_cuda_test cuda_engine_test mha_cuda_test gemm_lt_cuda_test op_cases_cuda_test families_cuda_test gemm_i8_cuda_test mha_i8_cuda_test quantize_i8_cuda_test int8_cuda_test layernorm_i8_f64_cuda_test twin_f64_cuda_test"
  [ "$what" = quick ] && tests="ops_cuda_test cuda_engine_test"
  tests=${TESTS:-$tests}
  for t in $tests; do
    "$B/bin/$t" --gtest_brief=1 >"$out/$t.log" 2>&1
    summary+=("$t: rc=$? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$out/$t.log" | paste -sd' ')")
    grep -E 'Failure|error:|FAILED|rel err|predictions|profile total' "$out/$t.log" | head -60
  done
  grep -A17 '^allocation [0-9]' "$out/cuda_engine_test.log" 2>/dev/null | head -40
  footprint_on_gpu
fi
if [ "$what" = check ]; then
  echo "==== summary"; printf '%s\n' "${summary[@]}"; exit 0
fi
if [ "$what" = tests ] || [ "$what" = all ]; then
  # GEMM tuning off in these engines (each timed run costs milliseconds under the sanitizer); one tuned
  # engine (GemmTuningOnFp16: the timing runs and the L2 sweep kernel) is checked apart, below.
  filter='*MatchesTimm/0:*MatchesTimm/1:*MatchesTimm/8:*MatchesTimm/9:*MatchesTimm/10:*BatchOutside*'
  EDGEVIT_TEST_GEMM_TUNING=0 timeout 200 compute-sanitizer --tool memcheck --error-exitcode 99 "$B/bin/cuda_engine_test" --gtest_brief=1 \
    --gtest_filter="$filter" >"$out/memcheck.log" 2>&1
  summary+=("memcheck cuda_engine_test: rc=$? $(grep -E 'ERROR SUMMARY' "$out/memcheck.log" | tail -1)")
  EDGEVIT_TEST_UNDER_SANITIZER=1 timeout 300 compute-sanitizer --tool memcheck --error-exitcode 99 "$B/bin/cuda_engine_test" \
    --gtest_brief=1 --gtest_filter='*GemmTuningOnFp16' >"$out/memcheck_tuning.log" 2>&1
  summary+=("memcheck cuda_engine_test GEMM tuning: rc=$? (124: over 300 s) $(grep -E 'ERROR SUMMARY' "$out/memcheck_tuning.log" | tail -1)")
fi
if [ "$what" != tests ]; then
  models=/tmp/edgevit-models
  PYTHONUNBUFFERED=1 python3 tools/gpu/make_timm_checkpoints.py "$models" 2>&1 | tee "$out/bench.log"
  PYTHONUNBUFFERED=1 python3 tools/gpu/bench_e2e.py --edgevit "$B/bin/edgevit" --models-dir "$models" \
    --json "$out/bench_e2e.json" 2>&1 | tee -a "$out/bench.log"
  summary+=("bench_e2e: rc=${PIPESTATUS[0]}")
fi
echo "==== summary"
printf '%s\n' "${summary[@]}"
