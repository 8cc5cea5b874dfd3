// INT8 scales (docs/int8.md): the scale file `edgevit calibrate` writes beside the model, its strict loader,
// and the load-time quantization of the block GEMMs' weights into the arena.
//
// Scale file: safetensors, one F32 tensor of shape [1] per block GEMM input, named
//   blocks.N.attn.qkv.input_scale   blocks.N.attn.proj.input_scale
//   blocks.N.mlp.fc1.input_scale    blocks.N.mlp.fc2.input_scale      for N in [0, depth)
// each the scale s of that activation: symmetric for qkv, proj and fc1 (x ~ s * q, q in [-127, 127]); for
// fc2 the scale of its unsigned input u = GELU + gelu_shift (u ~ s * q, q in [0, 255]: docs/int8.md); metadata
//   format  = "edgevit-int8-scales-v2"   gelu_shift = "0.17" (kGemmI8GeluShift)
//   method = minmax | percentile | mse   samples = images used
// The loader refuses, naming the file, the tensor and the reason (kCheckpointError, exit code 4): a missing
// or extra tensor, a dtype other than F32, a shape other than [1], NaN, Inf, zero, negative or subnormal
// values, a missing or unknown format (v1 files, whose fc2 scale was symmetric, included: recalibrate), a
// missing gelu_shift or one other than this build's.
//
// Optional LayerNorm fold (RepQ-ViT, `edgevit calibrate --ln-fold`): metadata `ln_fold = repq` and one F32
// tensor of shape [E] per block LayerNorm, blocks.N.norm1.channel_factor and blocks.N.norm2.channel_factor,
// the factor r_c > 0 of each output channel. At load, the LayerNorm's gamma_c and beta_c are divided by r_c and
// column c of the next GEMM's weight (qkv after norm1, fc1 after norm2) multiplied by r_c before its
// quantization: in exact arithmetic the model is unchanged, and the LayerNorm's outputs y_c / r_c have
// ranges of one size, so one per-tensor scale fits them (qkv's and fc1's input scales then describe y / r).
// The loader refuses factors without the metadata, the metadata without every factor, an unknown `ln_fold`,
// a shape other than [E], and NaN, Inf, zero, negative or subnormal factors.
//
// Optional bias correction (`edgevit calibrate --bias-correction`): metadata `bias_correction = input_mean` and
// one F32 tensor of shape [K] per block GEMM that has a bias, blocks.N.<gemm>.input_mean, the mean of that
// GEMM's input x over the calibration tokens, per input channel (fc2: GELU's output, not the shifted u; with the
// fold, the folded y / r). At load the systematic part of the weight rounding error, (Wq sw - W) mean, is taken
// out of the GEMM's fp32 bias (int8_correct_bias): a value in the arena, read alike by every backend.
// The loader refuses means without the metadata, the metadata without every mean, an unknown
// `bias_correction`, a dtype other than F32, a shape other than [K], and NaN or Inf values.
//
// Weights: each block GEMM's weight W (N, K) is read in fp32 and quantized once per output channel,
// symmetric and deterministic: sw[n] = max_k |W[n][k]| / 127 (1 for an all-zero row), Wq = rne(W / sw)
// saturated to [-127, 127] (kernels/cpu/quantize_i8_ref.h, the same rule as the activations'). fc2's bias
// then carries its input's shift: bias - kGemmI8GeluShift * sw * sum_k Wq (gemm_i8_fold_shift_into_bias,
// in double from the quantized weights, stored fp32), in both activation modes.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "runtime/model_spec.h"

namespace edgevit {

class Arena;
class WeightSource;
struct Plan;
struct TensorDesc;

constexpr const char* kInt8ScalesFormat = "edgevit-int8-scales-v2";
constexpr const char* kInt8ScalesGeluShift = "0.17";  // kGemmI8GeluShift as the metadata spells it

constexpr const char* kInt8LnFoldRepq = "repq";  // metadata ln_fold: the only fold this build knows
constexpr const char* kInt8BiasCorrectionMean = "input_mean";  // metadata bias_correction: the only kind known

struct Int8Scales {
  std::map<std::string, float> input_scales;  // "<gemm>.input_scale" -> s
  // "blocks.N.normK.channel_factor" -> r [E]; empty: no fold (and no `ln_fold` metadata written)
  std::map<std::string, std::vector<float>> channel_factors;
  // "blocks.N.<gemm>.input_mean" -> mean [K]; empty: no bias correction (and no `bias_correction` metadata)
  std::map<std::string, std::vector<float>> input_means;
  std::string method;                         // minmax | percentile | mse
  int samples = 0;
};

// The four block GEMMs of every block, "blocks.N.attn.qkv", ... in graph order.
std::vector<std::string> int8_gemm_names(const VitArch& arch);
// The LayerNorms a fold applies to, "blocks.N.norm1", "blocks.N.norm2", in graph order, and the GEMM each feeds.
std::vector<std::string> int8_fold_norm_names(const VitArch& arch);
std::string int8_fold_gemm_of(const std::string& norm);  // "blocks.N.norm1" -> "blocks.N.attn.qkv"; norm2 -> mlp.fc1

// The fold in place, in fp32 (one rounding per element): gamma[c] /= r[c], beta[c] /= r[c] (either may be null),
// and w (n, k = E, row-major, the next GEMM's weight) w[j][c] *= r[c].
// The block GEMMs that take a bias correction (those with a bias: qkv only with qkv_bias), in graph order, and
// the width K of each one's input (E, or the MLP's hidden width for fc2).
std::vector<std::string> int8_bias_corrected_gemms(const VitArch& arch);
int64_t int8_gemm_input_width(const VitArch& arch, const std::string& gemm);

// out[j] = bias[j] - sum_c (q[j][c] * sw[j] - w[j][c]) * mean[c], in double, stored fp32 (out may be bias):
// the mean over the calibration tokens of the rounding error of W (n, k) quantized as q (n, k) with row scales
// sw (n), taken out of the bias. The caller keeps ownership of every buffer.
void int8_correct_bias(int64_t n, int64_t k, const float* w, const int8_t* q, const float* sw, const float* mean,
                       const float* bias, float* out);

void int8_fold_ln_factors(const float* r, int64_t e, float* gamma, float* beta, float* w, int64_t n);
Result<Int8Scales> load_int8_scales(const std::string& path, const VitArch& arch);
Status write_int8_scales(const std::string& path, const Int8Scales& scales);

// True for an INT8 graph's unsigned activation: `blocks.N.mlp.hidden`, fc1's output and fc2's input, uint8
// codes of GELU + kGemmI8GeluShift (dequantized as q * s - kGemmI8GeluShift).
bool int8_tensor_is_u8(const TensorDesc& t);

// True for the tensors load_int8_weights writes (int8 weights, their scales, the calibrated input scales);
// the arena's generic loader skips them.
bool is_int8_tensor(const TensorDesc& t);
// Makes every is_int8_tensor weight of an INT8 plan: weights quantized per output channel from `weights`,
// input scales from plan.int8_scales_path, fc2's bias with the shift folded in (written again over the
// generic loader's copy); put(tensor id, bytes, size) stores each (the arena's loader: a
// copy into the host arena, or through the device arena's copy_in).
using Int8Put = std::function<Status(int tensor_id, const void* bytes, size_t size)>;
Status load_int8_weights(const Plan& plan, const WeightSource& weights, const Int8Put& put);

}  // namespace edgevit
