// Text and JSON renderings of a Plan (edgevit plan). Deterministic: no clocks, addresses or locale.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "runtime/plan.h"

namespace edgevit {

namespace {

// INT8 graphs on CUDA with per-tensor scales: the attention writes proj's int8 input (runtime/graph.cpp).
bool attention_writes_int8(const Graph& g) {
  for (const Op& o : g.ops)
    if (o.kind == OpKind::kAttention && o.int8 && g.tensors[static_cast<size_t>(o.outputs[0])].elem_bytes == 1)
      return true;
  return false;
}

std::string human_bytes(int64_t b) {
  char buf[64];
  const double v = static_cast<double>(b);
  if (b >= (int64_t{1} << 30)) std::snprintf(buf, sizeof buf, "%.2f GiB", v / (1 << 30));
  else if (b >= (1 << 20)) std::snprintf(buf, sizeof buf, "%.2f MiB", v / (1 << 20));
  else if (b >= (1 << 10)) std::snprintf(buf, sizeof buf, "%.1f KiB", v / (1 << 10));
  else std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(b));
  return buf;
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? "," : "") + std::to_string(s[i]);
  return out + "]";
}

// Roofline estimate for one op on a CUDA profile: max(FLOPs / tensor rate, bytes / DRAM bandwidth).
struct Predicted {
  double us = 0;
  bool memory_bound = false;
};
// INT8 GEMMs (Op::int8) run at the profile's int8 tensor rate.
Predicted predict(const Op& o, const DeviceProfile& d) {
  Predicted p;
  const bool i8 = o.int8 && o.kind == OpKind::kLinear && d.int8_dense_tops > 0;
  const double rate = i8 ? d.int8_dense_tops : d.fp16_dense_tflops;
  const double compute_us = rate > 0 ? o.flops / (rate * 1e12) * 1e6 : 0;
  const double memory_us = d.dram_bandwidth_gbps > 0 ? o.bytes / (d.dram_bandwidth_gbps * 1e9) * 1e6 : 0;
  p.memory_bound = memory_us >= compute_us;
  p.us = std::max(compute_us, memory_us);
  return p;
}

// INT8 plans (docs/int8.md): the W8A8 weights and scales, and where the activation scales come from.
struct Int8Summary {
  int gemms = 0;
  int64_t weight_bytes = 0, weight_scale_bytes = 0, input_scale_bytes = 0;
  std::string gemm_kernel;
};
Int8Summary int8_summary(const Plan& p) {
  Int8Summary s;
  for (const TensorDesc& t : p.graph.tensors) {
    if (t.kind != TensorKind::kWeight) continue;
    const std::string& n = t.name;
    if (t.elem_bytes == 1) s.weight_bytes += t.bytes();
    else if (n.size() > 13 && n.compare(n.size() - 13, 13, ".weight_scale") == 0) s.weight_scale_bytes += t.bytes();
    else if (n.size() > 12 && n.compare(n.size() - 12, 12, ".input_scale") == 0) s.input_scale_bytes += t.bytes();
  }
  for (const Op& o : p.graph.ops) {
    if (!o.int8 || o.kind != OpKind::kLinear) continue;
    ++s.gemms;
    if (s.gemm_kernel.empty()) s.gemm_kernel = o.kernel;
  }
  return s;
}

bool is_planned(const TensorDesc& t) {
  return t.kind == TensorKind::kActivation || t.kind == TensorKind::kScratch;
}

}  // namespace

namespace {

// Non-verbose listings show the stem, block 0, the head, and the last block when it is the class-token tail
// (runtime/graph.h), which differs from block 0.
struct Listing {
  const Plan& p;
  bool verbose;
  bool hidden(const std::string& name) const {
    const std::string last_block = "blocks." + std::to_string(p.graph.arch.depth - 1) + ".";
    return !verbose && name.rfind("blocks.", 0) == 0 && name.rfind("blocks.0.", 0) != 0 &&
           !(p.class_token_tail && name.rfind(last_block, 0) == 0);
  }
};

void header_text(const Plan& p, std::ostringstream& os) {
  const Graph& g = p.graph;
  os << "plan: model " << p.model_name << " on " << p.device.name << " (" << to_string(p.device.kind)
     << "), batch " << g.batch << ", " << to_string(g.precision) << ", plan hash " << p.hash_hex() << "\n";
  const VitArch& a = g.arch;
  os << "input: " << a.num_tokens() << " tokens at " << a.img_h << "x" << a.img_w << " (" << a.grid_h() << "x"
     << a.grid_w() << " patches of " << a.patch_size << " + " << a.num_prefix_tokens() << " prefix)\n";
  os << "attention: " << p.attention_kernel << " -- " << p.attention_reason << "\n";
  os << "kernels: "
     << (p.resolved ? "resolved: what this engine runs (library, tiles, algorithm and row pinned at start-up)"
                    : "forecast from the op table; an engine resolves them to what runs on its machine "
                      "(`run -v`, `bench --profile`)")
     << "\n";
  for (const std::string& n : p.notes) os << "note: " << n << "\n";
  if (g.precision == Precision::kInt8) {
    const Int8Summary s = int8_summary(p);
    os << "int8: " << s.gemms << " block GEMMs W8A8 (" << s.gemm_kernel << "): int8 weights " << s.weight_bytes
       << " bytes, per-channel weight scales " << s.weight_scale_bytes << " bytes, activation scales "
       << (g.int8_per_token()
               ? std::string("per token at run time")
               : std::string(g.int8_activations == Int8Activations::kNormPerToken
                                 ? "the LayerNorm outputs' per token at run time, proj's and fc2's inputs' per tensor, "
                                 : "per tensor, ") +
                     std::to_string(s.input_scale_bytes) + " bytes from " +
                     (p.int8_scales_path.empty() ? "(runtime.int8_scales not set: run `edgevit calibrate`)"
                                                 : p.int8_scales_path))
       << (g.int8_attention ? "; qkv writes int8 Q and K with a scale per (token, head) and float V for the INT8 "
                              "attention (runtime.int8_attention: int8)"
                            : "")
       << (attention_writes_int8(g) ? "; the attention writes proj's int8 input at its calibrated scale" : "")
       << "; LayerNorm, softmax, residual and the other ops " << to_string(g.int8_rest)
       << (g.int8_rest == Precision::kFp32 ? ", the float GEMMs, norms and attention in float64 rounded once (the "
                                             "twin rows: the same fp32 values on CPU and CUDA)"
                                           : "")
       << " (docs/int8.md)\n";
  }
  for (const TuningRecord& t : p.tuning)
    os << "tuned: " << t.op << " at batch " << t.batch << ": " << t.choice << (t.detail.empty() ? "" : " (" + t.detail + ")")
       << "\n";
  os << "\n";
}

void tensors_text(const Listing& l, std::ostringstream& os) {
  const Plan& p = l.p;
  const Graph& g = p.graph;
  char line[512];
  os << "tensors (non-weight; offsets from the arena base):\n";
  std::snprintf(line, sizeof line, "  %-26s %-10s %-20s %12s %12s %5s %5s\n", "name", "kind", "shape", "offset",
                "bytes", "first", "last");
  os << line;
  for (const TensorDesc& t : g.tensors) {
    if (t.kind == TensorKind::kWeight) continue;
    if (is_planned(t) && l.hidden(t.name)) continue;
    std::snprintf(line, sizeof line, "  %-26s %-10s %-20s %12lld %12lld %5d %5d\n", t.name.c_str(),
                  to_string(t.kind), shape_str(t.shape).c_str(), static_cast<long long>(p.offsets[t.id]),
                  static_cast<long long>(t.bytes()), t.first_op, t.last_op);
    os << line;
  }
  const bool tail = p.class_token_tail;
  if (!l.verbose && g.arch.depth > 1) {
    const int last_same = tail ? g.arch.depth - 2 : g.arch.depth - 1;
    if (last_same >= 1) os << "  (blocks 1.." << last_same << " repeat block 0's pattern";
    else os << "  (";
    if (tail) os << (last_same >= 1 ? "; " : "") << "block " << g.arch.depth - 1
                 << " is the class-token tail: one query and one row per image after its qkv";
    os << "; --verbose lists all)\n";
  }
  int weight_count = 0;
  for (const TensorDesc& t : g.tensors) weight_count += t.kind == TensorKind::kWeight;
  os << "  weights: " << weight_count << " tensors, " << p.weights_bytes << " bytes at offset 0\n\n";
}

// Arena occupancy chart of the planned region: one row per op, 64 columns over the region.
void arena_chart_text(const Listing& l, std::ostringstream& os) {
  const Plan& p = l.p;
  const Graph& g = p.graph;
  char line[512];
  const int64_t base = p.weights_bytes + p.io_bytes;
  const int64_t region = std::max<int64_t>(p.activations_bytes, 1);
  const int kCols = 64;
  os << "activation arena over the op sequence (" << human_bytes(p.activations_bytes)
     << ", each column " << human_bytes((region + kCols - 1) / kCols) << "; # live, . free):\n";
  for (size_t i = 0; i < g.ops.size(); ++i) {
    const Op& o = g.ops[i];
    if (l.hidden(o.name)) continue;
    std::string bar(kCols, '.');
    int64_t live = 0;
    for (const TensorDesc& t : g.tensors) {
      if (!is_planned(t) || static_cast<int>(i) < t.first_op || static_cast<int>(i) > t.last_op) continue;
      live += t.bytes();
      const int64_t lo = p.offsets[t.id] - base, hi = lo + t.bytes();
      for (int c = 0; c < kCols; ++c) {
        const int64_t c_lo = region * c / kCols, c_hi = region * (c + 1) / kCols;
        if (lo < c_hi && hi > c_lo) bar[c] = '#';
      }
    }
    std::snprintf(line, sizeof line, "  %3zu %-26s |%s| %s\n", i, o.name.c_str(), bar.c_str(), human_bytes(live).c_str());
    os << line;
  }
  os << "\n";
}

void roofline_text(const Listing& l, std::ostringstream& os) {
  const Plan& p = l.p;
  if (p.device.kind != DeviceKind::kCuda) return;
  char line[512];
  double total_us = 0;
  std::ostringstream ops;
  for (const Op& o : p.graph.ops) {
    const Predicted pr = predict(o, p.device);
    total_us += pr.us;
    if (l.hidden(o.name)) continue;
    std::snprintf(line, sizeof line, "  %-26s %-40s %8.2f GFLOP %9.2f MB %9.2f us %s\n", o.name.c_str(),
                  o.kernel.c_str(), o.flops / 1e9, o.bytes / 1e6, pr.us, pr.memory_bound ? "memory" : "compute");
    ops << line;
  }
  std::snprintf(line, sizeof line, "%.3f ms", total_us / 1e3);
  os << "predicted (roofline from the profile: " << p.device.fp16_dense_tflops << " TFLOP/s fp16, ";
  if (p.graph.precision == Precision::kInt8) os << p.device.int8_dense_tops << " TOP/s int8, ";
  os << p.device.dram_bandwidth_gbps << " GB/s; a floor, not a measurement): total " << line << "\n"
     << ops.str() << "\n";
}

void bytes_line(std::ostringstream& os, const char* label, int64_t bytes, const std::string& extra = "") {
  char line[512];
  std::snprintf(line, sizeof line, "  %-34s %14lld  (%s%s)\n", label, static_cast<long long>(bytes),
                human_bytes(bytes).c_str(), extra.c_str());
  os << line;
}

// "logits [8, 1000], embedding [8, 768] (tensor pre_logits), pre_logits [8, 768]": each named output with its
// tensor's shape at the plan's batch; an embedding held by another output's tensor names that tensor.
std::string outputs_text(const Graph& g) {
  std::string s;
  for (OutputKind k : g.outputs.kinds()) {
    const TensorDesc& t = g.tensors[static_cast<size_t>(output_tensor(g, k))];
    s += (s.empty() ? "" : ", ") + std::string(to_string(k));
    s += " [";
    for (size_t i = 0; i < t.shape.size(); ++i) s += (i ? ", " : "") + std::to_string(t.shape[i]);
    s += "]";
    if (k == OutputKind::kEmbedding && t.name != "embedding") s += " (tensor " + t.name + ")";
  }
  return s;
}

void memory_text(const Plan& p, std::ostringstream& os) {
  char line[512];
  os << "memory:\n";
  bytes_line(os, "weights", p.weights_bytes);
  bytes_line(os, "io (input + outputs)", p.io_bytes, "; outputs: " + outputs_text(p.graph));
  bytes_line(os, "activations (planned)", p.activations_bytes,
             "; lower bound " + std::to_string(p.activations_lower_bound_bytes));
  bytes_line(os, "workspace", p.workspace_bytes);
  if (p.int8_split_workspace_bytes > 0)
    bytes_line(os, "  of which INT8 split-K (zeroed)", p.int8_split_workspace_bytes,
               "; counters + partial tiles, never shared with activations");
  bytes_line(os, "arena total", p.arena_bytes, "; lower bound " + std::to_string(p.lower_bound_bytes));
  os << "process memory (everything the engine holds):\n";
  for (const MemoryLine& l : p.memory) {
    std::snprintf(line, sizeof line, "  %-6s %-58s %14lld  (%s; %s%s)\n", to_string(l.space), l.name.c_str(),
                  static_cast<long long>(l.bytes), human_bytes(l.bytes).c_str(), l.basis.c_str(),
                  l.load_only ? "; not in the total" : "");
    os << line;
  }
  bytes_line(os, "host total", p.host_total_bytes);
  if (p.device.kind == DeviceKind::kCuda) bytes_line(os, "device total", p.device_total_bytes);
  const char* total_label = p.device.kind == DeviceKind::kCpu ? "total (host)"
                            : p.device.unified_memory   ? "total (host + device: unified memory)"
                                                        : "total (device memory)";
  bytes_line(os, total_label, p.total_bytes);
  if (p.load_peak_extra_bytes > 0) bytes_line(os, "during load, also", p.load_peak_extra_bytes);
  bytes_line(os, "budget", p.budget_bytes);
  if (p.fits) {
    os << "verdict: FITS (" << p.budget_bytes - p.total_bytes << " bytes to spare)\n";
  } else {
    os << "verdict: DOES NOT FIT (" << does_not_fit_message(p) << ")\n";
  }
}

}  // namespace

std::string format_plan_text(const Plan& p, bool verbose) {
  std::ostringstream os;
  const Listing listing{p, verbose};
  header_text(p, os);
  tensors_text(listing, os);
  arena_chart_text(listing, os);
  roofline_text(listing, os);
  memory_text(p, os);
  return os.str();
}

namespace {

// The plan JSON's `ops` (each op's row, kernel, reason, cost and, on CUDA, the roofline's prediction) and
// `predicted_total_us` (format_plan_json).
void add_ops_json(const Plan& p, nlohmann::ordered_json* out) {
  using nlohmann::ordered_json;
  const Graph& g = p.graph;
  ordered_json& j = *out;
  ordered_json ops = ordered_json::array();
  double total_us = 0;
  for (const Op& o : g.ops) {
    ordered_json jo{{"name", o.name}, {"op", to_string(o.kind)}, {"row", o.row}, {"kernel", o.kernel}, {"reason", o.reason},
                    {"flops", o.flops}, {"bytes", o.bytes}};
    if (g.precision == Precision::kInt8) jo["precision"] = to_string(op_precision(o, g));
    if (p.device.kind == DeviceKind::kCuda) {
      const Predicted pr = predict(o, p.device);
      jo["predicted_us"] = pr.us;
      total_us += pr.us;
    }
    ops.push_back(jo);
  }
  j["ops"] = ops;
  if (p.device.kind == DeviceKind::kCuda) j["predicted_total_us"] = total_us;
}

}  // namespace

std::string format_plan_json(const Plan& p) {
  using nlohmann::ordered_json;
  ordered_json j;
  const Graph& g = p.graph;
  j["model"] = p.model_name;
  j["device"] = p.device.name;
  j["device_kind"] = to_string(p.device.kind);
  j["batch"] = g.batch;
  j["precision"] = to_string(g.precision);
  j["plan_hash"] = p.hash_hex();
  j["image_size"] = {g.arch.img_h, g.arch.img_w};  // (height, width)
  j["tokens"] = g.arch.num_tokens();
  j["kernels_resolved"] = p.resolved;
  j["arena_bytes"] = p.arena_bytes;
  j["lower_bound_bytes"] = p.lower_bound_bytes;
  j["weights_bytes"] = p.weights_bytes;
  j["io_bytes"] = p.io_bytes;
  j["activations_bytes"] = p.activations_bytes;
  j["activations_lower_bound_bytes"] = p.activations_lower_bound_bytes;
  j["workspace_bytes"] = p.workspace_bytes;
  j["int8_split_workspace_bytes"] = p.int8_split_workspace_bytes;
  j["context_bytes"] = p.context_bytes;
  ordered_json memory = ordered_json::array();
  for (const MemoryLine& l : p.memory)
    memory.push_back({{"name", l.name}, {"space", to_string(l.space)}, {"bytes", l.bytes}, {"basis", l.basis},
                      {"load_only", l.load_only}});
  j["memory"] = memory;
  j["host_total_bytes"] = p.host_total_bytes;
  j["device_total_bytes"] = p.device_total_bytes;
  j["load_peak_extra_bytes"] = p.load_peak_extra_bytes;
  j["unified_memory"] = p.device.unified_memory;
  j["total_bytes"] = p.total_bytes;
  j["budget_bytes"] = p.budget_bytes;
  j["fits"] = p.fits;
  j["attention_kernel"] = p.attention_kernel;
  j["attention_reason"] = p.attention_reason;
  j["attention_fallback"] = p.attention_fallback;
  j["class_token_tail"] = p.class_token_tail;
  ordered_json outputs = ordered_json::array();
  for (OutputKind k : g.outputs.kinds()) {
    const TensorDesc& t = g.tensors[static_cast<size_t>(output_tensor(g, k))];
    outputs.push_back(
        {{"name", to_string(k)}, {"tensor", t.name}, {"shape", t.shape}, {"staged_bytes", t.numel() * 4}});
  }
  j["outputs"] = outputs;
  j["notes"] = p.notes;
  if (g.precision == Precision::kInt8) {
    const Int8Summary s = int8_summary(p);
    j["int8"] = {{"gemms", s.gemms}, {"weight_bytes", s.weight_bytes}, {"weight_scale_bytes", s.weight_scale_bytes},
                 {"input_scale_bytes", s.input_scale_bytes},
                 {"activation_scales", to_string(g.int8_activations)},
                 {"scales_file", p.int8_scales_path}, {"float", to_string(g.int8_rest)},
                 {"attention", g.int8_attention ? "int8" : "float"}};
  }
  ordered_json tuning = ordered_json::array();
  for (const TuningRecord& t : p.tuning)
    tuning.push_back({{"op", t.op}, {"batch", t.batch}, {"choice", t.choice}, {"detail", t.detail}});
  j["tuning"] = tuning;
  ordered_json tensors = ordered_json::array();
  for (const TensorDesc& t : g.tensors) {
    tensors.push_back({{"name", t.name}, {"kind", to_string(t.kind)}, {"shape", t.shape},
                       {"offset", p.offsets[t.id]}, {"bytes", t.bytes()}, {"first_op", t.first_op},
                       {"last_op", t.last_op}});
  }
  j["tensors"] = tensors;
  add_ops_json(p, &j);
  return j.dump(1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace edgevit
