// W8A8 GEMM on SM80-class tensor cores: mma.sync m16n8k32 (s8 x s8 -> s32), ldmatrix fragments from
// XOR-swizzled shared memory, a multi-stage cp.async pipeline with one barrier per k-tile, optional split-K,
// and the dequantization (fp32) with bias, GELU (a table of cubics), residual add or INT8 requantization (fc1:
// GELU + shift -> uint8) fused into the store; unsigned activations (fc2's input) through mma .u8.s8
// (kernels/cuda/gemm_i8.h; the design and what limits it: docs/kernels-gemm-i8.md).
// Rows (gemm_i8_variants(): tile M x N x K bytes, warps, stages, [_b: blocks per SM of the register cap],
// [_k: K split]; rows 4 and 26 run the register-lean main loop), one figure each: ViT-B/16 fc2 at batch 64
// (12608 x 768 x 3072, bias + residual into fp16), TOP/s on an H200 (mma.sync s8 ceiling 1279 TOP/s; cuBLASLt
// fp16 640 TFLOP/s). Every shape and batch: docs/benchmarks.md ("INT8 GEMM"), tools/gpu/bench_gemm_i8.cu.
//    0 i8_128x128x64_w8_s4       605      15 i8_32x64x128_w4_s3        416  (batch 1: best on qkv, proj, fc2)
//    1 i8_128x64x64_w4_s4        587      16 i8_64x32x128_w4_s3        408  (batch 1: best on fc1)
//    2 i8_64x128x64_w4_s4        582      17 i8_32x32x128_w4_s4        306
//    3 i8_64x64x64_w4_s4         513      18 i8_64x64x128_w4_s3_k2     437
//    4 i8_128x128x128_w8_s3      617      19 i8_64x64x128_w4_s3_k4     334
//    5 i8_128x128x128_w4_s3      605      20 i8_32x64x128_w4_s3_k2     355
//    6 i8_128x256x128_w8_s3      496      21 i8_64x32x128_w4_s3_k3     288
//    7 i8_128x64x128_w4_s3       629      22 i8_64x64x64_w4_s4_k2      408  (7: batch 64 best on proj, fc1, fc2)
//    8 i8_64x64x128_w4_s3        545      23 i8_128x64x128_w4_s3_k2    484
//    9 i8_128x256x64_w8_s4       467      24 i8_128x128x64_w4_s4_k2    451
//   10 i8_256x128x64_w8_s4       469      25 i8_64x128x64_w4_s4_b4     606
//   11 i8_256x128x128_w8_s3      509      26 i8_128x64x128_w4_s2_b4    606
//   12 i8_128x128x64_w4_s4       577      27 i8_128x64x64_w4_s4_b4     612
//   13 i8_128x128x128_w4_s3_b2   614      28 i8_64x128x64_w4_s3_b4     580  (28, 29: 4 blocks fit Orin's SM)
//   14 i8_64x256x64_w4_s4        547      29 i8_128x64x64_w4_s3_b4     575
// Rows 30-33, deep pipelines for fc2 at small batches, figured at batch 1 inside the graph (us, H200; row 15:
// 11.0): 30 i8_32x64x128_w4_s6 and 31 its _k3 8.0 (the trace does not tell the two apart); 32
// i8_64x64x128_w4_s5 and 33 its _k3: picked by start-up tuning at batch 2, no figure of their own yet.
// Rows 34-35, 48-row tiles (i8_48x64x128_w4_s3, _w2_s3): at batch 8 on 132 SMs start-up tuning picks 34 for
// proj and fc2 in 11 of 12 blocks, and ViT-B/16 INT8 runs 0.987 -> 0.955 ms (H200).
#include "kernels/cuda/gemm_i8.h"

#include "kernels/cuda/gemm_i8_kernel.cuh"

namespace edgevit::gpu {
namespace {

using LaunchFn = cudaError_t (*)(const GemmI8Args&, int, cudaStream_t);

template <class T, int kEpilogue, bool kXU8 = false>
cudaError_t launch_epilogue(const GemmI8Args& a, int split_k, cudaStream_t stream) {
  const auto kernel = gemm_i8_kernel<T, kEpilogue, kXU8>;
  // Once per kernel: above 48 KB of dynamic shared memory needs the opt-in (not a stream operation).
  static const cudaError_t attr =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, T::kSmemBytes);
  if (attr != cudaSuccess) return attr;
  const dim3 grid(static_cast<unsigned>((a.n + T::kTileN - 1) / T::kTileN),
                  static_cast<unsigned>((a.m + T::kTileM - 1) / T::kTileM), static_cast<unsigned>(split_k));
  kernel<<<grid, T::kThreads, T::kSmemBytes, stream>>>(a);
  return cudaGetLastError();
}

// Unsigned activations are instantiated for the epilogues fc2 (kF16BiasResidual; kF32BiasResidual, served by
// kF32's kernel) and the int32-exact tests (kF32) use only; valid_args refuses the others.
template <class T>
cudaError_t launch(const GemmI8Args& a, int split_k, cudaStream_t stream) {
  if (a.x_u8) {
    if (gemm_i8_epilogue_is_f32(a.epilogue)) return launch_epilogue<T, 0, true>(a, split_k, stream);
    if (a.epilogue == GemmI8Epilogue::kF16BiasResidual) return launch_epilogue<T, 3, true>(a, split_k, stream);
    return cudaErrorInvalidValue;
  }
  switch (a.epilogue) {
    case GemmI8Epilogue::kF32:
    case GemmI8Epilogue::kF32BiasResidual: return launch_epilogue<T, 0>(a, split_k, stream);  // store8's branch
    case GemmI8Epilogue::kF16Bias: return launch_epilogue<T, 1>(a, split_k, stream);
    case GemmI8Epilogue::kF16BiasGelu: return launch_epilogue<T, 2>(a, split_k, stream);
    case GemmI8Epilogue::kF16BiasResidual: return launch_epilogue<T, 3>(a, split_k, stream);
    case GemmI8Epilogue::kI8Bias: return launch_epilogue<T, 4>(a, split_k, stream);
    case GemmI8Epilogue::kI8BiasGelu: return launch_epilogue<T, 5>(a, split_k, stream);
    case GemmI8Epilogue::kQkHeadI8:  // tiles of whole heads (>= 64 columns: head_dim 32 and 64; 128 from 128)
      if constexpr (T::kTileN >= 64)
        return launch_epilogue<T, static_cast<int>(GemmI8Epilogue::kQkHeadI8)>(a, split_k, stream);
      return cudaErrorInvalidValue;
  }
  return cudaErrorInvalidValue;
}
static_assert(static_cast<int>(GemmI8Epilogue::kQkHeadI8) == kGemmI8EpilogueCount - 1, "launch() covers all");

// Traits: tile M, N, K (bytes), warps M x N, stages, resident blocks per SM (the register cap), lean main loop.
using T128x128x64 = GemmI8Traits<128, 128, 64, 2, 4, 4, 2>;
using T128x64x64 = GemmI8Traits<128, 64, 64, 2, 2, 4, 3>;
using T64x128x64 = GemmI8Traits<64, 128, 64, 2, 2, 4, 3>;
using T64x64x64 = GemmI8Traits<64, 64, 64, 2, 2, 4, 4>;
using T128x128x128 = GemmI8Traits<128, 128, 128, 2, 4, 3, 2, true>;
using T128x128x128w4 = GemmI8Traits<128, 128, 128, 2, 2, 3, 1>;
using T128x256x128 = GemmI8Traits<128, 256, 128, 2, 4, 3, 1>;
using T128x64x128 = GemmI8Traits<128, 64, 128, 2, 2, 3, 3>;
using T64x64x128 = GemmI8Traits<64, 64, 128, 2, 2, 3, 4>;
using T128x256x64 = GemmI8Traits<128, 256, 64, 2, 4, 4, 1>;
using T256x128x64 = GemmI8Traits<256, 128, 64, 4, 2, 4, 1>;
using T256x128x128 = GemmI8Traits<256, 128, 128, 4, 2, 3, 1>;
using T128x128x64w4 = GemmI8Traits<128, 128, 64, 2, 2, 4, 2>;
using T128x128x128w4b2 = GemmI8Traits<128, 128, 128, 2, 2, 3, 2>;
using T64x256x64 = GemmI8Traits<64, 256, 64, 1, 4, 4, 2>;
using T32x64x128 = GemmI8Traits<32, 64, 128, 2, 2, 3, 4>;
using T64x32x128 = GemmI8Traits<64, 32, 128, 2, 2, 3, 4>;
using T32x32x128 = GemmI8Traits<32, 32, 128, 2, 2, 4, 4>;
using T64x128x64b4 = GemmI8Traits<64, 128, 64, 2, 2, 4, 4>;
using T128x64x128s2 = GemmI8Traits<128, 64, 128, 2, 2, 2, 4, true>;
using T128x64x64b4 = GemmI8Traits<128, 64, 64, 2, 2, 4, 4>;
using T64x128x64s3b4 = GemmI8Traits<64, 128, 64, 2, 2, 3, 4>;  // 3 stages: 4 blocks fit Orin's 164 KB per SM
using T128x64x64s3b4 = GemmI8Traits<128, 64, 64, 2, 2, 3, 4>;
// Deep pipelines for long K over few tiles (fc2 at small batches: K = 3072 in 24 k-tiles, 84 output tiles of
// 32 x 64 at batch 1): more k-tiles in flight per block while the weights stream from DRAM.
using T32x64x128s6 = GemmI8Traits<32, 64, 128, 2, 2, 6, 4>;
using T64x64x128s5 = GemmI8Traits<64, 64, 128, 2, 2, 5, 4>;
// 48-row tiles, warps side by side (warp tiles 48 x 16 or 48 x 32): M = 197 n (ViT at batch n) is 33 of them at
// batch 8, so N / 64 column tiles give a multiple of 132 SMs' worth of tiles for every block GEMM (a 64-row tile
// leaves 2 or 3 tiles per SM: the SMs with 3 set the time).
using T48x64x128w4 = GemmI8Traits<48, 64, 128, 1, 4, 3, 4>;
using T48x64x128w2 = GemmI8Traits<48, 64, 128, 1, 2, 3, 6>;

template <class T>
constexpr GemmI8Variant row(const char* name, int split_k = 1) {
  return GemmI8Variant{name, T::kTileM, T::kTileN, T::kTileK, T::kWarps, T::kStages, 80, T::kSmemBytes, split_k};
}

constexpr GemmI8Variant kVariants[] = {
    row<T128x128x64>("i8_128x128x64_w8_s4"),    row<T128x64x64>("i8_128x64x64_w4_s4"),
    row<T64x128x64>("i8_64x128x64_w4_s4"),      row<T64x64x64>("i8_64x64x64_w4_s4"),
    row<T128x128x128>("i8_128x128x128_w8_s3"),  row<T128x128x128w4>("i8_128x128x128_w4_s3"),
    row<T128x256x128>("i8_128x256x128_w8_s3"),  row<T128x64x128>("i8_128x64x128_w4_s3"),
    row<T64x64x128>("i8_64x64x128_w4_s3"),      row<T128x256x64>("i8_128x256x64_w8_s4"),
    row<T256x128x64>("i8_256x128x64_w8_s4"),    row<T256x128x128>("i8_256x128x128_w8_s3"),
    row<T128x128x64w4>("i8_128x128x64_w4_s4"),  row<T128x128x128w4b2>("i8_128x128x128_w4_s3_b2"),
    row<T64x256x64>("i8_64x256x64_w4_s4"),      row<T32x64x128>("i8_32x64x128_w4_s3"),
    row<T64x32x128>("i8_64x32x128_w4_s3"),      row<T32x32x128>("i8_32x32x128_w4_s4"),
    row<T64x64x128>("i8_64x64x128_w4_s3_k2", 2),  row<T64x64x128>("i8_64x64x128_w4_s3_k4", 4),
    row<T32x64x128>("i8_32x64x128_w4_s3_k2", 2),  row<T64x32x128>("i8_64x32x128_w4_s3_k3", 3),
    row<T64x64x64>("i8_64x64x64_w4_s4_k2", 2),    row<T128x64x128>("i8_128x64x128_w4_s3_k2", 2),
    row<T128x128x64w4>("i8_128x128x64_w4_s4_k2", 2), row<T64x128x64b4>("i8_64x128x64_w4_s4_b4"),
    row<T128x64x128s2>("i8_128x64x128_w4_s2_b4"),   row<T128x64x64b4>("i8_128x64x64_w4_s4_b4"),
    row<T64x128x64s3b4>("i8_64x128x64_w4_s3_b4"),   row<T128x64x64s3b4>("i8_128x64x64_w4_s3_b4"),
    row<T32x64x128s6>("i8_32x64x128_w4_s6"),        row<T32x64x128s6>("i8_32x64x128_w4_s6_k3", 3),
    row<T64x64x128s5>("i8_64x64x128_w4_s5"),        row<T64x64x128s5>("i8_64x64x128_w4_s5_k3", 3),
    row<T48x64x128w4>("i8_48x64x128_w4_s3"),        row<T48x64x128w2>("i8_48x64x128_w2_s3"),
};
constexpr LaunchFn kLaunchers[] = {launch<T128x128x64>,   launch<T128x64x64>,     launch<T64x128x64>,
                                   launch<T64x64x64>,     launch<T128x128x128>,   launch<T128x128x128w4>,
                                   launch<T128x256x128>,  launch<T128x64x128>,    launch<T64x64x128>,
                                   launch<T128x256x64>,   launch<T256x128x64>,    launch<T256x128x128>,
                                   launch<T128x128x64w4>, launch<T128x128x128w4b2>, launch<T64x256x64>,
                                   launch<T32x64x128>,    launch<T64x32x128>,     launch<T32x32x128>,
                                   launch<T64x64x128>,    launch<T64x64x128>,     launch<T32x64x128>,
                                   launch<T64x32x128>,    launch<T64x64x64>,      launch<T128x64x128>,
                                   launch<T128x128x64w4>, launch<T64x128x64b4>, launch<T128x64x128s2>,
                                   launch<T128x64x64b4>,  launch<T64x128x64s3b4>, launch<T128x64x64s3b4>,
                                   launch<T32x64x128s6>,  launch<T32x64x128s6>,   launch<T64x64x128s5>,
                                   launch<T64x64x128s5>,  launch<T48x64x128w4>,   launch<T48x64x128w2>};
static_assert(sizeof(kVariants) / sizeof(kVariants[0]) == sizeof(kLaunchers) / sizeof(kLaunchers[0]),
              "one launcher per row");

bool aligned(const void* p, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

bool valid_args(const GemmI8Args& a) {
  const int count = static_cast<int>(sizeof(kVariants) / sizeof(kVariants[0]));
  if (a.variant < 0 || a.variant >= count) return false;
  if (a.m < 1 || a.n < 8 || a.k < 32 || a.n % 8 != 0 || a.k % 32 != 0) return false;
  const GemmI8Variant& v = kVariants[a.variant];
  if ((a.m + v.tile_m - 1) / v.tile_m > 65535 || a.n > int64_t{1} << 30) return false;  // grid limits
  if (!a.x || !a.w || !a.sx || !a.sw || !a.y) return false;
  if (!aligned(a.x, 16) || !aligned(a.w, 16)) return false;
  const uintptr_t y_align = gemm_i8_epilogue_is_i8(a.epilogue) ? 8 : 16;  // one store per 8 outputs
  if (!aligned(a.y, y_align)) return false;
  if (gemm_i8_epilogue_is_i8(a.epilogue) && !(a.out_scale > 0.f)) return false;
  if (a.x_u8 && ((!gemm_i8_epilogue_is_f32(a.epilogue) && a.epilogue != GemmI8Epilogue::kF16BiasResidual) ||
                 a.k > (int64_t{1} << 16)))
    return false;
  if (gemm_i8_epilogue_is_qk_head(a.epilogue) && !gemm_i8_variant_serves_qk_head(v, a.head_dim, a.qk_cols, a.n))
    return false;
  if (gemm_i8_epilogue_is_qk_head(a.epilogue) &&
      (!a.qk_scales || !a.y_v || !aligned(a.y_v, 16) || (a.n - a.qk_cols) % 8 != 0))
    return false;
  if (v.split_k > 1) {
    if (!a.workspace || !aligned(a.workspace, 16)) return false;
    if ((a.m + v.tile_m - 1) / v.tile_m * ((a.n + v.tile_n - 1) / v.tile_n) > kGemmI8MaxSplitTiles) return false;
  }
  const int e = static_cast<int>(a.epilogue);
  return e >= 0 && e < kGemmI8EpilogueCount;
}

}  // namespace

size_t gemm_i8_workspace_bytes(const GemmI8Args& a) {
  const int count = static_cast<int>(sizeof(kVariants) / sizeof(kVariants[0]));
  if (a.variant < 0 || a.variant >= count || kVariants[a.variant].split_k <= 1 || a.m < 1 || a.n < 1) return 0;
  const GemmI8Variant& v = kVariants[a.variant];
  const int64_t tiles = (a.m + v.tile_m - 1) / v.tile_m * ((a.n + v.tile_n - 1) / v.tile_n);
  return static_cast<size_t>(kGemmI8CounterBytes + tiles * v.split_k * v.tile_m * v.tile_n * 4);
}

bool gemm_i8_variant_serves_qk_head(const GemmI8Variant& v, int64_t head_dim, int64_t qk_cols, int64_t n) {
  const bool d_ok = head_dim == 32 || head_dim == 64 || head_dim == 128;
  return d_ok && v.tile_n >= 64 && v.tile_n % head_dim == 0 && qk_cols > 0 && qk_cols % head_dim == 0 && qk_cols < n;
}

const GemmI8Variant* gemm_i8_variants(int* count) {
  *count = static_cast<int>(sizeof(kVariants) / sizeof(kVariants[0]));
  return kVariants;
}

cudaError_t gemm_i8(const GemmI8Args& args, cudaStream_t stream) {
  if (!valid_args(args)) return cudaErrorInvalidValue;
  return kLaunchers[args.variant](args, kVariants[args.variant].split_k, stream);
}

}  // namespace edgevit::gpu
