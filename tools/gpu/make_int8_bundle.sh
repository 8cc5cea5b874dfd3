#!/usr/bin/env bash
# Builds, on this (GPU-less) host, the GPU INT8 producers' test for the lent GPU machine into
# build-int8-bundle/ (git-ignored; pass it as `carry` to the device run), packed as payload.tar.xz:
#   quantize_i8_cuda_test   tests/kernels/quantize_i8_cuda_test.cu (LayerNorm -> int8 and fp16 rows -> int8,
#                           kernels/cuda/quantize_i8.h, against layernorm_ref + quantize_rows_i8_ref)
#   lib/                    what it needs beyond glibc and CUDA (tools/lib/bundle_libs.sh; gtest is static)
# SASS for sm_87 (Orin) and sm_90 (the lent H100 / H200); ARCHS overrides ("87 90").
#   usage: tools/gpu/make_int8_bundle.sh [OUT_DIR]   (default build-int8-bundle)
#   on the GPU machine: tar xJf OUT_DIR/payload.tar.xz -C DIR; DIR/quantize_i8_cuda_test
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
out=${1:-build-int8-bundle}
obj=build-int8-obj
archs=${ARCHS:-87 90}
gencode=()
for a in $archs; do gencode+=(-gencode "arch=compute_$a,code=sm_$a"); done
flags=(-std=c++17 -O3 -I"$root" --expt-relaxed-constexpr -lineinfo -Xcompiler -Wall,-Wextra)
mkdir -p "$out/bin" "$obj"
nvcc "${flags[@]}" "${gencode[@]}" -c kernels/cuda/quantize_i8.cu -o "$obj/quantize_i8.o"
for f in quantize_i8_ref gemm_i8_ref layernorm_ref; do
  g++ -std=c++17 -O3 -Wall -Wextra -I"$root" -c "kernels/cpu/$f.cpp" -o "$obj/$f.o"
done
nvcc "${flags[@]}" "${gencode[@]}" tests/kernels/quantize_i8_cuda_test.cu tests/testutil/cuda_main.cpp \
  "$obj/quantize_i8.o" "$obj/quantize_i8_ref.o" "$obj/gemm_i8_ref.o" "$obj/layernorm_ref.o" -lgtest -lpthread \
  -o "$out/bin/quantize_i8_cuda_test"
. tools/lib/bundle_libs.sh
bundle_libs "$out/bin/lib" "$out/bin/quantize_i8_cuda_test"
tar cJf "$out/payload.tar.xz" -C "$out/bin" .
ls -la "$out" "$out/bin"
