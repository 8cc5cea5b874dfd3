// W8A8 GEMM on SM80-class tensor cores (mma.sync m16n8k32 s8 x s8 -> s32), for ViT's block GEMMs:
//   y (M, N) = epilogue( sx[m or 0] * sw[n] * (x_q (M, K) @ w_q (N, K)^T) + bias[n] )
// with the dequantization, bias, GELU (a table of cubics), residual add or INT8 requantization fused
// (GemmI8Epilogue, kernels/cpu/gemm_i8_ref.h, which also states the exact arithmetic; gemm_i8_ref is the
// reference).
// Host-compilable: includers need the CUDA runtime header only.
//
// Variants are rows of gemm_i8_variants() (tile, warps, pipeline stages, shared memory, K split); the caller
// names the row, there is no hidden choice. A row with split_k > 1 splits K over that many blocks per output
// tile and needs args.workspace: gemm_i8_workspace_bytes(args) bytes, zeroed once (cudaMemset) before its
// first use; every launch leaves it zeroed again, and launches sharing one must be ordered on one stream;
// such a row is refused above kGemmI8MaxSplitTiles output tiles.
// Limits: K a multiple of 32, N a multiple of 8, any M >= 1; x and w 16-byte aligned; y 16-byte aligned
// (kI8*: 8); out_scale > 0 for kI8*. Unsigned activations (x_u8, fc2's input u = GELU + shift in codes
// 0..255: mma.sync m16n8k32 u8 x s8) with the kF32, kF32BiasResidual and kF16BiasResidual epilogues,
// K <= 2^16; kI8BiasGelu
// writes those codes (kernels/cpu/gemm_i8_ref.h).
// Pointers are device pointers; the caller keeps ownership. gemm_i8 only enqueues work on `stream` (it
// can be captured in a CUDA graph); call it once outside a capture first for each variant and epilogue
// (the first call sets the kernel's shared-memory attribute).
// Tested by tests/kernels/gemm_i8_cuda_test.cu; timed by tools/gpu/bench_gemm_i8.cu; which row to name for
// which shape (H200 and 8 SMs): docs/kernels-gemm-i8.md. The same GEMM through cuBLASLt IMMA, with this
// kernel's epilogue as a kernel of its own (the runtime's other tuning candidate): gemm_i8_lt.h.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/gemm_i8_ref.h"

namespace edgevit::gpu {

// One kernel configuration.
struct GemmI8Variant {
  const char* name;   // "i8_128x128x64_w8_s4": tile M x N x K (bytes), warps, stages
  int tile_m, tile_n, tile_k;
  int warps;
  int stages;
  int min_sm;         // compute capability x 10
  int smem_bytes;     // dynamic shared memory per block (the pipeline's, or the epilogue's int32 tile)
  int split_k;        // blocks per output tile along K (1: none, no workspace)
};

// The rows, in a fixed order (an index into this table is a variant's id).
const GemmI8Variant* gemm_i8_variants(int* count);

struct GemmI8Args {
  int64_t m = 0, n = 0, k = 0;
  const int8_t* x = nullptr;    // (M, K) row-major
  const int8_t* w = nullptr;    // (N, K) row-major
  const float* sx = nullptr;    // (M) when sx_per_token, else (1)
  bool sx_per_token = false;
  const float* sw = nullptr;    // (N)
  const float* bias = nullptr;  // (N) or nullptr
  GemmI8Epilogue epilogue = GemmI8Epilogue::kF16Bias;
  void* y = nullptr;            // (M, N): float (kF32*; kF32BiasResidual: in place), half (kF16*;
                                //   kF16BiasResidual: in place), int8 (kI8*)
  float out_scale = 1.f;        // kI8*: y = sat(rne(v / out_scale))
  int variant = -1;             // row of gemm_i8_variants()
  void* workspace = nullptr;    // split_k > 1: gemm_i8_workspace_bytes(*this) bytes, 16-byte aligned, see above
  bool x_u8 = false;            // x holds uint8 codes (fc2's input; mma .u8.s8); epilogues kF32,
                                // kF32BiasResidual and kF16BiasResidual only, K <= 2^16
  // kQkHeadI8 (qkv for the INT8 attention): y is int8 (M, qk_cols), the Q and K columns; y_v half (M, N - qk_cols)
  // the V columns (16-byte aligned, N - qk_cols a multiple of 8); qk_scales fp32 (M, qk_cols / head_dim), one
  // scale per (row, head). Rows whose tile_n is not a multiple of head_dim are refused
  // (gemm_i8_variant_serves_qk_head).
  int64_t qk_cols = 0;
  int64_t head_dim = 0;         // 32, 64 or 128
  float* qk_scales = nullptr;
  void* y_v = nullptr;
};

// Whether row v can write kQkHeadI8 for heads of head_dim columns (its tile holds whole heads).
bool gemm_i8_variant_serves_qk_head(const GemmI8Variant& v, int64_t head_dim, int64_t qk_cols, int64_t n);

// Bytes of args.workspace the row args.variant needs at args' shape (0: none; also 0 for a bad row).
size_t gemm_i8_workspace_bytes(const GemmI8Args& args);

// The workspace starts with one counter per output tile, kGemmI8MaxSplitTiles of them whatever the shape
// (so one workspace serves every row and shape: the counters never overlap another launch's partial
// tiles), then the partial tiles. A split row is refused above kGemmI8MaxSplitTiles output tiles.
constexpr int64_t kGemmI8MaxSplitTiles = 16384;
constexpr int64_t kGemmI8CounterBytes = kGemmI8MaxSplitTiles * 4;

// cudaErrorInvalidValue for a bad variant, shape, alignment or missing pointer; else the launch's status.
cudaError_t gemm_i8(const GemmI8Args& args, cudaStream_t stream);

}  // namespace edgevit::gpu
