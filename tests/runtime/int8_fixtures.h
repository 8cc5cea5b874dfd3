// Fixtures shared by the CPU INT8 scale-file tests (int8_test, int8_fold_test, int8_bias_test): a valid scale
// file's content, hand-made files, the check of a refused file, an engine's refusal of a hostile file, an
// engine's arena bytes, and the weight bytes a CUDA INT8 plan (made on the CPU, for the Orin NX profile; nothing
// runs) loads. Header-only.
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "platform/device_registry.h"
#include "runtime/engine.h"
#include "runtime/int8_scales.h"
#include "runtime/plan.h"
#include "runtime/weights.h"
#include "tests/runtime/digits_data.h"
#include "tests/testutil/testutil.h"

namespace edgevit::int8fix {

// Every block GEMM's input at `scale`, calibration method minmax over one sample.
inline Int8Scales uniform_scales(const VitArch& a, float scale = 0.05f) {
  Int8Scales s;
  s.method = "minmax";
  s.samples = 1;
  for (const std::string& g : int8_gemm_names(a)) s.input_scales[g + ".input_scale"] = scale;
  return s;
}

// One tensor of a scale file written by hand: any dtype string, any shape, raw bytes.
struct RawTensor {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};

// Every block GEMM's input scale 0.05 as F32 [1] raw tensors (the body of a valid file).
inline std::vector<RawTensor> uniform_raw_scales(const VitArch& a) {
  const float v = 0.05f;
  std::vector<RawTensor> t;
  for (const std::string& g : int8_gemm_names(a))
    t.push_back({g + ".input_scale", "F32", {1}, std::string(reinterpret_cast<const char*>(&v), 4)});
  return t;
}

// A safetensors file of `tensors` in order with `metadata` as its __metadata__, for what write_int8_scales
// cannot make (other dtypes, shapes, metadata).
inline void write_raw_scale_file(const std::string& path, const nlohmann::json& metadata,
                                 const std::vector<RawTensor>& tensors) {
  nlohmann::json h;
  h["__metadata__"] = metadata;
  std::string data;
  for (const RawTensor& t : tensors) {
    h[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {data.size(), data.size() + t.bytes.size()}}};
    data += t.bytes;
  }
  std::string text = h.dump();
  while (text.size() % 8) text += ' ';
  std::ofstream f(path, std::ios::binary);
  const uint64_t n = text.size();
  f.write(reinterpret_cast<const char*>(&n), 8);
  f << text << data;
}

// A scale file refused as a checkpoint error (exit code 4) whose message names the file, the tensor and why.
inline void expect_refused(const Status& st, const std::string& file, const std::string& tensor,
                           const std::string& why) {
  EXPECT_EQ(st.code(), StatusCode::kCheckpointError) << st.to_string();
  EXPECT_EQ(exit_code_for(st.code()), 4);
  EXPECT_NE(st.message().find(file), std::string::npos) << st.message();
  EXPECT_NE(st.message().find(tensor), std::string::npos) << st.message();
  EXPECT_NE(st.message().find(why), std::string::npos) << st.message();
}

// An INT8 engine on the host profile reading scales `s` (written to `path`) must refuse to start, as a
// checkpoint error whose message contains `what`.
inline void expect_engine_refuses(ModelSpec spec, const Int8Scales& s, const std::string& path,
                                  const std::string& what) {
  spec.int8_scales_path = path;
  ASSERT_TRUE(write_int8_scales(path, s).ok());
  EngineOptions o;
  o.plan.precision = Precision::kInt8;
  auto e = Engine::create(spec, digits::host(), o);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kCheckpointError);
  EXPECT_NE(e.status().message().find(what), std::string::npos) << e.status().message();
}

// The arena bytes of an engine's tensor `name` (null, with a test failure, when the plan has none).
inline const void* arena_data(const Engine& e, const std::string& name) {
  for (const TensorDesc& t : e.plan().graph.tensors)
    if (t.name == name) return e.tensor_data(t.id);
  ADD_FAILURE() << "no tensor " << name;
  return nullptr;
}

// A CUDA INT8 plan of `spec` (its scale file already written) for orin-nx-16gb at batch 1, and the bytes
// load_int8_weights puts into its arena, by tensor id.
struct PlannedWeights {
  Plan plan;
  std::map<int, std::string> bytes;
  // The bytes of the plan's tensor `name` (empty when it has none).
  std::string of(const std::string& name) const {
    for (const TensorDesc& t : plan.graph.tensors)
      if (t.name == name) return bytes.count(t.id) ? bytes.at(t.id) : "";
    return "";
  }
};
inline void plan_orin_int8(const ModelSpec& spec, PlannedWeights* out) {
  auto orin = find_device_profile("orin-nx-16gb", {testutil::source_path("config/devices")});
  ASSERT_TRUE(orin.ok());
  PlanOptions o;
  o.batch = 1;
  o.precision = Precision::kInt8;
  auto plan = make_plan(spec, *orin, o);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  out->plan = std::move(*plan);
  auto w = WeightSource::open(spec.weights_path, spec.weights_naming);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  ASSERT_TRUE(load_int8_weights(out->plan, *w, [&](int id, const void* bytes, size_t size) {
                out->bytes[id] = std::string(static_cast<const char*>(bytes), size);
                return Status::Ok();
              }).ok());
}

}  // namespace edgevit::int8fix
