#!/usr/bin/env bash
# Builds, on this (GPU-less) host, the INT8 fused attention's binaries for the lent GPU machine into
# BUNDLE_DIR (default build-attn8-bundle/, git-ignored; pass it as `carry` to the device run), packed as
# BUNDLE_DIR/payload.tar.xz, and prints ptxas's register / spill counts of every INT8 kernel for sm_87:
#   mha_i8_cuda_test   tests/kernels/mha_i8_cuda_test.cu (every INT8 row vs mha_i8_ref and fp32 attention)
#   mha_i8_test        tests/kernels/mha_i8_test.cpp (the CPU reference, quantiser and support predicate)
#   bench_mha_i8       tools/gpu/bench_mha_i8.cu (INT8 rows vs our fp16 fused kernel, same process)
#   lib/               what they need beyond glibc and CUDA (tools/lib/bundle_libs.sh)
#   bench_mha_i8_run.sh  a copy of tools/gpu/bench_mha_i8_run.sh, beside the payload
# SASS for sm_87 (Orin) and sm_90 (the lent H100 / H200); ARCHS overrides ("87 90").
#   usage: tools/gpu/bench_mha_i8_bundle.sh [BUNDLE_DIR]; then, on the GPU machine, tools/gpu/bench_mha_i8_run.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
out=${1:-build-attn8-bundle}
obj=build-attn8-obj
archs=${ARCHS:-87 90}
gencode=()
for a in $archs; do gencode+=(-gencode "arch=compute_$a,code=sm_$a"); done
flags=(-std=c++17 -O3 -I"$root" --expt-relaxed-constexpr -lineinfo -Xcompiler -Wall,-Wextra)
mkdir -p "$out/bin" "$obj"
nvcc "${flags[@]}" -gencode arch=compute_87,code=sm_87 -Xptxas -v -c kernels/cuda/mha_i8.cu -o "$obj/ptxas87.o" 2>&1 |
  awk '/Compiling entry/ {n = $0; sub(/.*I8TraitsILi/, "", n); sub(/EEEEE.*/, "", n)}
       /spill/ {sp = $1 " stack, " $5 " spill st, " $9 " spill ld"}
       /Used [0-9]+ registers/ {for (i = 1; i <= NF; i++) if ($(i + 1) == "registers,") r = $i; print "sm_87 " n ": " r " regs, " sp}'
nvcc "${flags[@]}" "${gencode[@]}" -c kernels/cuda/mha_i8.cu -o "$obj/mha_i8.o" &
nvcc "${flags[@]}" "${gencode[@]}" -c kernels/cuda/mha_fused.cu -o "$obj/mha_fused.o" &
wait
for f in mha_i8_ref mha_ref mha_variants; do
  g++ -std=c++17 -O3 -Wall -Wextra -I"$root" -c kernels/cpu/$f.cpp -o "$obj/$f.o"
done
nvcc "${flags[@]}" "${gencode[@]}" tests/kernels/mha_i8_cuda_test.cu tests/testutil/cuda_main.cpp \
  "$obj/mha_i8.o" "$obj/mha_i8_ref.o" "$obj/mha_ref.o" -lgtest -lpthread -o "$out/bin/mha_i8_cuda_test"
g++ -std=c++17 -O3 -Wall -Wextra -I"$root" tests/kernels/mha_i8_test.cpp "$obj/mha_i8_ref.o" "$obj/mha_ref.o" \
  -lgtest -lgtest_main -lpthread -o "$out/bin/mha_i8_test"
nvcc "${flags[@]}" "${gencode[@]}" tools/gpu/bench_mha_i8.cu "$obj/mha_i8.o" "$obj/mha_fused.o" "$obj/mha_variants.o" \
  -o "$out/bin/bench_mha_i8"
. tools/lib/bundle_libs.sh
bundle_libs "$out/bin/lib" "$out/bin/mha_i8_cuda_test" "$out/bin/mha_i8_test" "$out/bin/bench_mha_i8"
tar cJf "$out/payload.tar.xz" -C "$out/bin" .
cp tools/gpu/bench_mha_i8_run.sh "$out/"  # the GPU machine gets /work/main's tree, not this one
ls -la "$out" "$out/bin"
