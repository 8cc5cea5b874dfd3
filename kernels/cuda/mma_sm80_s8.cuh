// The int8 SM80-class tensor-core instructions as inline PTX (valid from CUDA 11.0), beside the fp16 ones of
// mma_sm80.cuh: mma.sync m16n8k32 s8 x s8 -> s32 and u8 x s8 -> s32; and an unpredicated cp.async. Used by
// kernels/cuda/gemm_i8.cu and the ceiling measurement in tools/gpu/bench_gemm_i8.cu.
#pragma once

#include <cstdint>

namespace edgevit::cuda {

// c (16x8, s32) += a (16x32, s8, row) * b (32x8, s8, col). Fragments: an int8 16x32 A tile is laid out
// as a b16 16x16 one (ldmatrix.x4), an int8 32x8 B tile as a b16 16x8 one (two ldmatrix matrices).
// Not volatile: a register-only operation, so the compiler may interleave it with the (volatile) ldmatrix.
__device__ __forceinline__ void mma_16832_s8(int (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The same with unsigned A (u8 x s8 -> s32; fc2's input, codes of GELU + shift: kernels/cpu/gemm_i8_ref.h).
__device__ __forceinline__ void mma_16832_u8s8(int (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// 16-byte global -> shared copy that always reads (no zero-fill operand): for tiles wholly inside the matrix.
__device__ __forceinline__ void cp_async_16_full_at(uint32_t smem_dst, const void* gmem_src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_dst), "l"(gmem_src));
}

}  // namespace edgevit::cuda
