#include "programs/edgevit/run_outputs.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "runtime/safetensors.h"

namespace ev = edgevit;

namespace edgevit_cli {

namespace {

int64_t product(const std::vector<int64_t>& dims) {
  int64_t p = 1;
  for (int64_t d : dims) p *= d;
  return p;
}

std::string shape_text(int n, const std::vector<int64_t>& dims) {
  std::string s = "[" + std::to_string(n);
  for (int64_t d : dims) s += "," + std::to_string(d);
  return s + "]";
}

// "L2 norm 12.3456, first values [0.1234, -0.5678, ...]"
std::string vector_text(const float* v, int64_t dim) {
  double sum = 0;
  for (int64_t i = 0; i < dim; ++i) sum += static_cast<double>(v[i]) * v[i];
  char buf[64];
  std::snprintf(buf, sizeof buf, "L2 norm %.4f, first values [", std::sqrt(sum));
  std::string s = buf;
  const int64_t shown = std::min<int64_t>(dim, 6);
  for (int64_t i = 0; i < shown; ++i) {
    std::snprintf(buf, sizeof buf, "%s%.4f", i ? ", " : "", v[i]);
    s += buf;
  }
  return s + (dim > shown ? ", ...]" : "]");
}

}  // namespace

RunOutputs::RunOutputs(const ev::Engine& engine, int n) : n_(n) {
  for (ev::OutputKind k : engine.outputs().kinds()) {
    dims_[k] = engine.output_dims(k);
    values_[k].assign(static_cast<size_t>(n * product(dims_[k])), 0.f);
  }
}

void RunOutputs::take(const ev::Engine& engine, int start, int count) {
  for (auto& [k, v] : values_) {
    const int64_t per = product(dims_.at(k));
    const float* src = engine.output(k);
    std::copy(src, src + per * count, v.begin() + per * start);
  }
}

void RunOutputs::print_summary(bool has_predictions) const {
  for (const auto& [k, dims] : dims_) {
    const int64_t per = product(dims);
    const float* v = values_.at(k).data();
    if (k == ev::OutputKind::kEmbedding && !has_predictions) {
      std::printf("embedding %s:\n", shape_text(n_, dims).c_str());
      for (int i = 0; i < std::min(n_, 8); ++i)
        std::printf("  image %d: %s\n", i, vector_text(v + per * i, per).c_str());
      if (n_ > 8) std::printf("  ... (%d more images; use --output to get every row)\n", n_ - 8);
    } else if (k == ev::OutputKind::kTokens) {
      std::printf("tokens %s (the final-normed tokens; --output writes them)\n", shape_text(n_, dims).c_str());
    } else if (k == ev::OutputKind::kPreLogits && !has_predictions && !dims_.count(ev::OutputKind::kEmbedding)) {
      std::printf("pre_logits %s: image 0: %s\n", shape_text(n_, dims).c_str(), vector_text(v, per).c_str());
    }
  }
}

ev::Status RunOutputs::write(const std::string& path, const std::map<std::string, std::string>& metadata) const {
  std::vector<ev::NamedTensorView> tensors;
  for (const auto& [k, dims] : dims_) {
    std::vector<int64_t> shape{n_};
    shape.insert(shape.end(), dims.begin(), dims.end());
    tensors.push_back({ev::to_string(k), shape, values_.at(k).data()});
  }
  return ev::write_safetensors(path, tensors, metadata);
}

std::string RunOutputs::describe() const {
  std::string s;
  for (const auto& [k, dims] : dims_)
    s += (s.empty() ? "" : ", ") + std::string(ev::to_string(k)) + " " + shape_text(n_, dims);
  return s;
}

}  // namespace edgevit_cli
