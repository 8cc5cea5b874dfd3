#!/usr/bin/env bash
# ptxas resource check of the fused attention kernels for Orin (sm_87), run by ctest as mha_ptxas_check
# (label cpu: needs nvcc, not a GPU).
#   usage: check_ptxas.sh NVCC SOURCE_DIR
# Compiles kernels/cuda/mha_fused.cu with -Xptxas -v for sm_87 and fails if any kernel uses more than 255
# registers, spills (stack frame, spill stores or loads), or more static shared memory than CC 8.7 allows
# per block (163 KB). Dynamic shared memory is checked at compile time by the traits' static_asserts.
set -euo pipefail
nvcc=${1:?usage: check_ptxas.sh NVCC SOURCE_DIR}
src=${2:?usage: check_ptxas.sh NVCC SOURCE_DIR}
log=$(mktemp)
trap 'rm -f "$log" "$log.o"' EXIT
"$nvcc" -std=c++17 -O3 --expt-relaxed-constexpr -I"$src" -gencode arch=compute_87,code=sm_87 \
  -Xptxas -v -c "$src/kernels/cuda/mha_fused.cu" -o "$log.o" >"$log" 2>&1 || { cat "$log"; exit 1; }
awk '
  /Compiling entry function/ { name = $0; sub(/.*function ./, "", name); sub(/. for .*/, "", name); kernels++ }
  /bytes stack frame/ {
    if ($1 != 0 || $5 != 0 || $9 != 0) { printf "FAIL spill/stack: %s: %s\n", name, $0; bad++ }
  }
  /Used [0-9]+ registers/ {
    for (i = 1; i <= NF; i++) {
      if ($(i + 1) == "registers,") regs = $i
      if ($(i + 1) == "bytes" && $(i + 2) ~ /^smem/) smem = $i
    }
    printf "%-100s regs %3d smem %6d\n", name, regs, smem
    if (regs > 255) { printf "FAIL registers > 255: %s\n", name; bad++ }
    if (smem > 163 * 1024) { printf "FAIL static smem > 163 KB: %s\n", name; bad++ }
    smem = 0
  }
  END {
    if (kernels == 0) { print "FAIL: no kernels found in ptxas output"; exit 1 }
    printf "%d kernels checked for sm_87, %d failures\n", kernels, bad
    exit bad > 0
  }' "$log"
