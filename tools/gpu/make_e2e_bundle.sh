#!/usr/bin/env bash
# Builds, on this (GPU-less) host, what tools/gpu/run_e2e_on_gpu.sh runs on the lent GPU machine, into
# build-e2e-bundle/ (git-ignored by /build*/; pass it as `carry` to the device run):
#   bin/  edgevit, ops_cuda_test, cuda_engine_test, mha_cuda_test (sm_87 + sm_90 SASS)
#   lib/  the non-glibc, non-CUDA shared libraries they need (yaml-cpp, spdlog, fmt, OpenBLAS, ...): the GPU
#         machine has glibc, the CUDA toolkit and torch's CUDA wheels, nothing else of ours
#   golden/  ../shared/testdata/golden (the tests read it; ../shared does not travel with the checkout)
# Same approach as tools/gpu/make_bundle.sh (attention kernels), for the whole runtime.
#   usage: tools/gpu/make_e2e_bundle.sh [BUILD_DIR]     (default build-cb)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build-cb}
bundle=$root/build-e2e-bundle
cd "$root"
[ -f "$build/CMakeCache.txt" ] || cmake -S "$root" -B "$build" -G Ninja -DEDGEVIT_CUDA=ON -DEDGEVIT_CUDA_ARCHS="87;90"
cmake --build "$build" -j2 --target edgevit ops_cuda_test cuda_engine_test mha_cuda_test
rm -rf "$bundle"
mkdir -p "$bundle/bin" "$bundle/lib" "$bundle/golden"
for b in edgevit ops_cuda_test cuda_engine_test mha_cuda_test; do cp "$build/bin/$b" "$bundle/bin/"; done
strip --strip-debug "$bundle"/bin/*
cp "$root"/../shared/testdata/golden/* "$bundle/golden/"
ldd "$bundle"/bin/* | awk '/=>/ {print $3}' | sort -u |
  grep -v -E '/(libc|libm|libdl|librt|libpthread|ld-linux[^/]*|libcuda|libcudart|libcublas(Lt)?)\.so' |
  while read -r lib; do cp -L "$lib" "$bundle/lib/"; done
echo "bundle ($(du -sh "$bundle" | cut -f1)):"; ls -la "$bundle/bin" "$bundle/lib"
