#!/usr/bin/env bash
# Builds, on this (GPU-less) host, the INT8 GPU tests for the lent GPU machine into build-int8-bundle/
# (git-ignored; pass it as `carry` to the device run):
#   payload.tar.xz  quantize_i8_cuda_test (tests/kernels/quantize_i8_cuda_test.cu: LayerNorm -> int8 and fp16 rows
#                   -> int8, kernels/cuda/quantize_i8.h, against layernorm_ref + quantize_rows_i8_ref), standalone
#                   nvcc, + lib/
#   engine.tar.xz   bin/int8_cuda_test (tests/runtime/int8_cuda_test.cu, from the CUDA build dir CUDA_BUILD:
#                   vit-digits INT8 through the CUDA rows), lib/, and wt/: config/ and the two digits splits, for
#                   the source path compiled into the test (link it there: ln -s DIR/wt <this worktree's path>)
# SASS for sm_87 (Orin) and sm_90 (the lent H100 / H200); ARCHS overrides ("87 90").
#   usage: CUDA_BUILD=build-hc tools/gpu/make_int8_bundle.sh [OUT_DIR]   (default build-int8-bundle)
#   on the GPU machine: tar xJf OUT_DIR/payload.tar.xz -C DIR; DIR/quantize_i8_cuda_test; likewise engine.tar.xz
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
if [ -n "${CUDA_BUILD:-}" ]; then
  cmake --build "$CUDA_BUILD" -j2 --target int8_cuda_test
  stage=$obj/engine-stage
  rm -rf "$stage"
  mkdir -p "$stage/bin" "$stage/lib" "$stage/wt/tests/data/digits"
  cp "$CUDA_BUILD/bin/int8_cuda_test" "$stage/bin/"
  strip --strip-debug "$stage/bin/int8_cuda_test"
  cp -r config "$stage/wt/"
  cp tests/data/digits/calib_split.safetensors tests/data/digits/test_split.safetensors "$stage/wt/tests/data/digits/"
  bundle_libs "$stage/lib" "$stage/bin/int8_cuda_test"
  tar cf - -C "$stage" bin lib wt | xz -T2 -6 >"$out/engine.tar.xz"
fi
ls -la "$out" "$out/bin"
