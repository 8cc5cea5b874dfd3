#include "runtime/outputs.h"

namespace edgevit {

const char* to_string(OutputKind k) {
  switch (k) {
    case OutputKind::kLogits: return "logits";
    case OutputKind::kEmbedding: return "embedding";
    case OutputKind::kPreLogits: return "pre_logits";
    case OutputKind::kTokens: return "tokens";
  }
  return "?";
}

bool parse_output_kind(const std::string& name, OutputKind* out) {
  for (int i = 0; i < kOutputKinds; ++i) {
    const OutputKind k = static_cast<OutputKind>(i);
    if (name == to_string(k)) {
      *out = k;
      return true;
    }
  }
  return false;
}

const char* output_kind_names() { return "logits, embedding, pre_logits, tokens"; }

std::vector<OutputKind> OutputSet::kinds() const {
  std::vector<OutputKind> v;
  for (int i = 0; i < kOutputKinds; ++i)
    if (has(static_cast<OutputKind>(i))) v.push_back(static_cast<OutputKind>(i));
  return v;
}

std::string OutputSet::to_string() const {
  std::string s;
  for (OutputKind k : kinds()) s += (s.empty() ? "" : ", ") + std::string(edgevit::to_string(k));
  return s;
}

}  // namespace edgevit
