// INT8 calibration and the layer-wise comparison of two precisions (docs/int8.md; `edgevit calibrate`,
// `edgevit compare`).
//
// Calibration runs the fp32 model on the calibration images with every activation kept
// (PlanOptions::keep_activations) and observes the input of each block GEMM (blocks.N.norm1.out for qkv,
// attn.out for proj, norm2.out for fc1, mlp.hidden for fc2). Two passes over the images, in their order:
// the largest |x| per input, then a histogram of |x| over [0, amax] (kCalibBins bins); the scale is
//   minmax      amax / qmax
//   percentile  the upper edge of the bin holding the given percentile of |x| (default 99.99), / qmax
//   mse         the clip c in {amax * i / 128 : i = 32..128} whose quantization error (clip plus rounding,
//               evaluated at the bin centres) is least, / qmax; ties go to the larger clip
// with qmax = 127, except for fc2's input, which is observed as u = x + kGemmI8GeluShift clipped at 0 (the
// unsigned value fc1's epilogue quantizes: kernels/cpu/gemm_i8_ref.h) with qmax = 255.
// With ln_fold (RepQ-ViT, `--ln-fold`), a first pass takes each block LayerNorm's (norm1, norm2) largest |y_c| per
// output channel c over every token (the last block too: PlanOptions::all_tokens), range_c, and gives it the factor r_c
// = range_c / mean_c range_c clamped to [kLnFoldMinFactor, kLnFoldMaxFactor] (1 for a channel that is zero on every
// image, and for every channel of an all-zero LayerNorm); qkv's and fc1's inputs are then observed folded, y_c / r_c,
// as the folded model (runtime/int8_scales.h) computes them. The factors go into the scale file.
// With bias_correction, the first pass also sums each block GEMM's input (as observed: fc2's x, not u; folded
// with the fold) per input channel over every row of every image; the means go into the scale file
// (blocks.N.<gemm>.input_mean, runtime/int8_scales.h), from which the loader takes the mean rounding error of
// each quantized weight out of its bias.
// Everything is a deterministic function of the images and the weights: the same data gives the same
// scales, bit for bit (single-threaded sums in image order; no randomness).
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "platform/device_profile.h"
#include "runtime/int8_scales.h"
#include "runtime/model_spec.h"

namespace edgevit {

constexpr int kCalibBins = 2048;
// The LayerNorm fold's factors are clamped to [1/64, 64]: a channel 64x wider than the mean takes
// the whole per-tensor range; more would only move the weights' range (their column times r_c) further.
constexpr double kLnFoldMinFactor = 1.0 / 64;
constexpr double kLnFoldMaxFactor = 64.0;

enum class CalibMethod { kMinmax, kPercentile, kMse };
const char* to_string(CalibMethod m);  // "minmax" | "percentile" | "mse"

struct CalibOptions {
  CalibMethod method = CalibMethod::kMse;  // docs/int8.md "Calibrating": why mse is the default
  double percentile = 99.99;  // kPercentile
  int threads = 1;            // the fp32 engine's (the statistics are single-threaded)
  bool ln_fold = false;       // RepQ-ViT channel factors for norm1 and norm2 (above)
  // Each GEMM input's per-channel mean, for the load-time bias correction (above). True unless asked otherwise
  // because it takes the systematic part of the weights' rounding error out of every GEMM (docs/int8.md "Bias
  // correction").
  bool bias_correction = true;
};

// images: (count, C, H, W) fp32, normalized like the model's input. `spec` is run at fp32 on `device` (a CPU
// profile). Returns the scale of every block GEMM's input, method and samples filled.
Result<Int8Scales> calibrate_int8(const ModelSpec& spec, const DeviceProfile& device, const float* images, int count,
                                  const CalibOptions& options);

// One observed tensor of both runs.
struct LayerError {
  std::string tensor;      // e.g. "blocks.0.attn.qkv.out"
  double rel_error = 0;    // ||b - a|| / ||a||
  double sqnr_db = 0;      // 10 log10(||a||^2 / ||b - a||^2); 300 when identical
  double max_abs = 0;      // max |b - a|
};

// Runs `a` and `b` (the same model at two precisions, each with its own spec: an INT8 one names its scale file) on the
// same images and compares every activation both graphs have under one name, dequantizing int8 tensors with their
// per-row scales (`<name>_scale`; fc2's unsigned input as q * s - kGemmI8GeluShift; a folded LayerNorm's output times
// its channel factors, back in the fp32 model's units), then pre_logits and logits. In graph order. Both run every
// token through the last block (PlanOptions::all_tokens: same outputs), so every tensor compares.
Result<std::vector<LayerError>> compare_layers(const ModelSpec& a, Precision pa, const ModelSpec& b, Precision pb,
                                               const DeviceProfile& device, const float* images, int count,
                                               int threads);

}  // namespace edgevit
