#!/usr/bin/env bash
# Builds, on this (GPU-less) host, what tools/gpu/run_e2e_on_gpu.sh runs on the lent GPU machine, into
# build-e2e-bundle/ (git-ignored by /build*/; pass it as `carry` to the device run):
#   payload.tar.xz  bin/: edgevit, edgevit-selftest and the CUDA tests below (ops, engine, mha, gemm_lt, op cases, families, footprint, gemm_i8, mha_i8, quantize_i8, int8, layernorm_i8_f64)
#                   (sm_87 + sm_90 SASS)
#                   lib/: the shared libraries they need beyond glibc, libstdc++ (the GPU machine's is newer)
#                   and CUDA's own (yaml-cpp, spdlog, fmt, OpenBLAS, ...: tools/lib/bundle_libs.sh);
#                   xz -9 (its 64 MiB dictionary shares the runtime code the binaries all link: 36 MB at -6, 12 MB at -9;
#                   OpenBLAS alone is 36 MB uncompressed; the working
#                   tree that travels is capped at 64 MiB)
#   golden/         ../shared/testdata/golden (the tests read it; ../shared does not travel with the checkout)
# Same approach as tools/gpu/make_bundle.sh (attention kernels), for the whole runtime.
#   usage: tools/gpu/make_e2e_bundle.sh [BUILD_DIR]     (default build-cb)
#   BUNDLE=DIR: write the bundle there instead (e.g. /work/main/build-NAME-bundle from a worktree: the device
#   machine copies /work/main's tree); TARGETS="edgevit int8_cuda_test ...": only those binaries.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build-cb}
bundle=${BUNDLE:-$root/build-e2e-bundle}
targets=${TARGETS:-edgevit edgevit-selftest ops_cuda_test cuda_engine_test mha_cuda_test gemm_lt_cuda_test op_cases_cuda_test families_cuda_test footprint_cuda_test gemm_i8_cuda_test mha_i8_cuda_test quantize_i8_cuda_test int8_cuda_test layernorm_i8_f64_cuda_test twin_f64_cuda_test}
cd "$root"
. tools/lib/bundle_libs.sh
[ -f "$build/CMakeCache.txt" ] || cmake -S "$root" -B "$build" -G Ninja -DEDGEVIT_CUDA=ON -DEDGEVIT_CUDA_ARCHS="87;90"
cmake --build "$build" -j2 --target $targets
rm -rf "$bundle"
stage=$build/e2e-bundle-stage
rm -rf "$stage"
mkdir -p "$stage/bin" "$stage/lib" "$bundle/golden"
for b in $targets; do cp "$build/bin/$b" "$stage/bin/"; done
strip --strip-debug "$stage"/bin/*
cp "$root"/../shared/testdata/golden/* "$bundle/golden/"
bundle_libs "$stage/lib" "$stage"/bin/*
tar cf - -C "$stage" bin lib | xz -T2 -9 >"$bundle/payload.tar.xz"
tar tJvf "$bundle/payload.tar.xz"
echo "bundle ($(du -sh "$bundle" | cut -f1)):"; ls -la "$bundle"
