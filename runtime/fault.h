// Test-only fault injection: edgevit-selftest must prove that its checks can fail. Never set in production
// paths (EngineOptions::fault defaults to kNone).
#pragma once

namespace edgevit {

enum class InjectedFault {
  kNone,
  kWrongAttentionScale,  // attention runs with scale 1 instead of 1/sqrt(head_dim) (TensorRT 10.7's bug)
  kCorruptWeightByte,    // one exponent bit of blocks.0.attn.qkv.weight[0] flipped at load
};

}  // namespace edgevit
