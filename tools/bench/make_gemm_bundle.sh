#!/usr/bin/env bash
# Builds tools/bench/gemm_bench.cpp (the ViT GEMM shapes through OpenBLAS tiles, edgevit's libxsmm
# PackedLinear, oneDNN's dnnl_sgemm and matmul primitive, BLIS) against BUILD's edgevit_kernels and copies
# it, BUILD/bin/edgevit and every non-glibc shared library they need (tools/lib/bundle_libs.sh) into
# .bundle-gemm/ (git-ignored locally through .git/info/exclude), to run on another x86-64 machine (the lent
# GPU machine's 16-core host). Needs libdnnl-dev, libblis-openmp-dev, libxsmm-dev, libbenchmark-dev.
# Usage: tools/bench/make_gemm_bundle.sh [BUILD]   (default build-gemm; build target edgevit first)
# Then:  .bundle-gemm/run gemm_bench --benchmark_filter=threads:1
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
build=${1:-build-gemm}
exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
grep -qx '/.bundle-gemm/' "$exclude" 2>/dev/null || echo '/.bundle-gemm/' >>"$exclude"
rm -rf .bundle-gemm && mkdir -p .bundle-gemm/lib
blis_inc=/usr/include/x86_64-linux-gnu/blis-openmp
blis_lib=/usr/lib/x86_64-linux-gnu/blis-openmp
# BLIS ships its own cblas.h: its include directory is for gemm_bench.cpp alone, and OpenBLAS comes
# first on the link line so cblas_sgemm (linear_f32) resolves to OpenBLAS.
g++ -std=c++17 -O3 -fopenmp -I. -I"$blis_inc" -DGEMM_BENCH_BLIS -c tools/bench/gemm_bench.cpp \
  -o .bundle-gemm/gemm_bench.o
g++ -fopenmp .bundle-gemm/gemm_bench.o "$build/kernels/libedgevit_kernels.a" /usr/lib/libxsmm.a \
  -o .bundle-gemm/gemm_bench -lopenblas -L"$blis_lib" -lblis -ldnnl -lbenchmark -lpthread -ldl
rm .bundle-gemm/gemm_bench.o
cp "$build/bin/edgevit" .bundle-gemm/
. tools/lib/bundle_libs.sh
bundle_libs .bundle-gemm/lib .bundle-gemm/gemm_bench .bundle-gemm/edgevit
cat >.bundle-gemm/run <<'EOF'
#!/bin/sh
# .bundle-gemm/run PROGRAM ARGS...: runs a bundled program against the bundled libraries.
here=$(cd "$(dirname "$0")" && pwd)
prog=$1; shift
LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$here/$prog" "$@"
EOF
chmod +x .bundle-gemm/run
ls -la .bundle-gemm .bundle-gemm/lib
