// INT8 end to end on the CPU (docs/int8.md): the calibration split, the scale file and its loader on hostile
// files, calibration determinism, fc2's folded bias and the INT8 plans. vit-digits INT8 against fp32 on the 360
// test images (issue #25's acceptance) is int8_digits_slow_test: seconds natively, minutes under emulation.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>

#include "kernels/cpu/quantize_i8_ref.h"
#include "platform/device_registry.h"
#include "runtime/config.h"
#include "runtime/engine.h"
#include "runtime/int8_calibrate.h"
#include "runtime/int8_scales.h"
#include "runtime/safetensors.h"
#include "runtime/weights.h"
#include "tests/runtime/digits_data.h"
#include "tests/runtime/int8_fixtures.h"
#include "tests/testutil/testutil.h"

namespace edgevit {
namespace {

using digits::digits_spec;
using digits::file_bytes;
using digits::host;
using digits::load_split;
using digits::read;
using digits::Split;

std::string tmp_path(const std::string& leaf) { return testutil::temp_dir() + "edgevit_int8_" + leaf; }

TEST(Int8CalibSplit, TrainingImagesDisjointFromTheTestSplit) {
  auto calib = SafetensorsFile::open(testutil::source_path("tests/data/digits/calib_split.safetensors"));
  auto test = SafetensorsFile::open(testutil::source_path("tests/data/digits/test_split.safetensors"));
  ASSERT_TRUE(calib.ok() && test.ok());
  const TensorInfo* in = calib->find("input");
  ASSERT_NE(in, nullptr);
  ASSERT_EQ(in->shape.size(), 4u);
  EXPECT_EQ(in->shape[1], 1);
  EXPECT_EQ(in->shape[2], 8);
  EXPECT_EQ(in->shape[3], 8);
  const auto ci = nlohmann::json::parse(calib->metadata().at("dataset_index")).get<std::vector<int>>();
  const auto ti = nlohmann::json::parse(test->metadata().at("dataset_index")).get<std::vector<int>>();
  ASSERT_EQ(static_cast<int64_t>(ci.size()), in->shape[0]);
  ASSERT_EQ(ti.size(), 360u);
  const std::set<int> test_rows(ti.begin(), ti.end());
  for (int i : ci) EXPECT_EQ(test_rows.count(i), 0u) << "load_digits image " << i << " is in both splits";
  EXPECT_EQ(std::set<int>(ci.begin(), ci.end()).size(), ci.size()) << "an image appears twice";
  // No calibration image equals a test image pixel for pixel either (load_digits has a few duplicates).
  const auto cx = read(*calib, "input"), tx = read(*test, "input");
  int equal = 0;
  for (size_t a = 0; a < ci.size(); ++a)
    for (size_t b = 0; b < ti.size(); ++b) equal += std::memcmp(&cx[a * 64], &tx[b * 64], 64 * sizeof(float)) == 0;
  std::printf("calibration split: %zu training images, %d equal to a test image pixel for pixel\n", ci.size(), equal);
}

// ---- scale file -------------------------------------------------------------------------------------------

// A safetensors file of raw tensors (any dtype string), for what write_safetensors cannot make.
void write_raw(const std::string& path, const std::vector<std::pair<std::string, std::string>>& dtypes_by_name,
               const std::vector<std::vector<int64_t>>& shapes, const std::vector<std::string>& bytes,
               const std::string& format, const std::string& gelu_shift = kInt8ScalesGeluShift) {
  nlohmann::json md = {{"format", format}};
  if (!gelu_shift.empty()) md["gelu_shift"] = gelu_shift;
  std::vector<int8fix::RawTensor> t;
  for (size_t i = 0; i < dtypes_by_name.size(); ++i)
    t.push_back({dtypes_by_name[i].first, dtypes_by_name[i].second, shapes[i], bytes[i]});
  int8fix::write_raw_scale_file(path, md, t);
}

Status load_after(const std::string& leaf, const std::function<void(Int8Scales*)>& edit, const VitArch& a) {
  Int8Scales s = int8fix::uniform_scales(a);
  edit(&s);
  const std::string path = tmp_path(leaf);
  EXPECT_TRUE(write_int8_scales(path, s).ok());
  return load_int8_scales(path, a).status();
}

TEST(Int8Scales, ValidFileRoundTrips) {
  const VitArch a = digits_spec().arch;
  const std::string path = tmp_path("valid.safetensors");
  ASSERT_TRUE(write_int8_scales(path, int8fix::uniform_scales(a)).ok());
  auto s = load_int8_scales(path, a);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->input_scales.size(), 16u);
  EXPECT_EQ(s->method, "minmax");
  EXPECT_EQ(s->samples, 1);
}

TEST(Int8Scales, HostileFilesAreRefusedNamingFileTensorAndReason) {
  const VitArch a = digits_spec().arch;
  const std::string t = "blocks.2.mlp.fc1.input_scale";
  struct Case {
    const char* leaf;
    std::function<void(Int8Scales*)> edit;
    std::string want;
  };
  const std::vector<Case> cases = {
      {"nan", [&](Int8Scales* s) { s->input_scales[t] = std::nanf(""); }, "NaN"},
      {"inf", [&](Int8Scales* s) { s->input_scales[t] = std::numeric_limits<float>::infinity(); }, "Inf"},
      {"zero", [&](Int8Scales* s) { s->input_scales[t] = 0.f; }, "zero"},
      {"negative", [&](Int8Scales* s) { s->input_scales[t] = -0.1f; }, "negative"},
      {"subnormal", [&](Int8Scales* s) { s->input_scales[t] = 1e-40f; }, "subnormal"},
      {"missing", [&](Int8Scales* s) { s->input_scales.erase(t); }, "missing"},
      {"extra", [&](Int8Scales* s) { s->input_scales["blocks.4.mlp.fc1.input_scale"] = 1.f; }, "not a scale of this model"},
  };
  for (const Case& c : cases) {
    const Status st = load_after(std::string(c.leaf) + ".safetensors", c.edit, a);
    EXPECT_EQ(st.code(), StatusCode::kCheckpointError) << c.leaf << ": " << st.to_string();
    EXPECT_NE(st.message().find(c.want), std::string::npos) << c.leaf << ": " << st.message();
    EXPECT_NE(st.message().find(std::string(c.leaf) + ".safetensors"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find(c.leaf == std::string("extra") ? "blocks.4.mlp.fc1" : t), std::string::npos)
        << st.message();
    EXPECT_EQ(exit_code_for(st.code()), 4);
  }
  // Wrong shape and dtype: every other tensor valid.
  std::vector<std::pair<std::string, std::string>> names;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<std::string> bytes;
  const float v = 0.05f;
  for (const std::string& g : int8_gemm_names(a)) {
    names.push_back({g + ".input_scale", "F32"});
    shapes.push_back({1});
    bytes.push_back(std::string(reinterpret_cast<const char*>(&v), 4));
  }
  auto shape = shapes;
  auto shape_bytes = bytes;
  shape[5] = {2};
  shape_bytes[5] += shape_bytes[5];
  write_raw(tmp_path("shape.safetensors"), names, shape, shape_bytes, kInt8ScalesFormat);
  Status st = load_int8_scales(tmp_path("shape.safetensors"), a).status();
  EXPECT_EQ(st.code(), StatusCode::kCheckpointError);
  EXPECT_NE(st.message().find("shape [2], expected [1]"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find(names[5].first), std::string::npos) << st.message();
  auto dt = names;
  auto dt_bytes = bytes;
  dt[3].second = "F16";
  dt_bytes[3] = std::string("\x66\x2a", 2);
  write_raw(tmp_path("dtype.safetensors"), dt, shapes, dt_bytes, kInt8ScalesFormat);
  st = load_int8_scales(tmp_path("dtype.safetensors"), a).status();
  EXPECT_EQ(st.code(), StatusCode::kCheckpointError);
  EXPECT_NE(st.message().find("dtype F16, expected F32"), std::string::npos) << st.message();
  write_raw(tmp_path("format.safetensors"), names, shapes, bytes, "something-else");
  st = load_int8_scales(tmp_path("format.safetensors"), a).status();
  EXPECT_EQ(st.code(), StatusCode::kCheckpointError);
  EXPECT_NE(st.message().find("metadata 'format'"), std::string::npos) << st.message();
  // A v1 file (fc2's scale symmetric, before fc2's input became unsigned): refused, saying to recalibrate.
  write_raw(tmp_path("v1.safetensors"), names, shapes, bytes, "edgevit-int8-scales-v1", "");
  st = load_int8_scales(tmp_path("v1.safetensors"), a).status();
  EXPECT_EQ(st.code(), StatusCode::kCheckpointError);
  EXPECT_NE(st.message().find("'edgevit-int8-scales-v1'"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("recalibrate"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("v1.safetensors"), std::string::npos) << st.message();
  // The shift fc2's scale was calibrated with must be this build's.
  for (const char* shift : {"", "0.1700401"}) {
    write_raw(tmp_path("shift.safetensors"), names, shapes, bytes, kInt8ScalesFormat, shift);
    st = load_int8_scales(tmp_path("shift.safetensors"), a).status();
    EXPECT_EQ(st.code(), StatusCode::kCheckpointError) << shift;
    EXPECT_NE(st.message().find("metadata 'gelu_shift' is " + std::string(*shift ? "'0.1700401'" : "missing")),
              std::string::npos) << st.message();
  }
  st = load_int8_scales(tmp_path("absent.safetensors"), a).status();
  EXPECT_EQ(st.code(), StatusCode::kNotFound) << st.to_string();
  // Not a safetensors file at all.
  std::ofstream(tmp_path("garbage.safetensors")) << "not a safetensors file";
  st = load_int8_scales(tmp_path("garbage.safetensors"), a).status();
  EXPECT_EQ(st.code(), StatusCode::kCheckpointError) << st.to_string();
  EXPECT_NE(st.message().find("INT8 scale file"), std::string::npos) << st.message();
}

TEST(Int8Scales, AnEngineRefusesAHostileScaleFile) {
  ModelSpec spec = digits_spec();
  Int8Scales s = int8fix::uniform_scales(spec.arch);
  s.input_scales["blocks.1.attn.proj.input_scale"] = std::nanf("");
  int8fix::expect_engine_refuses(spec, s, tmp_path("engine_nan.safetensors"), "blocks.1.attn.proj.input_scale': NaN");
}

// ---- calibration and accuracy -----------------------------------------------------------------------------

TEST(Int8Calibrate, SameDataGivesTheSameScalesBitForBit) {
  const ModelSpec spec = digits_spec();
  const Split calib = load_split("calib_split.safetensors");
  // 64 of the 256 images: enough for determinism, and the emulated CI stage runs this test too.
  const int n = std::min(calib.n, 64);
  for (CalibMethod m : {CalibMethod::kMinmax, CalibMethod::kPercentile, CalibMethod::kMse}) {
    CalibOptions o;
    o.method = m;
    o.threads = 2;
    auto a = calibrate_int8(spec, host(), calib.input.data(), n, o);
    o.threads = 1;  // the engine's thread count must not change the statistics
    auto b = calibrate_int8(spec, host(), calib.input.data(), n, o);
    ASSERT_TRUE(a.ok() && b.ok()) << a.status().to_string();
    ASSERT_TRUE(write_int8_scales(tmp_path("det_a.safetensors"), *a).ok());
    ASSERT_TRUE(write_int8_scales(tmp_path("det_b.safetensors"), *b).ok());
    EXPECT_EQ(file_bytes(tmp_path("det_a.safetensors")), file_bytes(tmp_path("det_b.safetensors"))) << to_string(m);
    EXPECT_EQ(a->samples, n);
    for (const auto& kv : a->input_scales) EXPECT_GT(kv.second, 0.f) << kv.first;
  }
}

// fc2 reads uint8 codes of GELU + kGemmI8GeluShift; its bias in the arena carries the shift, folded in double
// from the quantized weights (runtime/int8_scales.h), in both activation modes; qkv's bias is untouched.
TEST(Int8Weights, Fc2BiasCarriesTheShiftFoldedFromTheQuantizedWeights) {
  ModelSpec spec = digits_spec();
  spec.precision = Precision::kInt8;
  spec.int8_activations = Int8Activations::kPerToken;
  EngineOptions o;
  o.plan.precision = Precision::kInt8;
  auto e = Engine::create(spec, host(), o);
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  auto w = WeightSource::open(spec.weights_path, spec.weights_naming);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  const Graph& g = (*e)->plan().graph;
  auto id_of = [&](const std::string& name) {
    for (const TensorDesc& t : g.tensors)
      if (t.name == name) return t.id;
    return -1;
  };
  const int64_t n = spec.arch.embed_dim, k = spec.arch.mlp_hidden();
  for (int blk = 0; blk < spec.arch.depth; ++blk) {
    const std::string stem = "blocks." + std::to_string(blk) + ".mlp.fc2";
    std::vector<float> wf(static_cast<size_t>(n * k)), bias(static_cast<size_t>(n)), sw(static_cast<size_t>(n));
    ASSERT_TRUE(w->read_f32(stem + ".weight", wf.data(), wf.size()).ok());
    ASSERT_TRUE(w->read_f32(stem + ".bias", bias.data(), bias.size()).ok());
    std::vector<int8_t> wq(wf.size());
    quantize_rows_i8_ref(wf.data(), n, k, 0.f, wq.data(), sw.data());
    const int id = id_of(stem + ".bias");
    ASSERT_GE(id, 0);
    const float* got = static_cast<const float*>((*e)->tensor_data(id));
    double moved = 0;
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t p = 0; p < k; ++p) sum += wq[static_cast<size_t>(j * k + p)];
      const float want = static_cast<float>(bias[j] - 0.17f * static_cast<double>(sw[j]) * sum);
      ASSERT_EQ(got[j], want) << stem << " column " << j;
      moved = std::max(moved, std::fabs(static_cast<double>(got[j]) - bias[j]));
    }
    EXPECT_GT(moved, 1e-3) << stem;  // the fold is not a no-op on a trained model
  }
  std::vector<float> qkv_bias(static_cast<size_t>(3 * n));
  ASSERT_TRUE(w->read_f32("blocks.0.attn.qkv.bias", qkv_bias.data(), qkv_bias.size()).ok());
  const float* got = static_cast<const float*>((*e)->tensor_data(id_of("blocks.0.attn.qkv.bias")));
  for (size_t j = 0; j < qkv_bias.size(); ++j) ASSERT_EQ(got[j], qkv_bias[j]) << j;
}

}  // namespace
}  // namespace edgevit

namespace edgevit {
namespace {

// plan on an Orin profile: the block GEMMs on the CUDA INT8 rows at the profile's int8 rate, the other ops
// at fp16, the weights at one byte (+ per-channel scales); an fp16 plan of the same model is untouched. (The
// engine itself on a GPU: tests/runtime/int8_cuda_test.cu.)
// fc2's uint8 input accumulates exactly in int32 up to K = 65536: a wider MLP is refused at plan time with
// the reason; 65536 itself plans.
TEST(Int8Plan, Fc2WithUint8InputRefusesKAbove65536) {
  ModelSpec spec = digits_spec();
  PlanOptions o;
  o.precision = Precision::kInt8;
  spec.arch.mlp_ratio = 65600.0 / spec.arch.embed_dim;
  auto wide = make_plan(spec, host(), o);
  ASSERT_FALSE(wide.ok());
  EXPECT_NE(wide.status().message().find("K <= 65536"), std::string::npos) << wide.status().message();
  spec.arch.mlp_ratio = 65536.0 / spec.arch.embed_dim;
  auto edge = make_plan(spec, host(), o);
  EXPECT_TRUE(edge.ok()) << edge.status().to_string();
}

TEST(Int8Plan, OrinForecastHalvesTheWeightsAndPredictsAtTheInt8Rate) {
  auto spec = load_model_spec(testutil::source_path("config/models/vit-base-patch16-224.yaml"));
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  auto orin = find_device_profile("orin-nx-16gb", {testutil::source_path("config/devices")});
  ASSERT_TRUE(orin.ok());
  PlanOptions o;
  o.batch = 1;
  auto fp16 = make_plan(*spec, *orin, o);
  o.precision = Precision::kInt8;
  auto int8 = make_plan(*spec, *orin, o);
  ASSERT_TRUE(fp16.ok() && int8.ok()) << int8.status().to_string();
  EXPECT_EQ(fp16->graph.precision, Precision::kFp16);
  int64_t i8_bytes = 0;
  for (const TensorDesc& t : int8->graph.tensors)
    if (t.kind == TensorKind::kWeight && t.elem_bytes == 1) i8_bytes += t.bytes();
  EXPECT_EQ(i8_bytes, int64_t{12} * (3 * 768 * 768 + 768 * 768 + 2 * 768 * 3072));
  EXPECT_LT(int8->weights_bytes, fp16->weights_bytes * 11 / 20);
  int gemms = 0;
  for (const Op& op : int8->graph.ops) {
    if (op.int8 && op.kind == OpKind::kLinear) {
      ++gemms;
      EXPECT_EQ(op.row, "cuda.gemm_i8_mma") << op.name;
    } else if (!op.int8) {
      EXPECT_EQ(op_precision(op, int8->graph), Precision::kFp16) << op.name;
    }
  }
  EXPECT_EQ(gemms, 48);
  // The attention writes proj's int8 input at proj's calibrated scale (docs/int8.md): an int8 `attn.out`, the
  // fused row's int8 output, and proj reads it per tensor with no quantizing scratch.
  int attentions = 0;
  for (const Op& op : int8->graph.ops) {
    if (op.kind == OpKind::kAttention) {
      ++attentions;
      EXPECT_TRUE(op.int8) << op.name;
      EXPECT_EQ(op.row, "cuda.mha_fused_f16->int8") << op.name;
      EXPECT_EQ(int8->graph.tensors[static_cast<size_t>(op.outputs[0])].elem_bytes, 1) << op.name;
      ASSERT_EQ(op.weights.size(), 1u) << op.name;
      EXPECT_NE(int8->graph.tensors[static_cast<size_t>(op.weights[0])].name.find(".attn.proj.input_scale"),
                std::string::npos);
    }
    if (op.name.find(".attn.proj") != std::string::npos) {
      EXPECT_LT(op.scratch, 0) << op.name;
      EXPECT_EQ(int8->graph.tensors[static_cast<size_t>(op.inputs[0])].elem_bytes, 1) << op.name;
    }
  }
  EXPECT_EQ(attentions, 12);
  // --attention explicit: the unfused row with its separate quantizing pass, its fp16 O in the scratch.
  PlanOptions ex = o;
  ex.attention = AttentionImpl::kExplicit;
  auto unfused = make_plan(*spec, *orin, ex);
  ASSERT_TRUE(unfused.ok()) << unfused.status().to_string();
  for (const Op& op : unfused->graph.ops)
    if (op.kind == OpKind::kAttention) {
      EXPECT_EQ(op.row, "cuda.mha_unfused_cublas->int8") << op.name;
      EXPECT_GE(op.scratch, 0) << op.name;
      EXPECT_NE(op.reason.find("SEPARATE QUANTIZING PASS"), std::string::npos) << op.reason;
    }
  const std::string json = format_plan_json(*int8);
  const auto j = nlohmann::json::parse(json);
  EXPECT_EQ(j["precision"], "int8");
  EXPECT_LT(j["predicted_total_us"].get<double>(), nlohmann::json::parse(format_plan_json(*fp16))["predicted_total_us"].get<double>() * 0.65);
  EXPECT_FALSE(nlohmann::json::parse(format_plan_json(*fp16)).contains("int8"));
  // Per-token INT8 is refused on CUDA at plan time, naming why (fc1's GELU -> int8 needs a per-tensor scale).
  ModelSpec per_token = *spec;
  per_token.int8_activations = Int8Activations::kPerToken;
  auto refused = make_plan(per_token, *orin, o);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(refused.status().message().find("per_token INT8 runs on the CPU"), std::string::npos)
      << refused.status().message();
}

// runtime.int8_attention: int8 (docs/int8.md "INT8 attention"): on the Orin NX, qkv writes int8 Q|K (B, T, 2, H, D)
// with fp32 scales (B, T, 2, H) and fp16 V, the attention runs cuda.mha_i8->int8 (its int8-output row) and the
// forecast drops (fewer bytes); the CPU runs cpu.mha_i8_ref; the hash changes. Where no row serves (head dim 80,
// --attention explicit, qk-norm) the plan keeps float q, k, v and says why in a FALLBACK note; the CUDA fp32 mode
// is refused naming the key, and so is the YAML that asks for both.
TEST(Int8Plan, Int8AttentionPlansItsRowAndFallsBackLoudly) {
  auto base = load_model_spec(testutil::source_path("config/models/vit-base-patch16-224.yaml"));
  ASSERT_TRUE(base.ok()) << base.status().to_string();
  auto orin = find_device_profile("orin-nx-16gb", {testutil::source_path("config/devices")});
  ASSERT_TRUE(orin.ok());
  PlanOptions o;
  o.batch = 1;
  o.precision = Precision::kInt8;
  ModelSpec spec = *base;
  spec.int8_attention = true;
  auto plain = make_plan(*base, *orin, o);
  auto i8 = make_plan(spec, *orin, o);
  ASSERT_TRUE(plain.ok() && i8.ok()) << i8.status().to_string();
  EXPECT_TRUE(i8->graph.int8_attention);
  EXPECT_NE(i8->hash, plain->hash);
  int attentions = 0;
  for (const Op& op : i8->graph.ops) {
    if (op.kind == OpKind::kAttention) {
      ++attentions;
      EXPECT_EQ(op.row, "cuda.mha_i8->int8") << op.name;
      EXPECT_EQ(op.kernel.rfind("cuda.flash_fwd_i8_d64_", 0), 0u) << op.kernel;
      ASSERT_EQ(op.inputs.size(), 3u);
      EXPECT_EQ(i8->graph.tensors[static_cast<size_t>(op.outputs[0])].elem_bytes, 1) << op.name;
    }
    if (op.name.size() > 9 && op.name.compare(op.name.size() - 9, 9, ".attn.qkv") == 0) {
      ASSERT_EQ(op.outputs.size(), 3u) << op.name;
      const auto& t = i8->graph.tensors;
      EXPECT_EQ(t[static_cast<size_t>(op.outputs[0])].elem_bytes, 1);
      EXPECT_EQ(t[static_cast<size_t>(op.outputs[0])].shape, (std::vector<int64_t>{1, 197, 2, 12, 64}));
      EXPECT_EQ(t[static_cast<size_t>(op.outputs[1])].shape, (std::vector<int64_t>{1, 197, 2, 12}));
      EXPECT_EQ(t[static_cast<size_t>(op.outputs[2])].elem_bytes, 2);
    }
  }
  EXPECT_EQ(attentions, 12);
  EXPECT_NE(i8->attention_reason.find("int8 attention (int8 output)"), std::string::npos) << i8->attention_reason;
  const double us_plain = nlohmann::json::parse(format_plan_json(*plain))["predicted_total_us"].get<double>();
  const double us_i8 = nlohmann::json::parse(format_plan_json(*i8))["predicted_total_us"].get<double>();
  std::printf("orin-nx-16gb ViT-B/16 INT8 batch 1: %.1f us, with int8 Q/K %.1f us\n", us_plain, us_i8);
  EXPECT_LT(us_i8, us_plain - 20.0);  // ~0.6 MB a full block less activation traffic at 102 GB/s
  // The CPU INT8 path: the reference row.
  auto cpu = make_plan(spec, host(), o);
  ASSERT_TRUE(cpu.ok()) << cpu.status().to_string();
  for (const Op& op : cpu->graph.ops) {
    if (op.kind == OpKind::kAttention) {
      EXPECT_EQ(op.row, "cpu.mha_i8_ref") << op.name;
    }
  }
  // Fallbacks, each loud.
  const auto expect_fallback = [&](const ModelSpec& sp, const PlanOptions& po, const std::string& why) {
    auto p = make_plan(sp, *orin, po);
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    EXPECT_FALSE(p->graph.int8_attention) << why;
    bool noted = false;
    for (const std::string& n : p->notes)
      noted = noted || (n.rfind("FALLBACK: runtime.int8_attention", 0) == 0 && n.find(why) != std::string::npos);
    EXPECT_TRUE(noted) << "no FALLBACK note naming '" << why << "'";
    for (const Op& op : p->graph.ops) {
      if (op.kind == OpKind::kAttention) {
        EXPECT_NE(op.row, "cuda.mha_i8->int8");
      }
    }
  };
  ModelSpec d80 = spec;
  d80.arch.embed_dim = 960;  // 12 heads of 80
  expect_fallback(d80, o, "no row for head_dim 80");
  PlanOptions ex = o;
  ex.attention = AttentionImpl::kExplicit;
  expect_fallback(spec, ex, "unfused attention forced");
  ModelSpec qk = spec;
  qk.arch.qk_norm = true;
  expect_fallback(qk, o, "qk_norm");
  PlanOptions f32 = o;
  f32.int8_float = Precision::kFp32;
  auto refused = make_plan(spec, *orin, f32);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("runtime.int8_attention"), std::string::npos)
      << refused.status().message();
  const std::string yaml = tmp_path("int8_attention_fp32.yaml");
  {
    std::ofstream f(yaml);
    f << "architecture: {img_size: 32, patch_size: 8, embed_dim: 64, depth: 1, num_heads: 2, num_classes: 10}\n"
         "weights: {path: none.safetensors}\n"
         "runtime: {precision: int8, int8_activations: per_token, int8_attention: int8, int8_float: fp32}\n";
  }
  auto bad = load_model_spec(yaml);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("int8_attention"), std::string::npos) << bad.status().message();
  EXPECT_NE(bad.status().message().find(yaml), std::string::npos) << bad.status().message();
}

// The twin row (docs/int8.md "fp32 mode") an INT8 graph's float op of this kind runs on `dev`, or "".
std::string twin_row(OpKind kind, const std::string& dev) {
  return kind == OpKind::kAttention   ? dev + ".mha_f64"
         : kind == OpKind::kLinear    ? dev + ".linear_f64"
         : kind == OpKind::kLayerNorm ? dev + ".layernorm_f64"
                                      : "";
}

// runtime.int8_float: fp32 (or --int8-float fp32) on a CUDA profile: the INT8 rows read and write fp32 (the
// LayerNorm -> int8 over the fp32 residual, qkv to fp32, proj and fc2 into the fp32 residual) and every other
// op takes its INT8 twin row (float64 rounded once), as on the CPU; the plan says so (text and JSON) and hashes
// differently. On a CPU profile the INT8 graph is fp32 whatever it says: the same plan, the same hash. fp32
// graphs and the fp16 mode never see a twin row (not even in a rejection reason).
TEST(Int8Plan, Fp32FloatModeRunsTheTwinRowsOnCudaAsTheCpuPathDoes) {
  auto spec = load_model_spec(testutil::source_path("config/models/vit-base-patch16-224.yaml"));
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  auto orin = find_device_profile("orin-nx-16gb", {testutil::source_path("config/devices")});
  auto cpu = find_device_profile("host-cpu", {testutil::source_path("config/devices")});
  ASSERT_TRUE(orin.ok() && cpu.ok());
  PlanOptions o;
  o.batch = 1;
  o.precision = Precision::kInt8;
  auto f16 = make_plan(*spec, *orin, o);
  o.int8_float = Precision::kFp32;
  auto f32 = make_plan(*spec, *orin, o);
  ModelSpec from_config = *spec;
  from_config.int8_float = Precision::kFp32;
  PlanOptions config_only = o;
  config_only.int8_float.reset();
  auto f32_config = make_plan(from_config, *orin, config_only);
  ASSERT_TRUE(f16.ok() && f32.ok() && f32_config.ok()) << f32.status().to_string();
  EXPECT_EQ(f32->hash, f32_config->hash) << "runtime.int8_float and --int8-float plan the same";
  EXPECT_NE(f32->hash, f16->hash);
  EXPECT_EQ(f16->graph.int8_rest, Precision::kFp16);
  EXPECT_EQ(f32->graph.int8_rest, Precision::kFp32);
  int norms = 0, gemms = 0;
  for (const Op& op : f32->graph.ops) {
    if (!op.int8) {
      EXPECT_EQ(op_precision(op, f32->graph), Precision::kFp32) << op.name;
      // The twin rows (docs/int8.md "fp32 mode"): float64 rounded once, as the CPU INT8 path.
      const std::string want = twin_row(op.kind, "cuda");
      if (!want.empty()) {
        EXPECT_EQ(op.kernel, want) << op.name;
      }
      continue;
    }
    if (op.kind == OpKind::kLayerNorm) {
      ++norms;
      EXPECT_EQ(op.row, "cuda.layernorm_f32->int8") << op.name;
      EXPECT_EQ(f32->graph.tensors[static_cast<size_t>(op.inputs[0])].elem_bytes, 4) << op.name;
    } else {
      ++gemms;
      const std::string want = op.epilogue == 1   ? "cuda.gemm_i8_mma+bias_gelu->int8"
                               : op.epilogue == 2 ? "cuda.gemm_i8_mma+bias_residual_f32"
                                                  : "cuda.gemm_i8_mma+bias_f32";
      EXPECT_EQ(op.kernel, want) << op.name;
    }
  }
  EXPECT_EQ(norms, 24);
  EXPECT_EQ(gemms, 48);
  for (const Op& op : f16->graph.ops) {
    if (op.int8 && op.kind == OpKind::kLayerNorm) {
      EXPECT_EQ(op.row, "cuda.layernorm_f16->int8") << op.name;
    }
    EXPECT_EQ(op.kernel.find("_f64"), std::string::npos) << op.name << ": the fp16 mode has no twin row";
  }
  // The CPU-path twin keeps the float attention output that proj quantizes itself.
  for (const Op& op : f32->graph.ops)
    if (op.kind == OpKind::kAttention) {
      EXPECT_FALSE(op.int8) << op.name;
      EXPECT_EQ(f32->graph.tensors[static_cast<size_t>(op.outputs[0])].elem_bytes, 4) << op.name;
    }
  EXPECT_EQ(nlohmann::json::parse(format_plan_json(*f32))["int8"]["float"], "fp32");
  EXPECT_EQ(nlohmann::json::parse(format_plan_json(*f16))["int8"]["float"], "fp16");
  EXPECT_NE(format_plan_text(*f32, false).find("the other ops fp32"), std::string::npos);

  PlanOptions c = o;
  c.int8_float.reset();
  auto cpu_default = make_plan(*spec, *cpu, c);
  c.int8_float = Precision::kFp16;
  auto cpu_f16 = make_plan(*spec, *cpu, c);
  c.int8_float = Precision::kFp32;
  auto cpu_f32 = make_plan(*spec, *cpu, c);
  ASSERT_TRUE(cpu_default.ok() && cpu_f16.ok() && cpu_f32.ok()) << cpu_default.status().to_string();
  EXPECT_EQ(cpu_default->graph.int8_rest, Precision::kFp32);
  for (const Op& op : cpu_default->graph.ops)
    if (op.kind == OpKind::kAttention) {
      EXPECT_FALSE(op.int8) << op.name;  // the CPU INT8 path, the reference: fp32 attn.out, proj quantizes
    }
  EXPECT_EQ(cpu_f16->hash, cpu_default->hash);
  EXPECT_EQ(cpu_f32->hash, cpu_default->hash);
  // The CPU INT8 path runs the same twin rows; an fp32 plan of the same model never does.
  for (const Op& op : cpu_default->graph.ops) {
    if (op.int8) continue;
    const std::string want = twin_row(op.kind, "cpu");
    if (!want.empty()) {
      EXPECT_EQ(op.kernel, want) << op.name;
    }
  }
  c.precision = Precision::kFp32;
  auto cpu_fp32 = make_plan(*spec, *cpu, c);
  o.precision = Precision::kFp32;
  auto orin_fp32 = make_plan(*spec, *orin, o);
  ASSERT_TRUE(cpu_fp32.ok() && orin_fp32.ok());
  for (const Plan* p : {&*cpu_fp32, &*orin_fp32})
    for (const Op& op : p->graph.ops) {
      EXPECT_EQ(op.kernel.find("_f64"), std::string::npos) << op.name << ": fp32 graphs have no twin row";
      EXPECT_EQ(op.reason.find("_f64"), std::string::npos) << op.name << ": " << op.reason;
    }
}

// The INT8 GEMMs' split-K workspace (runtime/plan.h) on CUDA: planned bytes at the arena's end, just before
// cuBLASLt's workspace, past every tensor (never shared with an activation), sized by the largest INT8 GEMM
// (fc1 at batch 1: 256 x 3072 x 4 splits x 4 bytes + the counters) and capped at batch 8; shown in the text and
// JSON memory report; none in an fp16 plan or on the CPU; the same bytes on every run.
TEST(Int8Plan, CudaPlansReserveTheSplitKWorkspaceApartFromActivations) {
  auto spec = load_model_spec(testutil::source_path("config/models/vit-base-patch16-224.yaml"));
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  auto orin = find_device_profile("orin-nx-16gb", {testutil::source_path("config/devices")});
  auto cpu = find_device_profile("host-cpu", {testutil::source_path("config/devices")});
  ASSERT_TRUE(orin.ok() && cpu.ok());
  PlanOptions o;
  o.batch = 1;
  auto fp16 = make_plan(*spec, *orin, o);
  o.precision = Precision::kInt8;
  auto i8 = make_plan(*spec, *orin, o);
  auto i8_again = make_plan(*spec, *orin, o);
  auto i8_cpu = make_plan(*spec, *cpu, o);
  o.batch = 8;
  auto i8_b8 = make_plan(*spec, *orin, o);
  ASSERT_TRUE(fp16.ok() && i8.ok() && i8_again.ok() && i8_cpu.ok() && i8_b8.ok());
  EXPECT_EQ(fp16->int8_split_workspace_bytes, 0);
  EXPECT_EQ(i8_cpu->int8_split_workspace_bytes, 0);
  EXPECT_EQ(i8->int8_split_workspace_bytes, kCudaI8SplitCounterBytes + int64_t{256} * 3072 * 16);
  EXPECT_EQ(i8_b8->int8_split_workspace_bytes, kCudaI8SplitCounterBytes + kCudaI8SplitPartialsMaxBytes);
  EXPECT_EQ(i8->hash, i8_again->hash);
  for (const auto* p : {&*i8, &*i8_b8}) {
    const int64_t ws_begin = p->arena_bytes - kCudaLtWorkspaceBytes - p->int8_split_workspace_bytes;
    EXPECT_EQ(ws_begin % kArenaAlignment, 0);
    EXPECT_EQ(ws_begin, p->weights_bytes + p->io_bytes + p->activations_bytes);
    EXPECT_GE(p->workspace_bytes, p->int8_split_workspace_bytes + kCudaLtWorkspaceBytes);
    for (const TensorDesc& t : p->graph.tensors)
      EXPECT_LE(p->offsets[static_cast<size_t>(t.id)] + t.bytes(), ws_begin) << t.name;
    const auto j = nlohmann::json::parse(format_plan_json(*p));
    EXPECT_EQ(j["int8_split_workspace_bytes"].get<int64_t>(), p->int8_split_workspace_bytes);
    EXPECT_NE(j["memory"][0]["name"].get<std::string>().find("INT8 split-K"), std::string::npos);
    EXPECT_NE(format_plan_text(*p, false).find("of which INT8 split-K"), std::string::npos);
  }
  EXPECT_EQ(format_plan_text(*fp16, false).find("INT8 split-K"), std::string::npos);
}

}  // namespace
}  // namespace edgevit
