// edgevit: the command-line tool. Subcommands: run, plan, bench, devices, import, client, calibrate, compare.
// Every failure prints "edgevit: error: <message>" on stderr and exits with the documented code of its
// status kind (docs/exit-codes.md); usage errors exit 2.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <stb_image.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <numeric>

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "platform/detect.h"
#include "programs/edgevit/cmd_int8.h"
#include "platform/device_registry.h"
#include "runtime/config.h"
#include "runtime/engine.h"
#include "runtime/host_info.h"
#include "runtime/importer.h"
#include "runtime/inputs.h"
#include "runtime/labels.h"
#include "runtime/safetensors.h"
#include "runtime/topk.h"
#include "programs/edgevit/run_outputs.h"
#include "serving/client.h"

namespace ev = edgevit;

namespace {

int fail(const ev::Status& s) {
  std::fprintf(stderr, "edgevit: error: %s\n", s.message().c_str());
  return ev::exit_code_for(s.code());
}

struct DeviceChoice {
  ev::DeviceProfile profile;
  std::string how;  // "detected from /proc/device-tree/model" / "profile config/devices/x.yaml"
};

ev::Result<DeviceChoice> resolve_device(const std::string& name, const std::vector<std::string>& dirs) {
  DeviceChoice c;
  if (name.empty() || name == "auto") {
    EV_ASSIGN_OR_RETURN(ev::Detection d, ev::detect_device(dirs));
    c.profile = d.profile;
    c.how = "auto-detected: " + d.source + (d.details.empty() ? "" : " (" + d.details + ")");
    return c;
  }
  EV_ASSIGN_OR_RETURN(c.profile, ev::find_device_profile(name, dirs));
  c.how = "profile " + c.profile.source;
  return c;
}

ev::Result<ev::Precision> parse_precision(const std::string& s) {
  if (s == "fp32") return ev::Precision::kFp32;
  if (s == "fp16") return ev::Precision::kFp16;
  if (s == "int8") return ev::Precision::kInt8;
  return ev::invalid_argument("--precision must be fp32, fp16 or int8, got '" + s + "'");
}

ev::Result<ev::AttentionImpl> parse_attention(const std::string& s) {
  if (s == "auto") return ev::AttentionImpl::kAuto;
  if (s == "fused") return ev::AttentionImpl::kFused;
  if (s == "explicit" || s == "unfused") return ev::AttentionImpl::kExplicit;
  return ev::invalid_argument("--attention must be auto, fused or explicit, got '" + s + "'");
}

struct CommonOpts {
  std::string model;
  std::string device = "auto";
  int batch = 0;
  std::string precision;
  std::string attention;
  std::string int8_float;  // PlanOptions::int8_float
  int threads = 0;
  bool verbose = false;
  bool no_gemm_tuning = false;  // run, bench: EngineOptions::tune_gemms = false
  bool no_attention_tuning = false;  // run, bench: EngineOptions::tune_attention = false
  bool all_tokens = false;  // PlanOptions::all_tokens
  bool tokens = false;      // PlanOptions::tokens: the tokens output too
};


ev::Result<ev::PlanOptions> plan_options(const CommonOpts& o) {
  ev::PlanOptions p;
  p.batch = o.batch;
  p.all_tokens = o.all_tokens;
  p.tokens = o.tokens;
  if (!o.precision.empty()) { EV_ASSIGN_OR_RETURN(ev::Precision pr, parse_precision(o.precision)); p.precision = pr; }
  if (!o.attention.empty()) { EV_ASSIGN_OR_RETURN(ev::AttentionImpl a, parse_attention(o.attention)); p.attention = a; }
  if (!o.int8_float.empty()) {
    if (o.int8_float != "fp16" && o.int8_float != "fp32")
      return ev::invalid_argument("--int8-float must be fp16 or fp32, got '" + o.int8_float + "'");
    p.int8_float = o.int8_float == "fp16" ? ev::Precision::kFp16 : ev::Precision::kFp32;
  }
  return p;
}

// What run, plan and bench all start from: the model config, the device and the plan options.
struct Setup {
  ev::ModelSpec spec;
  DeviceChoice device;
  ev::PlanOptions plan;
};

ev::Result<Setup> load_setup(const CommonOpts& o, const std::vector<std::string>& dirs) {
  Setup s;
  EV_ASSIGN_OR_RETURN(s.spec, ev::load_model_spec(o.model));
  EV_ASSIGN_OR_RETURN(s.device, resolve_device(o.device, dirs));
  EV_ASSIGN_OR_RETURN(s.plan, plan_options(o));
  return s;
}

// Loud fallbacks: whatever prints the plan or runs it says when attention is not fused, and why.
void announce_plan(const ev::Plan& plan, bool verbose) {
  if (plan.attention_fallback) spdlog::warn("attention fallback: {} ({})", plan.attention_kernel, plan.attention_reason);
  if (verbose) {
    std::fprintf(stderr, "plan %s: arena %lld bytes (weights %lld, activations %lld, workspace %lld), attention %s: %s\n",
                 plan.hash_hex().c_str(), static_cast<long long>(plan.arena_bytes),
                 static_cast<long long>(plan.weights_bytes), static_cast<long long>(plan.activations_bytes),
                 static_cast<long long>(plan.workspace_bytes), plan.attention_kernel.c_str(),
                 plan.attention_reason.c_str());
  }
}

// CPU engines: which GEMM library runs (-v), and loudly any layer that fell back from it.
void announce_cpu_gemm(const ev::Engine& e, bool verbose) {
  if (e.plan().device.kind != ev::DeviceKind::kCpu) return;
  if (verbose) std::fprintf(stderr, "CPU GEMM: %s; OpenBLAS core %s\n", ev::host_gemm_library(), ev::host_blas_core());
  for (const ev::OpTiming& t : e.op_timings())
    if (t.kernel.find("FALLBACK") != std::string::npos) spdlog::warn("{}: {}", t.name, t.kernel);
}

// CUDA engines (-v, bench --profile; on stderr): the cuBLASLt algorithm pinned per GEMM
// (EngineOptions::tune_gemms), summed per captured batch size, and GEMM by GEMM for `batch`.
void announce_gemm_choices(const ev::Engine& e, bool verbose, int batch) {
  const std::vector<ev::GemmChoice>& cs = e.gemm_choices();
  if (!verbose || cs.empty()) return;
  if (cs.front().candidates == 0) {
    std::fprintf(stderr, "cuBLASLt GEMM algorithms: the heuristic's first, pinned untimed (--no-gemm-tuning)\n");
    return;
  }
  for (size_t i = 0; i < cs.size();) {
    const int b = cs[i].batch;
    int count = 0, changed = 0;
    double first = 0, chosen = 0;
    for (; i < cs.size() && cs[i].batch == b; ++i, ++count) {
      changed += cs[i].chosen != 0;
      first += cs[i].first_us;
      chosen += cs[i].chosen_us;
    }
    std::fprintf(stderr,
                 "cuBLASLt GEMM algorithms, batch %d: %d GEMMs (tuned at init), %d pinned another than the heuristic's "
                 "first; sum of medians %.1f us (first choices) -> %.1f us\n",
                 b, count, changed, first, chosen);
  }
  std::fprintf(stderr,
               "  %-26s %-9s %10s %10s  %s   (batch %d; algo#k/C: k-th of C timed candidates, the heuristic's results "
               "first, then cluster-1 and split-K variants; 'in a chain of N': timed as N same-shape GEMMs replayed "
               "back to back)\n",
               "op", "algo", "us", "first us", "configuration", batch);
  for (const ev::GemmChoice& c : cs) {
    if (c.batch != batch) continue;
    const std::string pick = "#" + std::to_string(c.chosen) + "/" + std::to_string(c.candidates);
    std::string same = c.timed_as.empty() ? "" : "  (timed as " + c.timed_as + ")";
    if (c.chain > 1) same += "  (in a chain of " + std::to_string(c.chain) + ")";
    std::fprintf(stderr, "  %-26s %-9s %10.2f %10.2f  %s%s\n", c.op.c_str(), pick.c_str(), c.chosen_us, c.first_us,
                 c.algo.c_str(), same.c_str());
  }
}

// CUDA engines (-v, bench --profile; on stderr): the attention kernel per captured batch size on this device.
void announce_attention_choices(const ev::Engine& e, bool verbose) {
  const std::vector<ev::AttentionChoice>& cs = e.attention_choices();
  if (!verbose || cs.empty()) return;
  std::fprintf(stderr, "attention per captured batch size on this device (the plan names batch %d on its profile):\n",
               e.max_batch());
  for (const ev::AttentionChoice& c : cs) {
    std::fprintf(stderr, "  batch %-4d seq_q %-5d %s\n", c.batch, c.seq_q, c.kernel.c_str());
    if (c.candidates > 0 && c.kernel != c.table_kernel)
      std::fprintf(stderr, "             timed %d rows: %.2f us, the table's %s %.2f us\n", c.candidates, c.chosen_us,
                   c.table_kernel.c_str(), c.table_us);
    else if (c.candidates > 0)
      std::fprintf(stderr, "             timed %d rows: the table's row is the fastest (%.2f us)\n", c.candidates,
                   c.chosen_us);
    std::fprintf(stderr, "             table: %s\n", c.reason.c_str());
  }
}

// CUDA INT8 engines (-v, bench --profile; on stderr): the gemm_i8 tile row or cuBLASLt IMMA algorithm each INT8
// GEMM runs (the plan's tuning records whose choice is a gemm_i8 row, kernels/cuda/gemm_i8.h, or "lt_imma ...",
// kernels/cuda/gemm_i8_lt.h), counted per captured batch size and GEMM role, then op by op for `batch` with what
// start-up timed.
void announce_gemm_i8_rows(const ev::Engine& e, bool verbose, int batch) {
  std::vector<const ev::TuningRecord*> rs;
  for (const ev::TuningRecord& t : e.plan().tuning)
    if (t.choice.rfind("i8_", 0) == 0 || t.choice.rfind("lt_imma ", 0) == 0) rs.push_back(&t);
  if (!verbose || rs.empty()) return;
  std::fprintf(stderr, "gemm_i8 rows per captured batch size (role: row x GEMMs):\n");
  std::vector<int> batches;
  for (const ev::TuningRecord* t : rs)
    if (std::find(batches.begin(), batches.end(), t->batch) == batches.end()) batches.push_back(t->batch);
  std::sort(batches.begin(), batches.end());
  for (int b : batches) {
    std::vector<std::pair<std::string, int>> counts;  // "role: row", in first-seen order
    for (const ev::TuningRecord* t : rs) {
      if (t->batch != b) continue;
      const size_t dot = t->op.find('.', t->op.find('.') + 1);  // "blocks.3.attn.qkv" -> "attn.qkv"
      const std::string key = (dot == std::string::npos ? t->op : t->op.substr(dot + 1)) + ": " + t->choice;
      auto it = std::find_if(counts.begin(), counts.end(), [&](const auto& c) { return c.first == key; });
      if (it == counts.end()) counts.emplace_back(key, 1);
      else ++it->second;
    }
    std::string line;
    for (const auto& c : counts) line += (line.empty() ? "" : ", ") + c.first + " x" + std::to_string(c.second);
    std::fprintf(stderr, "  batch %-4d %s\n", b, line.c_str());
  }
  std::fprintf(stderr, "  %-26s %-28s %s   (batch %d)\n", "op", "row", "start-up timing", batch);
  for (const ev::TuningRecord* t : rs)
    if (t->batch == batch)
      std::fprintf(stderr, "  %-26s %-28s %s\n", t->op.c_str(), t->choice.c_str(), t->detail.c_str());
}

std::vector<float> softmax_row(const float* x, int n) {
  std::vector<float> p(n);
  const float m = *std::max_element(x, x + n);
  double s = 0;
  for (int i = 0; i < n; ++i) s += std::exp(static_cast<double>(x[i]) - m);
  for (int i = 0; i < n; ++i) p[i] = static_cast<float>(std::exp(static_cast<double>(x[i]) - m) / s);
  return p;
}

// Grey text art of an image file, at most max_cols characters wide (2 characters per pixel column when
// small, since terminal cells are about twice as tall as wide). Empty when the file is not an image.
std::vector<std::string> text_art(const std::string& path, int max_cols) {
  int w = 0, h = 0, c = 0;
  std::unique_ptr<stbi_uc, void (*)(void*)> pix(stbi_load(path.c_str(), &w, &h, &c, 1), stbi_image_free);
  std::vector<std::string> rows;
  if (!pix || w <= 0 || h <= 0) return rows;
  const char* ramp = " .:-=+*#%@";
  const int cols = std::min(w, max_cols / 2);
  const int nrows = std::max(1, h * cols / w);
  for (int r = 0; r < nrows; ++r) {
    std::string line;
    for (int col = 0; col < cols; ++col) {
      const int y = r * h / nrows, x = col * w / cols;
      const int v = pix.get()[y * w + x];
      const char ch = ramp[v * 9 / 255];
      line += ch;
      line += ch;
    }
    rows.push_back(line);
  }
  return rows;
}

nlohmann::ordered_json profile_json(const ev::DeviceProfile& p) {
  return {{"name", p.name}, {"kind", ev::to_string(p.kind)}, {"description", p.description},
          {"compute_capability", p.compute_capability}, {"sm_count", p.sm_count},
          {"smem_per_block_optin_bytes", p.smem_per_block_optin_bytes},
          {"memory_total_bytes", p.memory_total_bytes}, {"memory_budget_bytes", p.memory_budget_bytes},
          {"unified_memory", p.unified_memory}, {"dram_bandwidth_gbps", p.dram_bandwidth_gbps},
          {"fp16_dense_tflops", p.fp16_dense_tflops}, {"cpu_cores", p.cpu_cores}, {"source", p.source}};
}

int cmd_devices(const std::vector<std::string>& dirs, bool json) {
  std::vector<ev::Status> errors;
  const auto profiles = ev::list_device_profiles(dirs, &errors);
  if (json) {
    nlohmann::ordered_json arr = nlohmann::ordered_json::array();
    for (const auto& p : profiles)
      arr.push_back(profile_json(p));
    std::cout << arr.dump(1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
  } else {
    std::printf("%-16s %-5s %-5s %4s %9s %10s %10s %9s %7s  %s\n", "name", "kind", "sm", "SMs", "smem/blk",
                "memory", "budget", "DRAM GB/s", "TFLOPS", "description");
    for (const auto& p : profiles) {
      const std::string sm = p.kind == ev::DeviceKind::kCuda ? std::to_string(p.compute_capability) : "-";
      std::printf("%-16s %-5s %-5s %4d %8lldK %9.1fG %9.1fG %9.1f %7.1f  %s\n", p.name.c_str(), ev::to_string(p.kind),
                  sm.c_str(), p.sm_count, static_cast<long long>(p.smem_per_block_optin_bytes / 1024),
                  p.memory_total_bytes / 1e9, p.memory_budget_bytes / 1e9, p.dram_bandwidth_gbps,
                  p.fp16_dense_tflops, p.description.c_str());
    }
  }
  for (const auto& e : errors) spdlog::warn("skipped profile: {}", e.message());
  if (profiles.empty()) return fail(ev::not_found("no device profiles found (searched the config directories)"));
  return 0;
}

// `devices --detect`: what detect_device chose on this machine and how (the same detection `--device auto`
// uses), then every field of the profile it produced.
int cmd_devices_detect(const std::vector<std::string>& dirs, bool json) {
  auto d = ev::detect_device(dirs);
  if (!d.ok()) return fail(d.status());
  const ev::DeviceProfile& p = d->profile;
  if (json) {
    nlohmann::ordered_json j = {{"source", d->source}, {"details", d->details}, {"profile", profile_json(p)}};
    std::cout << j.dump(1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
    return 0;
  }
  std::printf("detected: %s\n  found by: %s\n", p.name.c_str(), d->source.c_str());
  if (!d->details.empty()) std::printf("  how: %s\n", d->details.c_str());
  std::printf("  profile: %s\n", p.source.c_str());
  if (p.kind == ev::DeviceKind::kCuda) {
    std::printf("  kind cuda, compute capability %d, %d SMs, %lld KB opt-in shared memory per block\n",
                p.compute_capability, p.sm_count, static_cast<long long>(p.smem_per_block_optin_bytes / 1024));
  } else {
    std::printf("  kind %s\n", ev::to_string(p.kind));
  }
  std::printf("  memory %.2f GB total, %.2f GB budget%s, %d CPU cores\n", p.memory_total_bytes / 1e9,
              p.memory_budget_bytes / 1e9, p.unified_memory ? " (unified: CPU and GPU share it)" : "",
              p.cpu_cores);
  std::printf("  DRAM %.1f GB/s%s\n", p.dram_bandwidth_gbps,
              p.kind == ev::DeviceKind::kCuda ? (", fp16 " + std::to_string(p.fp16_dense_tflops) + " TFLOPS dense").c_str()
                                              : " (from the profile)");
  return 0;
}

int cmd_plan(const CommonOpts& o, const std::vector<std::string>& dirs, bool json) {
  auto setup = load_setup(o, dirs);
  if (!setup.ok()) return fail(setup.status());
  const ev::ModelSpec* spec = &setup->spec;
  const DeviceChoice* dev = &setup->device;
  const ev::PlanOptions* popts = &setup->plan;
  auto plan = ev::make_plan(*spec, dev->profile, *popts);
  if (!plan.ok()) return fail(plan.status());
  if (plan->attention_fallback) spdlog::warn("attention fallback: {} ({})", plan->attention_kernel, plan->attention_reason);
  if (json) {
    std::cout << ev::format_plan_json(*plan) << "\n";
  } else {
    std::cout << "device: " << dev->profile.name << " (" << dev->how << ")\n" << ev::format_plan_text(*plan, o.verbose);
  }
  // A plan that does not fit is an answer, not an error: exit 6 so scripts can branch on it.
  return plan->fits ? 0 : ev::exit_code_for(ev::StatusCode::kDoesNotFit);
}

struct RunOpts {
  std::string input;
  std::string output;
  int topk = 5;
  bool show = false;
};

// The top-k classes of each of the n rows of `logits` (at most 32 rows printed), with --show's text art
// beside a single image.
void print_predictions(const float* logits, int n, int out_dim, const std::vector<std::string>& labels,
                       const RunOpts& r) {
  const int k = std::max(1, std::min(r.topk, out_dim));
  for (int i = 0; i < n; ++i) {
    const float* row = logits + static_cast<size_t>(i) * out_dim;
    const std::vector<float> prob = softmax_row(row, out_dim);
    const std::vector<std::pair<int, float>> best = ev::top_k(row, out_dim, k);
    std::vector<std::string> lines;
    if (n > 1) lines.push_back("image " + std::to_string(i) + ":");
    for (int j = 0; j < k; ++j) {
      const int c = best[j].first;
      const std::string label = c < static_cast<int>(labels.size()) ? labels[c] : "class " + std::to_string(c);
      char buf[256];
      std::snprintf(buf, sizeof buf, "%s%d. %-20s p=%.4f  logit=%.4f  [%d]", j == 0 ? "" : "", j + 1, label.c_str(),
                    prob[c], row[c], c);
      lines.push_back(buf);
    }
    if (i == 0 && n == 1) {
      const int c = best[0].first;
      const std::string top = c < static_cast<int>(labels.size()) ? labels[c] : "class " + std::to_string(c);
      std::printf("prediction: %s (p=%.4f)\n", top.c_str(), prob[c]);
    }
    std::vector<std::string> art = (r.show && n == 1) ? text_art(r.input, 40) : std::vector<std::string>{};
    const size_t rows = std::max(lines.size(), art.size());
    size_t art_w = 0;
    for (const auto& a : art) art_w = std::max(art_w, a.size());
    for (size_t j = 0; j < rows; ++j) {
      std::string left = j < art.size() ? art[j] : std::string(art_w, ' ');
      if (!art.empty()) left = "|" + left + "|   ";
      std::printf("  %s%s\n", left.c_str(), j < lines.size() ? lines[j].c_str() : "");
    }
    if (i >= 31 && n > 32) {
      std::printf("  ... (%d more images; use --output to get every row)\n", n - 32);
      break;
    }
  }
}

int cmd_run(const CommonOpts& o, const RunOpts& r, const std::vector<std::string>& dirs) {
  auto setup = load_setup(o, dirs);
  if (!setup.ok()) return fail(setup.status());
  const ev::ModelSpec* spec = &setup->spec;
  const DeviceChoice* dev = &setup->device;
  const ev::PlanOptions* popts = &setup->plan;

  if (r.input.empty()) return fail(ev::invalid_argument("run needs --input FILE (an image or a safetensors file with tensor 'input')"));
  auto batch = ev::load_input_file(r.input, *spec);
  if (!batch.ok()) return fail(batch.status());

  ev::EngineOptions eo;
  eo.plan = *popts;
  eo.threads = o.threads;
  eo.tune_gemms = !o.no_gemm_tuning;
  eo.tune_attention = !o.no_attention_tuning;
  if (eo.plan.batch == 0) eo.plan.batch = std::min(batch->count, spec->max_batch);
  auto engine = ev::Engine::create(*spec, dev->profile, eo);
  if (!engine.ok()) return fail(engine.status());
  ev::Engine& e = **engine;
  announce_plan(e.plan(), o.verbose);
  announce_cpu_gemm(e, o.verbose);
  announce_gemm_choices(e, o.verbose, e.max_batch());
  announce_attention_choices(e, o.verbose);
  announce_gemm_i8_rows(e, o.verbose, e.max_batch());
  if (o.verbose) std::fprintf(stderr, "device %s (%s), threads %d\n", dev->profile.name.c_str(), dev->how.c_str(), e.threads());

  std::vector<std::string> labels;
  if (!spec->labels_path.empty()) {
    auto l = ev::load_labels(spec->labels_path, spec->arch.num_classes);
    if (!l.ok()) return fail(l.status());
    labels = std::move(*l);
  }

  const int n = batch->count;
  const int64_t per = e.input_numel_per_image();
  edgevit_cli::RunOutputs outputs(e, n);
  // One untimed warm-up pass (thread pools, first-touch page faults) so the latency printed is the
  // steady-state one a long-running process sees.
  {
    const ev::Status s = e.infer(batch->data.data(), std::min(n, e.max_batch()));
    if (!s.ok()) return fail(s);
  }
  double seconds = 0;
  for (int start = 0; start < n; start += e.max_batch()) {
    const int count = std::min(e.max_batch(), n - start);
    const auto t0 = std::chrono::steady_clock::now();
    const ev::Status s = e.infer(batch->data.data() + per * start, count);
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!s.ok()) return fail(s);
    outputs.take(e, start, count);
  }

  std::printf("device: %s (%s)\n", dev->profile.name.c_str(), dev->how.c_str());
  std::printf("model %s on %s: %d image%s, %s, attention %s\n", spec->name.c_str(), dev->profile.name.c_str(), n,
              n == 1 ? "" : "s", ev::to_string(e.plan().graph.precision), e.plan().attention_kernel.c_str());
  const bool predictions = e.outputs().has(ev::OutputKind::kLogits);
  if (predictions) print_predictions(outputs.values(ev::OutputKind::kLogits).data(), n, e.output_dim(), labels, r);
  outputs.print_summary(predictions);
  std::printf("latency: %.3f ms for %d image%s (%.3f ms/image, %d thread%s, after one warm-up run)\n", seconds * 1e3, n, n == 1 ? "" : "s",
              seconds * 1e3 / n, e.threads(), e.threads() == 1 ? "" : "s");

  if (!r.output.empty()) {
    const ev::Status s = outputs.write(r.output, {{"model", spec->name}, {"plan_hash", e.plan().hash_hex()}});
    if (!s.ok()) return fail(s);
    std::printf("wrote %s (%s)\n", r.output.c_str(), outputs.describe().c_str());
  }
  return 0;
}

struct BenchOpts {
  int iters = 50;
  int warmup = 5;
  bool profile = false;
  bool json = false;
  bool pageable_input = false;  // infer() from a separate host array (copied each call), not input_buffer()
  bool device_input = false;    // CUDA: infer_device() over images already in Engine::device_input()
};

// Latency percentiles of the timed forwards, and the per-op sums of --profile.
struct BenchTimes {
  std::vector<double> ms;      // per iteration
  std::vector<double> op_sum;  // per op, seconds summed over iterations (--profile)
  double pct(double q) const {
    std::vector<double> sorted = ms;
    std::sort(sorted.begin(), sorted.end());
    return sorted[std::min(sorted.size() - 1, static_cast<size_t>(q * (sorted.size() - 1) + 0.5))];
  }
  double mean() const { return std::accumulate(ms.begin(), ms.end(), 0.0) / ms.size(); }
};

// Deterministic pseudo-random input in [-1, 1) (never zeros: they hide bugs and run unrealistically),
// written once into the engine's own input buffer (infer() then copies nothing: the numbers are the
// forward's), or with --pageable-input into a separate array that every infer() copies in.
float* bench_input(ev::Engine& e, const BenchOpts& b, int n, std::vector<float>* pageable) {
  const size_t input_len = static_cast<size_t>(e.input_numel_per_image()) * n;
  pageable->assign(b.pageable_input ? input_len : 0, 0.f);
  float* input = b.pageable_input ? pageable->data() : e.input_buffer();
  uint32_t s = 12345;
  for (size_t i = 0; i < input_len; ++i) {
    s = s * 1664525u + 1013904223u;
    input[i] = static_cast<float>(s >> 8) / 8388608.0f - 1.0f;
  }
  return input;
}

ev::Status time_forwards(ev::Engine& e, const BenchOpts& b, const float* input, int n, BenchTimes* t) {
  auto forward = [&]() { return b.device_input ? e.infer_device(n) : e.infer(input, n); };
  for (int i = 0; i < b.warmup; ++i) EV_RETURN_IF_ERROR(forward());
  t->op_sum.assign(e.op_timings().size(), 0.0);
  for (int i = 0; i < b.iters; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const ev::Status st = forward();
    t->ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    EV_RETURN_IF_ERROR(st);
    if (b.profile)
      for (size_t j = 0; j < t->op_sum.size(); ++j) t->op_sum[j] += e.op_timings()[j].seconds;
  }
  return ev::Status::Ok();
}

void print_bench_json(const ev::Engine& e, const ev::ModelSpec& spec, const DeviceChoice& dev, const BenchOpts& b,
                      const ev::EngineOptions& eo, const char* input_path, const BenchTimes& t) {
  const int n = e.max_batch();
  nlohmann::ordered_json j{{"model", spec.name}, {"device", dev.profile.name}, {"batch", n},
                           {"precision", ev::to_string(e.plan().graph.precision)}, {"threads", e.threads()},
                           {"iters", b.iters}, {"p50_ms", t.pct(0.5)}, {"p90_ms", t.pct(0.9)}, {"p99_ms", t.pct(0.99)},
                           {"mean_ms", t.mean()}, {"images_per_s", n / (t.mean() / 1e3)},
                           {"attention_kernel", e.plan().attention_kernel}, {"input_path", input_path},
                           {"gemm_tuning", eo.tune_gemms}, {"attention_tuning", eo.tune_attention}};
  if (b.profile) {
    nlohmann::ordered_json ops = nlohmann::ordered_json::array();
    for (size_t k = 0; k < t.op_sum.size(); ++k)
      ops.push_back({{"name", e.op_timings()[k].name}, {"kernel", e.op_timings()[k].kernel}, {"ms", t.op_sum[k] / b.iters * 1e3}});
    j["ops"] = ops;
  }
  std::cout << j.dump(1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
}

void print_bench_text(const ev::Engine& e, const ev::ModelSpec& spec, const DeviceChoice& dev, const BenchOpts& b,
                      const char* input_desc, const BenchTimes& t) {
  const int n = e.max_batch();
  std::printf("bench %s on %s: batch %d, %s, %d threads, attention %s\n", spec.name.c_str(), dev.profile.name.c_str(), n,
              ev::to_string(e.plan().graph.precision), e.threads(), e.plan().attention_kernel.c_str());
  std::printf("input: %s\n", input_desc);
  std::printf("latency over %d iterations (after %d warm-up): p50 %.3f ms  p90 %.3f ms  p99 %.3f ms  mean %.3f ms\n",
              b.iters, b.warmup, t.pct(0.5), t.pct(0.9), t.pct(0.99), t.mean());
  std::printf("throughput: %.1f images/s\n", n / (t.mean() / 1e3));
  if (!b.profile) return;
  double total = 0;
  for (double v : t.op_sum) total += v;
  std::printf("\nper-op profile (mean over iterations; wall time per op):\n");
  std::printf("  %-26s %-30s %9s %7s %9s %9s\n", "op", "kernel", "ms", "share", "GB/s", "GFLOP/s");
  for (size_t k = 0; k < t.op_sum.size(); ++k) {
    const auto& op = e.op_timings()[k];
    const double sec = t.op_sum[k] / b.iters;
    std::printf("  %-26s %-30s %9.4f %6.1f%% %9.2f %9.2f\n", op.name.c_str(), op.kernel.c_str(), sec * 1e3,
                total > 0 ? 100.0 * t.op_sum[k] / total : 0.0, sec > 0 ? op.bytes / sec / 1e9 : 0.0,
                sec > 0 ? op.flops / sec / 1e9 : 0.0);
  }
}

int cmd_bench(const CommonOpts& o, const BenchOpts& b, const std::vector<std::string>& dirs) {
  auto setup = load_setup(o, dirs);
  if (!setup.ok()) return fail(setup.status());
  if (b.iters < 1) return fail(ev::invalid_argument("--iters must be >= 1"));
  if (b.pageable_input && b.device_input)
    return fail(ev::invalid_argument("--pageable-input and --device-input exclude each other"));
  ev::EngineOptions eo;
  eo.plan = setup->plan;
  eo.threads = o.threads;
  eo.profile_ops = b.profile;
  eo.tune_gemms = !o.no_gemm_tuning;
  eo.tune_attention = !o.no_attention_tuning;
  auto engine = ev::Engine::create(setup->spec, setup->device.profile, eo);
  if (!engine.ok()) return fail(engine.status());
  ev::Engine& e = **engine;
  announce_plan(e.plan(), o.verbose);
  announce_cpu_gemm(e, o.verbose);
  announce_gemm_choices(e, o.verbose || b.profile, e.max_batch());
  announce_attention_choices(e, o.verbose || b.profile);
  announce_gemm_i8_rows(e, o.verbose || b.profile, e.max_batch());
  const int n = e.max_batch();
  std::vector<float> pageable;
  const float* input = bench_input(e, b, n, &pageable);
  const char* input_path = b.pageable_input ? "pageable_copy" : b.device_input ? "device_tensor" : "engine_buffer";
  const char* input_desc =
      b.pageable_input ? "a separate pageable host array, copied into the engine's input buffer by every infer()"
      : b.device_input ? "already on the device (Engine::device_input(), written once by a first infer()); "
                         "infer_device() replays the forward without the input cast"
                       : "written once into the engine's input buffer (Engine::input_buffer(); pinned and mapped on "
                         "CUDA), no copy in infer()";
  if (b.device_input) {
    if (e.device_input() == nullptr)
      return fail(ev::unsupported("--device-input: the " + setup->device.profile.name +
                                  " backend has no device-resident input (CUDA engines only)"));
    const ev::Status st = e.infer(input, n);  // the cast of the host images fills the device input
    if (!st.ok()) return fail(st);
  }
  BenchTimes t;
  const ev::Status st = time_forwards(e, b, input, n, &t);
  if (!st.ok()) return fail(st);
  if (b.json) {
    print_bench_json(e, setup->spec, setup->device, b, eo, input_path, t);
  } else {
    print_bench_text(e, setup->spec, setup->device, b, input_desc, t);
  }
  return 0;
}

int cmd_import(const std::string& from, const std::string& checkpoint, const ev::ImportOptions& io, const std::string& out) {
  ev::Result<ev::ModelSpec> spec = from == "timm" ? ev::infer_model_spec_timm(checkpoint, io)
                                                  : ev::infer_model_spec_hf(checkpoint, io);
  if (!spec.ok()) return fail(spec.status());
  const ev::Status s = ev::save_imported_spec(*spec, out);
  if (!s.ok()) return fail(s);
  const ev::VitArch& a = spec->arch;
  std::printf("wrote %s: img %dx%d, patch %d, chans %d, embed %d, depth %d, heads %d, classes %d, tokens %d (%s pool%s)\n",
              out.c_str(), a.img_h, a.img_w, a.patch_size, a.in_chans, a.embed_dim, a.depth, a.num_heads, a.num_classes,
              a.num_tokens(), ev::to_string(a.global_pool), a.fc_norm ? ", fc_norm" : "");
  if (!spec->head_note.empty()) std::printf("head: %s\n", spec->head_note.c_str());
  if (!spec->preprocess.note.empty()) std::printf("preprocess: %s\n", spec->preprocess.note.c_str());
  return 0;
}

void add_common(CLI::App* sub, CommonOpts& o, bool batch) {
  sub->add_option("model", o.model, "model config (config/models/NAME.yaml)")->required();
  sub->add_option("--device,-d", o.device, "device profile name or YAML path, or 'auto' (default)");
  if (batch) sub->add_option("--batch,-b", o.batch, "batch size (default: the model's max_batch)");
  sub->add_option("--precision", o.precision, "fp32 | fp16 | int8 (default: the config's int8, else fp32 on cpu, fp16 on cuda)");
  sub->add_option("--attention", o.attention, "auto | fused | explicit (default: the model config's)");
  sub->add_option("--int8-float", o.int8_float,
                  "INT8 on CUDA: fp16 | fp32, the precision of the ops that are not int8 (default: the config's "
                  "runtime.int8_float, fp16; fp32 matches the CPU INT8 path; the CPU is always fp32)");
  sub->add_flag("--all-tokens", o.all_tokens,
                "keep every token through the last block (default for token-pooled models: the class-token tail, "
                "same outputs with the last block's proj and MLP on one row per image)");
  sub->add_flag("--tokens", o.tokens,
                "also produce the final-normed tokens [N, tokens, embed] (the planner sizes them only then; run "
                "--output writes them)");
  sub->add_flag("--verbose,-v", o.verbose, "say more (plan summary, device, fallbacks)");
}

// OpenBLAS picks its kernels when loaded; if it fell back to generic ones on a CPU with AVX2/AVX-512,
// restart once with OPENBLAS_CORETYPE set (a user's own setting is always left alone).
void reexec_if_blas_chose_generic_kernels(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;
  if (const char* better = ev::host_blas_better_coretype()) {
    spdlog::info("OpenBLAS chose '{}' kernels on a CPU that supports {}; restarting with OPENBLAS_CORETYPE={}",
                 ev::host_blas_core(), better, better);
    setenv("OPENBLAS_CORETYPE", better, 1);
    execv("/proc/self/exe", argv);
    spdlog::warn("re-exec failed ({}); continuing with the slow kernels", std::strerror(errno));
  }
}

CLI::App* add_run(CLI::App& app, CommonOpts& o, RunOpts& r) {
  CLI::App* run = app.add_subcommand("run", "run a model on an image or a safetensors input");
  add_common(run, o, false);
  run->add_option("--input,-i", r.input,
                  "image (PNG, JPEG, PPM/PGM, BMP, TGA; also GIF, PSD, HDR, PIC) or safetensors with tensor 'input' "
                  "[N,C,H,W]");
  run->add_option("--output,-o", r.output,
                  "write the outputs (float32 safetensors tensors by name: logits, embedding, pre_logits, tokens, as "
                  "the model has them and they were asked for) to this file");
  run->add_option("--topk,-k", r.topk, "classes to print")->check(CLI::Range(1, 100000));
  run->add_option("--threads,-t", o.threads, "CPU threads (0 = all cores; 1 under qemu)")->check(CLI::Range(0, 4096));
  run->add_flag("--show", r.show, "draw the input image as text art beside the answer");
  return run;
}

CLI::App* add_bench(CLI::App& app, CommonOpts& o, BenchOpts& b) {
  CLI::App* bench = app.add_subcommand("bench", "latency percentiles and throughput");
  add_common(bench, o, true);
  bench->add_option("--iters,-n", b.iters, "timed iterations")->check(CLI::Range(1, 1000000));
  bench->add_option("--warmup", b.warmup, "warm-up iterations")->check(CLI::Range(0, 1000000));
  bench->add_option("--threads,-t", o.threads, "CPU threads (0 = all cores)")->check(CLI::Range(0, 4096));
  bench->add_flag("--profile", b.profile, "per-op time table");
  bench->add_flag("--json", b.json, "one JSON object");
  bench->add_flag("--pageable-input", b.pageable_input,
                  "feed infer() from a separate host array it must copy (default: the engine's own input buffer)");
  bench->add_flag("--device-input", b.device_input,
                  "CUDA: time infer_device() over images already in the engine's device input tensor (as a GPU "
                  "decode/preprocessing pipeline would hand them over; PyTorch baselines have theirs on the GPU too)");
  return bench;
}

// Engine tuning switches of run and bench.
void add_tuning_flags(CLI::App* sub, CommonOpts& o) {
  sub->add_flag("--no-gemm-tuning", o.no_gemm_tuning,
                "CUDA: pin cuBLASLt's first heuristic algorithm per GEMM instead of timing it, the other heuristic results and their split-K variants at start-up");
  sub->add_flag("--no-attention-tuning", o.no_attention_tuning,
                "CUDA: run the kernel table's fused-attention row instead of timing every row the device can run at start-up");
}

struct ImportCmd {
  CLI::App* app = nullptr;
  std::string from, checkpoint, output, pool, act, size;
  int heads = 0;
  double eps = 0;
};

void add_import(CLI::App& app, ImportCmd& c) {
  CLI::App* imp = c.app = app.add_subcommand("import", "write a model config inferred from a checkpoint");
  imp->add_option("--from", c.from, "timm | hf")->required()->check(CLI::IsMember({"timm", "hf"}));
  imp->add_option("checkpoint", c.checkpoint, "timm .safetensors file, or Hugging Face model directory")->required();
  imp->add_option("--heads", c.heads, "attention heads (timm checkpoints do not record it)")->check(CLI::Range(1, 4096));
  imp->add_option("--pool", c.pool, "token | avg | map")->check(CLI::IsMember({"token", "avg", "map"}));
  imp->add_option("--act", c.act, "MLP activation of a timm checkpoint (it cannot say): gelu | gelu_tanh | quick_gelu")
      ->check(CLI::IsMember({"gelu", "gelu_tanh", "quick_gelu"}));
  imp->add_option("--eps", c.eps, "LayerNorm epsilon")->check(CLI::PositiveNumber);
  imp->add_option("--image-size", c.size,
                  "input size H[xW] in pixels instead of the checkpoint's (position embeddings resampled at load)");
  imp->add_option("-o,--output", c.output, "model YAML to write")->required();
}

int run_import(const ImportCmd& c) {
  ev::ImportOptions io;
  if (c.heads > 0) io.heads = c.heads;
  if (!c.pool.empty())
    io.pool = c.pool == "avg" ? ev::GlobalPool::kAvg : c.pool == "map" ? ev::GlobalPool::kMap : ev::GlobalPool::kToken;
  if (!c.act.empty())
    io.act = c.act == "gelu_tanh" ? ev::Activation::kGeluTanh
             : c.act == "quick_gelu" ? ev::Activation::kQuickGelu : ev::Activation::kGelu;
  if (c.eps > 0) io.eps = c.eps;
  if (!c.size.empty()) {
    int h = 0, w = 0;
    char extra = 0;
    const int got = std::sscanf(c.size.c_str(), "%dx%d%c", &h, &w, &extra);
    if (got == 1) w = h;
    if ((got != 1 && got != 2) || h <= 0 || w <= 0 ||
        (got == 1 && c.size.find_first_not_of("0123456789") != std::string::npos)) {
      std::fprintf(stderr, "error: --image-size %s: expected H or HxW (pixels)\n", c.size.c_str());
      return 2;
    }
    io.image_size = std::make_pair(h, w);
  }
  return cmd_import(c.from, c.checkpoint, io, c.output);
}

CLI::App* add_client(CLI::App& app, ev::daemon::ClientOptions& o) {
  CLI::App* client = app.add_subcommand("client", "send inputs to a running edgevitd (docs/protocol.md)");
  client->add_option("--socket,-s", o.socket_path, "edgevitd's Unix socket");
  client->add_option("--input,-i", o.inputs, "image (sent encoded) or safetensors with tensor 'input'; repeatable");
  client->add_option("--query", o.query, "health | stats | version")->check(CLI::IsMember({"health", "stats", "version"}));
  client->add_option("--topk,-k", o.topk, "classes per image")->check(CLI::Range(1, 1000));
  client->add_flag("--logits", o.logits, "ask for the logits too");
  client->add_flag("--embedding", o.embedding, "ask for the embedding too (prints its L2 norm and first values)");
  client->add_flag("--tokens", o.tokens,
                   "ask for the final-normed tokens too (the served model config must list tokens in runtime.outputs)");
  client->add_flag("--json", o.json, "one JSON object per request (topk: [{index, label, score}])");
  client->add_option("--timeout-ms", o.timeout_ms, "per send/receive")->check(CLI::Range(1, 3600000));
  return client;
}

}  // namespace

int main(int argc, char** argv) {
  // Diagnostics go to stderr, always: stdout carries only the answer (`plan --json | jq .` must parse).
  spdlog::set_default_logger(spdlog::stderr_logger_mt("edgevit"));
  spdlog::set_pattern("edgevit: %l: %v");
  reexec_if_blas_chose_generic_kernels(argv);
  CLI::App app{"edgevit: static-allocation ViT inference for Jetson-class devices"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "edgevit 0.1.0");
  std::string config_dir;
  app.add_option("--config-dir", config_dir, "extra base config directory (holds devices/ and models/)");

  CommonOpts run_o, plan_o, bench_o;
  RunOpts run_r;
  BenchOpts bench_b;
  bool plan_json = false, devices_json = false, devices_detect = false;
  CLI::App* run = add_run(app, run_o, run_r);
  CLI::App* plan = app.add_subcommand("plan", "show the memory plan and whether the model fits a device");
  add_common(plan, plan_o, true);
  plan->add_flag("--json", plan_json, "one JSON object");
  CLI::App* bench = add_bench(app, bench_o, bench_b);
  add_tuning_flags(run, run_o);
  add_tuning_flags(bench, bench_o);
  CLI::App* devices = app.add_subcommand("devices", "list device profiles");
  devices->add_flag("--json", devices_json, "JSON array (with --detect: one JSON object)");
  devices->add_flag("--detect", devices_detect,
                    "detect this machine's device: print the profile chosen and how each field was found");
  ImportCmd imp;
  add_import(app, imp);
  ev::daemon::ClientOptions client_o;
  CLI::App* client = add_client(app, client_o);
  const Int8Commands int8 = add_int8_commands(app);  // calibrate, compare (programs/edgevit/cmd_int8.cpp)

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }

  std::vector<std::string> bases = ev::default_config_dirs(argv[0]);
  if (!config_dir.empty()) bases.insert(bases.begin(), config_dir);
#ifdef EDGEVIT_SOURCE_CONFIG_DIR
  if (bases.empty()) bases.push_back(EDGEVIT_SOURCE_CONFIG_DIR);
#endif
  const std::vector<std::string> dev_dirs = ev::config_subdirs(bases, "devices");

  if (*int8.calibrate) return cmd_calibrate(int8, dev_dirs);
  if (*int8.compare) return cmd_compare(int8, dev_dirs);
  if (*run) return cmd_run(run_o, run_r, dev_dirs);
  if (*plan) return cmd_plan(plan_o, dev_dirs, plan_json);
  if (*bench) return cmd_bench(bench_o, bench_b, dev_dirs);
  if (*devices) return devices_detect ? cmd_devices_detect(dev_dirs, devices_json) : cmd_devices(dev_dirs, devices_json);
  if (*client) {
    const ev::Status s = ev::daemon::run_client(client_o, std::cout);
    return s.ok() ? 0 : fail(s);
  }
  if (*imp.app) return run_import(imp);
  return 2;
}
