// The INT8 bias correction (docs/int8.md, `edgevit calibrate --bias-correction`): the corrected bias takes the
// weights' mean rounding error out exactly, the arena holds the corrected biases (and unchanged int8 weights), a
// CUDA plan gets the same bytes, calibration with it is deterministic and without it writes a plain scale file
// (no means, no metadata for them), hostile mean files are refused naming the file, the tensor and the reason.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>

#include "base/tolerances.h"
#include "kernels/cpu/gemm_i8_ref.h"
#include "kernels/cpu/quantize_i8_ref.h"
#include "platform/device_registry.h"
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
using digits::Split;
using int8fix::expect_refused;

std::string tmp_path(const std::string& leaf) { return testutil::temp_dir() + "edgevit_int8_bias_" + leaf; }

// Over rows x with a per-channel mean far from 0, the dequantized int8 GEMM with the corrected bias has a mean
// output error (over the rows) at fp32 rounding level, where the uncorrected one's is the weights' rounding error
// times the mean: the correction takes out exactly the systematic part.
TEST(Int8BiasCorrection, CorrectedBiasTakesOutTheMeanRoundingError) {
  const int64_t n = 48, k = 96, m = 64;
  const std::vector<float> w = testutil::random_floats(static_cast<size_t>(n * k), 3, -0.05f, 0.05f);
  const std::vector<float> bias = testutil::random_floats(static_cast<size_t>(n), 4, -0.1f, 0.1f);
  std::vector<float> x = testutil::random_floats(static_cast<size_t>(m * k), 5, -1.f, 1.f);
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < k; ++c) x[static_cast<size_t>(r * k + c)] += 0.5f + 0.01f * static_cast<float>(c);
  std::vector<int8_t> q(w.size());
  std::vector<float> sw(static_cast<size_t>(n)), mean(static_cast<size_t>(k), 0.f), corrected(bias.size());
  quantize_rows_i8_ref(w.data(), n, k, 0.f, q.data(), sw.data());
  for (int64_t c = 0; c < k; ++c) {
    double s = 0;
    for (int64_t r = 0; r < m; ++r) s += x[static_cast<size_t>(r * k + c)];
    mean[static_cast<size_t>(c)] = static_cast<float>(s / m);
  }
  int8_correct_bias(n, k, w.data(), q.data(), sw.data(), mean.data(), bias.data(), corrected.data());
  double before = 0, after = 0, signal = 0;
  for (int64_t j = 0; j < n; ++j) {
    double err_plain = 0, err_corr = 0, y_mean = 0;
    for (int64_t r = 0; r < m; ++r) {
      double exact = bias[static_cast<size_t>(j)], quant = 0;
      for (int64_t c = 0; c < k; ++c) {
        const double xv = x[static_cast<size_t>(r * k + c)];
        exact += static_cast<double>(w[static_cast<size_t>(j * k + c)]) * xv;
        quant += static_cast<double>(q[static_cast<size_t>(j * k + c)]) * sw[static_cast<size_t>(j)] * xv;
      }
      err_plain += quant + bias[static_cast<size_t>(j)] - exact;
      err_corr += quant + corrected[static_cast<size_t>(j)] - exact;
      y_mean += exact;
    }
    before += (err_plain / m) * (err_plain / m);
    after += (err_corr / m) * (err_corr / m);
    signal += (y_mean / m) * (y_mean / m);
  }
  EXPECT_GT(std::sqrt(before / signal), 1e-4);  // the weights' rounding, systematic over rows with this mean
  EXPECT_LE(std::sqrt(after / signal), tol::kFp32Reordered);
}

Int8Scales corrected_scales(const VitArch& a, float value) {
  Int8Scales s = int8fix::uniform_scales(a);
  for (const std::string& g : int8_bias_corrected_gemms(a))
    s.input_means[g + ".input_mean"] = std::vector<float>(static_cast<size_t>(int8_gemm_input_width(a, g)), value);
  return s;
}

// The arena of an INT8 engine reading a file with means: every block GEMM's bias is the checkpoint's bias with
// int8_correct_bias applied (fc2's then with the GELU shift folded in), bit for bit, and the int8 weights are
// those of the uncorrected model.
TEST(Int8BiasCorrection, ArenaHoldsTheCorrectedBiases) {
  ModelSpec spec = digits_spec();
  spec.precision = Precision::kInt8;
  Int8Scales s = corrected_scales(spec.arch, 0.f);
  uint32_t seed = 40;
  for (auto& kv : s.input_means) kv.second = testutil::random_floats(kv.second.size(), seed++, -0.5f, 1.5f);
  spec.int8_scales_path = tmp_path("arena.safetensors");
  ASSERT_TRUE(write_int8_scales(spec.int8_scales_path, s).ok());
  auto e = engine(spec, Precision::kInt8);
  ASSERT_TRUE(e);
  auto w = WeightSource::open(spec.weights_path, spec.weights_naming);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  auto data = [&](const std::string& name) { return int8fix::arena_data(*e, name); };
  for (const std::string& gemm : int8_bias_corrected_gemms(spec.arch)) {
    const int64_t k = int8_gemm_input_width(spec.arch, gemm);
    const int64_t n = gemm.find(".attn.qkv") != std::string::npos ? 3 * spec.arch.embed_dim
                      : gemm.find(".mlp.fc1") != std::string::npos ? spec.arch.mlp_hidden()
                                                                    : spec.arch.embed_dim;
    std::vector<float> wf(static_cast<size_t>(n * k)), sw(static_cast<size_t>(n)), bias(static_cast<size_t>(n));
    ASSERT_TRUE(w->read_f32(gemm + ".weight", wf.data(), wf.size()).ok());
    ASSERT_TRUE(w->read_f32(gemm + ".bias", bias.data(), bias.size()).ok());
    std::vector<int8_t> q(wf.size());
    quantize_rows_i8_ref(wf.data(), n, k, 0.f, q.data(), sw.data());
    EXPECT_EQ(std::memcmp(data(gemm + ".weight"), q.data(), q.size()), 0) << gemm;
    const std::vector<float>& mean = s.input_means.at(gemm + ".input_mean");
    std::vector<float> want(bias.size());
    int8_correct_bias(n, k, wf.data(), q.data(), sw.data(), mean.data(), bias.data(), want.data());
    if (gemm.find(".mlp.fc2") != std::string::npos)
      gemm_i8_fold_shift_into_bias(n, k, q.data(), sw.data(), want.data(), kGemmI8GeluShift, want.data());
    EXPECT_NE(want, bias) << gemm;  // the correction moved it
    EXPECT_EQ(std::memcmp(data(gemm + ".bias"), want.data(), want.size() * sizeof(float)), 0) << gemm;
  }
}

// A CUDA INT8 plan (made here on the CPU, for an Orin profile; nothing runs) gets the same corrected fp32
// biases, byte for byte, as the CPU engine's arena: one value both backends read.
TEST(Int8BiasCorrection, CudaPlansGetTheCpuEnginesCorrectedBiases) {
  ModelSpec spec = digits_spec();
  spec.precision = Precision::kInt8;
  Int8Scales s = corrected_scales(spec.arch, 0.f);
  uint32_t seed = 60;
  for (auto& kv : s.input_means) kv.second = testutil::random_floats(kv.second.size(), seed++, -0.5f, 1.5f);
  spec.int8_scales_path = tmp_path("cuda_plan.safetensors");
  ASSERT_TRUE(write_int8_scales(spec.int8_scales_path, s).ok());
  int8fix::PlannedWeights planned;
  ASSERT_NO_FATAL_FAILURE(int8fix::plan_orin_int8(spec, &planned));
  auto e = engine(spec, Precision::kInt8);
  ASSERT_TRUE(e);
  int biases = 0;
  for (const std::string& gemm : int8_bias_corrected_gemms(spec.arch)) {
    const std::string cuda_bytes = planned.of(gemm + ".bias");
    ASSERT_FALSE(cuda_bytes.empty()) << gemm;
    for (const TensorDesc& t : e->plan().graph.tensors) {
      if (t.name != gemm + ".bias") continue;
      ++biases;
      EXPECT_EQ(cuda_bytes, std::string(static_cast<const char*>(e->tensor_data(t.id)), static_cast<size_t>(t.bytes())))
          << gemm;
    }
  }
  EXPECT_EQ(biases, 4 * spec.arch.depth);
}

TEST(Int8BiasCorrection, CalibrationIsDeterministicAndWithoutItUnchanged) {
  const ModelSpec spec = digits_spec();
  const Split calib = load_split("calib_split.safetensors");
  // 64 of the 256 images: enough for determinism, and the emulated CI stage runs this test too.
  const int n = std::min(calib.n, 64);
  CalibOptions o;
  o.bias_correction = true;
  o.threads = 2;
  auto a = calibrate_int8(spec, host(), calib.input.data(), n, o);
  o.threads = 1;
  auto b = calibrate_int8(spec, host(), calib.input.data(), n, o);
  ASSERT_TRUE(a.ok() && b.ok()) << a.status().to_string();
  ASSERT_TRUE(write_int8_scales(tmp_path("det_a.safetensors"), *a).ok());
  ASSERT_TRUE(write_int8_scales(tmp_path("det_b.safetensors"), *b).ok());
  EXPECT_EQ(file_bytes(tmp_path("det_a.safetensors")), file_bytes(tmp_path("det_b.safetensors")));
  ASSERT_EQ(a->input_means.size(), 4u * spec.arch.depth);
  for (const auto& kv : a->input_means) {
    if (kv.first.find(".mlp.fc2.") == std::string::npos) continue;
    for (float v : kv.second) EXPECT_GT(v, -kGemmI8GeluShift) << kv.first;  // a mean of GELU outputs (>= -0.16997)
  }
  auto loaded = load_int8_scales(tmp_path("det_a.safetensors"), spec.arch);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  EXPECT_EQ(loaded->input_means, a->input_means);
  // The means do not change the scales; without the flag the file has no mean and no metadata for it.
  o.bias_correction = false;
  auto c = calibrate_int8(spec, host(), calib.input.data(), n, o);
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->input_means.empty());
  EXPECT_EQ(c->input_scales, a->input_scales);
  ASSERT_TRUE(write_int8_scales(tmp_path("plain.safetensors"), *c).ok());
  auto f = SafetensorsFile::open(tmp_path("plain.safetensors"));
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->metadata().count("bias_correction"), 0u);
  EXPECT_EQ(f->tensors().size(), 4u * spec.arch.depth);
}

// ---- hostile mean files ------------------------------------------------------------------------------------

// A scale file written by hand with one F16 mean (a dtype write_int8_scales cannot make).
void write_with_f16_mean(const std::string& path, const VitArch& a, const std::string& f16_name) {
  const nlohmann::json md = {{"format", kInt8ScalesFormat}, {"gelu_shift", kInt8ScalesGeluShift},
                             {"bias_correction", kInt8BiasCorrectionMean}};
  std::vector<int8fix::RawTensor> t = int8fix::uniform_raw_scales(a);
  for (const std::string& g : int8_bias_corrected_gemms(a)) {
    const int64_t k = int8_gemm_input_width(a, g);
    const bool f16 = g + ".input_mean" == f16_name;
    t.push_back({g + ".input_mean", f16 ? "F16" : "F32", {k}, std::string(static_cast<size_t>((f16 ? 2 : 4) * k), '\0')});
  }
  int8fix::write_raw_scale_file(path, md, t);
}

TEST(Int8BiasCorrection, HostileMeanFilesAreRefusedNamingFileTensorAndReason) {
  const VitArch a = digits_spec().arch;
  const std::string t = "blocks.2.mlp.fc2.input_mean";
  struct Case {
    const char* leaf;
    std::function<void(Int8Scales*)> edit;
    std::string tensor, want;
  };
  const std::vector<Case> cases = {
      {"m_nan", [&](Int8Scales* s) { s->input_means[t][7] = std::nanf(""); }, t, "channel 7: NaN"},
      {"m_inf", [&](Int8Scales* s) { s->input_means[t][0] = -std::numeric_limits<float>::infinity(); }, t, "channel 0: Inf"},
      {"m_missing", [&](Int8Scales* s) { s->input_means.erase(t); }, t, "missing"},
      {"m_short", [&](Int8Scales* s) { s->input_means[t].pop_back(); }, t, "shape [255], expected [256]"},
      {"m_wide", [&](Int8Scales* s) { s->input_means["blocks.1.attn.qkv.input_mean"].push_back(0.f); },
       "blocks.1.attn.qkv.input_mean", "shape [65], expected [64]"},
      {"m_extra", [&](Int8Scales* s) { s->input_means["blocks.4.attn.proj.input_mean"] = {1.f}; },
       "blocks.4.attn.proj.input_mean", "not a scale of this model"},
  };
  for (const Case& c : cases) {
    Int8Scales s = corrected_scales(a, 0.25f);
    c.edit(&s);
    const std::string path = tmp_path(std::string(c.leaf) + ".safetensors");
    ASSERT_TRUE(write_int8_scales(path, s).ok());
    expect_refused(load_int8_scales(path, a).status(), c.leaf, c.tensor, c.want);
  }
  // Zero and negative means are values like any other: the file loads.
  Int8Scales signed_means = corrected_scales(a, -0.25f);
  signed_means.input_means[t][3] = 0.f;
  ASSERT_TRUE(write_int8_scales(tmp_path("m_signed.safetensors"), signed_means).ok());
  auto ok = load_int8_scales(tmp_path("m_signed.safetensors"), a);
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ(ok->input_means, signed_means.input_means);
  // One mean in F16, every other one valid F32.
  write_with_f16_mean(tmp_path("m_dtype.safetensors"), a, t);
  expect_refused(load_int8_scales(tmp_path("m_dtype.safetensors"), a).status(), "m_dtype", t, "dtype F16, expected F32");
}

// write_int8_scales writes the means and their metadata together; these files are its output with one metadata
// entry rewritten in place (same length, so the offsets hold).
std::string scale_file_text(const Int8Scales& s, const std::string& path) {
  EXPECT_TRUE(write_int8_scales(path, s).ok());
  const std::vector<uint8_t> b = file_bytes(path);
  return std::string(b.begin(), b.end());
}
void rewrite(const std::string& path, std::string text, const std::string& from, const std::string& to) {
  ASSERT_EQ(from.size(), to.size());
  const size_t at = text.find(from);
  ASSERT_NE(at, std::string::npos) << from;
  text.replace(at, from.size(), to);
  std::ofstream(path, std::ios::binary) << text;
}

TEST(Int8BiasCorrection, MetadataAndMeansComeTogether) {
  const VitArch a = digits_spec().arch;
  const std::string meta = "\"bias_correction\":\"input_mean\"";
  // Means without the metadata.
  const Int8Scales with = corrected_scales(a, 0.1f);
  const std::string p1 = tmp_path("m_nometa.safetensors");
  rewrite(p1, scale_file_text(with, p1), meta, "\"bias_kind______\":\"input_mean\"");
  expect_refused(load_int8_scales(p1, a).status(), "m_nometa", "blocks.0.attn.qkv.input_mean",
                 "without metadata 'bias_correction'");
  // The metadata with an unknown value.
  const std::string p2 = tmp_path("m_unknown.safetensors");
  rewrite(p2, scale_file_text(with, p2), meta, "\"bias_correction\":\"input_max_\"");
  expect_refused(load_int8_scales(p2, a).status(), "m_unknown", "'input_max_'", "metadata 'bias_correction'");
  // The metadata without any mean: a plain file whose `method` entry (padded to the same length) becomes it.
  Int8Scales plain = corrected_scales(a, 0.1f);
  plain.input_means.clear();
  plain.method = "abcdefghijklmnopqrs";
  const std::string p3 = tmp_path("m_nomean.safetensors");
  rewrite(p3, scale_file_text(plain, p3), "\"method\":\"abcdefghijklmnopqrs\"", meta);
  expect_refused(load_int8_scales(p3, a).status(), "m_nomean", "blocks.0.attn.qkv.input_mean", "missing");
}

TEST(Int8BiasCorrection, AnEngineRefusesAHostileMeanFile) {
  ModelSpec spec = digits_spec();
  Int8Scales s = corrected_scales(spec.arch, 0.1f);
  s.input_means["blocks.3.mlp.fc1.input_mean"][5] = std::nanf("");
  int8fix::expect_engine_refuses(spec, s, tmp_path("engine_nan.safetensors"),
                                 "blocks.3.mlp.fc1.input_mean': channel 5: NaN");
}

}  // namespace
}  // namespace edgevit
