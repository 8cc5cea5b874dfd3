// INT8 scale file and load-time weight quantization (runtime/int8_scales.h).
#include "runtime/int8_scales.h"

#include <cmath>
#include <cstring>
#include <set>

#include "kernels/cpu/gemm_i8_ref.h"
#include "kernels/cpu/quantize_i8_ref.h"
#include "runtime/plan.h"
#include "runtime/safetensors.h"
#include "runtime/weights.h"

namespace edgevit {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Why a scale value cannot be used, or "".
std::string bad_scale(float v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return "Inf";
  if (v == 0) return "zero";
  if (v < 0) return "negative (" + std::to_string(v) + ")";
  if (!std::isnormal(v)) return "subnormal (" + std::to_string(v) + ")";
  return "";
}

Status scale_error(const std::string& path, const std::string& tensor, const std::string& reason) {
  return checkpoint_error("INT8 scale file " + path + ": " + (tensor.empty() ? "" : "tensor '" + tensor + "': ") +
                          reason);
}

Status check_metadata(const SafetensorsFile& f, Int8Scales* out, bool* fold, bool* corrected) {
  const auto& md = f.metadata();
  const auto fmt = md.find("format");
  if (fmt == md.end() || fmt->second != kInt8ScalesFormat)
    return scale_error(f.path(), "", std::string("metadata 'format' is ") +
                                         (fmt == md.end() ? "missing" : "'" + fmt->second + "'") + ", expected '" +
                                         kInt8ScalesFormat + "' (write it with `edgevit calibrate`" +
                                         (fmt != md.end() && fmt->second == "edgevit-int8-scales-v1"
                                              ? "; a v1 file's fc2 scale is symmetric, this version's fc2 input is "
                                                "unsigned: recalibrate"
                                              : "") +
                                         ")");
  const auto shift = md.find("gelu_shift");
  if (shift == md.end() || shift->second != kInt8ScalesGeluShift)
    return scale_error(f.path(), "", std::string("metadata 'gelu_shift' is ") +
                                         (shift == md.end() ? "missing" : "'" + shift->second + "'") + ", expected '" +
                                         kInt8ScalesGeluShift + "' (fc2's unsigned input GELU + shift; recalibrate)");
  const auto ln_fold = md.find("ln_fold");
  *fold = ln_fold != md.end();
  if (*fold && ln_fold->second != kInt8LnFoldRepq)
    return scale_error(f.path(), "", "metadata 'ln_fold' is '" + ln_fold->second + "', expected '" + kInt8LnFoldRepq +
                                         "' (the only LayerNorm fold this build knows; recalibrate)");
  const auto correction = md.find("bias_correction");
  *corrected = correction != md.end();
  if (*corrected && correction->second != kInt8BiasCorrectionMean)
    return scale_error(f.path(), "", "metadata 'bias_correction' is '" + correction->second + "', expected '" +
                                         kInt8BiasCorrectionMean + "' (the only bias correction this build knows; recalibrate)");
  const auto method = md.find("method");
  if (method != md.end()) out->method = method->second;
  const auto samples = md.find("samples");
  if (samples != md.end()) out->samples = std::atoi(samples->second.c_str());
  return Status::Ok();
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? "," : "") + std::to_string(shape[i]);
  return text + "]";
}

// The LayerNorm fold's factors (runtime/int8_scales.h): all 2 x depth of them when `fold`, none otherwise.
Status load_channel_factors(const SafetensorsFile& f, const VitArch& arch, bool fold, Int8Scales* out) {
  for (const std::string& norm : int8_fold_norm_names(arch)) {
    const std::string name = norm + ".channel_factor";
    const TensorInfo* t = f.find(name);
    if (!fold) {
      if (t != nullptr)
        return scale_error(f.path(), name, "a LayerNorm channel factor without metadata 'ln_fold' (expected '" +
                                               std::string(kInt8LnFoldRepq) + "' with every factor, or no factor)");
      continue;
    }
    if (t == nullptr)
      return scale_error(f.path(), name, "missing (metadata 'ln_fold' needs a factor for every block's norm1 and norm2)");
    if (t->dtype != DType::kF32) return scale_error(f.path(), name, std::string("dtype ") + dtype_name(t->dtype) + ", expected F32");
    if (t->shape != std::vector<int64_t>{arch.embed_dim})
      return scale_error(f.path(), name, "shape " + shape_text(t->shape) + ", expected [" + std::to_string(arch.embed_dim) + "]");
    std::vector<float> r(static_cast<size_t>(arch.embed_dim));
    std::memcpy(r.data(), f.data(*t), r.size() * sizeof(float));
    for (size_t c = 0; c < r.size(); ++c) {
      const std::string why = bad_scale(r[c]);
      if (!why.empty())
        return scale_error(f.path(), name, "channel " + std::to_string(c) + ": " + why + ": a factor must be a finite normal number > 0");
    }
    out->channel_factors[name] = std::move(r);
  }
  return Status::Ok();
}

// The bias correction's input means (runtime/int8_scales.h): one per bias-corrected GEMM when `corrected`, none
// otherwise.
Status load_input_means(const SafetensorsFile& f, const VitArch& arch, bool corrected, Int8Scales* out) {
  for (const std::string& gemm : int8_bias_corrected_gemms(arch)) {
    const std::string name = gemm + ".input_mean";
    const TensorInfo* t = f.find(name);
    if (!corrected) {
      if (t != nullptr)
        return scale_error(f.path(), name, "an input mean without metadata 'bias_correction' (expected '" +
                                               std::string(kInt8BiasCorrectionMean) + "' with every mean, or no mean)");
      continue;
    }
    if (t == nullptr)
      return scale_error(f.path(), name, "missing (metadata 'bias_correction' needs a mean for every block GEMM with a bias)");
    if (t->dtype != DType::kF32) return scale_error(f.path(), name, std::string("dtype ") + dtype_name(t->dtype) + ", expected F32");
    const int64_t k = int8_gemm_input_width(arch, gemm);
    if (t->shape != std::vector<int64_t>{k})
      return scale_error(f.path(), name, "shape " + shape_text(t->shape) + ", expected [" + std::to_string(k) + "]");
    std::vector<float> m(static_cast<size_t>(k));
    std::memcpy(m.data(), f.data(*t), m.size() * sizeof(float));
    for (size_t c = 0; c < m.size(); ++c)
      if (!std::isfinite(m[c]))
        return scale_error(f.path(), name, "channel " + std::to_string(c) + ": " + (std::isnan(m[c]) ? "NaN" : "Inf") +
                                               ": a mean must be finite");
    out->input_means[name] = std::move(m);
  }
  return Status::Ok();
}

}  // namespace

std::vector<std::string> int8_bias_corrected_gemms(const VitArch& arch) {
  std::vector<std::string> names;
  for (const std::string& g : int8_gemm_names(arch))
    if (arch.qkv_bias || !ends_with(g, ".attn.qkv")) names.push_back(g);
  return names;
}

int64_t int8_gemm_input_width(const VitArch& arch, const std::string& gemm) {
  return ends_with(gemm, ".mlp.fc2") ? arch.mlp_hidden() : arch.embed_dim;
}

void int8_correct_bias(int64_t n, int64_t k, const float* w, const int8_t* q, const float* sw, const float* mean,
                       const float* bias, float* out) {
  for (int64_t j = 0; j < n; ++j) {
    double err = 0;
    for (int64_t c = 0; c < k; ++c)
      err += (static_cast<double>(q[j * k + c]) * sw[j] - w[j * k + c]) * static_cast<double>(mean[c]);
    out[j] = static_cast<float>(static_cast<double>(bias[j]) - err);
  }
}

std::vector<std::string> int8_fold_norm_names(const VitArch& arch) {
  std::vector<std::string> names;
  for (int i = 0; i < arch.depth; ++i)
    for (const char* n : {".norm1", ".norm2"}) names.push_back("blocks." + std::to_string(i) + n);
  return names;
}

std::string int8_fold_gemm_of(const std::string& norm) {
  const std::string blk = norm.substr(0, norm.rfind('.'));
  return blk + (ends_with(norm, ".norm1") ? ".attn.qkv" : ".mlp.fc1");
}

void int8_fold_ln_factors(const float* r, int64_t e, float* gamma, float* beta, float* w, int64_t n) {
  for (int64_t c = 0; c < e; ++c) {
    if (gamma != nullptr) gamma[c] /= r[c];
    if (beta != nullptr) beta[c] /= r[c];
  }
  if (w == nullptr) return;
  for (int64_t j = 0; j < n; ++j)
    for (int64_t c = 0; c < e; ++c) w[j * e + c] *= r[c];
}

std::vector<std::string> int8_gemm_names(const VitArch& arch) {
  std::vector<std::string> names;
  for (int i = 0; i < arch.depth; ++i)
    for (const char* g : {".attn.qkv", ".attn.proj", ".mlp.fc1", ".mlp.fc2"})
      names.push_back("blocks." + std::to_string(i) + g);
  return names;
}

Result<Int8Scales> load_int8_scales(const std::string& path, const VitArch& arch) {
  Result<SafetensorsFile> opened = SafetensorsFile::open(path);
  if (!opened.ok()) {
    const Status& s = opened.status();
    if (s.code() == StatusCode::kNotFound || s.code() == StatusCode::kIoError) return s;
    return scale_error(path, "", s.message());
  }
  const SafetensorsFile& f = opened.value();
  Int8Scales out;
  bool fold = false, corrected = false;
  EV_RETURN_IF_ERROR(check_metadata(f, &out, &fold, &corrected));
  std::set<std::string> expected, optional;
  for (const std::string& g : int8_gemm_names(arch)) expected.insert(g + ".input_scale");
  for (const std::string& n : int8_fold_norm_names(arch)) optional.insert(n + ".channel_factor");
  for (const std::string& g : int8_bias_corrected_gemms(arch)) optional.insert(g + ".input_mean");
  for (const TensorInfo& t : f.tensors())
    if (expected.count(t.name) == 0 && optional.count(t.name) == 0)
      return scale_error(path, t.name, "not a scale of this model (expected blocks.N.{attn.qkv,attn.proj,mlp.fc1,"
                                       "mlp.fc2}.input_scale and optionally blocks.N.{norm1,norm2}.channel_factor "
                                       "and blocks.N.<gemm>.input_mean for N < depth " + std::to_string(arch.depth) + ")");
  for (const std::string& name : expected) {
    const TensorInfo* t = f.find(name);
    if (t == nullptr) return scale_error(path, name, "missing (every block GEMM's input needs a scale)");
    if (t->dtype != DType::kF32) return scale_error(path, name, std::string("dtype ") + dtype_name(t->dtype) + ", expected F32");
    if (t->shape != std::vector<int64_t>{1}) return scale_error(path, name, "shape " + shape_text(t->shape) + ", expected [1]");
    float v = 0;
    std::memcpy(&v, f.data(*t), sizeof v);
    const std::string why = bad_scale(v);
    if (!why.empty()) return scale_error(path, name, why + ": a scale must be a finite normal number > 0");
    out.input_scales[name] = v;
  }
  EV_RETURN_IF_ERROR(load_channel_factors(f, arch, fold, &out));
  EV_RETURN_IF_ERROR(load_input_means(f, arch, corrected, &out));
  return out;
}

Status write_int8_scales(const std::string& path, const Int8Scales& scales) {
  std::vector<NamedTensorView> views;
  for (const auto& kv : scales.input_scales) views.push_back(NamedTensorView{kv.first, {1}, &kv.second});
  for (const auto* vectors : {&scales.channel_factors, &scales.input_means})
    for (const auto& kv : *vectors)
      views.push_back(NamedTensorView{kv.first, {static_cast<int64_t>(kv.second.size())}, kv.second.data()});
  std::map<std::string, std::string> metadata{{"format", kInt8ScalesFormat},
                                              {"gelu_shift", kInt8ScalesGeluShift},
                                              {"method", scales.method},
                                              {"samples", std::to_string(scales.samples)}};
  if (!scales.channel_factors.empty()) metadata["ln_fold"] = kInt8LnFoldRepq;
  if (!scales.input_means.empty()) metadata["bias_correction"] = kInt8BiasCorrectionMean;
  return write_safetensors(path, views, metadata);
}

bool int8_tensor_is_u8(const TensorDesc& t) {
  return t.kind == TensorKind::kActivation && t.elem_bytes == 1 && t.name.compare(0, 7, "blocks.") == 0 &&
         ends_with(t.name, ".mlp.hidden");
}

namespace {
bool is_fc2_bias(const TensorDesc& t) {
  return t.kind == TensorKind::kWeight && t.name.compare(0, 7, "blocks.") == 0 && ends_with(t.name, ".mlp.fc2.bias");
}
int tensor_named(const Graph& g, const std::string& name) {
  for (const TensorDesc& s : g.tensors)
    if (s.name == name) return s.id;
  return -1;
}
// The fold's LayerNorm side: gamma and beta of every folded LayerNorm divided by its factors, written again over
// the generic loader's copy (fp32, or fp16 rounded from the folded fp32 values, as the tensor is in the plan).
Status put_folded_norms(const Graph& g, const Int8Scales& scales, const WeightSource& weights, const Int8Put& put) {
  std::vector<float> v;
  std::vector<uint16_t> h;
  for (const auto& kv : scales.channel_factors) {
    const std::string norm = kv.first.substr(0, kv.first.size() - std::string(".channel_factor").size());
    for (const char* leaf : {".weight", ".bias"}) {
      const int id = tensor_named(g, norm + leaf);
      if (id < 0) return internal_error("INT8 LayerNorm fold: the graph has no tensor '" + norm + leaf + "'");
      const TensorDesc& t = g.tensors[static_cast<size_t>(id)];
      v.resize(kv.second.size());
      if (t.numel() != static_cast<int64_t>(v.size()))
        return internal_error("INT8 LayerNorm fold: '" + t.name + "' does not have one element per channel factor");
      EV_RETURN_IF_ERROR(weights.read_f32(t.name, v.data(), v.size()));
      int8_fold_ln_factors(kv.second.data(), static_cast<int64_t>(v.size()), v.data(), nullptr, nullptr, 0);
      if (t.elem_bytes == 4) {
        EV_RETURN_IF_ERROR(put(id, v.data(), v.size() * sizeof(float)));
        continue;
      }
      h.resize(v.size());
      for (size_t c = 0; c < v.size(); ++c) h[c] = f32_to_f16(v[c]);
      EV_RETURN_IF_ERROR(put(id, h.data(), h.size() * sizeof(uint16_t)));
    }
  }
  return Status::Ok();
}

}  // namespace

bool is_int8_tensor(const TensorDesc& t) {
  return t.kind == TensorKind::kWeight && (t.elem_bytes == 1 || ends_with(t.name, ".weight_scale") ||
                                           ends_with(t.name, ".input_scale") || is_fc2_bias(t));
}

Status load_int8_weights(const Plan& plan, const WeightSource& weights, const Int8Put& put) {
  const Graph& g = plan.graph;
  Int8Scales scales;
  if (!g.int8_per_token()) {
    if (plan.int8_scales_path.empty())
      return config_error("model '" + plan.model_name + "': precision int8 with per-tensor activation scales needs "
                          "runtime.int8_scales (run `edgevit calibrate`)");
    EV_ASSIGN_OR_RETURN(scales, load_int8_scales(plan.int8_scales_path, g.arch));
  }
  EV_RETURN_IF_ERROR(put_folded_norms(g, scales, weights, put));
  std::map<std::string, const std::vector<float>*> fold_of;  // "blocks.N.attn.qkv" -> norm1's factors, ...
  for (const auto& kv : scales.channel_factors)
    fold_of[int8_fold_gemm_of(kv.first.substr(0, kv.first.size() - std::string(".channel_factor").size()))] = &kv.second;
  std::vector<float> w, sw, bias;
  std::vector<int8_t> q;
  for (const TensorDesc& t : g.tensors) {
    if (!is_int8_tensor(t)) continue;
    if (ends_with(t.name, ".input_scale")) {
      const float v = scales.input_scales.at(t.name);
      EV_RETURN_IF_ERROR(put(t.id, &v, sizeof v));
      continue;
    }
    if (t.elem_bytes != 1) continue;  // a weight_scale or fc2's bias: written with its weight
    const int64_t n = t.shape[0], k = t.shape[1];
    w.resize(static_cast<size_t>(n * k));
    EV_RETURN_IF_ERROR(weights.read_f32(t.name, w.data(), w.size()));
    for (size_t i = 0; i < w.size(); ++i)
      if (!std::isfinite(w[i]))
        return checkpoint_error("weights: tensor '" + t.name + "' holds a non-finite value at element " +
                                std::to_string(i) + ": it cannot be quantized to INT8");
    const std::string stem = t.name.substr(0, t.name.size() - 7);  // drop ".weight"
    const auto fold = fold_of.find(stem);
    if (fold != fold_of.end()) {  // the LayerNorm fold's GEMM side: column c times r_c, before the quantization
      if (static_cast<int64_t>(fold->second->size()) != k)
        return internal_error("INT8 LayerNorm fold: '" + t.name + "' has " + std::to_string(k) + " columns, not one per factor");
      int8_fold_ln_factors(fold->second->data(), k, nullptr, nullptr, w.data(), n);
    }
    const int sw_id = tensor_named(g, stem + ".weight_scale");
    if (sw_id < 0) return internal_error("INT8 weight '" + t.name + "' has no tensor '" + stem + ".weight_scale'");
    q.resize(w.size());
    sw.resize(static_cast<size_t>(n));
    quantize_rows_i8_ref(w.data(), n, k, 0.f, q.data(), sw.data());
    EV_RETURN_IF_ERROR(put(t.id, q.data(), q.size()));
    EV_RETURN_IF_ERROR(put(sw_id, sw.data(), sw.size() * sizeof(float)));
    const int bias_id = tensor_named(g, stem + ".bias");
    const auto mean = scales.input_means.find(stem + ".input_mean");
    const bool fc2 = bias_id >= 0 && is_fc2_bias(g.tensors[static_cast<size_t>(bias_id)]);
    if (bias_id < 0 || (!fc2 && mean == scales.input_means.end())) continue;
    if (g.tensors[static_cast<size_t>(bias_id)].elem_bytes != 4)
      return internal_error("INT8 GEMM bias '" + stem + ".bias' is not fp32");
    bias.resize(static_cast<size_t>(n));
    EV_RETURN_IF_ERROR(weights.read_f32(stem + ".bias", bias.data(), bias.size()));
    if (mean != scales.input_means.end()) {  // the bias correction, from the (folded) fp32 weights and their codes
      if (static_cast<int64_t>(mean->second.size()) != k)
        return internal_error("INT8 bias correction: '" + t.name + "' has " + std::to_string(k) + " columns, not one per mean");
      int8_correct_bias(n, k, w.data(), q.data(), sw.data(), mean->second.data(), bias.data(), bias.data());
    }
    // fc2 reads uint8 codes of GELU + kGemmI8GeluShift: its bias takes the shift back out (gemm_i8_ref.h).
    if (fc2) gemm_i8_fold_shift_into_bias(n, k, q.data(), sw.data(), bias.data(), kGemmI8GeluShift, bias.data());
    EV_RETURN_IF_ERROR(put(bias_id, bias.data(), bias.size() * sizeof(float)));
  }
  return Status::Ok();
}

}  // namespace edgevit
