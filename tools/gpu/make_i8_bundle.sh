#!/usr/bin/env bash
# Builds, on this (GPU-less) host, the W8A8 GEMM's binaries for the lent GPU machine into BUNDLE (default
# build-i8-bundle/, git-ignored; pass it as `carry` to the device run), packed as BUNDLE/payload.tar.xz, with
# tools/gpu/run_i8_on_gpu.sh copied beside it (the device copies the lead's tree, not a helper's worktree):
#   gemm_i8_cuda_test   tests/kernels/gemm_i8_cuda_test.cu (every variant x epilogue x scale mode vs the CPU reference)
#   gemm_i8_test        tests/kernels/gemm_i8_test.cpp (the CPU reference vs a naive loop)
#   gemm_i8_lt_cuda_test tests/kernels/gemm_i8_lt_cuda_test.cu (cuBLASLt IMMA and the standalone epilogue vs the reference)
#   bench_gemm_i8       tools/gpu/bench_gemm_i8.cu (int8 variants vs cuBLASLt fp16 at ViT-B shapes, mma ceilings)
#   lib/                what they need beyond glibc and CUDA (tools/lib/bundle_libs.sh; gtest is static)
# SASS for sm_87 (Orin) and sm_90 (the lent H100 / H200); ARCHS overrides ("87 90").
#   usage: [BUNDLE=/work/main/build-NAME-bundle] tools/gpu/make_i8_bundle.sh
#   on the GPU machine: BUNDLE/run_i8_on_gpu.sh BUNDLE (or tar xJf BUNDLE/payload.tar.xz -C DIR and run DIR/*)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
out=${BUNDLE:-build-i8-bundle}
obj=build-i8
archs=${ARCHS:-87 90}
gencode=()
for a in $archs; do gencode+=(-gencode "arch=compute_$a,code=sm_$a"); done
flags=(-std=c++17 -O3 -I"$root" --expt-relaxed-constexpr -lineinfo -Xcompiler -Wall,-Wextra)
rm -rf "$out/bin"
mkdir -p "$out/bin" "$obj"
nvcc "${flags[@]}" "${gencode[@]}" -c kernels/cuda/gemm_i8.cu -o "$obj/gemm_i8.o"
nvcc "${flags[@]}" "${gencode[@]}" -c kernels/cuda/gemm_i8_epilogue.cu -o "$obj/gemm_i8_epilogue.o"
for f in gemm_i8_lt gemm_lt; do
  g++ -std=c++17 -O3 -Wall -Wextra -I"$root" -I/usr/local/cuda/include -c "kernels/cuda/$f.cpp" -o "$obj/$f.o"
done
g++ -std=c++17 -O3 -Wall -Wextra -I"$root" -c kernels/cpu/gemm_i8_ref.cpp -o "$obj/gemm_i8_ref.o"
g++ -std=c++17 -O3 -Wall -Wextra -I"$root" -c kernels/cpu/quantize_i8_ref.cpp -o "$obj/quantize_i8_ref.o"
nvcc "${flags[@]}" "${gencode[@]}" tests/kernels/gemm_i8_cuda_test.cu tests/testutil/cuda_main.cpp \
  "$obj/gemm_i8.o" "$obj/gemm_i8_ref.o" -lgtest -lpthread -o "$out/bin/gemm_i8_cuda_test"
nvcc "${flags[@]}" "${gencode[@]}" tests/kernels/gemm_i8_lt_cuda_test.cu tests/testutil/cuda_main.cpp \
  "$obj/gemm_i8_epilogue.o" "$obj/gemm_i8_lt.o" "$obj/gemm_lt.o" kernels/cuda/ops_elementwise.cu "$obj/gemm_i8_ref.o" \
  -lcublasLt -lgtest -lpthread -o "$out/bin/gemm_i8_lt_cuda_test"
g++ -std=c++17 -O3 -Wall -Wextra -I"$root" tests/kernels/gemm_i8_test.cpp "$obj/gemm_i8_ref.o" "$obj/quantize_i8_ref.o" \
  -lgtest -lgtest_main -lpthread -o "$out/bin/gemm_i8_test"
nvcc "${flags[@]}" "${gencode[@]}" tools/gpu/bench_gemm_i8.cu "$obj/gemm_lt.o" "$obj/gemm_i8_lt.o" \
  "$obj/gemm_i8_epilogue.o" kernels/cuda/ops_elementwise.cu "$obj/gemm_i8.o" "$obj/gemm_i8_ref.o" -lcublasLt \
  -o "$out/bin/bench_gemm_i8"
. tools/lib/bundle_libs.sh
bundle_libs "$out/bin/lib" "$out/bin/gemm_i8_cuda_test" "$out/bin/gemm_i8_test" "$out/bin/gemm_i8_lt_cuda_test" \
  "$out/bin/bench_gemm_i8"
tar cJf "$out/payload.tar.xz" -C "$out/bin" .
cp tools/gpu/run_i8_on_gpu.sh "$out/"
rm -rf "$out/bin"
ls -la "$out"
