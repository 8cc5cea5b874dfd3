#!/usr/bin/env bash
# Configures and builds edgevit into build/ (Release, all cores). Used by tools/demo.sh and tools/test.sh.
# Usage: tools/build.sh [--target T]... [CMAKE_ARGS...]
#   --target T   build only T (repeatable; default: everything, tests included), e.g. --target edgevit
#   CMAKE_ARGS   go to cmake's configure step, e.g. -DEDGEVIT_CUDA=OFF
set -euo pipefail
cd "$(dirname "$0")/.."
targets=()
cmake_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --target) [ $# -ge 2 ] || { echo "build.sh: --target needs a name" >&2; exit 2; }; targets+=(--target "$2"); shift 2;;
    --target=*) targets+=(--target "${1#--target=}"); shift;;
    *) cmake_args+=("$1"); shift;;
  esac
done
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "${cmake_args[@]}" >build-configure.log 2>&1 || { cat build-configure.log; exit 1; }
grep -E "^-- edgevit:" build-configure.log || true
cmake --build build -j"$(nproc)" "${targets[@]}"
