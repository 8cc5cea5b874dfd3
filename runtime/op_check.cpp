#include "runtime/op_check.h"

#include <cmath>
#include <cstring>

#include "base/tolerances.h"
#include "kernels/cpu/kernels.h"
#include "runtime/cpu/ops_cpu.h"
#include "runtime/int8_scales.h"
#include "runtime/epilogue.h"

namespace edgevit {

// The INT8 ops' values, reference and dequantized outputs (runtime/op_check_int8.cpp).
bool int8_case_values(const Op& op, const TensorDesc& t, uint32_t* state, std::vector<float>* out);
std::vector<float> int8_case_reference(const Plan& plan, const Op& op, const std::vector<std::vector<float>>& v);
Status int8_case_dequantize(const Plan& plan, const Op& op, Arena& arena, OpCaseDevice& device, std::vector<float>* got);

namespace {

// ---- inputs -----------------------------------------------------------------------------------------------

std::vector<float> uniform(size_t n, uint32_t* state, float lo, float hi) {
  std::vector<float> v(n);
  for (float& x : v) {
    *state = *state * 1664525u + 1013904223u;
    x = lo + (hi - lo) * static_cast<float>(*state >> 8) / static_cast<float>(1u << 24);
  }
  return v;
}

// Values for tensor t read by `op`: activations in [-1, 1]; GEMM weights scaled by 1/sqrt(K) so outputs stay
// of order one; LayerNorm gamma near 1.
std::vector<float> values_for(const Op& op, const TensorDesc& t, uint32_t* state) {
  const size_t n = static_cast<size_t>(t.numel());
  std::vector<float> i8;
  if (op.int8 && int8_case_values(op, t, state, &i8)) return i8;
  if (t.kind != TensorKind::kWeight) return uniform(n, state, -1.f, 1.f);
  if (op.kind == OpKind::kLayerNorm && t.name.size() > 7 && t.name.compare(t.name.size() - 7, 7, ".weight") == 0)
    return uniform(n, state, 0.8f, 1.2f);
  if (op.kind == OpKind::kLinear && t.shape.size() == 2) {
    const float s = 1.f / std::sqrt(static_cast<float>(op.k));
    return uniform(n, state, -s, s);
  }
  return uniform(n, state, -0.5f, 0.5f);
}

const float* weight_named(const Plan& plan, const Op& op, const std::vector<std::vector<float>>& v, const char* name) {
  for (int id : op.weights)
    if (plan.graph.tensors[static_cast<size_t>(id)].name == name) return v[static_cast<size_t>(id)].data();
  return nullptr;
}

// ---- the reference ----------------------------------------------------------------------------------------

// The op's output computed by its kernel's reference from the values in `v` (per tensor id).
std::vector<float> reference(const Plan& plan, const Op& op, const std::vector<std::vector<float>>& v) {
  if (op.int8) return int8_case_reference(plan, op, v);
  const Graph& g = plan.graph;
  const VitArch& a = g.arch;
  const int b = g.batch;
  const auto in = [&](size_t i) { return v[static_cast<size_t>(op.inputs[i])].data(); };
  const auto w = [&](size_t i) { return i < op.weights.size() ? v[static_cast<size_t>(op.weights[i])].data() : nullptr; };
  std::vector<float> out(static_cast<size_t>(g.tensors[static_cast<size_t>(op.outputs[0])].numel()));
  switch (op.kind) {
    case OpKind::kIm2col:
      im2col_patches_ref(in(0), out.data(), b, a.in_chans, a.img_h, a.img_w, a.patch_size);
      break;
    case OpKind::kLinear:
      if (op.epilogue == 2) out = v[static_cast<size_t>(op.outputs[0])];
      linear_ref(in(0), w(0), w(1), out.data(), static_cast<int>(op.m), static_cast<int>(op.n), static_cast<int>(op.k),
                 epilogue_of(op.epilogue));
      break;
    case OpKind::kAssembleTokens:
      assemble_tokens_ref(in(0), weight_named(plan, op, v, "cls_token"),
                          a.dist_token ? weight_named(plan, op, v, "dist_token") : weight_named(plan, op, v, "reg_token"),
                          a.extra_prefix_tokens(), weight_named(plan, op, v, "pos_embed"), a.no_embed_class, out.data(), b,
                          a.num_patches(), a.embed_dim);
      break;
    case OpKind::kLayerNorm:
      layernorm_ref(in(0), w(0), w(1), out.data(), static_cast<int>(op.m), static_cast<int>(op.n),
                    static_cast<float>(op.eps), 1);
      break;
    case OpKind::kAttention: {
      const AttnParams p = attn_params_packed_qkv(b, a.num_tokens(), a.num_heads, a.head_dim(),
                                                  1.0f / std::sqrt(static_cast<float>(a.head_dim())),
                                                  static_cast<int>(op.seq_q));
      const float* q = in(0);
      mha_ref(p, q, q + packed_k_offset(a.num_heads, a.head_dim()), q + packed_v_offset(a.num_heads, a.head_dim()),
              out.data(), 1);
      break;
    }
    case OpKind::kQkNorm:
      out = v[static_cast<size_t>(op.inputs[0])];
      qk_norm_ref(out.data(), w(0), w(1), w(2), w(3), static_cast<int>(op.m), a.num_heads, a.head_dim(),
                  static_cast<float>(op.eps), 1);
      break;
    case OpKind::kPool:
      if (op.pool_count > 0) {
        pool_prefix_ref(in(0), out.data(), b, a.num_tokens(), a.embed_dim, op.pool_count, op.pool_concat);
        break;
      }
      pool_ref(in(0), out.data(), b, a.num_tokens(), a.embed_dim, op.avg_pool, a.num_prefix_tokens());
      break;
  }
  return out;
}

double rel_error(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size() && i < got.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    num += d * d;
    den += static_cast<double>(want[i]) * want[i];
  }
  if (!std::isfinite(num)) return INFINITY;
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// ---- one row ----------------------------------------------------------------------------------------------

// Every tensor the op reads (inputs, weights, and the residual it accumulates into) gets fresh values, read
// back as stored (fp16 rounds), so the reference sees exactly what the kernel sees.
Status fill_inputs(const Plan& plan, const Op& op, Arena& arena, OpCaseDevice& device, uint32_t seed,
                   std::vector<std::vector<float>>* v) {
  v->assign(plan.graph.tensors.size(), {});
  std::vector<int> ids = op.inputs;
  ids.insert(ids.end(), op.weights.begin(), op.weights.end());
  uint32_t state = seed;
  for (int id : ids) {
    const TensorDesc& t = plan.graph.tensors[static_cast<size_t>(id)];
    if (!(*v)[static_cast<size_t>(id)].empty()) continue;
    EV_RETURN_IF_ERROR(device.write(arena, t, values_for(op, t, &state)));
    EV_RETURN_IF_ERROR(device.read(arena, t, &(*v)[static_cast<size_t>(id)]));
  }
  return Status::Ok();
}

Result<OpCaseResult> run_row(const Plan& plan, const Op& op, const OpRow& row, OpCaseDevice& device, uint32_t seed) {
  OpCaseResult r;
  r.row = row.name;
  r.bound = op.int8 ? (op.kind == OpKind::kAttention ? tol::kInt8AttnOutCase : tol::kInt8Kernel)
                    : plan.graph.precision == Precision::kFp16 ? tol::kFp16Kernel : tol::kFp32Kernel;
  EV_ASSIGN_OR_RETURN(std::unique_ptr<Arena> arena, Arena::create(plan, device.memory()));
  std::vector<std::vector<float>> v;
  EV_RETURN_IF_ERROR(fill_inputs(plan, op, *arena, device, seed, &v));
  EV_ASSIGN_OR_RETURN(std::unique_ptr<ExecContext> ctx, device.context(plan, *arena));
  ctx->sizes = {plan.graph.batch};
  std::unique_ptr<OpKernel> kernel = row.bind(op);
  if (kernel == nullptr) return unsupported(std::string("row ") + row.name + " does not bind in this build");
  EV_RETURN_IF_ERROR(kernel->prepare(*ctx));
  // prepare() may have launched the kernel (op_check.h): a residual epilogue then added into its
  // input once already, so the activations get their values again before the run that counts.
  for (int id : op.inputs) {
    const TensorDesc& t = plan.graph.tensors[static_cast<size_t>(id)];
    if (t.kind != TensorKind::kWeight) EV_RETURN_IF_ERROR(device.write(*arena, t, v[static_cast<size_t>(id)]));
  }
  EV_RETURN_IF_ERROR(kernel->run(*ctx, plan.graph.batch));
  EV_RETURN_IF_ERROR(device.sync(*ctx));
  r.kernel = kernel->resolved(plan.graph.batch);
  std::vector<float> got;
  EV_RETURN_IF_ERROR(device.read(*arena, plan.graph.tensors[static_cast<size_t>(op.outputs[0])], &got));
  if (op.int8) EV_RETURN_IF_ERROR(int8_case_dequantize(plan, op, *arena, device, &got));
  const std::vector<float> want = reference(plan, op, v);
  r.error = rel_error(got, want);
  r.ok = r.error <= r.bound;
  if (!r.ok) r.detail = "error " + std::to_string(r.error) + " > " + std::to_string(r.bound);
  return r;
}

// ---- the CPU device -----------------------------------------------------------------------------------------

class CpuDevice final : public OpCaseDevice {
 public:
  std::unique_ptr<ArenaMemory> memory() override { return host_arena_memory(); }
  Result<std::unique_ptr<ExecContext>> context(const Plan& plan, Arena& arena) override {
    return std::unique_ptr<ExecContext>(std::make_unique<CpuContext>(plan, arena, InjectedFault::kNone, 2));
  }
  Status write(Arena& arena, const TensorDesc& t, const std::vector<float>& values) override {
    if (t.elem_bytes == 1) {  // INT8 ops: integers in [-127, 127], or [0, 255] for uint8 tensors
      const bool u8 = int8_tensor_is_u8(t);
      for (size_t i = 0; i < values.size(); ++i)
        arena.as<uint8_t>(t.id)[i] = u8 ? static_cast<uint8_t>(values[i])
                                        : static_cast<uint8_t>(static_cast<int8_t>(values[i]));
      return Status::Ok();
    }
    std::memcpy(arena.at(t.id), values.data(), values.size() * sizeof(float));
    return Status::Ok();
  }
  Status read(Arena& arena, const TensorDesc& t, std::vector<float>* values) override {
    values->resize(static_cast<size_t>(t.numel()));
    if (t.elem_bytes == 1) {
      const bool u8 = int8_tensor_is_u8(t);
      for (size_t i = 0; i < values->size(); ++i)
        (*values)[i] = u8 ? arena.as<uint8_t>(t.id)[i] : arena.as<int8_t>(t.id)[i];
      return Status::Ok();
    }
    std::memcpy(values->data(), arena.at(t.id), values->size() * sizeof(float));
    return Status::Ok();
  }
  Status sync(ExecContext&) override { return Status::Ok(); }
};

// ---- cases ------------------------------------------------------------------------------------------------

VitArch small_arch(int img, int patch, int embed, int heads, int depth) {
  VitArch a;
  a.img_h = a.img_w = img;
  a.patch_size = patch;
  a.embed_dim = embed;
  a.num_heads = heads;
  a.depth = depth;
  a.mlp_ratio = 2.0;
  a.num_classes = 10;
  return a;
}

OpCase make_case(const std::string& name, const VitArch& a, int batch, const std::string& op, Precision p,
                 AttentionImpl att = AttentionImpl::kAuto, bool all_tokens = true,
                 Precision int8_float = Precision::kFp16,
                 Int8Activations int8_activations = Int8Activations::kPerTensor) {
  return OpCase{name, a, batch, op, p, att, all_tokens, int8_float, int8_activations};
}

}  // namespace

std::unique_ptr<OpCaseDevice> cpu_op_case_device() { return std::make_unique<CpuDevice>(); }
#ifndef EDGEVIT_HAVE_CUDA
std::unique_ptr<OpCaseDevice> cuda_op_case_device() { return nullptr; }
#endif

// INT8 (docs/int8.md): the four block GEMMs and the LayerNorms that write their int8 input, in a full block
// and in the class-token tail (one row per image after the attention), with each runtime.int8_float (on
// CUDA: the fp16 or fp32 residual, LayerNorm input, qkv output and proj input), with per-tensor scales; and
// the ops norm_per_token changes (the LayerNorms scale each row, qkv and fc1 read those row scales); then the
// float ops of an fp32 INT8 graph (the twin rows: patch embedding, attention in a full block and in the tail,
// norms, head, norm_pre, qk_norm).
std::vector<OpCase> int8_op_cases() {
  std::vector<OpCase> cases;
  const VitArch base = small_arch(40, 8, 64, 2, 2);
  for (Precision f : {Precision::kFp16, Precision::kFp32}) {
    const std::string stem = f == Precision::kFp16 ? "int8 vit-40/8 " : "int8 float32 vit-40/8 ";
    for (const char* op : {"blocks.0.norm1", "blocks.0.attn.qkv", "blocks.0.attn.proj", "blocks.0.norm2",
                           "blocks.0.mlp.fc1", "blocks.0.mlp.fc2", "blocks.1.attn.proj", "blocks.1.mlp.fc2"})
      cases.push_back(make_case(stem + op, base, 3, op, Precision::kInt8, AttentionImpl::kAuto, false, f));
    for (const char* op : {"blocks.0.norm1", "blocks.0.attn.qkv", "blocks.1.norm2", "blocks.1.mlp.fc1"})
      cases.push_back(make_case(stem + "norm_per_token " + op, base, 3, op, Precision::kInt8, AttentionImpl::kAuto,
                                false, f, Int8Activations::kNormPerToken));
  }
  // The attention writing proj's int8 input (CUDA, fp16 float ops): the fused row and the unfused one with its
  // quantizing pass, full block and class-token tail (on the CPU and in the fp32 mode: the float attention).
  for (AttentionImpl att : {AttentionImpl::kAuto, AttentionImpl::kExplicit})
    for (const char* op : {"blocks.0.attn.sdpa", "blocks.1.attn.sdpa"})
      cases.push_back(make_case(std::string("int8 vit-40/8 ") + to_string(att) + " " + op, base, 3, op,
                                Precision::kInt8, att, false, Precision::kFp16));
  // runtime.int8_attention: int8: qkv writing int8 Q|K per (token, head) and the INT8 attention reading them
  // (full block, class-token tail; CPU: fp32 output, CUDA: proj's int8 input), with each activation mode.
  for (Int8Activations act : {Int8Activations::kPerTensor, Int8Activations::kNormPerToken})
    for (const char* op : {"blocks.0.attn.qkv", "blocks.0.attn.sdpa", "blocks.1.attn.sdpa"}) {
      OpCase c = make_case(std::string("int8 int8_attention ") + to_string(act) + " vit-40/8 " + op, base, 3, op,
                           Precision::kInt8, AttentionImpl::kAuto, false, Precision::kFp16, act);
      c.int8_attention = true;
      cases.push_back(c);
    }
  // The float ops of an fp32 INT8 graph: the twin rows (float64, OpRow::int8_twin) and the fp32 rows after them.
  for (const char* op : {"patch_embed.proj", "blocks.0.attn.sdpa", "blocks.1.attn.sdpa", "norm", "head"})
    cases.push_back(make_case(std::string("int8 float32 twin vit-40/8 ") + op, base, 3, op, Precision::kInt8,
                              AttentionImpl::kAuto, false, Precision::kFp32));
  VitArch clip = base;  // norm_pre (in place), QuickGELU: the twin LayerNorm and GEMM epilogue on CLIP's ops
  clip.pre_norm = true;
  clip.act = Activation::kQuickGelu;
  cases.push_back(make_case("int8 float32 twin clip norm_pre", clip, 2, "norm_pre", Precision::kInt8,
                            AttentionImpl::kAuto, false, Precision::kFp32));
  VitArch qk = base;  // timm qk_norm: between qkv and the attention, so on the path to proj's int8 rounding
  qk.qk_norm = true;
  cases.push_back(make_case("int8 float32 twin qk_norm blocks.0.attn.qk_norm", qk, 2, "blocks.0.attn.qk_norm",
                            Precision::kInt8, AttentionImpl::kAuto, false, Precision::kFp32));
  return cases;
}

std::vector<OpCase> standard_op_cases(Precision p) {
  if (p == Precision::kInt8) return int8_op_cases();
  std::vector<OpCase> cases;
  // 40 px / 8 px patches: 25 patches + class token = 26 tokens (odd tile tails everywhere).
  const VitArch base = small_arch(40, 8, 64, 2, 2);
  for (const char* op : {"patch_embed.im2col", "patch_embed.proj", "assemble_tokens", "blocks.0.norm1",
                         "blocks.0.attn.qkv", "blocks.0.attn.proj", "blocks.0.mlp.fc1", "blocks.0.mlp.fc2", "norm",
                         "pool.token", "head"})
    cases.push_back(make_case(std::string("vit-40/8 ") + op, base, 3, op, p));
  VitArch tall = base;  // a non-square input, 48 high and 24 wide: a 6 x 3 patch grid
  tall.img_h = 48;
  tall.img_w = 24;
  for (const char* op : {"patch_embed.im2col", "assemble_tokens"})
    cases.push_back(make_case(std::string("vit-48x24/8 ") + op, tall, 2, op, p));
  VitArch tanh = base;
  tanh.act = Activation::kGeluTanh;
  cases.push_back(make_case("gelu_tanh blocks.0.mlp.fc1", tanh, 3, "blocks.0.mlp.fc1", p));
  VitArch reg = base;
  reg.reg_tokens = 4;
  reg.no_embed_class = true;
  reg.global_pool = GlobalPool::kAvg;
  reg.fc_norm = true;
  for (const char* op : {"assemble_tokens", "pool.avg", "fc_norm", "blocks.0.attn.sdpa"})
    cases.push_back(make_case(std::string("reg4 no_embed_class avg ") + op, reg, 2, op, p));
  VitArch quick = base;  // CLIP: QuickGELU, norm_pre, no patch-embedding bias, a head without bias
  quick.act = Activation::kQuickGelu;
  quick.pre_norm = true;
  quick.patch_bias = false;
  quick.head_bias = false;
  for (const char* op : {"blocks.0.mlp.fc1", "norm_pre", "patch_embed.proj", "head"})
    cases.push_back(make_case(std::string("clip quick_gelu ") + op, quick, 3, op, p));
  VitArch pooler = base;  // HF ViTModel: the pooler, dense + tanh over the class token
  pooler.num_classes = 0;
  pooler.pooler = true;
  cases.push_back(make_case("vit pooler pooler.dense", pooler, 3, "pooler.dense", p));
  VitArch qk = base;  // timm qk_norm
  qk.qk_norm = true;
  cases.push_back(make_case("qk_norm blocks.0.attn.qk_norm", qk, 3, "blocks.0.attn.qk_norm", p));
  VitArch map = base;  // SigLIP: no class token, the MAP head (its query folded into attn_pool.qkv's bias)
  map.class_token = false;
  map.global_pool = GlobalPool::kMap;
  map.act = Activation::kGeluTanh;
  // Not attn_pool.qkv: the packed CPU GEMM computes its Q columns for token 0's row only (the attention reads no
  // other), so the rest of that tensor differs from the full reference by design.
  for (const char* op : {"attn_pool.sdpa", "attn_pool.proj", "attn_pool.norm", "attn_pool.mlp.fc2"})
    cases.push_back(make_case(std::string("siglip map ") + op, map, 3, op, p));
  VitArch cls_mean = base;  // HF Dinov2ForImageClassification: head over the class token + head_mean (+=)
  cls_mean.head_mean_tokens = true;
  for (const char* op : {"pool.avg", "head_mean"})
    cases.push_back(make_case(std::string("class token + patch mean head ") + op, cls_mean, 2, op, p));
  VitArch dist = base;  // DeiT distilled: class + distillation token, the folded two-token head
  dist.dist_token = true;
  for (const char* op : {"assemble_tokens", "pool.cls_dist_mean", "pool.cls_dist", "head_distilled"})
    cases.push_back(make_case(std::string("deit distilled ") + op, dist, 2, op, p));
  for (int d : {32, 64, 80, 96, 128, 160}) {
    const VitArch a = small_arch(48, 8, 2 * d, 2, 2);  // 36 patches + 1 = 37 tokens
    for (AttentionImpl att : {AttentionImpl::kAuto, AttentionImpl::kExplicit}) {
      cases.push_back(make_case("attention d" + std::to_string(d) + " " + to_string(att), a, 2,
                                "blocks.0.attn.sdpa", p, att));
      cases.push_back(make_case("attention d" + std::to_string(d) + " class-token tail " + to_string(att), a, 2,
                                "blocks.1.attn.sdpa", p, att, false));
    }
  }
  return cases;
}

std::vector<OpCase> model_op_cases(const ModelSpec& spec, int batch, Precision p) {
  std::vector<OpCase> cases;
  VitArch a = spec.arch;
  a.depth = 1;  // the first block's shapes are every block's
  const bool avg = a.global_pool == GlobalPool::kAvg;
  std::vector<std::string> ops = {"patch_embed.im2col", "patch_embed.proj", "assemble_tokens", "blocks.0.norm1",
                                  "blocks.0.attn.qkv", "blocks.0.attn.sdpa", "blocks.0.attn.proj",
                                  "blocks.0.norm2", "blocks.0.mlp.fc1", "blocks.0.mlp.fc2",
                                  a.fc_norm ? "fc_norm" : "norm"};
  if (a.pre_norm) ops.push_back("norm_pre");
  if (a.qk_norm) ops.push_back("blocks.0.attn.qk_norm");
  if (a.dist_token) {
    ops.push_back("pool.cls_dist_mean");
    if (a.num_classes > 0) ops.insert(ops.end(), {"pool.cls_dist", "head_distilled"});
  } else if (a.head_mean_tokens) {
    ops.insert(ops.end(), {"pool.token", "pool.avg", "head", "head_mean"});
  } else if (a.global_pool == GlobalPool::kMap) {
    ops.insert(ops.end(), {"attn_pool.sdpa", "attn_pool.proj", "attn_pool.norm", "attn_pool.mlp.fc1",
                           "attn_pool.mlp.fc2"});
    if (a.num_classes > 0) ops.push_back("head");
  } else {
    ops.push_back(avg ? "pool.avg" : "pool.token");
    if (a.num_classes > 0) ops.push_back("head");
  }
  if (a.pooler) ops.push_back("pooler.dense");
  for (const std::string& op : ops)
    cases.push_back(make_case(spec.name + " " + op, a, batch, op, p, spec.attention, true, spec.int8_float,
                              spec.int8_activations));
  return cases;
}

Result<std::vector<OpCaseResult>> run_op_case(const OpCase& c, const DeviceProfile& profile, OpCaseDevice& device,
                                              uint32_t seed) {
  ModelSpec spec;
  spec.name = "op-case";
  spec.arch = c.arch;
  spec.max_batch = c.batch;
  spec.int8_activations = c.int8_activations;
  spec.int8_attention = c.int8_attention;
  PlanOptions o;
  o.batch = c.batch;
  o.precision = c.precision;
  o.attention = c.attention;
  o.all_tokens = c.all_tokens;
  o.int8_float = c.int8_float;
  EV_ASSIGN_OR_RETURN(Plan plan, make_plan(spec, profile, o));
  const Op* op = nullptr;
  for (const Op& candidate : plan.graph.ops)
    if (candidate.name == c.op) op = &candidate;
  if (op == nullptr) return invalid_argument("op case '" + c.name + "': the model has no op '" + c.op + "'");
  std::vector<OpCaseResult> results;
  for (const OpRow& row : op_table(profile.kind)) {
    if (!row_matches(row, *op, plan.graph)) continue;
    if (op->kind == OpKind::kAttention && (row.scratch_bytes != nullptr) != (op->scratch >= 0))
      continue;  // the plan's arena fits its path's rows
    if (!row.supports(*op, plan.graph, profile).ok || !row.available().empty()) continue;
    EV_ASSIGN_OR_RETURN(OpCaseResult r, run_row(plan, *op, row, device, seed));
    results.push_back(std::move(r));
  }
  return results;
}

}  // namespace edgevit
