#include "runtime/plan.h"

#include <xxhash.h>

#include <algorithm>
#include <cassert>
#include <cstdio>
#include <sstream>

#include "kernels/cpu/kernels.h"
#include "kernels/mha_variants.h"
#include "runtime/planner.h"

namespace edgevit {

std::string Plan::hash_hex() const {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(hash));
  return buf;
}

namespace {

struct AttentionDecision {
  AttentionPath path;
  std::string kernel;
  std::string reason;
  bool fallback;
};

// seq_q: query tokens per image of the launch judged (0: all tokens; the class-token tail's last block has 1).
AttentionDecision decide_attention(const VitArch& arch, const DeviceProfile& dev, Precision precision,
                                   AttentionImpl requested, int batch, int seq_q = 0) {
  const int d = arch.head_dim();
  if (dev.kind == DeviceKind::kCpu) {
    if (requested == AttentionImpl::kExplicit)
      return {AttentionPath::kExplicit, "cpu.mha_explicit_f32",
              "explicit attention forced by config/flag: Q K^T -> softmax -> V with an S x S scratch", false};
    if (d > kMhaFusedMaxHeadDim) {
      // Loud, like the CUDA side: the fused kernel was not forced off, yet it cannot serve this head_dim.
      std::string reason = "cpu: fused kernel serves head_dim <= " + std::to_string(kMhaFusedMaxHeadDim) +
                           " (its tiles live on the stack), this model has head_dim " + std::to_string(d) +
                           "; explicit attention with an S x S scratch runs instead";
      if (requested == AttentionImpl::kFused) reason = "fused attention requested but unavailable: " + reason;
      return {AttentionPath::kExplicit, "cpu.mha_explicit_f32", reason, true};
    }
    return {AttentionPath::kFused, "cpu.mha_fused_f32",
            "cpu: tiled online-softmax kernel serves head_dim <= " + std::to_string(kMhaFusedMaxHeadDim) +
                " (here " + std::to_string(d) + "); no S x S buffer",
            false};
  }
  const bool force_unfused = requested == AttentionImpl::kExplicit;
  // The plan's batch on the profile's SMs; the launcher judges each captured batch size on the real device.
  const MhaGrid grid{batch, arch.num_heads, seq_q > 0 ? seq_q : arch.num_tokens(), dev.sm_count};
  const MhaChoice choice = choose_mha(dev.compute_capability, dev.smem_per_block_optin_bytes, d,
                                      precision == Precision::kFp16, force_unfused, &grid);
  if (choice.fused) {
    return {AttentionPath::kFused, std::string("cuda.") + choice.variant->name, choice.reason, false};
  }
  std::string reason = choice.reason;
  if (force_unfused) reason = "unfused attention forced by config/flag; " + reason;
  // Loud: the fused kernel was not forced off, yet it cannot serve.
  const bool fallback = !force_unfused;
  if (requested == AttentionImpl::kFused) reason = "fused attention requested but unavailable: " + reason;
  return {AttentionPath::kExplicit, "cuda.mha_unfused_cublas", reason, fallback};
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
  const uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return h;
}

std::string linear_kernel(const DeviceProfile& dev, Precision prec, int epilogue) {
  static const char* kEpi[] = {"", "+bias_gelu", "+bias_residual"};
  // CPU: which library serves the GEMM (libxsmm's packed kernels on x86-64 with AVX2, else OpenBLAS) is this
  // machine's to say: the forecast names the op, the engine resolves it (resolve_kernels).
  if (dev.kind == DeviceKind::kCpu) return std::string("cpu.linear_f32") + (epilogue ? kEpi[epilogue] : "+bias");
  return std::string("cuda.cublaslt_") + (prec == Precision::kFp16 ? "f16" : "f32") +
         (epilogue ? kEpi[epilogue] : "+bias");
}

}  // namespace

Result<Plan> make_plan(const ModelSpec& spec, const DeviceProfile& device, const PlanOptions& options) {
  const int batch = options.batch > 0 ? options.batch : spec.max_batch;
  if (batch < 1 || batch > 4096)
    return invalid_argument("batch " + std::to_string(batch) + " out of range [1, 4096]");

  Precision precision = device.kind == DeviceKind::kCuda ? Precision::kFp16 : Precision::kFp32;
  if (options.precision) precision = *options.precision;
  if (device.kind == DeviceKind::kCpu && precision == Precision::kFp16)
    return unsupported("precision fp16 is not supported on device '" + device.name +
                       "' (kind cpu): the CPU backend computes in fp32; use --precision fp32");

  const AttentionImpl requested = options.attention ? *options.attention : spec.attention;
  const AttentionDecision att = decide_attention(spec.arch, device, precision, requested, batch);

  const VitArch& a = spec.arch;
  const int64_t s = a.num_tokens();
  // Explicit path scratch. CPU: the full (B, H, S, S) fp32 score matrix (the kernel uses one S x S slice
  // per thread, at most B*H of them).
  // CUDA's unfused launcher works one batch element at a time and says how much it needs.
  int64_t scratch_bytes = 0;
  if (att.path == AttentionPath::kExplicit)
    scratch_bytes = device.kind == DeviceKind::kCpu
                        ? int64_t{batch} * a.num_heads * s * s * 4
                        : mha_unfused_workspace_bytes_for(a.num_heads, static_cast<int>(s), static_cast<int>(s));

  Plan plan;
  plan.model_name = spec.name;
  plan.device = device;
  plan.graph = build_vit_graph(a, batch, precision, att.path, scratch_bytes, options.all_tokens);
  plan.attention_kernel = att.kernel;
  plan.attention_reason = att.reason;
  plan.attention_fallback = att.fallback;
  if (att.fallback)
    plan.notes.push_back("FALLBACK: attention runs unfused (" + att.reason + ")");
  for (const Op& o : plan.graph.ops) {
    if (o.kind != OpKind::kAttention || o.seq_q >= a.num_tokens()) continue;
    plan.class_token_tail = true;
    plan.notes.push_back("class-token tail: token pooling reads only the class token, so " +
                         o.name.substr(0, o.name.find(".attn")) +
                         " runs its attention for that query alone and its proj, MLP and the final norm on one "
                         "row per image (same outputs; --all-tokens keeps every token)");
  }

  Graph& g = plan.graph;
  for (Op& o : g.ops) {
    switch (o.kind) {
      case OpKind::kAttention:
        o.kernel = att.kernel;
        o.reason = att.reason;
        if (o.seq_q < a.num_tokens() && att.path == AttentionPath::kFused && device.kind == DeviceKind::kCuda) {
          // The tail's launch has its own grid (one query row per head): the launcher judges it as such.
          const AttentionDecision t = decide_attention(a, device, precision, requested, batch,
                                                       static_cast<int>(o.seq_q));
          if (t.path == AttentionPath::kFused) {
            o.kernel = t.kernel;
            o.reason = t.reason;
          }
        }
        break;
      case OpKind::kLinear:
        o.kernel = linear_kernel(device, precision, o.epilogue);
        o.reason = o.epilogue == 2 ? "residual add fused as GEMM accumulate (in place)"
                 : o.epilogue == 1 ? "GELU fused into the GEMM epilogue" : "bias fused into the GEMM epilogue";
        break;
      case OpKind::kLayerNorm:
        o.kernel = device.kind == DeviceKind::kCpu ? "cpu.layernorm_f32" : "cuda.layernorm_fp32stats";
        o.reason = "statistics in fp32";
        break;
      default:
        o.kernel = std::string(device.kind == DeviceKind::kCpu ? "cpu." : "cuda.") + to_string(o.kind);
        break;
    }
  }

  // Region 1: weights, in graph order. Region 2: io. Region 3: planned activations + scratch.
  plan.offsets.assign(g.tensors.size(), -1);
  int64_t cursor = 0;
  for (const TensorDesc& t : g.tensors) {
    if (t.kind != TensorKind::kWeight) continue;
    plan.offsets[t.id] = cursor;
    cursor += align_up(t.bytes(), kArenaAlignment);
  }
  plan.weights_bytes = cursor;
  for (const TensorDesc& t : g.tensors) {
    if (t.kind != TensorKind::kInput && t.kind != TensorKind::kOutput) continue;
    plan.offsets[t.id] = cursor;
    cursor += align_up(t.bytes(), kArenaAlignment);
  }
  plan.io_bytes = cursor - plan.weights_bytes;

  MemoryPlanner planner(kArenaAlignment);
  std::vector<int> buffer_of(g.tensors.size(), -1);
  int64_t scratch_peak = 0;
  for (const TensorDesc& t : g.tensors) {
    if (t.kind != TensorKind::kActivation && t.kind != TensorKind::kScratch) continue;
    buffer_of[t.id] = planner.AddBuffer(t.bytes(), t.first_op, t.last_op);
    if (t.kind == TensorKind::kScratch) scratch_peak = std::max(scratch_peak, align_up(t.bytes(), kArenaAlignment));
  }
  const int64_t act_base = cursor;
  for (const TensorDesc& t : g.tensors)
    if (buffer_of[t.id] >= 0) plan.offsets[t.id] = act_base + planner.OffsetOf(buffer_of[t.id]);
  plan.activations_bytes = planner.ArenaBytes();
  plan.activations_lower_bound_bytes = planner.LowerBoundBytes();
  cursor += plan.activations_bytes;

  const int64_t backend_ws = device.kind == DeviceKind::kCuda ? kCudaLtWorkspaceBytes : 0;
  cursor += backend_ws;
  plan.workspace_bytes = backend_ws + scratch_peak;
  plan.arena_bytes = cursor;
  plan.lower_bound_bytes = plan.weights_bytes + plan.io_bytes + plan.activations_lower_bound_bytes + backend_ws;

  plan.context_bytes = device.kind == DeviceKind::kCuda ? device.cuda_context_bytes : 0;
  plan.budget_bytes = device.memory_budget_bytes;
  account_memory(&plan, options.threads > 0 ? options.threads : std::max(1, device.cpu_cores));
  plan.fits = plan.budget_bytes <= 0 ? false : plan.total_bytes <= plan.budget_bytes;
  if (device.kind == DeviceKind::kCuda && device.unified_memory)
    plan.notes.push_back("unified memory: weights go from the mmap'd checkpoint to the arena tensor by tensor through one staging buffer; no second host copy of the weights");

  plan.hash = hash_plan(plan);
  return plan;
}

void resolve_kernels(Plan* p, const std::vector<std::string>& kernels) {
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
