// CUDA multi-head attention launchers (fp16 in/out, fp32 accumulation and softmax statistics).
// Host-compilable: includers need only the CUDA runtime API header; __half is forward-declared.
//
//   mha_fused_f16    FlashAttention-2 style kernel (kernels/cuda/mha_fused.cu), head_dim in
//                    {32, 64, 80, 96, 128}; one row of kernels/mha_variants.h, named by the caller.
//   mha_fused_f16_i8out  the same kernel writing int8 codes at a per-tensor scale (INT8 graphs' proj input).
//   mha_unfused_f16  cuBLASLt GEMM (S = scale Q K^T, fp32) + fp32-statistics softmax (P, fp16) + cuBLASLt
//                    GEMM (O = P V) (kernels/cuda/mha_unfused.cu); any head_dim; S x S scratch in workspace.
//
// Both take the layouts of AttnParams (kernels/attn_params.h): strided Q/K/V/O, packed qkv, Sq != Skv, and an
// optional key mask (device pointer, (B, Skv) bytes; a query row with no valid key yields zeros).
// Pointers are device pointers; the caller keeps ownership of every buffer and handle. Both only enqueue
// work on `stream` and are safe to capture in a CUDA graph once each has run once outside capture.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/attn_params.h"

struct __half;
typedef struct cublasLtContext* cublasLtHandle_t;

namespace edgevit {

// Fused attention with row `row` of kMhaVariants (the caller chooses it: choose_mha for the table's row, the
// CUDA backend's start-up tuning, or a test naming every row). Requires scale > 0, 16-byte aligned q/k/v/o,
// strides that are multiples of 8 elements and a row of the launch's head_dim (cudaErrorInvalidValue
// otherwise).
cudaError_t mha_fused_f16(const AttnParams& p, const __half* q, const __half* k, const __half* v, __half* o,
                          int row, cudaStream_t stream);

// The same attention writing int8 codes instead of fp16 O: o[...] = rne(o_exact / s) saturated to
// [-127, 127] (kernels/cpu/quantize_i8_ref.h's rule, the reference mha_i8out_ref), s = *o_scale (device, one
// float: the per-tensor scale of the INT8 graph's proj input), computed from the fp32 normalised output before
// any fp16 rounding. o (int8, o strides as for fp16, in elements) must be 8-byte aligned; else as mha_fused_f16.
cudaError_t mha_fused_f16_i8out(const AttnParams& p, const __half* q, const __half* k, const __half* v, int8_t* o,
                                const float* o_scale, int row, cudaStream_t stream);

// Blocks of row `variant_index` of kMhaVariants that one SM of the current device holds at once (the CUDA
// occupancy calculator over the instantiated kernel: its registers, shared memory and threads).
cudaError_t mha_fused_resident_blocks(int variant_index, int* blocks);

// Unfused attention: workspace holds mha_unfused_workspace_bytes(p) bytes (device memory; the planner
// reserves it). Processes one batch element per pair of GEMMs; the scratch is H x Sq x Skv (fp32 S, fp16 P).
size_t mha_unfused_workspace_bytes(const AttnParams& p);
cudaError_t mha_unfused_f16(const AttnParams& p, const __half* q, const __half* k, const __half* v, __half* o,
                            void* workspace, size_t workspace_bytes, cublasLtHandle_t handle,
                            cudaStream_t stream);

}  // namespace edgevit
