// The RepQ-ViT LayerNorm fold of INT8 (docs/int8.md, `edgevit calibrate --ln-fold`): the fold is exact in fp32,
// the arena holds the folded LayerNorms and the weights quantized after the fold, calibration with the fold is
// deterministic, hostile factor files are refused. vit-digits INT8 with the fold against fp32 on the test split
// (issue #25's acceptance) is int8_digits_slow_test.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>

#include "base/tolerances.h"
#include "kernels/cpu/quantize_i8_ref.h"
#include "platform/device_registry.h"
#include "runtime/config.h"
#include "runtime/engine.h"
#include "runtime/int8_calibrate.h"
#include "runtime/int8_scales.h"
#include "runtime/plan.h"
#include "runtime/safetensors.h"
#include "runtime/weights.h"
#include "tests/runtime/digits_data.h"
#include "tests/runtime/int8_fixtures.h"
#include "tests/testutil/testutil.h"

namespace edgevit {
namespace {

using digits::digits_spec;
using digits::engine;
using digits::file_bytes;
using digits::host;
using digits::load_split;
using digits::logits;
using digits::read;
using digits::Split;
using int8fix::expect_refused;

std::string tmp_path(const std::string& leaf) { return testutil::temp_dir() + "edgevit_int8_fold_" + leaf; }

// Factors far from 1 (1/8 .. 8, log-uniform, fixed seed): a fold that is not exact shows.
std::map<std::string, std::vector<float>> wide_factors(const VitArch& a) {
  std::map<std::string, std::vector<float>> f;
  uint32_t seed = 25;
  for (const std::string& norm : int8_fold_norm_names(a)) {
    const std::vector<float> u = testutil::random_floats(static_cast<size_t>(a.embed_dim), seed++, -3.f, 3.f);
    std::vector<float>& r = f[norm + ".channel_factor"];
    for (float x : u) r.push_back(std::exp2(x));
  }
  return f;
}

// The fold is a reparametrization: the fp32 model with folded LayerNorms and qkv/fc1 weights (the loader's
// int8_fold_ln_factors, applied to a checkpoint) gives the unfolded model's logits within a few fp32 ulps per
// op (tol::kFp32Reordered), with factors from 1/8 to 8.
TEST(Int8LnFold, FoldIsExactInFp32) {
  const ModelSpec spec = digits_spec();
  auto ckpt = SafetensorsFile::open(spec.weights_path);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
  std::map<std::string, std::vector<float>> t;
  std::map<std::string, std::vector<int64_t>> shape;
  for (const TensorInfo& i : ckpt->tensors()) {
    t[i.name] = read(*ckpt, i.name);
    shape[i.name] = i.shape;
  }
  const int64_t e = spec.arch.embed_dim;
  for (const auto& kv : wide_factors(spec.arch)) {
    const std::string norm = kv.first.substr(0, kv.first.rfind('.'));
    const std::string gemm = int8_fold_gemm_of(norm) + ".weight";
    ASSERT_TRUE(t.count(norm + ".weight") && t.count(norm + ".bias") && t.count(gemm)) << norm;
    std::vector<float>& w = t[gemm];
    int8_fold_ln_factors(kv.second.data(), e, t[norm + ".weight"].data(), t[norm + ".bias"].data(), w.data(),
                         static_cast<int64_t>(w.size()) / e);
  }
  std::vector<NamedTensorView> views;
  for (const auto& kv : t) views.push_back(NamedTensorView{kv.first, shape[kv.first], kv.second.data()});
  ModelSpec folded = spec;
  folded.weights_path = tmp_path("folded_digits.safetensors");
  ASSERT_TRUE(write_safetensors(folded.weights_path, views).ok());

  const Split test = load_split("test_split.safetensors");
  auto a = engine(spec, Precision::kFp32);
  auto b = engine(folded, Precision::kFp32);
  ASSERT_TRUE(a && b);
  const std::vector<float> la = logits(*a, test, 10), lb = logits(*b, test, 10);
  ASSERT_EQ(la.size(), lb.size());
  const double err = testutil::rel_error(lb.data(), la.data(), la.size());
  std::printf("fp32 logits, folded (factors 1/8..8) vs unfolded, 360 images: %.3e\n", err);
  EXPECT_LE(err, tol::kFp32Reordered);
  EXPECT_GT(testutil::max_abs_error(t["blocks.0.norm1.weight"].data(), read(*ckpt, "blocks.0.norm1.weight").data(),
                                    static_cast<size_t>(e)), 1e-2);  // the checkpoint did change
}

// The INT8 engine's arena: each folded LayerNorm's gamma and beta are the checkpoint's divided by r_c, and qkv's
// and fc1's int8 weights and scales are the per-row quantization of W with column c times r_c.
TEST(Int8LnFold, ArenaHoldsTheFoldedLayerNormsAndWeightsQuantizedAfterTheFold) {
  ModelSpec spec = digits_spec();
  spec.precision = Precision::kInt8;
  spec.int8_activations = Int8Activations::kPerTensor;
  Int8Scales s = int8fix::uniform_scales(spec.arch);
  s.channel_factors = wide_factors(spec.arch);
  spec.int8_scales_path = tmp_path("arena.safetensors");
  ASSERT_TRUE(write_int8_scales(spec.int8_scales_path, s).ok());
  auto e = engine(spec, Precision::kInt8);
  ASSERT_TRUE(e);
  auto w = WeightSource::open(spec.weights_path, spec.weights_naming);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  auto data = [&](const std::string& name) { return int8fix::arena_data(*e, name); };
  const int64_t k = spec.arch.embed_dim;
  for (const auto& kv : s.channel_factors) {
    const std::string norm = kv.first.substr(0, kv.first.rfind('.'));
    const std::vector<float>& r = kv.second;
    for (const char* leaf : {".weight", ".bias"}) {
      std::vector<float> want(static_cast<size_t>(k));
      ASSERT_TRUE(w->read_f32(norm + leaf, want.data(), want.size()).ok());
      const float* got = static_cast<const float*>(data(norm + leaf));
      for (int64_t c = 0; c < k; ++c) ASSERT_EQ(got[c], want[c] / r[c]) << norm << leaf << " channel " << c;
    }
    const std::string gemm = int8_fold_gemm_of(norm);
    const int64_t n = gemm.find(".attn.qkv") != std::string::npos ? 3 * k : spec.arch.mlp_hidden();
    std::vector<float> wf(static_cast<size_t>(n * k)), sw(static_cast<size_t>(n));
    ASSERT_TRUE(w->read_f32(gemm + ".weight", wf.data(), wf.size()).ok());
    for (int64_t j = 0; j < n; ++j)
      for (int64_t c = 0; c < k; ++c) wf[static_cast<size_t>(j * k + c)] *= r[static_cast<size_t>(c)];
    std::vector<int8_t> wq(wf.size());
    quantize_rows_i8_ref(wf.data(), n, k, 0.f, wq.data(), sw.data());
    EXPECT_EQ(std::memcmp(data(gemm + ".weight"), wq.data(), wq.size()), 0) << gemm;
    EXPECT_EQ(std::memcmp(data(gemm + ".weight_scale"), sw.data(), sw.size() * sizeof(float)), 0) << gemm;
  }
  // proj and fc2 are not folded: their weights are the checkpoint's, quantized as without the fold.
  const int64_t n = k;
  std::vector<float> wf(static_cast<size_t>(n * k)), sw(static_cast<size_t>(n));
  ASSERT_TRUE(w->read_f32("blocks.0.attn.proj.weight", wf.data(), wf.size()).ok());
  std::vector<int8_t> wq(wf.size());
  quantize_rows_i8_ref(wf.data(), n, k, 0.f, wq.data(), sw.data());
  EXPECT_EQ(std::memcmp(data("blocks.0.attn.proj.weight"), wq.data(), wq.size()), 0);
}

// A CUDA INT8 plan (made here on the CPU, for an Orin profile; nothing runs): its fp16 LayerNorm weights are
// rounded from the folded fp32 values, and its GEMMs get the same folded int8 weights as the CPU's.
TEST(Int8LnFold, CudaPlansGetFp16LayerNormsRoundedFromTheFoldedValues) {
  ModelSpec spec = digits_spec();
  spec.precision = Precision::kInt8;
  Int8Scales s = int8fix::uniform_scales(spec.arch);
  s.channel_factors = wide_factors(spec.arch);
  spec.int8_scales_path = tmp_path("cuda_plan.safetensors");
  ASSERT_TRUE(write_int8_scales(spec.int8_scales_path, s).ok());
  int8fix::PlannedWeights planned;
  ASSERT_NO_FATAL_FAILURE(int8fix::plan_orin_int8(spec, &planned));
  auto w = WeightSource::open(spec.weights_path, spec.weights_naming);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  const int64_t k = spec.arch.embed_dim;
  for (const auto& kv : s.channel_factors) {
    const std::string norm = kv.first.substr(0, kv.first.rfind('.'));
    for (const char* leaf : {".weight", ".bias"}) {
      std::vector<float> v(static_cast<size_t>(k));
      ASSERT_TRUE(w->read_f32(norm + leaf, v.data(), v.size()).ok());
      std::vector<uint16_t> want(v.size());
      for (size_t c = 0; c < v.size(); ++c) want[c] = f32_to_f16(v[c] / kv.second[c]);
      ASSERT_EQ(planned.of(norm + leaf), std::string(reinterpret_cast<const char*>(want.data()), want.size() * 2))
          << norm << leaf << ": not fp16 of the folded fp32 values";
    }
  }
  // The int8 weights are the backend-independent part: qkv's equal the CPU engine's.
  ModelSpec cpu_spec = spec;
  auto e = engine(cpu_spec, Precision::kInt8);
  ASSERT_TRUE(e);
  for (const TensorDesc& t : e->plan().graph.tensors) {
    if (t.name != "blocks.1.attn.qkv.weight") continue;
    EXPECT_EQ(planned.of(t.name), std::string(static_cast<const char*>(e->tensor_data(t.id)), static_cast<size_t>(t.bytes())));
  }
}

TEST(Int8LnFold, CalibrationWithTheFoldIsDeterministicAndWithoutItUnchanged) {
  const ModelSpec spec = digits_spec();
  const Split calib = load_split("calib_split.safetensors");
  // 64 of the 256 images: enough for determinism, and the emulated CI stage runs this test too.
  const int n = std::min(calib.n, 64);
  for (CalibMethod m : {CalibMethod::kMinmax, CalibMethod::kMse}) {
    CalibOptions o;
    o.method = m;
    o.ln_fold = true;
    o.bias_correction = false;  // the fold's tensors alone (the means: int8_bias_test)
    o.threads = 2;
    auto a = calibrate_int8(spec, host(), calib.input.data(), n, o);
    o.threads = 1;
    auto b = calibrate_int8(spec, host(), calib.input.data(), n, o);
    ASSERT_TRUE(a.ok() && b.ok()) << a.status().to_string();
    ASSERT_TRUE(write_int8_scales(tmp_path("det_a.safetensors"), *a).ok());
    ASSERT_TRUE(write_int8_scales(tmp_path("det_b.safetensors"), *b).ok());
    EXPECT_EQ(file_bytes(tmp_path("det_a.safetensors")), file_bytes(tmp_path("det_b.safetensors"))) << to_string(m);
    ASSERT_EQ(a->channel_factors.size(), 2u * spec.arch.depth);
    for (const auto& kv : a->channel_factors) {
      ASSERT_EQ(kv.second.size(), static_cast<size_t>(spec.arch.embed_dim)) << kv.first;
      double mean = 0;
      for (float r : kv.second) {
        EXPECT_GE(r, kLnFoldMinFactor) << kv.first;
        EXPECT_LE(r, kLnFoldMaxFactor) << kv.first;
        mean += r;
      }
      EXPECT_NEAR(mean / kv.second.size(), 1.0, 1e-5) << kv.first;  // range_c / mean range: no clamp hit here
    }
    auto loaded = load_int8_scales(tmp_path("det_a.safetensors"), spec.arch);
    ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
    EXPECT_EQ(loaded->channel_factors, a->channel_factors);
    // Without the fold: no factor, no `ln_fold` metadata (the file of the version before the fold).
    o.ln_fold = false;
    auto c = calibrate_int8(spec, host(), calib.input.data(), n, o);
    ASSERT_TRUE(c.ok());
    EXPECT_TRUE(c->channel_factors.empty());
    ASSERT_TRUE(write_int8_scales(tmp_path("nofold.safetensors"), *c).ok());
    auto f = SafetensorsFile::open(tmp_path("nofold.safetensors"));
    ASSERT_TRUE(f.ok());
    EXPECT_EQ(f->metadata().count("ln_fold"), 0u);
    EXPECT_EQ(f->tensors().size(), 4u * spec.arch.depth);
    // The fold changes qkv's and fc1's input scales (they describe y / r), not proj's or fc2's.
    EXPECT_NE(c->input_scales.at("blocks.1.attn.qkv.input_scale"), a->input_scales.at("blocks.1.attn.qkv.input_scale"));
    EXPECT_EQ(c->input_scales.at("blocks.1.attn.proj.input_scale"), a->input_scales.at("blocks.1.attn.proj.input_scale"));
  }
}

// ---- hostile factor files ----------------------------------------------------------------------------------

Int8Scales folded_scales(const VitArch& a) {
  Int8Scales s = int8fix::uniform_scales(a);
  for (const std::string& n : int8_fold_norm_names(a))
    s.channel_factors[n + ".channel_factor"] = std::vector<float>(static_cast<size_t>(a.embed_dim), 1.5f);
  return s;
}

using int8fix::RawTensor;
// A scale file written by hand (dtypes write_int8_scales cannot make): every input scale 0.05 (F32 [1]),
// then `extra`, with `metadata`.
void write_raw(const std::string& path, const VitArch& a, const std::map<std::string, std::string>& metadata,
               const std::vector<RawTensor>& extra) {
  std::vector<RawTensor> all = int8fix::uniform_raw_scales(a);
  all.insert(all.end(), extra.begin(), extra.end());
  int8fix::write_raw_scale_file(path, nlohmann::json(metadata), all);
}

TEST(Int8LnFold, HostileFactorFilesAreRefusedNamingFileTensorAndReason) {
  const VitArch a = digits_spec().arch;
  const std::string t = "blocks.2.norm2.channel_factor";
  struct Case {
    const char* leaf;
    std::function<void(Int8Scales*)> edit;
    std::string want;
  };
  const std::vector<Case> cases = {
      {"f_nan", [&](Int8Scales* s) { s->channel_factors[t][7] = std::nanf(""); }, "channel 7: NaN"},
      {"f_inf", [&](Int8Scales* s) { s->channel_factors[t][0] = std::numeric_limits<float>::infinity(); }, "channel 0: Inf"},
      {"f_zero", [&](Int8Scales* s) { s->channel_factors[t][63] = 0.f; }, "channel 63: zero"},
      {"f_negative", [&](Int8Scales* s) { s->channel_factors[t][1] = -2.f; }, "channel 1: negative"},
      {"f_subnormal", [&](Int8Scales* s) { s->channel_factors[t][2] = 1e-40f; }, "channel 2: subnormal"},
      {"f_missing", [&](Int8Scales* s) { s->channel_factors.erase(t); }, "missing"},
      {"f_short", [&](Int8Scales* s) { s->channel_factors[t].pop_back(); }, "shape [63], expected [64]"},
      {"f_extra", [&](Int8Scales* s) { s->channel_factors["blocks.4.norm1.channel_factor"] = {1.f}; },
       "not a scale of this model"},
  };
  for (const Case& c : cases) {
    Int8Scales s = folded_scales(a);
    c.edit(&s);
    const std::string path = tmp_path(std::string(c.leaf) + ".safetensors");
    ASSERT_TRUE(write_int8_scales(path, s).ok());
    expect_refused(load_int8_scales(path, a).status(), c.leaf, c.leaf == std::string("f_extra") ? "blocks.4.norm1" : t,
                   c.want);
  }
  const std::map<std::string, std::string> md{{"format", kInt8ScalesFormat}, {"gelu_shift", kInt8ScalesGeluShift}};
  std::map<std::string, std::string> fold_md = md;
  fold_md["ln_fold"] = kInt8LnFoldRepq;
  const std::vector<float> r(64, 1.f);
  const std::string rb(reinterpret_cast<const char*>(r.data()), r.size() * 4);
  // A factor without the metadata: refused (a fold the file does not declare).
  write_raw(tmp_path("f_nometa.safetensors"), a, md, {{t, "F32", {64}, rb}});
  expect_refused(load_int8_scales(tmp_path("f_nometa.safetensors"), a).status(), "f_nometa", t, "without metadata 'ln_fold'");
  // The metadata without any factor: the first one is named missing.
  write_raw(tmp_path("f_nofactor.safetensors"), a, fold_md, {});
  expect_refused(load_int8_scales(tmp_path("f_nofactor.safetensors"), a).status(), "f_nofactor",
                 "blocks.0.norm1.channel_factor", "missing");
  // An unknown fold.
  std::map<std::string, std::string> other = md;
  other["ln_fold"] = "smoothquant";
  write_raw(tmp_path("f_unknown.safetensors"), a, other, {});
  expect_refused(load_int8_scales(tmp_path("f_unknown.safetensors"), a).status(), "f_unknown", "'smoothquant'",
                 "metadata 'ln_fold'");
  // One factor in F16, every other one valid F32 (the same file with F32 there loads).
  for (const char* dtype : {"F32", "F16"}) {
    std::vector<RawTensor> factors;
    for (const std::string& n : int8_fold_norm_names(a)) {
      const bool f16 = n + ".channel_factor" == t && dtype == std::string("F16");
      factors.push_back({n + ".channel_factor", f16 ? "F16" : "F32", {64}, f16 ? std::string(128, '\x3c') : rb});
    }
    write_raw(tmp_path("f_dtype.safetensors"), a, fold_md, factors);
    if (dtype == std::string("F32")) {
      auto ok = load_int8_scales(tmp_path("f_dtype.safetensors"), a);
      ASSERT_TRUE(ok.ok()) << ok.status().to_string();
      EXPECT_EQ(ok->channel_factors.size(), 8u);
    }
  }
  expect_refused(load_int8_scales(tmp_path("f_dtype.safetensors"), a).status(), "f_dtype", t, "dtype F16, expected F32");
}

TEST(Int8LnFold, AnEngineRefusesAHostileFactorFile) {
  ModelSpec spec = digits_spec();
  Int8Scales s = folded_scales(spec.arch);
  s.channel_factors["blocks.3.norm1.channel_factor"][5] = -1.f;
  int8fix::expect_engine_refuses(spec, s, tmp_path("engine_negative.safetensors"),
                                 "blocks.3.norm1.channel_factor': channel 5: negative");
}

}  // namespace
}  // namespace edgevit
