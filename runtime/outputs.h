// The named outputs of a forward (docs/models.md "Outputs"): what an engine, `run --output`, the C and
// Python APIs and the daemon return, under the same names.
//   logits      (n, classes)    the classifier's output; models with a classifier head only
//   embedding   (n, dim)        the pooled feature (embedding_of in runtime/graph.h says which tensor it is
//                               per family: pre_logits, HF ViTModel's pooler, CLIP's projection)
//   pre_logits  (n, embed)      timm's forward_head(pre_logits=True), as before
//   tokens      (n, tokens, E)  the final-normed tokens (timm forward_features, HF last_hidden_state after
//                               the final norm); only when asked for: the planner sizes it only then
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace edgevit {

enum class OutputKind { kLogits, kEmbedding, kPreLogits, kTokens };
constexpr int kOutputKinds = 4;
const char* to_string(OutputKind k);  // "logits" | "embedding" | "pre_logits" | "tokens"
// The kind named `name`; false when no kind has that name.
bool parse_output_kind(const std::string& name, OutputKind* out);
// The names, comma-separated, for messages.
const char* output_kind_names();

// A set of output kinds. Empty means "the model's default" wherever a set is optional (ModelSpec::outputs).
struct OutputSet {
  unsigned bits = 0;
  bool has(OutputKind k) const { return (bits >> static_cast<unsigned>(k)) & 1u; }
  OutputSet& add(OutputKind k) {
    bits |= 1u << static_cast<unsigned>(k);
    return *this;
  }
  OutputSet& remove(OutputKind k) {
    bits &= ~(1u << static_cast<unsigned>(k));
    return *this;
  }
  bool empty() const { return bits == 0; }
  bool operator==(const OutputSet& o) const { return bits == o.bits; }
  bool operator!=(const OutputSet& o) const { return bits != o.bits; }
  std::vector<OutputKind> kinds() const;  // in OutputKind order
  std::string to_string() const;          // "logits, embedding, pre_logits"
};

}  // namespace edgevit
