#!/usr/bin/env bash
# The README's second command (and what CI runs): installs what is missing, builds once, then runs the
# tests by label: cuda tests (which report "skipped: no GPU" and count as skipped on machines without one),
# slow cpu tests, fast cpu tests; then builds and checks the amd64 .deb and relocatable tarball, and installs
# the Python module with pip into a venv and classifies two digits with it (tools/pip_install_test.sh).
# Extra stages, off by default (they take about half an hour on 2 cores); .ci/run turns both on:
#   EDGEVIT_CI_HARDENING=1  ASan + UBSan build of the cpu suite, then every fuzzer for EDGEVIT_FUZZ_SECONDS
#                           (default 60) each (tools/sanitize.sh, tools/fuzz.sh; docs/reliability.md)
#   EDGEVIT_CI_CROSS=1      aarch64 cross build, its tests and `edgevit-selftest --quick` under qemu, and the
#                           arm64 .deb and tarball (tools/cross_build.sh, tools/package.sh; docs/deploy.md)
# Every stage runs even when an earlier one failed; the exit status is 1 if any failed.
# The run ends with every skipped test of every stage and its reason (tools/skips.sh, from GoogleTest's XML
# reports and ctest's JUnit report, kept in build/test-reports/); a skip whose reason its stage does not
# allow (no GPU anywhere; sanitizer and emulator reasons in their stages: docs/reliability.md) fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
status=0
failed=()
stage() {  # stage NAME: prints NAME and the seconds since tools/test.sh started
  echo "== tools/test.sh: $1 (at $(( $(date +%s) - start )) s)"
}
fail() { status=1; failed+=("$1"); }
# Test reports of every stage, for tools/skips.sh; sanitize.sh and cross_build.sh write theirs here too.
export EDGEVIT_TEST_REPORTS=$PWD/build/test-reports
rm -rf "$EDGEVIT_TEST_REPORTS"
native_ctest() {  # native_ctest STAGE CTEST_ARGS...: ctest in build/ with its reports in STAGE's folder
  local stage=$1
  shift
  mkdir -p "$EDGEVIT_TEST_REPORTS/$stage/gtest"
  (cd build && GTEST_OUTPUT="xml:$EDGEVIT_TEST_REPORTS/$stage/gtest/" \
    ctest --output-junit "$EDGEVIT_TEST_REPORTS/$stage/ctest.xml" "$@")
}

stage "dependencies and native build"
tools/deps.sh
tools/build.sh
jobs=$(nproc)
stage "native tests"
# cuda and slow first, so the closing summary is the main cpu run's.
native_ctest native-cuda -L cuda --output-on-failure --timeout 900 || fail "ctest -L cuda"
native_ctest native-slow -L slow --output-on-failure --timeout 1800 || fail "ctest -L slow"
native_ctest native-cpu -L cpu -LE slow -j"$jobs" --output-on-failure --timeout 900 || fail "ctest -L cpu"
stage "native packages"
tools/package.sh build || fail "tools/package.sh build"
tools/pip_install_test.sh || fail "tools/pip_install_test.sh"

if [ "${EDGEVIT_CI_HARDENING:-0}" = 1 ]; then
  stage "hardening: ASan + UBSan cpu suite"
  tools/sanitize.sh -LE slow || fail "tools/sanitize.sh"
  stage "hardening: fuzzers, ${EDGEVIT_FUZZ_SECONDS:-60} s each"
  tools/fuzz.sh "${EDGEVIT_FUZZ_SECONDS:-60}" || fail "tools/fuzz.sh"
fi
if [ "${EDGEVIT_CI_CROSS:-0}" = 1 ]; then
  stage "aarch64: cross build, tests and self-test under qemu"
  tools/cross_build.sh || fail "tools/cross_build.sh"
  stage "aarch64: packages"
  tools/package.sh build-aarch64 || fail "tools/package.sh build-aarch64"
fi
stage "skipped tests"
tools/skips.sh "$EDGEVIT_TEST_REPORTS" || fail "tools/skips.sh (a skip its stage does not allow)"
stage "done"
if [ $status -ne 0 ]; then
  echo "tools/test.sh: FAILED: ${failed[*]}" >&2
fi
exit $status
