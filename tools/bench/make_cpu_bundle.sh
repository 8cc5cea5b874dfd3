#!/usr/bin/env bash
# Builds a CPU-only edgevit (EDGEVIT_CUDA=OFF) into build-cpu-bench/ and copies the binary plus every
# non-glibc shared library it needs (tools/lib/bundle_libs.sh) into .bundle-cpu/ (git-ignored), so it runs
# on another x86-64 Linux machine (the lent GPU machine, which has 16 cores, torch, timm and onnxruntime)
# for tools/bench/cpu_vs_ort.py. Usage: tools/bench/make_cpu_bundle.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
cmake -S . -B build-cpu-bench -DEDGEVIT_CUDA=OFF -DEDGEVIT_TESTS=OFF -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build-cpu-bench -j2 --target edgevit
rm -rf .bundle-cpu && mkdir -p .bundle-cpu/lib
cp build-cpu-bench/bin/edgevit .bundle-cpu/
. tools/lib/bundle_libs.sh
# OpenBLAS is found through Debian's alternatives symlink; bundle_libs keeps the name the binary asks for.
bundle_libs .bundle-cpu/lib build-cpu-bench/bin/edgevit
# libxsmm (EDGEVIT_LIBXSMM, x86-64) is linked statically (Debian ships only libxsmm.a): nothing to bundle.
ls -la .bundle-cpu .bundle-cpu/lib
