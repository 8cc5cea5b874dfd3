#!/usr/bin/env bash
# Builds edgevit's libFuzzer targets (tests/fuzz/fuzz_*.cpp, clang, ASan + UBSan) into build-hardening/ and runs
# each for SECONDS (default 60), one after the other, on a scratch corpus seeded from tests/fuzz/corpus/NAME/
# (the checked-in seeds are read, never written). Fails on any crash, leak, timeout, out-of-memory or
# sanitizer report; reproducers are left in build-hardening/artifacts/NAME/ and logs in build-hardening/logs/.
# Called by tools/test.sh when EDGEVIT_CI_HARDENING=1; docs/reliability.md records longer runs.
# Usage: tools/fuzz.sh [SECONDS] [NAME...]      (NAME: safetensors, model_config, device_profile, image, ...)
#   env: FUZZ_JOBS (build parallelism, default nproc), FUZZ_ARGS (extra libFuzzer flags)
# Reproduce a finding: build-hardening/bin/fuzz_NAME build-hardening/artifacts/NAME/crash-...
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
root=$PWD
. tools/lib/hardening_build.sh
build=$hardening_dir
hardening_build -j"${FUZZ_JOBS:-$(nproc)}" --target fuzzers

# Input size caps per target (bytes): seeds are well under them; larger inputs only slow the search.
declare -A max_len=([safetensors]=16384 [model_config]=4096 [device_profile]=4096 [image]=16384 [frame]=4096)
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
  for src in tests/fuzz/fuzz_*.cpp; do n=$(basename "$src" .cpp); names+=("${n#fuzz_}"); done
fi

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
status=0
mkdir -p "$build/logs"
for name in "${names[@]}"; do
  bin=$build/bin/fuzz_$name
  seeds=$root/tests/fuzz/corpus/$name
  [ -x "$bin" ] || { echo "fuzz.sh: no fuzzer $bin" >&2; status=1; continue; }
  mkdir -p "$build/corpus/$name" "$build/artifacts/$name" "$seeds"
  dict=()
  [ -f "tests/fuzz/$name.dict" ] && dict=(-dict="tests/fuzz/$name.dict")
  log=$build/logs/$name.log
  # -timeout: seconds per input (ASan+UBSan); -rss_limit_mb also caps single mallocs (malloc_limit_mb).
  if "$bin" "$build/corpus/$name" "$seeds" -max_total_time="$seconds" -max_len="${max_len[$name]:-4096}" \
      -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 -artifact_prefix="$build/artifacts/$name/" \
      "${dict[@]}" ${FUZZ_ARGS:-} >"$log" 2>&1; then
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
    echo "fuzz_$name: ok, $runs runs in ${seconds}s, corpus $(ls "$build/corpus/$name" | wc -l) files"
  else
    echo "fuzz_$name: FAILED (log: $log); last lines:" >&2
    tail -n 40 "$log" >&2
    status=1
  fi
done
exit $status
