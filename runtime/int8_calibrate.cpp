// INT8 calibration and layer-wise comparison (runtime/int8_calibrate.h).
#include "runtime/int8_calibrate.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>

#include "kernels/cpu/gemm_i8_ref.h"
#include "runtime/engine.h"

namespace edgevit {

namespace {

// The fp32 tensor holding the input of block GEMM `gemm` ("blocks.N.attn.qkv", ...).
std::string gemm_input_tensor(const std::string& gemm) {
  const size_t dot = gemm.find('.', 7);  // after "blocks.N"
  const std::string blk = gemm.substr(0, dot), g = gemm.substr(dot);
  if (g == ".attn.qkv") return blk + ".norm1.out";
  if (g == ".attn.proj") return blk + ".attn.out";
  if (g == ".mlp.fc1") return blk + ".norm2.out";
  return blk + ".mlp.hidden";
}

int tensor_id(const Graph& g, const std::string& name) {
  for (const TensorDesc& t : g.tensors)
    if (t.name == name) return t.id;
  return -1;
}

// all_tokens: the last block over every token (compare: the fp32 class-token tail computes its qkv's queries
// for the class token only, so that tensor would not compare).
Result<std::unique_ptr<Engine>> observing_engine(const ModelSpec& spec, Precision p, const DeviceProfile& device,
                                                 int count, int threads, bool all_tokens) {
  if (device.kind != DeviceKind::kCpu)
    return unsupported("calibration and compare run on a CPU device profile, not '" + device.name + "'");
  if (count < 1) return invalid_argument("no images to run");
  EngineOptions o;
  o.threads = threads;
  o.plan.precision = p;
  o.plan.batch = std::min(count, 64);
  o.plan.keep_activations = true;
  o.plan.all_tokens = all_tokens;
  return Engine::create(spec, device, o);
}

// The valid elements of tensor `id` after a forward of n images, as fp32 (int8 dequantized by its rows'
// scales, the tensor `<name>_scale`; a CUDA INT8 graph's int8 `blocks.N.attn.out` by proj's per-tensor
// `blocks.N.attn.proj.input_scale`, with which the attention wrote it).
Status read_tensor(const Engine& e, int id, int n, std::vector<float>* out) {
  const Graph& g = e.plan().graph;
  const TensorDesc& t = g.tensors[static_cast<size_t>(id)];
  const int64_t count = t.numel() / g.batch * n;
  out->resize(static_cast<size_t>(count));
  if (t.elem_bytes == 4) {
    const float* p = static_cast<const float*>(e.tensor_data(id));
    std::copy(p, p + count, out->begin());
    return Status::Ok();
  }
  int sid = tensor_id(g, t.name + "_scale");
  bool per_tensor = false;
  const std::string attn_out = ".attn.out";
  if (sid < 0 && t.name.size() > attn_out.size() &&
      t.name.compare(t.name.size() - attn_out.size(), attn_out.size(), attn_out) == 0) {
    sid = tensor_id(g, t.name.substr(0, t.name.size() - 4) + ".proj.input_scale");
    per_tensor = true;
  }
  if (sid < 0 || t.elem_bytes != 1) return internal_error("tensor '" + t.name + "' cannot be read as fp32");
  const int64_t cols = per_tensor ? count : t.shape.back();  // per tensor: one scale for every element
  const float* s = static_cast<const float*>(e.tensor_data(sid));
  if (int8_tensor_is_u8(t)) {  // fc2's input: uint8 codes of GELU + shift
    const uint8_t* q = static_cast<const uint8_t*>(e.tensor_data(id));
    for (int64_t i = 0; i < count; ++i)
      (*out)[static_cast<size_t>(i)] = static_cast<float>(q[i]) * s[i / cols] - kGemmI8GeluShift;
    return Status::Ok();
  }
  const int8_t* q = static_cast<const int8_t*>(e.tensor_data(id));
  for (int64_t i = 0; i < count; ++i) (*out)[static_cast<size_t>(i)] = static_cast<float>(q[i]) * s[i / cols];
  return Status::Ok();
}

// Quantization error of |x| values in histogram `h` over [0, amax] with clip c (bin centres), qmax codes above 0
// (127 symmetric, 255 for fc2's unsigned input).
double clip_error(const std::vector<double>& h, double amax, double c, double qmax) {
  const double s = c / qmax, width = amax / kCalibBins;
  double err = 0;
  for (int b = 0; b < kCalibBins; ++b) {
    if (h[static_cast<size_t>(b)] == 0) continue;
    const double v = (b + 0.5) * width;
    const double q = std::min(qmax, std::nearbyint(v / s)) * s;
    err += h[static_cast<size_t>(b)] * (v - q) * (v - q);
  }
  return err;
}

double scale_from_histogram(const std::vector<double>& h, double amax, double qmax, const CalibOptions& o) {
  double total = 0;
  for (double c : h) total += c;
  if (o.method == CalibMethod::kPercentile) {
    const double want = total * o.percentile / 100.0;
    double seen = 0;
    for (int b = 0; b < kCalibBins; ++b) {
      seen += h[static_cast<size_t>(b)];
      if (seen >= want) return amax * (b + 1) / kCalibBins / qmax;
    }
    return amax / qmax;
  }
  double best_c = amax, best = clip_error(h, amax, amax, qmax);
  for (int i = 127; i >= 32; --i) {
    const double c = amax * i / 128.0;
    const double e = clip_error(h, amax, c, qmax);
    if (e < best) best = e, best_c = c;
  }
  return best_c / qmax;
}

// Adds the rows of v (rows of sum->size() channels) to the per-channel sums, in order, and counts them.
void accumulate_channels(const std::vector<float>& v, std::vector<double>* sum, double* rows) {
  const size_t ch = sum->size();
  for (size_t k = 0; k < v.size(); ++k) (*sum)[k % ch] += static_cast<double>(v[k]);
  *rows += static_cast<double>(v.size() / ch);
}

// RepQ-ViT's factors of one LayerNorm from its channels' largest |y_c| (runtime/int8_calibrate.h).
std::vector<float> factors_from_ranges(const std::vector<double>& range) {
  double mean = 0;
  for (double r : range) mean += r;
  mean /= static_cast<double>(range.size());
  std::vector<float> f(range.size(), 1.f);
  if (!(mean > 0)) return f;
  for (size_t c = 0; c < range.size(); ++c)
    if (range[c] > 0) f[c] = static_cast<float>(std::min(kLnFoldMaxFactor, std::max(kLnFoldMinFactor, range[c] / mean)));
  return f;
}

// The fold's first pass: for every block LayerNorm, its factors from the fp32 outputs on the images, into
// `factors` ("blocks.N.normK.channel_factor" -> r). `e` runs every token through the last block (all_tokens):
// in a class-token tail, norm2 sees one row per image, too few for a per-channel maximum.
Status fold_factors(Engine& e, const VitArch& arch, const float* images, int count,
                    std::map<std::string, std::vector<float>>* factors) {
  const Graph& g = e.plan().graph;
  const std::vector<std::string> norms = int8_fold_norm_names(arch);
  const size_t ch = static_cast<size_t>(arch.embed_dim);
  std::vector<int> ids;
  for (const std::string& n : norms) {
    ids.push_back(tensor_id(g, n + ".out"));
    if (ids.back() < 0) return internal_error("calibration: the fp32 graph has no tensor '" + n + ".out'");
  }
  std::vector<std::vector<double>> range(norms.size(), std::vector<double>(ch, 0.0));
  std::vector<float> v;
  for (int i = 0; i < count; i += e.max_batch()) {
    const int n = std::min(e.max_batch(), count - i);
    EV_RETURN_IF_ERROR(e.infer(images + static_cast<int64_t>(i) * e.input_numel_per_image(), n));
    for (size_t l = 0; l < ids.size(); ++l) {
      EV_RETURN_IF_ERROR(read_tensor(e, ids[l], n, &v));
      for (size_t k = 0; k < v.size(); ++k)
        range[l][k % ch] = std::max(range[l][k % ch], std::fabs(static_cast<double>(v[k])));
    }
  }
  for (size_t l = 0; l < norms.size(); ++l) {
    for (double r : range[l])
      if (!std::isfinite(r)) return check_failed("calibration: the output of '" + norms[l] + "' is not finite");
    (*factors)[norms[l] + ".channel_factor"] = factors_from_ranges(range[l]);
  }
  return Status::Ok();
}

// An INT8 engine's folded LayerNorm outputs ("blocks.N.normK.out" -> r), from its scale file; none when it
// reads no file or the file has no fold.
Result<std::map<std::string, std::vector<float>>> folded_outputs(const Engine& e) {
  std::map<std::string, std::vector<float>> out;
  const Graph& g = e.plan().graph;
  if (g.precision != Precision::kInt8 || g.int8_per_token() || e.plan().int8_scales_path.empty()) return out;
  EV_ASSIGN_OR_RETURN(Int8Scales s, load_int8_scales(e.plan().int8_scales_path, g.arch));
  for (auto& kv : s.channel_factors)
    out[kv.first.substr(0, kv.first.size() - std::string(".channel_factor").size()) + ".out"] = std::move(kv.second);
  return out;
}

// Back to the fp32 model's units: v (rows of r.size() channels) times r_c, when `name` is a folded output.
void unfold(const std::map<std::string, std::vector<float>>& folded, const std::string& name, std::vector<float>* v) {
  const auto f = folded.find(name);
  if (f == folded.end()) return;
  for (size_t k = 0; k < v->size(); ++k) (*v)[k] *= f->second[k % f->second.size()];
}

}  // namespace

const char* to_string(CalibMethod m) {
  return m == CalibMethod::kMinmax ? "minmax" : m == CalibMethod::kMse ? "mse" : "percentile";
}

Result<Int8Scales> calibrate_int8(const ModelSpec& spec, const DeviceProfile& device, const float* images, int count,
                                  const CalibOptions& options) {
  EV_ASSIGN_OR_RETURN(std::unique_ptr<Engine> e, observing_engine(spec, Precision::kFp32, device, count, options.threads, false));
  const Graph& g = e->plan().graph;
  const std::vector<std::string> gemms = int8_gemm_names(spec.arch);
  std::vector<int> ids;
  std::vector<bool> shifted;  // fc2's input: observed as u = x + kGemmI8GeluShift on [0, 255] codes
  for (const std::string& gemm : gemms) {
    const int id = tensor_id(g, gemm_input_tensor(gemm));
    if (id < 0) return internal_error("calibration: the fp32 graph has no tensor '" + gemm_input_tensor(gemm) + "'");
    ids.push_back(id);
    shifted.push_back(gemm.size() > 8 && gemm.compare(gemm.size() - 8, 8, ".mlp.fc2") == 0);
  }
  Int8Scales out;
  std::map<int, const std::vector<float>*> folded;  // input tensor id -> its LayerNorm's factors
  if (options.ln_fold) {
    EV_ASSIGN_OR_RETURN(std::unique_ptr<Engine> all,
                        observing_engine(spec, Precision::kFp32, device, count, options.threads, true));
    EV_RETURN_IF_ERROR(fold_factors(*all, spec.arch, images, count, &out.channel_factors));
    for (const auto& kv : out.channel_factors) {
      const std::string norm = kv.first.substr(0, kv.first.size() - std::string(".channel_factor").size());
      folded[tensor_id(g, norm + ".out")] = &kv.second;
    }
  }
  const int64_t per_image = e->input_numel_per_image();
  std::vector<double> amax(gemms.size(), 0.0), rows(gemms.size(), 0.0);
  std::vector<std::vector<double>> sums(gemms.size());  // per input channel, for the bias correction
  for (size_t l = 0; l < gemms.size(); ++l)
    sums[l].assign(static_cast<size_t>(int8_gemm_input_width(spec.arch, gemms[l])), 0.0);
  std::vector<std::vector<double>> hist(gemms.size(), std::vector<double>(kCalibBins, 0.0));
  std::vector<float> v;
  const int passes = options.method == CalibMethod::kMinmax ? 1 : 2;
  for (int pass = 0; pass < passes; ++pass) {
    for (int i = 0; i < count; i += e->max_batch()) {
      const int n = std::min(e->max_batch(), count - i);
      EV_RETURN_IF_ERROR(e->infer(images + static_cast<int64_t>(i) * per_image, n));
      for (size_t l = 0; l < ids.size(); ++l) {
        EV_RETURN_IF_ERROR(read_tensor(*e, ids[l], n, &v));
        const auto fold = folded.find(ids[l]);
        if (fold != folded.end())  // the folded LayerNorm's output y_c / r_c
          for (size_t k = 0; k < v.size(); ++k) v[k] /= (*fold->second)[k % fold->second->size()];
        if (pass == 0) accumulate_channels(v, &sums[l], &rows[l]);
        for (float x : v) {
          // u = x + shift as fc1's epilogue adds it (fp32), clipped at 0 as its saturation does
          const double a = shifted[l] ? std::max(0.0, static_cast<double>(x + kGemmI8GeluShift))
                                      : std::fabs(static_cast<double>(x));
          if (pass == 0) {
            amax[l] = std::max(amax[l], a);
          } else if (amax[l] > 0) {
            const int b = std::min(kCalibBins - 1, static_cast<int>(a / amax[l] * kCalibBins));
            hist[l][static_cast<size_t>(b)] += 1;
          }
        }
      }
    }
  }
  out.method = to_string(options.method);
  out.samples = count;
  for (size_t l = 0; l < gemms.size(); ++l) {
    const double qmax = shifted[l] ? 255.0 : 127.0;
    double s = amax[l] / qmax;
    if (passes == 2 && amax[l] > 0) s = scale_from_histogram(hist[l], amax[l], qmax, options);
    if (!(s > 0) || !std::isfinite(s))
      return check_failed("calibration: the input of '" + gemms[l] + "' is " +
                          (std::isfinite(amax[l]) ? "zero on every calibration image" : "not finite") +
                          ": no scale can be derived");
    out.input_scales[gemms[l] + ".input_scale"] = static_cast<float>(s);
  }
  if (options.bias_correction)
    for (const std::string& gemm : int8_bias_corrected_gemms(spec.arch)) {
      const size_t l = static_cast<size_t>(std::find(gemms.begin(), gemms.end(), gemm) - gemms.begin());
      std::vector<float>& mean = out.input_means[gemm + ".input_mean"];
      for (double sum : sums[l]) mean.push_back(static_cast<float>(sum / rows[l]));
    }
  return out;
}

Result<std::vector<LayerError>> compare_layers(const ModelSpec& a, Precision pa, const ModelSpec& b, Precision pb,
                                               const DeviceProfile& device, const float* images, int count,
                                               int threads) {
  EV_ASSIGN_OR_RETURN(std::unique_ptr<Engine> ea, observing_engine(a, pa, device, count, threads, true));
  EV_ASSIGN_OR_RETURN(std::unique_ptr<Engine> eb, observing_engine(b, pb, device, count, threads, true));
  const Graph& ga = ea->plan().graph;
  const Graph& gb = eb->plan().graph;
  EV_ASSIGN_OR_RETURN(const auto folded_a, folded_outputs(*ea));
  EV_ASSIGN_OR_RETURN(const auto folded_b, folded_outputs(*eb));
  struct Pair {
    std::string name;
    int ia, ib;
    double sig = 0, noise = 0, max_abs = 0;
  };
  std::vector<Pair> pairs;
  for (const TensorDesc& t : ga.tensors) {
    if (t.kind != TensorKind::kActivation && t.kind != TensorKind::kOutput) continue;
    const int ib = tensor_id(gb, t.name);
    if (ib < 0 || gb.tensors[static_cast<size_t>(ib)].numel() != t.numel() || t.name == "x") continue;
    pairs.push_back(Pair{t.name, t.id, ib});
  }
  const int64_t per_image = ea->input_numel_per_image();
  std::vector<float> va, vb;
  for (int i = 0; i < count; i += ea->max_batch()) {
    const int n = std::min(ea->max_batch(), count - i);
    const float* in = images + static_cast<int64_t>(i) * per_image;
    EV_RETURN_IF_ERROR(ea->infer(in, n));
    EV_RETURN_IF_ERROR(eb->infer(in, n));
    for (Pair& p : pairs) {
      EV_RETURN_IF_ERROR(read_tensor(*ea, p.ia, n, &va));
      EV_RETURN_IF_ERROR(read_tensor(*eb, p.ib, n, &vb));
      unfold(folded_a, p.name, &va);
      unfold(folded_b, p.name, &vb);
      for (size_t k = 0; k < va.size(); ++k) {
        const double d = static_cast<double>(vb[k]) - va[k];
        p.sig += static_cast<double>(va[k]) * va[k];
        p.noise += d * d;
        p.max_abs = std::max(p.max_abs, std::fabs(d));
      }
    }
  }
  std::vector<LayerError> out;
  for (const Pair& p : pairs) {
    LayerError l;
    l.tensor = p.name;
    l.rel_error = p.sig > 0 ? std::sqrt(p.noise / p.sig) : std::sqrt(p.noise);
    l.sqnr_db = p.noise > 0 ? 10.0 * std::log10(p.sig / p.noise) : 300.0;
    l.max_abs = p.max_abs;
    out.push_back(l);
  }
  return out;
}

}  // namespace edgevit
