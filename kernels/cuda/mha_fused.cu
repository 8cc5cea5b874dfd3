// Fused multi-head attention, fp16 in/out, FlashAttention-2 style, SM80-class instructions only
// (mma.sync m16n8k16, ldmatrix, cp.async; valid for CUDA 11.4+, SASS for sm_87 Orin and sm_90 H100/H200).
//
// One block per (q tile, head, batch). Each warp owns 16 or 32 query rows (one or two m16 tiles sharing
// every K/V fragment; with split-KV, kv_split warps share 16 rows and each takes its slice of the keys):
// its Q fragments stay in registers, K/V tiles of kv_tile keys stream through shared
// memory (cp.async, double-buffered when stages == 2), S = Q K^T and O += P V run on the tensor cores with
// fp32 accumulators, and the softmax is online in fp32 registers (running max and sum in log2 units;
// p = ex2(s * scale * log2 e - max): the scale is applied once, in the same FFMA). Keys past Skv or masked
// out are -inf before the max (only tiles holding such keys pay for the test); a row with no valid key
// ends with sum 0 and is written as zeros. Rows past Sq / Skv are zero-filled by cp.async (src-size 0), so
// inputs need no padding; a K/V tile's trailing 16-key groups that hold no valid key are skipped, and warps
// whose rows all lie past Sq skip the arithmetic.
//
// Output: fp16 O (mha_fused_f16), or int8 codes rne(o / s) at one per-tensor scale s (mha_fused_f16_i8out: the
// INT8 graph's proj input, quantized from the fp32 normalised O in the same epilogue): flash_fwd_kernel<T, true>,
// a second instantiation of every row, so the fp16 ones compile as without it (docs/kernels-mha.md).
//
// Variants: the rows of kMhaVariants (kernels/mha_variants.h), flash_fwd_f16_d{D}_q{rows}_w{warps}_kv{keys}
// _s{stages}, instantiated here in table order. Measured on an H200 (docs/benchmarks.md, docs/kernels-mha.md):
//   v1 (16-row warps, exp2f, mask test on every tile, 131 regs): d64 B64 H12 S197: 96 us (q64_w4);
//     0.37-0.68x of the best torch SDPA backend over the six ViT shapes.
//   v2 (ex2.approx + FFMA scale, mask test only where needed, 128-register target, optional 32-row warps):
//     q64_w4_kv64_s2 78 us at B64 H12 S197 (cuDNN 46, FA2 63), 0.51-0.84x of the best SDPA.
//   v3 (optional Q re-read from shared memory per tile (_qs rows), so 32-row warps fit 143 registers and
//     3 blocks/SM; rows chosen by blocks per SM): H100, q128_w4_kv32_s2_qs 68 us at B64 H12 S197 (cuDNN 46,
//     FA2 64), 0.50-0.93x of the best SDPA; ncu: issue/latency-bound, tensor pipe 22%.
//   v4 (split-KV rows (_ks{n}): n warps share 16 query rows, each taking 1/n of every K/V tile's
//     keys, partials combined through shared memory by combine_split_kv; for grids that leave SMs idle):
//     H100, B1 H12 S197 8.3 -> 5.8 us (q32_w8_kv128_s2_ks4; cuDNN 8.0), B8 H3 S197 9.0 -> 8.3.
//   v5 (fewer instructions per tile: lazy rescaling of O (the reference max moves only past 2^8), row sums
//     of P on the tensor cores, tile loads with per-thread constant offsets): H100, ncu instructions at B64
//     H12 S197 29.1 M -> 26.1 M before the loads; B64 H12 S197 68.0 -> 58.3 us, B4 H16 S1025 124.1 ->
//     102.1 (cuDNN 45.6 / 66.0, FA2 ~64 / ~96).
//   v6 (this code: the SASS loop of q128_w4_kv32_s2_qs still recomputed every ldmatrix address and every
//     copy's 64-bit row offset from the lane index (ptxas rematerialisation inside the skipped-group
//     branches); they are now loop-carried registers; the first S product starts from RZ; the row max is a
//     per-thread tree and the quad shuffles run only when a warp vote says a reference must move; 32-key
//     slices compute every 16-key group): loop 674 -> 542 SASS instructions, ncu 17.5 M instructions at
//     B64 H12 S197 (cuDNN 18.6 M); H100 B64 H12 S197 57.9 -> 47.3 us, B16 H6 S577 59.1 -> 42.0, B4 H16 S1025
//     102.6 -> 78.1 (cuDNN 45.7 / 33.8 / 66.9).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <utility>

#include "kernels/cuda/mha.h"
#include "kernels/cuda/mha_fused_kernel.cuh"
#include "kernels/mha_variants.h"

namespace edgevit {
namespace {

template <size_t kRow, bool kI8Out>
cudaError_t launch_row(const FusedArgs& args, int batch, int heads, cudaStream_t stream) {
  constexpr MhaVariant row = kMhaVariants[kRow];
  using T = FlashFwdTraits<row.head_dim, row.q_tile, row.threads / 32, row.kv_tile, row.stages, row.q_smem,
                           row.kv_split>;
  // Once per instantiation: opt in to more than 48 KB of dynamic shared memory.
  static const cudaError_t attr_status =
      T::kSmemBytes > kMhaDefaultSmemBytes
          ? cudaFuncSetAttribute(flash_fwd_kernel<T, kI8Out>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 static_cast<int>(T::kSmemBytes))
          : cudaSuccess;
  if (attr_status != cudaSuccess) return attr_status;
  const dim3 grid((args.seq_q + T::kQTile - 1) / T::kQTile, heads, batch);
  flash_fwd_kernel<T, kI8Out><<<grid, T::kThreads, T::kSmemBytes, stream>>>(args);
  return cudaGetLastError();
}

// Blocks of a row that can be resident on one SM of the current device (registers, shared memory, threads).
template <size_t kRow>
cudaError_t resident_row(int* blocks) {
  constexpr MhaVariant row = kMhaVariants[kRow];
  using T = FlashFwdTraits<row.head_dim, row.q_tile, row.threads / 32, row.kv_tile, row.stages, row.q_smem,
                           row.kv_split>;
  if (T::kSmemBytes > kMhaDefaultSmemBytes) {
    const cudaError_t err = cudaFuncSetAttribute(flash_fwd_kernel<T, false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                 static_cast<int>(T::kSmemBytes));
    if (err != cudaSuccess) return err;
  }
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, flash_fwd_kernel<T, false>, T::kThreads, T::kSmemBytes);
}

using LaunchFn = cudaError_t (*)(const FusedArgs&, int, int, cudaStream_t);
using ResidentFn = cudaError_t (*)(int*);
template <bool kI8Out, size_t... kRows>
constexpr std::array<LaunchFn, sizeof...(kRows)> make_launch_table(std::index_sequence<kRows...>) {
  return {&launch_row<kRows, kI8Out>...};
}
template <size_t... kRows>
constexpr std::array<ResidentFn, sizeof...(kRows)> make_resident_table(std::index_sequence<kRows...>) {
  return {&resident_row<kRows>...};
}
constexpr std::array<LaunchFn, kNumMhaVariants> kLaunch =
    make_launch_table<false>(std::make_index_sequence<kNumMhaVariants>{});
constexpr std::array<LaunchFn, kNumMhaVariants> kLaunchI8 =
    make_launch_table<true>(std::make_index_sequence<kNumMhaVariants>{});
constexpr std::array<ResidentFn, kNumMhaVariants> kResident =
    make_resident_table(std::make_index_sequence<kNumMhaVariants>{});

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }
bool strides_ok(const AttnStrides& s) { return s.batch % 8 == 0 && s.row % 8 == 0 && s.head % 8 == 0; }

}  // namespace

cudaError_t mha_fused_f16(const AttnParams& p, const __half* q, const __half* k, const __half* v, __half* o,
                          int row, cudaStream_t stream) {
  if (p.batch < 0 || p.heads < 0 || p.seq_q < 0 || p.seq_kv < 0 || p.batch > 65535 || p.heads > 65535)
    return cudaErrorInvalidValue;
  if (!(p.scale > 0.f)) return cudaErrorInvalidValue;  // the running max is kept in scaled units
  if (p.batch == 0 || p.heads == 0 || p.seq_q == 0) return cudaSuccess;
  if (!aligned16(q) || !aligned16(k) || !aligned16(v) || !aligned16(o) || !strides_ok(p.q) ||
      !strides_ok(p.k) || !strides_ok(p.v) || !strides_ok(p.o))
    return cudaErrorInvalidValue;
  if (row < 0 || static_cast<size_t>(row) >= kNumMhaVariants || kMhaVariants[row].head_dim != p.head_dim)
    return cudaErrorInvalidValue;
  FusedArgs args{q, k, v, o, p.q, p.k, p.v, p.o, p.key_mask, p.seq_q, p.seq_kv, p.scale * 1.4426950408889634f,
                 nullptr, nullptr};
  return kLaunch[static_cast<size_t>(row)](args, p.batch, p.heads, stream);
}

cudaError_t mha_fused_f16_i8out(const AttnParams& p, const __half* q, const __half* k, const __half* v, int8_t* o,
                                const float* o_scale, int row, cudaStream_t stream) {
  if (p.batch < 0 || p.heads < 0 || p.seq_q < 0 || p.seq_kv < 0 || p.batch > 65535 || p.heads > 65535)
    return cudaErrorInvalidValue;
  if (!(p.scale > 0.f) || o_scale == nullptr) return cudaErrorInvalidValue;
  if (p.batch == 0 || p.heads == 0 || p.seq_q == 0) return cudaSuccess;
  if (!aligned16(q) || !aligned16(k) || !aligned16(v) || reinterpret_cast<uintptr_t>(o) % 8 != 0 ||
      !strides_ok(p.q) || !strides_ok(p.k) || !strides_ok(p.v) || !strides_ok(p.o))
    return cudaErrorInvalidValue;
  if (row < 0 || static_cast<size_t>(row) >= kNumMhaVariants || kMhaVariants[row].head_dim != p.head_dim)
    return cudaErrorInvalidValue;
  FusedArgs args{q, k, v, nullptr, p.q, p.k, p.v, p.o, p.key_mask, p.seq_q, p.seq_kv, p.scale * 1.4426950408889634f,
                 o, o_scale};
  return kLaunchI8[static_cast<size_t>(row)](args, p.batch, p.heads, stream);
}

cudaError_t mha_fused_resident_blocks(int variant_index, int* blocks) {
  if (blocks == nullptr || variant_index < 0 || static_cast<size_t>(variant_index) >= kNumMhaVariants)
    return cudaErrorInvalidValue;
  return kResident[static_cast<size_t>(variant_index)](blocks);
}

}  // namespace edgevit
