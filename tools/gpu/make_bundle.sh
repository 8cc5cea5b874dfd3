#!/usr/bin/env bash
# Builds, on this (GPU-less) host, what tools/gpu/run_on_gpu.sh runs on the lent GPU machine, into .bundle/
# (git-ignored; pass it as `carry` to the device run):
#   .bundle/mha_cuda_test                  the CUDA attention tests (tests/kernels/mha_cuda_test.cu; gtest linked statically)
#   .bundle/libedgevit_mha_bench.so   C entry points for tools/gpu/bench_mha.py (tools/gpu/mha_bench_lib.cu)
#   .bundle/sm80_ceilings             mma.sync / ldmatrix / ex2 throughput on the GPU (tools/gpu/sm80_ceilings.cu)
# CUDA's own libraries (cudart, cublasLt) are not bundled: the GPU machine has them (toolkit and torch wheels),
# and run_on_gpu.sh puts them on LD_LIBRARY_PATH. Everything else the binaries need is static or glibc.
#   usage: tools/gpu/make_bundle.sh [BUILD_DIR]     (default build-cuda; BENCH_ARCHS default "90")
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build-cuda}
archs=${BENCH_ARCHS:-90}
cd "$root"
[ -f "$build/CMakeCache.txt" ] || cmake -S "$root" -B "$build" -DEDGEVIT_CUDA=ON -G Ninja
cmake --build "$build" -j2 --target mha_cuda_test
mkdir -p .bundle
test_bin=$(ls "$build/bin/mha_cuda_test" "$build/tests/mha_cuda_test" 2>/dev/null | head -1 || true)
cp "$test_bin" .bundle/
gencode=()
for a in ${archs//;/ }; do gencode+=(-gencode "arch=compute_$a,code=sm_$a"); done
nvcc -std=c++17 -O3 -shared -Xcompiler -fPIC,-Wall,-Wextra --expt-relaxed-constexpr -lineinfo -I"$root" "${gencode[@]}" \
  tools/gpu/mha_bench_lib.cu kernels/cuda/mha_fused.cu kernels/cuda/mha_unfused.cu kernels/cpu/mha_variants.cpp \
  -lcublasLt -o .bundle/libedgevit_mha_bench.so
nvcc -std=c++17 -O3 -I"$root" "${gencode[@]}" tools/gpu/sm80_ceilings.cu -o .bundle/sm80_ceilings
echo "bundle:"; ls -la .bundle
echo "non-glibc, non-CUDA libraries needed (should be none):"
. tools/lib/bundle_libs.sh
bundle_libs_list .bundle/mha_cuda_test .bundle/libedgevit_mha_bench.so .bundle/sm80_ceilings
