// mha_i8_ref: the INT8 fused attention's arithmetic (kernels/cuda/mha_i8.h) as plain loops, the reference its
// CUDA test compares against, and the per-row symmetric quantiser that produces its inputs.
//   S(i, j) = sum_d Q8[i, d] K8[j, d]                     exact (int64 here; |S| < 2^22 fits the kernel's int32)
//   x(i, j) = S * sq(i) * sk(j) * scale * log2(e)          double
//   p(i, j) = fp16(2^(x - m(i)))   m = max_j x (kRowMax) or 127^2 * sq(i) * sk * scale * log2(e) (kScaleMax)
//   O(i, :) = sum_j p V(j, :) / sum_j p                    double; zeros when the sum is 0
// p is rounded to fp16 as the kernel rounds it for P V (so the scale-max row's overflow to Inf and underflow
// to 0 show here too). The kernel's running max may sit up to 2^8 above the row max: p then rounds at another
// scale, which the tolerance covers (base/tolerances.h, kInt8AttnVsRef).
#pragma once

#include <cstdint>

#include "kernels/attn_params.h"
#include "kernels/cuda/mha_i8_variants.h"

namespace edgevit {

void mha_i8_ref(const AttnParams& p,
                const int8_t* q,  // (b, s, h, d) at q[b*p.q.batch + s*p.q.row + h*p.q.head + d], s < Sq
                const int8_t* k,  // likewise with p.k, s < Skv
                const float* v,   // likewise with p.v, s < Skv (the fp16 values the kernel reads)
                const AttnI8Scales& scales,  // host pointers
                MhaI8Softmax softmax,
                float* o);        // likewise with p.o, s < Sq

// mha_i8_ref over (image, head) slices on `threads` OpenMP threads (kernels/cpu/twin_f64.cpp): the same
// arithmetic per query row, so the same bits at any team size. The CPU INT8 path's attention with
// runtime.int8_attention: int8 (cpu.mha_i8_ref).
void mha_i8_ref_team(const AttnParams& p, const int8_t* q, const int8_t* k, const float* v, const AttnI8Scales& scales,
                     MhaI8Softmax softmax, float* o, int threads);

// Symmetric per-row quantisation: scale = max|x| / 127 (0 for an all-zero row), out[i] = round(x[i] / scale)
// (half away from zero) in [-127, 127]. Returns the scale.
float quantize_i8_row(const float* x, int n, int8_t* out);

// x rounded to the nearest fp16 value (ties to even), as a float: +-Inf above 65504's rounding range,
// fp16 subnormals below 2^-14.
float round_to_fp16(float x);

}  // namespace edgevit
