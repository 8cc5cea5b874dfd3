// Issue #25's accuracy acceptance on real data, on the CPU: vit-digits INT8 calibrated on the calibration split
// against fp32 on the 360 test images (at most 2 more errors, top-1 agreement >= 99%), for every calibration
// method and activation mode, with and without the LayerNorm fold, with the bias correction; and fc2's unsigned input accuracy. A few
// seconds natively; minutes under emulation (the CPU INT8 path is single-threaded plain loops), hence the slow
// label: CI runs it natively in the slow stage (tools/test.sh), not under qemu or ASan.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "base/tolerances.h"
#include "runtime/int8_calibrate.h"
#include "runtime/int8_scales.h"
#include "tests/runtime/digits_data.h"
#include "tests/testutil/testutil.h"

namespace edgevit {
namespace {

using digits::digits_spec;
using digits::engine;
using digits::host;
using digits::load_split;
using digits::logits;
using digits::Split;

std::string tmp_path(const std::string& leaf) { return testutil::temp_dir() + "edgevit_int8_digits_" + leaf; }

// fp32's logits, top-1 and errors against the labels on the test split: the acceptance's reference.
struct Fp32Ref {
  std::vector<float> logits;
  std::vector<int> top1;
  int errors = 0;
};
void fp32_reference(const ModelSpec& fp32, const Split& test, Fp32Ref* ref) {
  auto e = engine(fp32, Precision::kFp32);
  ASSERT_TRUE(e);
  ref->logits = logits(*e, test, 10);
  ref->top1 = testutil::argmax_rows(ref->logits.data(), test.n, 10);
  for (int i = 0; i < test.n; ++i) ref->errors += ref->top1[static_cast<size_t>(i)] != static_cast<int>(test.labels[i]);
}

// An INT8 engine on `spec` (its scale file written) against fp32 on the test split: issue #25's acceptance (at
// most 2 more errors, top-1 agreement >= 99%) and the logits within tol::kInt8EndToEnd.
void expect_accepted(const ModelSpec& spec, const Split& test, const Fp32Ref& ref, const std::string& what) {
  auto e = engine(spec, Precision::kInt8);
  ASSERT_TRUE(e);
  const std::vector<float> lq = logits(*e, test, 10);
  const std::vector<int> q = testutil::argmax_rows(lq.data(), test.n, 10);
  int errors = 0, agree = 0;
  for (int i = 0; i < test.n; ++i) {
    errors += q[static_cast<size_t>(i)] != static_cast<int>(test.labels[i]);
    agree += q[static_cast<size_t>(i)] == ref.top1[static_cast<size_t>(i)];
  }
  const double err = testutil::rel_error(lq.data(), ref.logits.data(), ref.logits.size());
  std::printf("digits int8 %s: %d errors (fp32 %d), agreement %d/360, logits %.3e from fp32\n", what.c_str(), errors,
              ref.errors, agree, err);
  EXPECT_LE(errors, ref.errors + 2) << what;
  EXPECT_GE(agree, 357) << what;  // >= 99% of 360
  EXPECT_LE(err, tol::kInt8EndToEnd) << what;
}

// Top-1 of every test image at a precision.
std::vector<int> predict(const ModelSpec& spec, Precision p, const Split& test) {
  auto e = engine(spec, p);
  if (!e) return {};
  const std::vector<float> l = logits(*e, test, 10);
  return testutil::argmax_rows(l.data(), test.n, 10);
}

// fc2's unsigned input (GELU + 0.17 in uint8 codes), read back by compare as q * s - 0.17: every block's
// mlp.hidden against fp32 on the 360 test images, per tensor (percentile on the calibration split) and per
// token. Measured: worst 24.5 dB / 34.9 dB; the symmetric int8 scale this replaced gave 22.7 dB / 31.5 dB.
TEST(Int8Digits, UnsignedHiddenKeepsFc2sInputAccurate) {
  const ModelSpec fp32 = digits_spec();
  const Split calib = load_split("calib_split.safetensors"), test = load_split("test_split.safetensors");
  for (Int8Activations mode : {Int8Activations::kPerTensor, Int8Activations::kNormPerToken, Int8Activations::kPerToken}) {
    const bool per_token = mode == Int8Activations::kPerToken;
    ModelSpec spec = fp32;
    spec.precision = Precision::kInt8;
    spec.int8_activations = mode;
    if (!per_token) {
      auto scales = calibrate_int8(fp32, host(), calib.input.data(), calib.n, CalibOptions{});
      ASSERT_TRUE(scales.ok()) << scales.status().to_string();
      EXPECT_GT(scales->input_scales.at("blocks.0.mlp.fc2.input_scale"), 0.f);
      spec.int8_scales_path = tmp_path("digits_hidden.safetensors");
      ASSERT_TRUE(write_int8_scales(spec.int8_scales_path, *scales).ok());
    }
    auto layers = compare_layers(fp32, Precision::kFp32, spec, Precision::kInt8, host(), test.input.data(), test.n, 1);
    ASSERT_TRUE(layers.ok()) << layers.status().to_string();
    int hidden = 0;
    for (const LayerError& l : *layers) {
      if (l.tensor.find(".mlp.hidden") == std::string::npos) continue;
      ++hidden;
      EXPECT_GE(l.sqnr_db, per_token ? 34.0 : 24.0) << l.tensor << " " << to_string(mode);
    }
    EXPECT_EQ(hidden, fp32.arch.depth);
  }
}

// Issue #25's acceptance on the CPU: at most 2 more errors than fp32, top-1 agreement >= 99%.
TEST(Int8Digits, CalibratedOnTheCalibSplitMatchesFp32OnTheTestSplit) {
  const ModelSpec fp32 = digits_spec();
  const Split calib = load_split("calib_split.safetensors"), test = load_split("test_split.safetensors");
  ASSERT_EQ(test.n, 360);
  const std::vector<int> ref = predict(fp32, Precision::kFp32, test);
  ASSERT_EQ(ref.size(), 360u);
  int ref_errors = 0;
  for (int i = 0; i < test.n; ++i) ref_errors += ref[i] != static_cast<int>(test.labels[i]);
  struct Variant {
    std::string name;
    CalibMethod method;
    Int8Activations mode;
    bool int8_attention = false;  // runtime.int8_attention: int8 (int8 Q/K per (token, head), cpu.mha_i8_ref)
  };
  const Int8Activations tensor = Int8Activations::kPerTensor, norm = Int8Activations::kNormPerToken;
  for (const Variant& v : {Variant{"percentile", CalibMethod::kPercentile, tensor}, Variant{"minmax", CalibMethod::kMinmax, tensor},
                           Variant{"mse", CalibMethod::kMse, tensor}, Variant{"mse_norm_per_token", CalibMethod::kMse, norm},
                           Variant{"mse_norm_per_token_int8_attention", CalibMethod::kMse, norm, true},
                           Variant{"per_token", CalibMethod::kPercentile, Int8Activations::kPerToken}}) {
    ModelSpec spec = fp32;
    spec.precision = Precision::kInt8;
    spec.int8_attention = v.int8_attention;
    spec.int8_activations = v.mode;
    if (v.mode != Int8Activations::kPerToken) {
      CalibOptions o;
      o.method = v.method;
      auto scales = calibrate_int8(fp32, host(), calib.input.data(), calib.n, o);
      ASSERT_TRUE(scales.ok()) << scales.status().to_string();
      spec.int8_scales_path = tmp_path("digits_" + v.name + ".safetensors");
      ASSERT_TRUE(write_int8_scales(spec.int8_scales_path, *scales).ok());
    }
    const std::vector<int> q = predict(spec, Precision::kInt8, test);
    ASSERT_EQ(q.size(), 360u);
    int errors = 0, agree = 0;
    for (int i = 0; i < test.n; ++i) {
      errors += q[i] != static_cast<int>(test.labels[i]);
      agree += q[i] == ref[i];
    }
    std::printf("digits int8 %-10s: %d errors (fp32 %d), top-1 agreement with fp32 %d/360 (%.2f%%)\n",
                v.name.c_str(), errors, ref_errors, agree, 100.0 * agree / 360);
    EXPECT_LE(errors, ref_errors + 2) << v.name;
    EXPECT_GE(agree, 357) << v.name;  // >= 99% of 360 (356.4)
  }
}

// Issue #25's acceptance with the fold: at most 2 more errors than fp32, top-1 agreement >= 99%; and compare
// reads the folded LayerNorm outputs back in the fp32 model's units (measured >= 37.4 dB per tensor; read as
// y / r they would be ~6 dB: the factors are 0.42 to 2.03 on digits).
TEST(Int8LnFold, DigitsWithTheFoldMatchFp32OnTheTestSplit) {
  const ModelSpec fp32 = digits_spec();
  const Split calib = load_split("calib_split.safetensors"), test = load_split("test_split.safetensors");
  Fp32Ref ref;
  ASSERT_NO_FATAL_FAILURE(fp32_reference(fp32, test, &ref));
  CalibOptions o;
  o.ln_fold = true;
  auto scales = calibrate_int8(fp32, host(), calib.input.data(), calib.n, o);
  ASSERT_TRUE(scales.ok()) << scales.status().to_string();
  for (Int8Activations mode : {Int8Activations::kPerTensor, Int8Activations::kNormPerToken}) {
    ModelSpec spec = fp32;
    spec.precision = Precision::kInt8;
    spec.int8_activations = mode;
    spec.int8_scales_path = tmp_path("digits_fold.safetensors");
    ASSERT_TRUE(write_int8_scales(spec.int8_scales_path, *scales).ok());
    ASSERT_NO_FATAL_FAILURE(expect_accepted(spec, test, ref, std::string("mse + fold, ") + to_string(mode)));
    auto layers = compare_layers(fp32, Precision::kFp32, spec, Precision::kInt8, host(), test.input.data(), test.n, 2);
    ASSERT_TRUE(layers.ok()) << layers.status().to_string();
    int norms = 0;
    for (const LayerError& l : *layers) {
      if (l.tensor.find(".norm") == std::string::npos || l.tensor.compare(0, 7, "blocks.") != 0) continue;
      ++norms;
      EXPECT_GE(l.sqnr_db, 35.0) << l.tensor << " " << to_string(mode);
    }
    EXPECT_EQ(norms, 2 * fp32.arch.depth);
  }
}

// Issue #25's acceptance with the bias correction (`calibrate --bias-correction`, mse), in both modes that read a
// scale file. Measured (this host): logits 1.143e-2 per tensor / 1.024e-2 norm_per_token from fp32 (1.124e-2 /
// 1.034e-2 without the correction).
TEST(Int8BiasCorrection, DigitsWithTheCorrectionMatchFp32OnTheTestSplit) {
  const ModelSpec fp32 = digits_spec();
  const Split calib = load_split("calib_split.safetensors"), test = load_split("test_split.safetensors");
  Fp32Ref ref;
  ASSERT_NO_FATAL_FAILURE(fp32_reference(fp32, test, &ref));
  CalibOptions o;
  o.bias_correction = true;
  auto scales = calibrate_int8(fp32, host(), calib.input.data(), calib.n, o);
  ASSERT_TRUE(scales.ok()) << scales.status().to_string();
  ASSERT_EQ(scales->input_means.size(), 4u * fp32.arch.depth);
  for (Int8Activations mode : {Int8Activations::kPerTensor, Int8Activations::kNormPerToken}) {
    ModelSpec spec = fp32;
    spec.precision = Precision::kInt8;
    spec.int8_activations = mode;
    spec.int8_scales_path = tmp_path("digits_bias.safetensors");
    ASSERT_TRUE(write_int8_scales(spec.int8_scales_path, *scales).ok());
    ASSERT_NO_FATAL_FAILURE(expect_accepted(spec, test, ref, std::string("mse + bias correction, ") + to_string(mode)));
  }
}

}  // namespace
}  // namespace edgevit
