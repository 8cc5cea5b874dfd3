// The vit-digits model and its data for the CPU tests (digits_test, int8_test, int8_fold_test,
// int8_digits_slow_test): the model and host profile, the calibration and test splits (tests/data/digits),
// tensor and file readers, and an engine's logits over a split. Header-only.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "platform/device_registry.h"
#include "runtime/config.h"
#include "runtime/engine.h"
#include "runtime/safetensors.h"
#include "tests/testutil/testutil.h"

namespace edgevit::digits {

inline ModelSpec digits_spec() {
  auto spec = load_model_spec(testutil::source_path("config/models/vit-digits.yaml"));
  EXPECT_TRUE(spec.ok()) << spec.status().to_string();
  return *spec;
}

inline DeviceProfile host() {
  auto dev = find_device_profile("host-cpu", {testutil::source_path("config/devices")});
  EXPECT_TRUE(dev.ok());
  return *dev;
}

// Tensor `name` of f converted to fp32 (empty, with a test failure, when it is missing).
inline std::vector<float> read(const SafetensorsFile& f, const std::string& name) {
  const TensorInfo* t = f.find(name);
  EXPECT_NE(t, nullptr) << name;
  if (!t) return {};
  std::vector<float> v(static_cast<size_t>(t->numel));
  convert_to_f32(*t, f.data(*t), v.data());
  return v;
}

// A digits split: input (n, 1, 8, 8), labels (n).
struct Split {
  std::vector<float> input, labels;
  int n = 0;
};
inline Split load_split(const char* leaf) {
  Split s;
  auto f = SafetensorsFile::open(testutil::source_path(std::string("tests/data/digits/") + leaf));
  EXPECT_TRUE(f.ok());
  if (!f.ok()) return s;
  s.input = read(*f, "input");
  s.labels = read(*f, "labels");
  s.n = static_cast<int>(s.labels.size());
  return s;
}

inline std::vector<uint8_t> file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// An engine on the host profile at precision p, two threads (null, with a test failure, when creation fails).
inline std::unique_ptr<Engine> engine(const ModelSpec& spec, Precision p) {
  EngineOptions o;
  o.threads = 2;
  o.plan.precision = p;
  auto e = Engine::create(spec, host(), o);
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  return e.ok() ? std::move(*e) : nullptr;
}

// Logits of every image of s, (n, classes).
inline std::vector<float> logits(Engine& e, const Split& s, int classes) {
  std::vector<float> out;
  for (int i = 0; i < s.n; i += e.max_batch()) {
    const int n = std::min(e.max_batch(), s.n - i);
    EXPECT_TRUE(e.infer(s.input.data() + static_cast<size_t>(i) * 64, n).ok());
    out.insert(out.end(), e.logits(), e.logits() + static_cast<size_t>(n) * classes);
  }
  return out;
}

}  // namespace edgevit::digits
