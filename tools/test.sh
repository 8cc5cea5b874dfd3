#!/usr/bin/env bash
# The README's second command (and what CI runs): installs what is missing, builds once, then runs the
# tests by label: fast cpu tests, slow cpu tests, and cuda tests (which report "skipped: no GPU" and
# count as skipped on machines without one).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/deps.sh
tools/build.sh
cd build
jobs=$(nproc)
status=0
# cuda and slow first, so the closing summary is the main cpu run's.
ctest -L cuda --output-on-failure --timeout 900 || status=1
ctest -L slow --output-on-failure --timeout 1800 || status=1
ctest -L cpu -LE slow -j"$jobs" --output-on-failure --timeout 900 || status=1
# Reliability hardening (CI sets EDGEVIT_CI_HARDENING=1; docs/reliability.md): the whole cpu suite under
# ASan + UBSan, then every fuzzer for EDGEVIT_FUZZ_SECONDS each.
if [ "${EDGEVIT_CI_HARDENING:-0}" = 1 ]; then
  cd ..
  tools/sanitize.sh -LE slow || status=1
  tools/fuzz.sh "${EDGEVIT_FUZZ_SECONDS:-60}" || status=1
fi
# aarch64 cross build + tests under qemu (about 30 min on 2 cores, docs/deploy.md): only when asked
# (EDGEVIT_CI_CROSS=1, e.g. from .ci/run).
if [ "${EDGEVIT_CI_CROSS:-0}" = 1 ]; then
  (cd "$(git rev-parse --show-toplevel)" && tools/cross_build.sh) || status=1
fi
exit $status
