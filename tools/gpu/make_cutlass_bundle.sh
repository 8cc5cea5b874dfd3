#!/usr/bin/env bash
# Builds the CUTLASS int8 yardstick (tools/gpu/bench_cutlass_i8.cu, a measurement tool: not a CMake target, not
# in CI) with, beside it, the W8A8 GEMM bundle it is compared with (tools/gpu/make_i8_bundle.sh: bench_gemm_i8
# and the GEMM tests), for the lent GPU machine. BUNDLE (default build-cutlass-bundle/, git-ignored; pass it as
# `carry` to the device run) gets payload.tar.xz (make_i8_bundle.sh's), cutlass.tar.xz (bench_cutlass_i8) and
# tools/gpu/run_cutlass_on_gpu.sh (the device copies the lead's tree, not a helper's worktree).
# CUTLASS is not vendored: CUTLASS_DIR names a checkout (its include/ is used, headers only), e.g. from the
# read-only mirror: git -C /work/.mirror/NVIDIA+cutlass/repo archive HEAD include | tar x -C /tmp/cutlass
# CUTLASS's kernels are compiled from compute_80 PTX (so only its SM80 paths exist: arch::Sm80, mma.sync,
# cp.async) to sm_90 SASS (the lent H100 / H200); our objects for ARCHS (default 90).
#   usage: CUTLASS_DIR=/tmp/cutlass [BUNDLE=/work/main/build-NAME-bundle] tools/gpu/make_cutlass_bundle.sh
#   on the GPU machine: BUNDLE/run_cutlass_on_gpu.sh BUNDLE
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
cutlass=${CUTLASS_DIR:?CUTLASS_DIR must name a CUTLASS checkout (with include/cutlass/cutlass.h)}
[[ -f "$cutlass/include/cutlass/cutlass.h" ]] || { echo "make_cutlass_bundle: no $cutlass/include/cutlass/cutlass.h" >&2; exit 1; }
out=${BUNDLE:-build-cutlass-bundle}
obj=build-i8  # make_i8_bundle.sh's objects
ARCHS=${ARCHS:-90} BUNDLE="$out" tools/gpu/make_i8_bundle.sh
mkdir -p "$out/cutlass-bin"
nvcc -std=c++17 -O3 -I"$root" -I"$cutlass/include" --expt-relaxed-constexpr -lineinfo -Xptxas -v \
  -gencode arch=compute_80,code=sm_90 tools/gpu/bench_cutlass_i8.cu "$obj/gemm_i8.o" "$obj/gemm_i8_ref.o" \
  -o "$out/cutlass-bin/bench_cutlass_i8" 2>"$out/cutlass-bin/ptxas.log"
tar cJf "$out/cutlass.tar.xz" -C "$out/cutlass-bin" .
cp tools/gpu/run_cutlass_on_gpu.sh "$out/"
rm -rf "$out/cutlass-bin"
ls -la "$out"
