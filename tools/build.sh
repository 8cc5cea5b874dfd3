#!/usr/bin/env bash
# Configures and builds edgevit into build/ (Release, all cores). Extra arguments go to cmake's configure
# step, e.g. tools/build.sh -DEDGEVIT_CUDA=OFF. Used by tools/demo.sh and tools/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "$@" >build-configure.log 2>&1 || { cat build-configure.log; exit 1; }
grep -E "^-- edgevit:" build-configure.log || true
cmake --build build -j"$(nproc)"
