// The outputs of a family golden (tests/data/families/<case>.golden.safetensors) and the engine outputs they
// check, shared by families_test (CPU) and families_cuda_test. Header-only (the CUDA test compiles it with nvcc).
#pragma once

#include <string>
#include <vector>

#include "runtime/engine.h"
#include "runtime/safetensors.h"

namespace edgevit::testutil {

struct GoldenOutput {
  OutputKind kind;
  std::string golden;  // the golden tensor's name
};

// Every output of `engine` the golden holds a value for. The goldens name them as the engine does, except
// that timm cases have no `embedding` tensor: a timm-named model's embedding is pre_logits (docs/models.md),
// so the `pre_logits` golden checks it too.
inline std::vector<GoldenOutput> golden_outputs(const Engine& engine, const SafetensorsFile& golden) {
  std::vector<GoldenOutput> out;
  for (OutputKind k : engine.outputs().kinds()) {
    std::string name = to_string(k);
    if (k == OutputKind::kEmbedding && golden.find(name) == nullptr &&
        engine.spec().weights_naming == WeightNaming::kTimm && !engine.spec().arch.projection_head &&
        !engine.spec().arch.pooler)
      name = "pre_logits";
    if (golden.find(name) != nullptr) out.push_back({k, name});
  }
  return out;
}

}  // namespace edgevit::testutil
