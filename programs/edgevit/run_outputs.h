// `edgevit run`'s named outputs (runtime/outputs.h): gathered across the engine's batches, printed as a
// summary (an embedding's L2 norm and first values, a tokens tensor's shape) and written by --output as
// float32 safetensors tensors under the same names.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "runtime/engine.h"

namespace edgevit_cli {

class RunOutputs {
 public:
  // Room for n images of every output `engine` produces.
  RunOutputs(const edgevit::Engine& engine, int n);
  // Copies the engine's outputs of its last infer (count images) to rows [start, start + count).
  void take(const edgevit::Engine& engine, int start, int count);
  const std::vector<float>& values(edgevit::OutputKind k) const { return values_.at(k); }
  // What the top-k list (has_predictions: the model has logits) does not already say: for a model without
  // logits the embedding's L2 norm and first values per image (up to 8 images); the tokens' shape when asked
  // for; pre_logits as the embedding would be when the engine gives no embedding.
  void print_summary(bool has_predictions) const;
  // Every output as float32 [n, dims...] to `path` (runtime/safetensors.h: deterministic bytes, atomic).
  edgevit::Status write(const std::string& path, const std::map<std::string, std::string>& metadata) const;
  std::string describe() const;  // "logits [2,10], embedding [2,64], ..."

 private:
  int n_ = 0;
  std::map<edgevit::OutputKind, std::vector<int64_t>> dims_;  // per image
  std::map<edgevit::OutputKind, std::vector<float>> values_;  // (n, dims...)
};

}  // namespace edgevit_cli
