#include "runtime/plan.h"

#include <xxhash.h>

#include <algorithm>
#include <cassert>
#include <cstdio>
#include <sstream>

#include "runtime/op_table.h"
#include "runtime/planner.h"

namespace edgevit {

std::string Plan::hash_hex() const {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(hash));
  return buf;
}

namespace {

// The row for an attention op. On a graph built for the explicit path (the arena holds its scratch) only
// rows that use that scratch qualify.
RowChoice choose_attention(const Op& op, const Graph& g, const DeviceProfile& device) {
  RowChoice c = choose_row(op, g, device);
  if (g.attention != AttentionPath::kExplicit || c.row == nullptr || c.row->scratch_bytes != nullptr) return c;
  for (const OpRow& row : op_table(device.kind)) {
    if (!row_matches(row, op, g) || row.scratch_bytes == nullptr) continue;
    const Support s = row.supports(op, g, device);
    if (!s.ok) continue;
    return RowChoice{&row, s.kernel.empty() ? row.name : s.kernel, s.reason + " (as the model's other blocks)", c.fallback};
  }
  return c;
}

// Every op's row, kernel and reason from the device's op table.
Status choose_rows(Graph* g, const DeviceProfile& device) {
  for (Op& o : g->ops) {
    const RowChoice c = o.kind == OpKind::kAttention ? choose_attention(o, *g, device) : choose_row(o, *g, device);
    if (c.row == nullptr)
      return unsupported("op '" + o.name + "' cannot run on device '" + device.name + "': " + c.reason);
    o.row = c.row->name;
    o.kernel = c.kernel;
    o.reason = c.reason;
  }
  return Status::Ok();
}

void hash_str(XXH3_state_t* st, const std::string& s) {
  const uint64_t n = s.size();
  XXH3_64bits_update(st, &n, sizeof n);
  XXH3_64bits_update(st, s.data(), s.size());
}
void hash_i64(XXH3_state_t* st, int64_t v) {
  // Fixed little-endian encoding: identical on every architecture.
  unsigned char b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<unsigned char>((static_cast<uint64_t>(v) >> (8 * i)) & 0xff);
  XXH3_64bits_update(st, b, 8);
}

// The hash covers everything that determines execution: arch, batch, precision, device identity and
// kernel-relevant facts, every tensor's shape/offset and every op with its kernel choice. Doubles enter
// as their exact text ("%.17g") so no float arithmetic is involved.
uint64_t hash_plan(const Plan& p) {
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  hash_str(st, "edgevit-plan-v1");
  hash_str(st, p.model_name);
  hash_str(st, p.device.name);
  hash_i64(st, static_cast<int64_t>(p.device.kind));
  hash_i64(st, p.device.compute_capability);
  hash_i64(st, p.device.smem_per_block_optin_bytes);
  hash_i64(st, p.graph.batch);
  hash_i64(st, static_cast<int64_t>(p.graph.precision));
  hash_i64(st, static_cast<int64_t>(p.graph.attention));
  // Hashed only when set: plans without it keep their hashes.
  if (p.graph.int8_attention) hash_str(st, "int8_attention");
  // Fixed values per mode (per_tensor 0, per_token 1, norm_per_token 2), so a mode's hash never moves.
  if (p.graph.precision == Precision::kInt8)
    hash_i64(st, p.graph.int8_activations == Int8Activations::kPerTensor  ? 0
                 : p.graph.int8_activations == Int8Activations::kPerToken ? 1
                                                                         : 2);
  char eps[64];
  std::snprintf(eps, sizeof eps, "%.17g", p.graph.arch.layer_norm_eps);
  hash_str(st, eps);
  for (const TensorDesc& t : p.graph.tensors) {
    hash_str(st, t.name);
    hash_i64(st, static_cast<int64_t>(t.kind));
    hash_i64(st, t.elem_bytes);
    for (int64_t d : t.shape) hash_i64(st, d);
    hash_i64(st, t.first_op);
    hash_i64(st, t.last_op);
    hash_i64(st, p.offsets[t.id]);
  }
  for (const Op& o : p.graph.ops) {
    hash_i64(st, static_cast<int64_t>(o.kind));
    hash_str(st, o.name);
    hash_str(st, o.kernel);
    hash_i64(st, o.epilogue);
    for (int id : o.inputs) hash_i64(st, id);
    for (int id : o.outputs) hash_i64(st, id);
    for (int id : o.weights) hash_i64(st, id);
    hash_i64(st, o.scratch);
  }
  hash_i64(st, p.arena_bytes);
  for (const TuningRecord& t : p.tuning) {  // resolved plans: what start-up tuning pinned
    hash_str(st, t.op);
    hash_i64(st, t.batch);
    hash_str(st, t.choice);
  }
  const uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return h;
}

// The graph, its path decided by the row the device's table picks for attention: a row with a scratch (the
// explicit path) gets its workspace planned in the arena. Fills the plan's attention summary and notes.
Status plan_graph(const ModelSpec& spec, const DeviceProfile& device, const PlanOptions& options, int batch,
                  Precision precision, Plan* plan) {
  const AttentionImpl requested = options.attention ? *options.attention : spec.attention;
  const VitArch& a = spec.arch;
  const Int8Activations scales = spec.int8_activations;
  const Precision cuda_rest = options.int8_float ? *options.int8_float : spec.int8_float;
  const Precision rest = device.kind == DeviceKind::kCuda ? cuda_rest : Precision::kFp32;  // INT8 graphs
  EV_ASSIGN_OR_RETURN(const OutputSet outputs, planned_outputs(spec, options));
  // runtime.int8_attention: int8 (docs/int8.md "INT8 attention"): qkv writes int8 Q/K for an INT8 attention row;
  // where no row serves it (head dim, device, qk-norm, explicit attention) the graph keeps float q, k, v and the
  // plan says why. The CUDA fp32 mode has no INT8 attention twin: refused.
  bool i8_attention = precision == Precision::kInt8 && spec.int8_attention;
  std::string i8_attention_off;
  if (i8_attention && device.kind == DeviceKind::kCuda && rest == Precision::kFp32)
    return invalid_argument((spec.source_path.empty() ? spec.name : spec.source_path) +
                            ": runtime.int8_attention: int8 needs runtime.int8_float: fp16 (--int8-float fp32 asks "
                            "for the CPU INT8 path's float64 twin, which has no INT8 attention)");
  if (i8_attention && a.qk_norm) {
    i8_attention = false;
    i8_attention_off = "qk_norm normalises float q and k between qkv and the attention";
  }
  Graph graph;
  RowChoice att;
  for (;;) {
    graph = build_vit_graph(a, batch, precision, AttentionPath::kFused, 0, options.all_tokens, outputs, scales, rest,
                            i8_attention);
    graph.attention_request = requested;
    const Op* first_attention = nullptr;
    for (const Op& o : graph.ops)
      if (o.kind == OpKind::kAttention && first_attention == nullptr) first_attention = &o;
    att = choose_row(*first_attention, graph, device);
    if (att.row != nullptr || !i8_attention) break;
    i8_attention = false;
    i8_attention_off = att.reason;
  }
  if (att.row == nullptr) return unsupported("attention cannot run on device '" + device.name + "': " + att.reason);
  if (att.row->scratch_bytes != nullptr) {
    graph = build_vit_graph(a, batch, precision, AttentionPath::kExplicit, att.row->scratch_bytes(graph, device),
                            options.all_tokens, outputs, scales, rest, false);
    graph.attention_request = requested;
  }
  plan->graph = std::move(graph);
  plan->attention_kernel = att.kernel;
  plan->attention_reason = att.reason;
  plan->attention_fallback = att.fallback;
  if (att.fallback && requested == AttentionImpl::kFused)
    plan->attention_reason = "fused attention requested but unavailable: " + att.reason;
  if (att.fallback) plan->notes.push_back("FALLBACK: attention runs unfused (" + att.reason + ")");
  if (!i8_attention_off.empty())
    plan->notes.push_back("FALLBACK: runtime.int8_attention: int8 not served, qkv writes float q, k, v for the float "
                          "attention (" + i8_attention_off + ")");
  for (const Op& o : plan->graph.ops) {
    if (o.kind != OpKind::kAttention || o.seq_q >= a.num_tokens()) continue;
    if (o.name.rfind("attn_pool.", 0) == 0) {  // the MAP head's one latent query: not a tail of the blocks
      plan->notes.push_back("MAP head: one latent query attends over every token (" + o.name + ")");
      continue;
    }
    plan->class_token_tail = true;
    plan->notes.push_back("class-token tail: token pooling reads only the class token, so " +
                          o.name.substr(0, o.name.find(".attn")) +
                          " runs its attention for that query alone and its proj, MLP and the final norm on one "
                          "row per image (same outputs; --all-tokens keeps every token)");
  }
  return choose_rows(&plan->graph, device);
}

// The INT8 GEMMs' split-K workspace (plan.h): 0 unless the plan runs INT8 GEMMs on CUDA.
int64_t int8_split_workspace_bytes(const DeviceProfile& device, const Graph& g) {
  if (device.kind != DeviceKind::kCuda) return 0;
  int64_t partials = 0;
  for (const Op& o : g.ops)
    if (o.int8 && o.kind == OpKind::kLinear)  // int32 partials: padded rows x padded columns x split 4 x 4 bytes
      partials = std::max(partials, align_up(o.m, 128) * align_up(o.n, 128) * 16);
  if (partials == 0) return 0;
  return align_up(kCudaI8SplitCounterBytes + std::min(partials, kCudaI8SplitPartialsMaxBytes), kArenaAlignment);
}

// Offsets and region sizes. Region 1: weights, in graph order. Region 2: io. Region 3: planned activations
// and scratch (shared where lifetimes do not intersect). Region 4: the backend's workspace.
void lay_out_arena(const DeviceProfile& device, Plan* plan) {
  const Graph& g = plan->graph;
  plan->offsets.assign(g.tensors.size(), -1);
  int64_t cursor = 0;
  for (const TensorDesc& t : g.tensors) {
    if (t.kind != TensorKind::kWeight) continue;
    plan->offsets[t.id] = cursor;
    cursor += align_up(t.bytes(), kArenaAlignment);
  }
  plan->weights_bytes = cursor;
  for (const TensorDesc& t : g.tensors) {
    if (t.kind != TensorKind::kInput && t.kind != TensorKind::kOutput) continue;
    plan->offsets[t.id] = cursor;
    cursor += align_up(t.bytes(), kArenaAlignment);
  }
  plan->io_bytes = cursor - plan->weights_bytes;

  MemoryPlanner planner(kArenaAlignment);
  std::vector<int> buffer_of(g.tensors.size(), -1);
  int64_t scratch_peak = 0;
  for (const TensorDesc& t : g.tensors) {
    if (t.kind != TensorKind::kActivation && t.kind != TensorKind::kScratch) continue;
    // keep_activations: every activation its own bytes (live over the whole graph), readable after a forward.
    const bool keep = plan->keep_activations && t.kind == TensorKind::kActivation;
    buffer_of[t.id] = planner.AddBuffer(t.bytes(), keep ? 0 : t.first_op, keep ? static_cast<int>(g.ops.size()) : t.last_op);
    if (t.kind == TensorKind::kScratch) scratch_peak = std::max(scratch_peak, align_up(t.bytes(), kArenaAlignment));
  }
  const int64_t act_base = cursor;
  for (const TensorDesc& t : g.tensors)
    if (buffer_of[t.id] >= 0) plan->offsets[t.id] = act_base + planner.OffsetOf(buffer_of[t.id]);
  plan->activations_bytes = planner.ArenaBytes();
  plan->activations_lower_bound_bytes = planner.LowerBoundBytes();
  cursor += plan->activations_bytes;

  // Region 4, the INT8 split-K workspace then cuBLASLt's: never shared with activations (the split rows' tile
  // counters must stay zero between launches).
  plan->int8_split_workspace_bytes = int8_split_workspace_bytes(device, g);
  const int64_t backend_ws =
      (device.kind == DeviceKind::kCuda ? kCudaLtWorkspaceBytes : 0) + plan->int8_split_workspace_bytes;
  cursor += backend_ws;
  plan->workspace_bytes = backend_ws + scratch_peak;
  plan->arena_bytes = cursor;
  plan->lower_bound_bytes = plan->weights_bytes + plan->io_bytes + plan->activations_lower_bound_bytes + backend_ws;
}

}  // namespace

Result<OutputSet> planned_outputs(const ModelSpec& spec, const PlanOptions& options) {
  const OutputSet available = available_outputs(spec.arch);
  OutputSet set = spec.outputs.empty() ? default_outputs(spec.arch) : spec.outputs;
  if (options.outputs && !options.outputs->empty()) set = *options.outputs;
  if (options.tokens) set.add(OutputKind::kTokens);
  for (OutputKind k : set.kinds())  // a spec built in memory (not through the YAML loader) is checked here too
    if (!available.has(k))
      return invalid_argument("model '" + spec.name + "' has no output '" + to_string(k) +
                              "' (a classifier head gives logits); its outputs are " + available.to_string());
  return set;
}

Result<Plan> make_plan(const ModelSpec& spec, const DeviceProfile& device, const PlanOptions& options) {
  const int batch = options.batch > 0 ? options.batch : spec.max_batch;
  if (batch < 1 || batch > 4096)
    return invalid_argument("batch " + std::to_string(batch) + " out of range [1, 4096]");

  Precision precision = device.kind == DeviceKind::kCuda ? Precision::kFp16 : Precision::kFp32;
  if (spec.precision == Precision::kInt8) precision = Precision::kInt8;  // the config's runtime.precision: int8
  if (options.precision) precision = *options.precision;
  if (device.kind == DeviceKind::kCpu && precision == Precision::kFp16)
    return unsupported("precision fp16 is not supported on device '" + device.name +
                       "' (kind cpu): the CPU backend computes in fp32; use --precision fp32");

  Plan plan;
  plan.model_name = spec.name;
  plan.device = device;
  plan.keep_activations = options.keep_activations;
  if (precision == Precision::kInt8) plan.int8_scales_path = spec.int8_scales_path;
  EV_RETURN_IF_ERROR(plan_graph(spec, device, options, batch, precision, &plan));
  lay_out_arena(device, &plan);

  plan.context_bytes = device.kind == DeviceKind::kCuda ? device.cuda_context_bytes : 0;
  plan.budget_bytes = device.memory_budget_bytes;
  account_memory(&plan, options.threads > 0 ? options.threads : std::max(1, device.cpu_cores));
  plan.fits = plan.budget_bytes <= 0 ? false : plan.total_bytes <= plan.budget_bytes;
  if (device.kind == DeviceKind::kCuda && device.unified_memory)
    plan.notes.push_back("unified memory: weights go from the mmap'd checkpoint to the arena tensor by tensor through one staging buffer; no second host copy of the weights");

  plan.hash = hash_plan(plan);
  return plan;
}

void resolve_kernels(Plan* p, const std::vector<std::string>& kernels, const std::vector<TuningRecord>& tuning,
                     const std::vector<std::string>& notes) {
  assert(kernels.size() == p->graph.ops.size());
  for (size_t i = 0; i < p->graph.ops.size() && i < kernels.size(); ++i) {
    Op& o = p->graph.ops[i];
    if (o.kernel == kernels[i]) continue;
    o.reason += (o.reason.empty() ? "forecast: " : "; forecast: ") + o.kernel;
    o.kernel = kernels[i];
  }
  for (const Op& o : p->graph.ops) {  // the summary names the full blocks' attention, as the forecast did
    if (o.kind != OpKind::kAttention) continue;
    p->attention_kernel = o.kernel;
    break;
  }
  p->tuning = tuning;
  for (const std::string& n : notes) p->notes.push_back(n);
  p->resolved = true;
  p->hash = hash_plan(*p);
}

std::string does_not_fit_message(const Plan& p) {
  std::ostringstream os;
  os << "model '" << p.model_name << "' at batch " << p.graph.batch << " (" << to_string(p.graph.precision)
     << ") needs " << p.total_bytes << " bytes, budget " << p.budget_bytes << " bytes on device '"
     << p.device.name << "'";
  if (p.graph.batch > 1) os << "; try a smaller batch (--batch " << std::max(1, p.graph.batch / 2) << ")";
  if (p.graph.precision == Precision::kFp32 && p.device.kind == DeviceKind::kCuda)
    os << "; or --precision fp16 (halves weights and activations)";
  return os.str();
}

}  // namespace edgevit
