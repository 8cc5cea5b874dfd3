#!/usr/bin/env bash
# ASan + UBSan build of the whole library and test suite (clang, CUDA off, -O1 -g, asserts on; the same
# build as tools/fuzz.sh: tools/lib/hardening_build.sh) into build-hardening/, then runs the tests labelled
# cpu. Any sanitizer report fails the run: UBSan halts on the first error, ASan on any memory error,
# LeakSanitizer at exit. Suppressions (third-party frames only, each explained):
# tests/fuzz/lsan.supp. Called by tools/test.sh when EDGEVIT_CI_HARDENING=1; with EDGEVIT_TEST_REPORTS set
# (tools/test.sh sets it), the test reports go to $EDGEVIT_TEST_REPORTS/hardening/ for tools/skips.sh.
# Usage: tools/sanitize.sh [extra ctest arguments, e.g. -LE slow or -R safetensors]
#   env: SANITIZE_JOBS (build and test parallelism, default nproc)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
jobs=${SANITIZE_JOBS:-$(nproc)}
. tools/lib/hardening_build.sh
hardening_build -j"$jobs"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:check_initialization_order=1:strict_init_order=1:detect_stack_use_after_return=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$root/tests/fuzz/lsan.supp:print_suppressions=0}
cd "$hardening_dir"
report=()
if [ -n "${EDGEVIT_TEST_REPORTS:-}" ]; then
  mkdir -p "$EDGEVIT_TEST_REPORTS/hardening/gtest"
  export GTEST_OUTPUT="xml:$EDGEVIT_TEST_REPORTS/hardening/gtest/"
  report=(--output-junit "$EDGEVIT_TEST_REPORTS/hardening/ctest.xml")
fi
ctest -L cpu -j"$jobs" --output-on-failure --timeout 1800 "${report[@]}" "$@"
