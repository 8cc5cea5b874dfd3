// The INT8 twin kernels on CUDA (docs/int8.md "fp32 mode"): the float64 references' arithmetic, rounded once to
// fp32, so that runtime.int8_float: fp32 and the CPU INT8 path (kernels/cpu/twin_f64.cpp, which runs mha_ref and
// linear_ref themselves) round the same fp32 values to int8 downstream.
//   mha_f64     mha_ref: s_j = sum_d q_d k_jd in d order, max, e_j = exp(s_j scale - max), denom = sum_j e_j in j
//               order (one thread), o_d = sum_j (e_j / denom) v_jd in j order; one block per (b, h, query row),
//               the query and the Skv weights in shared memory (head_dim + Skv <= kMhaF64MaxSmemDoubles)
//   linear_f64  linear_ref: acc = bias, += x_t w_t in t order, the epilogue in float64; 16 x 16 output tiles
//               through shared memory (the order per output is still t = 0..K-1)
//   layernorm_f32_f64 (kernels/cuda/layernorm_i8_f64.h) is the third: layernorm_ref's arithmetic to fp32
// Each operation is one rounded float64 operation (the __d*_rn intrinsics: no contraction, as the CPU's C++17
// build has none), so the results equal the references' bit for bit except where CUDA's exp, erfc or tanh
// differ from the C library's by an ulp of a double (~1e-16 relative), which moves an fp32 rounding only
// within that of a boundary (twin_f64_cuda_test measures how often: the rule is <= 1e-4 of the elements,
// each within one fp32 ulp).
// Speed: a checking mode (float64 on CUDA cores); docs/benchmarks.md "INT8 end to end" has the whole forward.
// Reference: mha_ref, linear_ref (kernels/cpu/kernels.h); test: tests/kernels/twin_f64_cuda_test.cu.
// Pointers are device pointers; the caller keeps ownership. Only enqueue work on `stream`.
#pragma once

#include <cuda_runtime_api.h>

#include "kernels/attn_params.h"
#include "kernels/cpu/kernels.h"  // Epilogue

namespace edgevit::gpu {

// mha_ref's meaning over AttnParams' strided layouts (key_mask honoured, device pointer; a row with no valid
// key yields zeros). cudaErrorInvalidValue when head_dim + seq_kv > kMhaF64MaxSmemDoubles or a size is bad.
constexpr int kMhaF64MaxSmemDoubles = 48 * 1024 / 8;
cudaError_t mha_f64(const AttnParams& p,
                    const float* q,  // (b, s, h, d) at q[b*p.q.batch + s*p.q.row + h*p.q.head + d]
                    const float* k,  // same addressing with p.k, s < Skv
                    const float* v,  // same addressing with p.v, s < Skv
                    float* o,        // same addressing with p.o, s < Sq
                    cudaStream_t stream);

// y (M, N) = epilogue(x (M, K) w (N, K)^T + bias (N)) as linear_ref computes it; bias may be nullptr; for
// kResidualAdd y holds the residual on entry (in place) and must not alias x.
cudaError_t linear_f64(const float* x, const float* w, const float* bias, float* y, int m, int n, int k,
                       Epilogue ep, cudaStream_t stream);

}  // namespace edgevit::gpu
