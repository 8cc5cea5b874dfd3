// Fused multi-head attention with INT8 Q and K, fp16 V and output, SM80-class instructions only
// (mma.sync m16n8k32 s8 and m16n8k16 f16, ldmatrix, cp.async; CUDA 11.4+; SASS for sm_87 Orin and sm_90).
//
// One block per (q tile, head, batch); each warp owns 16 or 32 query rows. The int8 Q fragments stay in
// registers (8 per m16 tile at D = 64, half the fp16 kernel's); int8 K and fp16 V tiles stream through shared
// memory (cp.async, double-buffered, zero-filled past Skv, so any sequence length runs unpadded).
// S = Q8 K8^T runs on the int8 tensor cores into int32 accumulators that start at the bits of 1.5 * 2^23,
// so the exact integer scores become floats without a conversion instruction. The softmax is online in fp32
// (log2 units; per-row multiplier a = scale log2(e) sq [sk], applied once in the exponent's FFMA), or with
// TensorRT's fixed offset (_smax rows). P is rounded to fp16 and O += P V runs on the fp16 tensor cores with
// fp32 accumulators; the row sums are P times a ones fragment on the same tensor cores.
//
// Variants: the rows of kMhaI8Variants (kernels/cuda/mha_i8_variants.h), flash_fwd_i8_d{D}_q{rows}_w{warps}
// _kv{keys}_s{stages}[_smax], each instantiated with a K scale per (batch, head) and, for the row-max softmax,
// per key. H100, B64 H12 S197 D64, against our fp16 kernel's 46.8 us in the same run (docs/benchmarks.md,
// "INT8 fused attention"; docs/kernels-mha-i8.md):
//   d64_q128_w4_kv32_s2       42.5 us (1.10x) with a K scale per (batch, head); 54.5 us with per-key K scales
//   d64_q128_w4_kv32_s2_smax  39.1 us (1.20x)
//   d64_q64_w4_kv32_s2 / q64_w4_kv64_s2 / q64_w2_kv32_s2: 43.4 / 47.1 / 44.9 us (they win on small grids)
//   d32_q128_w4_kv32_s2       31.9 us vs fp16 41.1 (1.29x);  d128_q64_w4_kv32_s2 (B32) 47.8 vs 69.3 (1.45x)
// Int8 output (mha_i8_fused_i8out, the runtime's INT8 attention writing proj's input): the row-max rows with
// per-key K scales only (mha_i8_row_has_i8out). H200, ViT-B/16 batch 1 per-op profile: d64_q64_w4_kv64_s2 9.6-10.8
// us a block (the fp16 kernel writing int8: 8.1), 10.2 us on the class-token tail (6.6).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <utility>

#include "kernels/cuda/mha_i8.h"
#include "kernels/cuda/mha_i8_kernel.cuh"

namespace edgevit {
namespace {
namespace i8attn {

// Issues the copies of the K and V tiles (and, with per-key scales, the tile's K scales) of keys from row0 into
// buffer `stage` (not committed).
template <class T, class KCopy, class VCopy>
__device__ __forceinline__ void copy_kv(const I8Args& a, KCopy& k_copy, VCopy& v_copy, const int8_t* kg,
                                        const __half* vg, const float* ksc, uint32_t s_ks, int stage, int row0,
                                        int tid) {
  k_copy.copy(kg, a.ks.row, stage * T::kKBytes, row0, a.seq_kv);
  v_copy.copy(vg, a.vs.row, stage * T::kVBytes, row0, a.seq_kv);
  if (T::kPerKey && tid < T::kKvTile) {
    const int key = row0 + tid;
    const bool valid = key < a.seq_kv;
    cp_async_4_at(s_ks + stage * T::kKsBytes + 4 * tid, valid ? ksc + static_cast<int64_t>(key) * a.kss.row : ksc,
                  valid);
  }
}

// Streams K/V tiles while each warp keeps its O rows, row maxima and row sums in registers.
// The warp's rows of O from its accumulators, staged through shared memory (the warp's own rows of the idle
// pipeline buffers) and written as 16-byte chunks (kI8Out: int8 codes at *a.o_scale, 8-byte chunks) to a.o /
// a.o_i8; rows past seq_q are not written.
template <class T, bool kI8Out>
__device__ __forceinline__ void write_output(const I8Args& a, WarpState<T>& w, unsigned char* smem_raw, int b, int h,
                                             int q0, int warp_row0, int lane) {
  const int g = lane / 4, t = lane % 4;
  if constexpr (kI8Out) {  // rows of 2 kRowV bytes (the fp16 staging's pitch), 8-byte chunks of codes
    int8_t* og = a.o_i8 + b * a.os.batch + h * a.os.head;
    int8_t* so = reinterpret_cast<int8_t*>(smem_raw) + warp_row0 * 2 * T::kRowV;
    stage_output_i8<T::kMTiles, T::kOTiles, 2 * T::kRowV>(so, w.o_acc, w.row_sum, 1.f / __ldg(a.o_scale), g, t);
    __syncwarp();
#pragma unroll
    for (int c = lane; c < T::kWarpRows * T::kChunksV; c += 32) {
      const int r = c / T::kChunksV, ch = c % T::kChunksV;
      const int row = q0 + warp_row0 + r;
      if (row < a.seq_q)
        *reinterpret_cast<uint2*>(og + static_cast<int64_t>(row) * a.os.row + ch * 8) =
            *reinterpret_cast<const uint2*>(so + r * 2 * T::kRowV + ch * 8);
    }
  } else {
    __half* og = a.o + b * a.os.batch + h * a.os.head;
    __half* so = reinterpret_cast<__half*>(smem_raw) + warp_row0 * T::kRowV;
    stage_output_f16<T::kMTiles, T::kOTiles, T::kRowV>(so, w.o_acc, w.row_sum, g, t);
    __syncwarp();
#pragma unroll
    for (int c = lane; c < T::kWarpRows * T::kChunksV; c += 32) {
      const int r = c / T::kChunksV, ch = c % T::kChunksV;
      const int row = q0 + warp_row0 + r;
      if (row < a.seq_q)
        *reinterpret_cast<uint4*>(og + static_cast<int64_t>(row) * a.os.row + ch * 8) =
            *reinterpret_cast<const uint4*>(so + r * T::kRowV + ch * 8);
    }
  }
}

// kI8Out: int8 codes of the fp32 normalised output at the per-tensor scale *a.o_scale to a.o_i8 (stage_output_i8,
// the fp16 kernel's int8 staging) instead of fp16 O to a.o.
template <class T, bool kI8Out>
__global__ void __launch_bounds__(T::kThreads, T::kMinBlocks) flash_fwd_i8_kernel(const I8Args a) {
  constexpr int kM = T::kMTiles;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const uint32_t s_q = smem_addr(smem_raw);                   // (kQTile, kRowI8) int8
  const uint32_t s_k = s_q + T::kQBytes;                      // (kStages, kKvTile, kRowI8) int8
  const uint32_t s_v = s_k + T::kStages * T::kKBytes;         // (kStages, kKvTile, kRowV) fp16
  const uint32_t s_ks = s_v + T::kStages * T::kVBytes;        // (kStages, kKvTile) fp32 per-key K scales
  const float* s_ks_ptr = reinterpret_cast<const float*>(smem_raw + (s_ks - s_q));

  const int q0 = blockIdx.x * T::kQTile;
  const int h = blockIdx.y, b = blockIdx.z;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;
  const int warp_row0 = warp * T::kWarpRows;

  const int8_t* qg = a.q + b * a.qs.batch + h * a.qs.head;
  const int8_t* kg = a.k + b * a.ks.batch + h * a.ks.head;
  const __half* vg = a.v + b * a.vs.batch + h * a.vs.head;
  const float* ksc = a.k_scale + b * a.kss.batch + h * a.kss.head;
  const uint8_t* mask = a.key_mask != nullptr ? a.key_mask + static_cast<int64_t>(b) * a.seq_kv : nullptr;
  const int n_kv = (a.seq_kv + T::kKvTile - 1) / T::kKvTile;
  const bool warp_active = q0 + warp_row0 < a.seq_q;

  using QCopy = TileCopy<int8_t, T::kQTile, T::kChunksI8, T::kRowI8, T::kThreads>;
  using KCopy = TileCopy<int8_t, T::kKvTile, T::kChunksI8, T::kRowI8, T::kThreads>;
  using VCopy = TileCopy<__half, T::kKvTile, T::kChunksV, T::kRowV * 2, T::kThreads>;
  QCopy q_copy(qg, a.qs.row, s_q, q0, tid);
  KCopy k_copy(kg, a.ks.row, s_k, 0, tid);
  VCopy v_copy(vg, a.vs.row, s_v, 0, tid);
  q_copy.copy(qg, a.qs.row, 0, q0, a.seq_q);
  if (n_kv > 0) copy_kv<T>(a, k_copy, v_copy, kg, vg, ksc, s_ks, 0, 0, tid);
  cp_async_commit();

  WarpState<T> w;
  init_warp_state<T>(w, a, b, h, q0 + warp_row0, g);
  // Per-lane ldmatrix bases (see the fp16 kernel's ldsm_lanes; int8 rows hold 32 k values per 32 bytes).
  const uint32_t sq_lane = s_q + (warp_row0 + lane % 16) * T::kRowI8 + (lane / 16) * 16;
  const uint32_t sk_lane = s_k + ((lane & 7) + ((lane >> 4) << 3)) * T::kRowI8 + ((lane >> 3) & 1) * 16;
  const uint32_t sv_lane = s_v + 2 * (((lane & 7) + (((lane >> 3) & 1) << 3)) * T::kRowV + ((lane >> 4) << 3));
  uint32_t q_frag[kM][T::kDSteps][4];
  for (int it = 0; it < n_kv; ++it) {
    const int kv0 = it * T::kKvTile;
    const int stage = T::kStages == 2 ? it & 1 : 0;
    if (T::kStages == 2 && it + 1 < n_kv) {
      copy_kv<T>(a, k_copy, v_copy, kg, vg, ksc, s_ks, stage ^ 1, kv0 + T::kKvTile, tid);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    if (warp_active) {
      if (it == 0) load_q_fragments<T>(q_frag, sq_lane);
      const int kv_valid = min(T::kKvTile, a.seq_kv - kv0);
      const uint32_t sk = sk_lane + stage * T::kKBytes, sv = sv_lane + stage * T::kVBytes;
      const float* s_ks_tile = s_ks_ptr + stage * T::kKvTile;
      dispatch_tile<T>(w, q_frag, sk, sv, s_ks_tile, mask, kv0, kv_valid, t);
    }
    __syncthreads();
    if (T::kStages == 1 && it + 1 < n_kv) {
      copy_kv<T>(a, k_copy, v_copy, kg, vg, ksc, s_ks, 0, kv0 + T::kKvTile, tid);
      cp_async_commit();
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // every warp is past the loop: the whole buffer stages the output
  if (!warp_active) return;
  write_output<T, kI8Out>(a, w, smem_raw, b, h, q0, warp_row0, lane);
}

template <size_t kRow, bool kPerKey, bool kI8Out = false>
struct RowKernel {
  static constexpr MhaI8Variant row = kMhaI8Variants[kRow];
  static constexpr bool kScaleMax = row.softmax == MhaI8Softmax::kScaleMax;
  using T = I8Traits<row.head_dim, row.q_tile, row.threads / 32, row.kv_tile, row.stages, kScaleMax,
                     kPerKey && !kScaleMax>;
  static_assert(T::kSmemBytes == row.smem_bytes, "traits and mha_i8_variants.h disagree on shared memory");
  // The int8-output kernels exist for the rows mha_i8_row_has_i8out names, with per-key K scales only.
  static constexpr bool kBuilt = !kI8Out || (mha_i8_row_has_i8out(row) && kPerKey);

  static cudaError_t opt_in() {
    if (T::kSmemBytes <= 48 * 1024) return cudaSuccess;
    return cudaFuncSetAttribute(flash_fwd_i8_kernel<T, kI8Out>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                static_cast<int>(T::kSmemBytes));
  }
  static cudaError_t launch(const I8Args& args, int batch, int heads, cudaStream_t stream) {
    if constexpr (!kBuilt) {
      return cudaErrorNotSupported;
    } else {
      static const cudaError_t attr = opt_in();  // once per instantiation
      if (attr != cudaSuccess) return attr;
      const dim3 grid((args.seq_q + T::kQTile - 1) / T::kQTile, heads, batch);
      flash_fwd_i8_kernel<T, kI8Out><<<grid, T::kThreads, T::kSmemBytes, stream>>>(args);
      return cudaGetLastError();
    }
  }
  static cudaError_t resident(int* blocks) {
    const cudaError_t err = opt_in();
    if (err != cudaSuccess) return err;
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, flash_fwd_i8_kernel<T, false>, T::kThreads,
                                                         T::kSmemBytes);
  }
};

using LaunchFn = cudaError_t (*)(const I8Args&, int, int, cudaStream_t);
using ResidentFn = cudaError_t (*)(int*);
template <bool kPerKey, bool kI8Out = false, size_t... kRows>
constexpr std::array<LaunchFn, sizeof...(kRows)> launch_table(std::index_sequence<kRows...>) {
  return {&RowKernel<kRows, kPerKey, kI8Out>::launch...};
}
template <size_t... kRows>
constexpr std::array<ResidentFn, sizeof...(kRows)> resident_table(std::index_sequence<kRows...>) {
  return {&RowKernel<kRows, false>::resident...};
}
constexpr auto kLaunchShared = launch_table<false>(std::make_index_sequence<kNumMhaI8Variants>{});
constexpr auto kLaunchPerKey = launch_table<true>(std::make_index_sequence<kNumMhaI8Variants>{});
constexpr auto kLaunchPerKeyI8Out = launch_table<true, true>(std::make_index_sequence<kNumMhaI8Variants>{});
constexpr auto kResident = resident_table(std::make_index_sequence<kNumMhaI8Variants>{});

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }
bool strides_multiple(const AttnStrides& s, int64_t n) { return s.batch % n == 0 && s.row % n == 0 && s.head % n == 0; }

}  // namespace i8attn
}  // namespace

namespace {

// Both launchers: checks the launch, then runs the table's kernel (fp16 o, or int8 o_i8 at *o_scale).
cudaError_t launch_i8(const AttnParams& p, const int8_t* q, const int8_t* k, const __half* v, const AttnI8Scales& scales,
                      __half* o, int8_t* o_i8, const float* o_scale, int row, cudaStream_t stream) {
  using namespace i8attn;
  const bool i8_out = o_i8 != nullptr;
  if (p.batch < 0 || p.heads < 0 || p.seq_q < 0 || p.seq_kv < 0 || p.batch > 65535 || p.heads > 65535)
    return cudaErrorInvalidValue;
  if (!(p.scale > 0.f) || !(p.scale < INFINITY)) return cudaErrorInvalidValue;
  if (row < 0 || static_cast<size_t>(row) >= kNumMhaI8Variants) return cudaErrorInvalidValue;
  const MhaI8Variant& variant = kMhaI8Variants[row];
  const bool per_key = scales.ks.row != 0;
  if (variant.head_dim != p.head_dim) return cudaErrorNotSupported;
  if (variant.softmax == MhaI8Softmax::kScaleMax && per_key) return cudaErrorNotSupported;
  if (i8_out && (!mha_i8_row_has_i8out(variant) || !per_key)) return cudaErrorNotSupported;
  if (p.batch == 0 || p.heads == 0 || p.seq_q == 0) return cudaSuccess;
  const bool o_ok = i8_out ? reinterpret_cast<uintptr_t>(o_i8) % 8 == 0 && o_scale != nullptr : aligned16(o);
  if (!aligned16(q) || !aligned16(k) || !aligned16(v) || !o_ok || !strides_multiple(p.q, 16) ||
      !strides_multiple(p.k, 16) || !strides_multiple(p.v, 8) || !strides_multiple(p.o, 8) ||
      scales.q == nullptr || scales.k == nullptr)
    return cudaErrorInvalidValue;
  const I8Args args{q, k, v, o, o_i8, o_scale, p.q, p.k, p.v, p.o, scales.q, scales.k, scales.qs, scales.ks,
                    p.key_mask, p.seq_q, p.seq_kv, p.scale * 1.4426950408889634f};
  const size_t r = static_cast<size_t>(row);
  if (i8_out) return kLaunchPerKeyI8Out[r](args, p.batch, p.heads, stream);
  return per_key ? kLaunchPerKey[r](args, p.batch, p.heads, stream) : kLaunchShared[r](args, p.batch, p.heads, stream);
}

}  // namespace

cudaError_t mha_i8_fused(const AttnParams& p, const int8_t* q, const int8_t* k, const __half* v,
                         const AttnI8Scales& scales, __half* o, int row, cudaStream_t stream) {
  return launch_i8(p, q, k, v, scales, o, nullptr, nullptr, row, stream);
}

cudaError_t mha_i8_fused_i8out(const AttnParams& p, const int8_t* q, const int8_t* k, const __half* v,
                               const AttnI8Scales& scales, int8_t* o, const float* o_scale, int row,
                               cudaStream_t stream) {
  if (o == nullptr) return cudaErrorInvalidValue;
  return launch_i8(p, q, k, v, scales, nullptr, o, o_scale, row, stream);
}

cudaError_t mha_i8_resident_blocks(int row, int* blocks) {
  if (blocks == nullptr || row < 0 || static_cast<size_t>(row) >= kNumMhaI8Variants) return cudaErrorInvalidValue;
  return i8attn::kResident[static_cast<size_t>(row)](blocks);
}

}  // namespace edgevit
