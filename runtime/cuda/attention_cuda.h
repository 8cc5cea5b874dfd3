// The CUDA attention kernels of the op table: the fused fp16 kernel (a row of kMhaVariants per captured
// size and launch shape, kernels/mha_variants.h), the unfused cuBLASLt path (fp16), and gpu::mha_f32
// (fp32 plans).
//
// At prepare() each attention op registers, once per captured size and launch shape (the full blocks; the
// class-token tail), the kernel that runs there (CudaContext::attention): for the fused kernel the table's
// row (choose_mha on this device's compute capability, shared-memory opt-in and SM count, with the launch's
// grid). Ops of one shape share the record.
//
// Attention tuning (EngineOptions::tune_attention, on by default; `--no-attention-tuning` turns it off): the
// table's windows were measured on an H100, and where a grid's last wave is nearly empty the row they pick
// can lose by 15-20% to another (docs/kernels-mha.md, start-up tuning). So after a captured size's warm-up
// forward has left finite activations in the arena, the backend calls tune_attention_launches: for each
// fused launch of that size it times every row the device can run (mha_eligible_rows) as a captured chain
// of up to kAttnChain launches (as many as fit in kAttnChainMs, from one timed launch) on the first such
// op's own qkv and output tensors (timed_median's rule; a row whose last warm-up is 1.5x the best so far is
// dropped) and pins the fastest; the table's row stays unless another is >= 3% faster. The runs write only
// the attention output, an activation the forward rewrites.
#pragma once

#include "runtime/cuda/cuda_context.h"

namespace edgevit {

// Times and pins the fused rows of every launch of captured batch n (see above).
Status tune_attention_launches(CudaContext& ctx, int n);

}  // namespace edgevit
