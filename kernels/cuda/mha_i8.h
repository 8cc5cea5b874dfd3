// CUDA INT8 fused multi-head attention launcher (kernels/cuda/mha_i8.cu). Host-compilable: includers need only
// the CUDA runtime API header; __half is forward-declared.
//
//   O[b,i,h,:] = softmax_j( scale * sq(b,i,h) * sk(b,j,h) * <Q8[b,i,h,:], K8[b,j,h,:]> + mask ) V[b,j,h,:]
//
// Q8 and K8 are int8 (symmetric; -128 is accepted but the quantiser writes [-127, 127]), addressed by the
// element strides of AttnParams (as for fp16: packed or separate layouts); V and O are fp16. The scales are
// AttnI8Scales (kernels/cuda/mha_i8_variants.h). The int32 dot products are exact; the softmax is fp32 (row-max
// rows) or uses TensorRT's fixed offset (_smax rows); P is rounded to fp16 for P V. A query row with no valid
// key yields zeros, as in the fp16 kernel. The plain reference of the same arithmetic is
// kernels/cpu/mha_i8_ref.h (mha_i8_ref).
//
// Choosing a row: mha_i8_supports (kernels/cuda/mha_i8_variants.h) says which row serves a launch, or why
// none does (then run the fp16 fused kernel and report that reason). Any Sq and Skv are served.
// Pointers are device pointers; the caller keeps ownership of every buffer. The launcher only enqueues work on
// `stream` and is safe to capture in a CUDA graph once it has run once outside capture.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/attn_params.h"
#include "kernels/cuda/mha_i8_variants.h"

struct __half;

namespace edgevit {

// Runs row `row` of kMhaI8Variants. Returns cudaErrorNotSupported when the row does not serve the launch
// (another head_dim; a scale-max row with per-key K scales: scales.ks.row != 0), cudaErrorInvalidValue for
// a bad launch (scale <= 0 or non-finite, batch or heads above 65535, q/k/v/o not 16-byte aligned, int8
// strides not multiples of 16 elements or fp16 strides not multiples of 8, null scales).
cudaError_t mha_i8_fused(const AttnParams& p,
                         const int8_t* q,     // (b, s, h, d) at q[b*p.q.batch + s*p.q.row + h*p.q.head + d]
                         const int8_t* k,     // likewise with p.k, s < Skv
                         const __half* v,     // likewise with p.v, s < Skv
                         const AttnI8Scales& scales,
                         __half* o,           // likewise with p.o, s < Sq
                         int row, cudaStream_t stream);

// The same attention writing int8 codes: each fp32 normalised output o (before any fp16 rounding) becomes
// rne(o / s) saturated to [-127, 127], s = *o_scale (device, one fp32: proj's calibrated input scale), as
// mha_fused_f16_i8out does (kernels/cuda/mha.h; the staging is shared, kernels/cuda/mha_softmax_pv.cuh). Built
// for the rows mha_i8_row_has_i8out names and per-key K scales (scales.ks.row != 0: the runtime's per (token,
// head) K): cudaErrorNotSupported for another row or K scale layout. o: 8-byte aligned, strides of p.o.
cudaError_t mha_i8_fused_i8out(const AttnParams& p, const int8_t* q, const int8_t* k, const __half* v,
                               const AttnI8Scales& scales, int8_t* o, const float* o_scale, int row,
                               cudaStream_t stream);

// Blocks of row `row` that one SM of the current device holds at once (occupancy calculator).
cudaError_t mha_i8_resident_blocks(int row, int* blocks);

}  // namespace edgevit
