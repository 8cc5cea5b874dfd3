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
exit $status
