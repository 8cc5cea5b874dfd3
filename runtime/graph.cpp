#include "runtime/graph.h"

#include <cassert>
#include <cmath>

namespace edgevit {

const char* to_string(TensorKind k) {
  switch (k) {
    case TensorKind::kWeight: return "weight";
    case TensorKind::kInput: return "input";
    case TensorKind::kOutput: return "output";
    case TensorKind::kActivation: return "activation";
    case TensorKind::kScratch: return "scratch";
  }
  return "?";
}

const char* to_string(OpKind k) {
  switch (k) {
    case OpKind::kIm2col: return "im2col";
    case OpKind::kLinear: return "linear";
    case OpKind::kAssembleTokens: return "assemble_tokens";
    case OpKind::kLayerNorm: return "layernorm";
    case OpKind::kAttention: return "attention";
    case OpKind::kPool: return "pool";
    case OpKind::kQkNorm: return "qk_norm";
  }
  return "?";
}

Precision op_precision(const Op& op, const Graph& graph) {
  if (op.int8) return Precision::kInt8;
  return graph.precision == Precision::kInt8 ? graph.int8_rest : graph.precision;
}

const char* to_string(AttentionPath p) { return p == AttentionPath::kFused ? "fused" : "explicit"; }

int64_t TensorDesc::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

namespace {

class Builder {
 public:
  Builder(Graph& g) : g_(g) {}

  int tensor(const std::string& name, std::vector<int64_t> shape, TensorKind kind, int64_t elem_bytes) {
    TensorDesc t;
    t.id = static_cast<int>(g_.tensors.size());
    t.name = name;
    t.shape = std::move(shape);
    t.kind = kind;
    t.elem_bytes = elem_bytes;
    g_.tensors.push_back(t);
    return t.id;
  }
  int act(const std::string& name, std::vector<int64_t> shape) {
    return tensor(name, std::move(shape), TensorKind::kActivation, g_.act_elem_bytes());
  }
  int weight(const std::string& name, std::vector<int64_t> shape) {
    return tensor(name, std::move(shape), TensorKind::kWeight, g_.act_elem_bytes());
  }

  // Appends an op and extends the lifetimes of everything it touches.
  Op& op(OpKind kind, const std::string& name, std::vector<int> in, std::vector<int> out,
         std::vector<int> w = {}) {
    Op o;
    o.kind = kind;
    o.name = name;
    o.inputs = std::move(in);
    o.outputs = std::move(out);
    o.weights = std::move(w);
    const int idx = static_cast<int>(g_.ops.size());
    for (int id : o.inputs) touch(id, idx);
    for (int id : o.outputs) touch(id, idx);
    g_.ops.push_back(o);
    return g_.ops.back();
  }
  void touch(int id, int op_index) {
    TensorDesc& t = g_.tensors[id];
    if (t.first_op < 0) t.first_op = op_index;
    t.last_op = op_index;
  }
  int scratch(Op& o, const std::string& name, int64_t bytes) {
    const int id = tensor(name, {bytes}, TensorKind::kScratch, 1);
    const int idx = static_cast<int>(g_.ops.size()) - 1;
    touch(id, idx);
    o.scratch = id;
    return id;
  }

  Op& linear(const std::string& name, int x, int y, int64_t m, int64_t n, int64_t k, bool bias, int epilogue) {
    std::vector<int> w{weight(name + ".weight", {n, k})};
    if (bias) w.push_back(weight(name + ".bias", {n}));
    std::vector<int> in{x};
    if (epilogue == 2) in.push_back(y);
    Op& o = op(OpKind::kLinear, name, in, {y}, w);
    o.epilogue = epilogue;
    o.m = m; o.n = n; o.k = k;
    const double eb = static_cast<double>(g_.act_elem_bytes());
    o.flops = 2.0 * m * n * k;
    o.bytes = eb * (m * k + n * k + (bias ? n : 0) + m * n * (epilogue == 2 ? 2 : 1));
    return o;
  }
  // INT8 linear (docs/int8.md): `in` holds the int8 input and its per-row scales (or the float input the op
  // quantizes itself, with its scratch), then the residual for epilogue 2. Weights: the int8 weight (N, K),
  // its per-output-channel scales (N, fp32), the bias (N, fp32) when `bias`, and `extra_scale` (the
  // calibrated scale of the op's int8 input or output) when >= 0.
  Op& linear_i8(const std::string& name, std::vector<int> in, std::vector<int> out, int64_t m, int64_t n,
                int64_t k, bool bias, int epilogue, int extra_scale) {
    std::vector<int> w{tensor(name + ".weight", {n, k}, TensorKind::kWeight, 1),
                       tensor(name + ".weight_scale", {n}, TensorKind::kWeight, 4)};
    if (bias) w.push_back(tensor(name + ".bias", {n}, TensorKind::kWeight, 4));  // fp32: the GEMM's epilogue adds it
    if (extra_scale >= 0) w.push_back(extra_scale);
    Op& o = op(OpKind::kLinear, name, std::move(in), std::move(out), w);
    o.int8 = true;
    o.epilogue = epilogue;
    o.m = m; o.n = n; o.k = k;
    o.flops = 2.0 * m * n * k;
    const double eb = static_cast<double>(g_.act_elem_bytes());
    const double in_bytes = g_.tensors[static_cast<size_t>(o.inputs[0])].elem_bytes == 1 ? m * k + 4.0 * m : eb * m * k;
    const double out_bytes = epilogue == 1 ? 1.0 : epilogue == 2 ? 2.0 * eb : eb;  // fc1: int8; residual: read + write
    o.bytes = in_bytes + 1.0 * n * k + 4.0 * n * (bias ? 2 : 1) + out_bytes * m * n;
    return o;
  }
  Op& layernorm(const std::string& name, int x, int y, int64_t m, int64_t c, double eps) {
    std::vector<int> w{weight(name + ".weight", {c}), weight(name + ".bias", {c})};
    Op& o = op(OpKind::kLayerNorm, name, {x}, {y}, w);
    o.eps = eps;
    o.m = m; o.n = c;
    const double eb = static_cast<double>(g_.act_elem_bytes());
    o.flops = 8.0 * m * c;
    o.bytes = eb * (2.0 * m * c + 2.0 * c);
    return o;
  }

 private:
  Graph& g_;
};

// The model's dimensions at the graph's batch.
struct Dims {
  Dims(const VitArch& a, int batch)
      : B(batch), P(a.num_patches()), T(a.num_tokens()), E(a.embed_dim), M(a.mlp_hidden()), H(a.num_heads),
        D(a.head_dim()), C(a.in_chans), K(int64_t{a.in_chans} * a.patch_size * a.patch_size) {}
  int64_t B, P, T, E, M, H, D, C, K;
};

// Patch embedding: im2col + GEMM, then class/register tokens and position embeddings. Returns x (B, T, E).
int add_stem(Builder& b, Graph& g, const Dims& d) {
  const VitArch& a = g.arch;
  const double eb = static_cast<double>(g.act_elem_bytes());
  g.input = b.tensor("input", {d.B, d.C, a.img_h, a.img_w}, TensorKind::kInput, g.act_elem_bytes());
  const int cols = b.act("patch_embed.cols", {d.B * d.P, d.K});
  {
    Op& o = b.op(OpKind::kIm2col, "patch_embed.im2col", {g.input}, {cols});
    o.bytes = eb * 2.0 * d.B * d.P * d.K;
  }
  const int patches = b.act("patch_embed.out", {d.B, d.P, d.E});
  b.linear("patch_embed.proj", cols, patches, d.B * d.P, d.E, d.K, a.patch_bias, 0);
  const int x = b.act("x", {d.B, d.T, d.E});
  std::vector<int> w;
  if (a.class_token) w.push_back(b.weight("cls_token", {1, 1, d.E}));
  if (a.dist_token) w.push_back(b.weight("dist_token", {1, 1, d.E}));
  if (a.reg_tokens > 0) w.push_back(b.weight("reg_token", {1, a.reg_tokens, d.E}));
  w.push_back(b.weight("pos_embed", {1, a.pos_embed_len(), d.E}));
  Op& o = b.op(OpKind::kAssembleTokens, "assemble_tokens", {patches}, {x}, w);
  o.bytes = eb * (d.B * d.P * d.E + d.B * d.T * d.E + a.pos_embed_len() * d.E);
  o.flops = static_cast<double>(d.B * d.T * d.E);
  if (a.pre_norm) b.layernorm("norm_pre", x, x, d.B * d.T, d.E, a.layer_norm_eps);  // in place
  return x;
}

// Op::epilogue of the MLP's first linear for the activation.
int fc1_epilogue(Activation act) {
  switch (act) {
    case Activation::kGeluTanh: return 3;
    case Activation::kQuickGelu: return 4;
    default: return 1;
  }
}

// The final norm over every token, x -> (B, T, E): the `tokens` output when it was asked for (graph.h).
int normed_tokens(Builder& b, Graph& g, const Dims& d, int x) {
  const bool out = g.outputs.has(OutputKind::kTokens);
  const int hn = out ? b.tensor("tokens", {d.B, d.T, d.E}, TensorKind::kOutput, g.act_elem_bytes())
                     : b.act("norm.out", {d.B, d.T, d.E});
  b.layernorm("norm", x, hn, d.B * d.T, d.E, g.arch.layer_norm_eps);
  if (out) g.tokens = hn;
  return hn;
}

// A block's qk-norm (when the model has it: in place on the packed qkv) and attention over sq queries per
// image (sq = 1: the class-token tail). Returns the attention output (B, sq, H, D).
// out_scale >= 0 (CUDA INT8 graphs, per tensor): the attention writes int8 codes of its output at that
// per-tensor scale (proj's calibrated input scale, a weight of both ops), an int8 `attn.out` (Op::int8).
int add_attention(Builder& b, const Graph& g, const Dims& d, const std::string& blk, std::vector<int> in, int64_t rows,
                  int64_t sq, int64_t explicit_scratch_bytes, int out_scale = -1) {
  const int qkv = in[0];
  const VitArch& a = g.arch;
  const double eb = static_cast<double>(g.act_elem_bytes());
  if (a.qk_norm) {
    const std::string n = blk + ".attn.";
    Op& o = b.op(OpKind::kQkNorm, n + "qk_norm", {qkv}, {qkv},
                 {b.weight(n + "q_norm.weight", {d.D}), b.weight(n + "q_norm.bias", {d.D}),
                  b.weight(n + "k_norm.weight", {d.D}), b.weight(n + "k_norm.bias", {d.D})});
    o.eps = a.layer_norm_eps;
    o.m = rows;
    o.n = d.D;
    o.flops = 8.0 * rows * 2 * d.E;
    o.bytes = eb * (4.0 * rows * d.E + 4.0 * d.D);
  }
  const bool i8 = out_scale >= 0;
  const int ctx = i8 ? b.tensor(blk + ".attn.out", {d.B, sq, d.H, d.D}, TensorKind::kActivation, 1)
                     : b.act(blk + ".attn.out", {d.B, sq, d.H, d.D});
  const bool qk_i8 = in.size() == 3;  // int8 Q|K, their scales, float V (Graph::int8_attention)
  const double in_bytes = qk_i8 ? d.B * d.T * (2.0 * d.E + 8.0 * d.H + eb * d.E) : eb * 3.0 * d.B * d.T * d.E;
  Op& at = i8 ? b.op(OpKind::kAttention, blk + ".attn.sdpa", std::move(in), {ctx}, {out_scale})
              : b.op(OpKind::kAttention, blk + ".attn.sdpa", std::move(in), {ctx});
  at.int8 = i8 || qk_i8;
  at.seq_q = sq;
  at.flops = 4.0 * d.B * d.H * sq * d.T * d.D + 5.0 * d.B * d.H * sq * d.T;
  at.bytes = in_bytes + (i8 ? 1.0 : eb) * d.B * sq * d.E;
  if (g.attention == AttentionPath::kExplicit) {
    b.scratch(at, blk + ".attn.scores", explicit_scratch_bytes);
    at.bytes += 2.0 * static_cast<double>(explicit_scratch_bytes);
  }
  return ctx;
}

// Block i over the residual stream x. `last`: the class-token tail (graph.h); returns its class-token rows
// xc (B, E), else -1.
int add_block(Builder& b, Graph& g, const Dims& d, int i, int x, bool last, int64_t explicit_scratch_bytes) {
  const VitArch& a = g.arch;
  const double eb = static_cast<double>(g.act_elem_bytes());
  const std::string blk = "blocks." + std::to_string(i);
  const int64_t rows = d.B * d.T;
  const int64_t sq = last ? 1 : d.T;    // query tokens per image from this block's attention on
  const int64_t r = last ? d.B : rows;  // rows of the ops after the attention
  const int h1 = b.act(blk + ".norm1.out", {d.B, d.T, d.E});
  b.layernorm(blk + ".norm1", x, h1, rows, d.E, a.layer_norm_eps);
  const int qkv = b.act(blk + ".attn.qkv.out", {d.B, d.T, 3, d.H, d.D});
  b.linear(blk + ".attn.qkv", h1, qkv, rows, 3 * d.E, d.E, a.qkv_bias, 0);
  const int ctx = add_attention(b, g, d, blk, {qkv}, rows, sq, explicit_scratch_bytes);
  int res = x;  // the residual stream this block's second half updates
  int xc = -1;
  if (last) {
    xc = b.act(blk + ".cls", {d.B, d.E});
    Op& o = b.op(OpKind::kPool, "pool.token", {x}, {xc});
    o.bytes = eb * 2.0 * d.B * d.E;
    res = xc;
  }
  b.linear(blk + ".attn.proj", ctx, res, r, d.E, d.E, true, 2);
  const int h2 = b.act(blk + ".norm2.out", {d.B, last ? 1 : d.T, d.E});
  b.layernorm(blk + ".norm2", res, h2, r, d.E, a.layer_norm_eps);
  const int mlp = b.act(blk + ".mlp.hidden", {d.B, last ? 1 : d.T, d.M});
  b.linear(blk + ".mlp.fc1", h2, mlp, r, d.M, d.E, true, fc1_epilogue(a.act));
  b.linear(blk + ".mlp.fc2", mlp, res, r, d.E, d.M, true, 2);
  return xc;
}

// Block i of an INT8 graph (docs/int8.md): the same ops as add_block, with the four GEMMs W8A8. norm1 and
// norm2 write int8 and per-row scales (LayerNorm -> int8), fc1 writes int8 through its GELU epilogue, proj's
// int8 input comes from the attention (CUDA, fp16 float ops, proj per tensor) or from proj quantizing the
// attention's float output into its scratch (elsewhere). A calibrated scale `<gemm>.input_scale` (1)
// is a weight from the scale file for every GEMM input in per-tensor mode, for proj's and fc2's in
// norm-per-token mode (the LayerNorms then scale each row at run time), for none in per-token mode.
int add_block_int8(Builder& b, Graph& g, const Dims& d, int i, int x, bool last, int64_t explicit_scratch_bytes) {
  const VitArch& a = g.arch;
  const std::string blk = "blocks." + std::to_string(i);
  const int64_t rows = d.B * d.T;
  const int64_t sq = last ? 1 : d.T;
  const int64_t r = last ? d.B : rows;
  auto in_scale = [&](const std::string& gemm) {
    const bool calibrated = g.int8_activations == Int8Activations::kPerTensor ||
                            (g.int8_activations == Int8Activations::kNormPerToken && gemm != ".attn.qkv" &&
                             gemm != ".mlp.fc1");
    return calibrated ? b.tensor(blk + gemm + ".input_scale", {1}, TensorKind::kWeight, 4) : -1;
  };
  auto ln_i8 = [&](const std::string& name, int src, int64_t m, const std::string& gemm, int* q, int* s) {
    *q = b.tensor(name + ".out", {m, d.E}, TensorKind::kActivation, 1);
    *s = b.tensor(name + ".out_scale", {m}, TensorKind::kActivation, 4);
    std::vector<int> w{b.weight(name + ".weight", {d.E}), b.weight(name + ".bias", {d.E})};
    const int sc = in_scale(gemm);
    if (sc >= 0) w.push_back(sc);
    Op& o = b.op(OpKind::kLayerNorm, name, {src}, {*q, *s}, w);
    o.int8 = true;
    o.eps = a.layer_norm_eps;
    o.m = m; o.n = d.E;
    o.flops = 10.0 * m * d.E;
    o.bytes = (static_cast<double>(g.act_elem_bytes()) + 1.0) * m * d.E + 4.0 * m + 8.0 * d.E;
  };
  int h1 = -1, h1s = -1;
  ln_i8(blk + ".norm1", x, rows, ".attn.qkv", &h1, &h1s);
  std::vector<int> att_in;
  if (g.int8_attention) {  // int8 Q|K with a scale per (token, head), float V (graph.h)
    const int qk = b.tensor(blk + ".attn.qk", {d.B, d.T, 2, d.H, d.D}, TensorKind::kActivation, 1);
    const int qks = b.tensor(blk + ".attn.qk_scale", {d.B, d.T, 2, d.H}, TensorKind::kActivation, 4);
    const int v = b.act(blk + ".attn.v", {d.B, d.T, d.H, d.D});
    Op& o = b.linear_i8(blk + ".attn.qkv", {h1, h1s}, {qk, qks, v}, rows, 3 * d.E, d.E, a.qkv_bias, 0, -1);
    o.bytes += rows * (2.0 * d.E + 8.0 * d.H) - static_cast<double>(g.act_elem_bytes()) * rows * 2 * d.E;
    att_in = {qk, qks, v};
  } else {
    const int qkv = b.act(blk + ".attn.qkv.out", {d.B, d.T, 3, d.H, d.D});
    b.linear_i8(blk + ".attn.qkv", {h1, h1s}, {qkv}, rows, 3 * d.E, d.E, a.qkv_bias, 0, -1);
    att_in = {qkv};
  }
  // On CUDA with fp16 float ops and proj's input per tensor (per_tensor, norm_per_token) the attention writes
  // proj's int8 input itself, at proj's calibrated scale (no quantizing pass); elsewhere (the CPU, the fp32
  // mode, per token) proj quantizes the float `attn.out` into its scratch.
  const bool attn_i8 = !g.int8_per_token() && g.int8_rest == Precision::kFp16;
  const int attn_scale = attn_i8 ? in_scale(".attn.proj") : -1;  // else made where it was (same tensor ids)
  const int ctx = add_attention(b, g, d, blk, std::move(att_in), rows, sq, explicit_scratch_bytes, attn_scale);
  const double eb = static_cast<double>(g.act_elem_bytes());
  int res = x, xc = -1;
  if (last) {
    xc = b.act(blk + ".cls", {d.B, d.E});
    Op& o = b.op(OpKind::kPool, "pool.token", {x}, {xc});
    o.bytes = eb * 2.0 * d.B * d.E;
    res = xc;
  }
  const int proj_scale = attn_i8 ? attn_scale : in_scale(".attn.proj");
  Op& proj = b.linear_i8(blk + ".attn.proj", {ctx, res}, {res}, r, d.E, d.E, true, 2, proj_scale);
  if (attn_i8) {
    proj.bytes -= 4.0 * r;  // reads its input's one per-tensor scale, no row scales
  } else {  // int8 (r, E), then fp32 scales (r) at the next 16-byte boundary (int8_scratch_scales_offset)
    b.scratch(proj, blk + ".attn.proj.in_q", int8_scratch_scales_offset(r, d.E) + 4 * r);
  }
  int h2 = -1, h2s = -1;
  ln_i8(blk + ".norm2", res, r, ".mlp.fc1", &h2, &h2s);
  const int mq = b.tensor(blk + ".mlp.hidden", {r, d.M}, TensorKind::kActivation, 1);
  const int ms = b.tensor(blk + ".mlp.hidden_scale", {r}, TensorKind::kActivation, 4);
  // mlp.hidden holds uint8 codes of GELU + 0.17 (docs/int8.md). Per tensor, fc1's output is at fc2's
  // calibrated scale: a weight of both (fc1 writes with it, fc2 reads with it); mlp.hidden_scale then carries
  // nothing the next op needs.
  const int fc2_scale = in_scale(".mlp.fc2");
  b.linear_i8(blk + ".mlp.fc1", {h2, h2s}, {mq, ms}, r, d.M, d.E, true, 1, fc2_scale);
  b.linear_i8(blk + ".mlp.fc2", {mq, ms, res}, {res}, r, d.E, d.M, true, 2, fc2_scale);
  return xc;
}

// DeiT distilled (graph.h): norm over every token, then the class and distillation tokens' mean
// (pre_logits) and their concatenation into the folded head.
void add_distilled_head(Builder& b, Graph& g, const Dims& d, int x) {
  const VitArch& a = g.arch;
  const double eb = static_cast<double>(g.act_elem_bytes());
  const int hn = normed_tokens(b, g, d, x);
  Op& mean = b.op(OpKind::kPool, "pool.cls_dist_mean", {hn}, {g.pre_logits});
  mean.pool_count = 2;
  mean.bytes = eb * 3.0 * d.B * d.E;
  if (a.num_classes == 0) {
    g.logits = g.pre_logits;
    return;
  }
  const int pair = b.act("pool.cls_dist", {d.B, 2 * d.E});
  Op& cat = b.op(OpKind::kPool, "pool.cls_dist", {hn}, {pair});
  cat.pool_count = 2;
  cat.pool_concat = true;
  cat.bytes = eb * 4.0 * d.B * d.E;
  g.logits = b.tensor("logits", {d.B, a.num_classes}, TensorKind::kOutput, g.act_elem_bytes());
  b.linear("head_distilled", pair, g.logits, d.B, a.num_classes, 2 * d.E, true, 0);
}

// timm's AttentionPoolLatent (global_pool='map', SigLIP; graph.h): the latent query's projection does not
// depend on the image, so the loader folds it into the bias of one packed qkv GEMM whose Q weights are zero
// (attn_pool.qkv: runtime/weights.h); the attention takes the query of token 0 only (seq_q = 1, the class-token
// tail's launch shape: the packed CPU GEMM computes Q for that row alone), then proj, and x + mlp(norm(x)).
void add_map_head(Builder& b, Graph& g, const Dims& d, int x, int64_t explicit_scratch_bytes) {
  const VitArch& a = g.arch;
  const double eb = static_cast<double>(g.act_elem_bytes());
  const int64_t rows = d.B * d.T;
  const int hn = normed_tokens(b, g, d, x);
  const int qkv = b.act("attn_pool.qkv.out", {d.B, d.T, 3, d.H, d.D});
  b.linear("attn_pool.qkv", hn, qkv, rows, 3 * d.E, d.E, true, 0);
  const int ctx = b.act("attn_pool.attn.out", {d.B, 1, d.H, d.D});
  Op& at = b.op(OpKind::kAttention, "attn_pool.sdpa", {qkv}, {ctx});
  at.seq_q = 1;
  at.flops = 4.0 * d.B * d.H * d.T * d.D + 5.0 * d.B * d.H * d.T;
  at.bytes = eb * (3.0 * d.B * d.T * d.E + d.B * d.E);
  if (g.attention == AttentionPath::kExplicit) {
    b.scratch(at, "attn_pool.attn.scores", explicit_scratch_bytes);
    at.bytes += 2.0 * static_cast<double>(explicit_scratch_bytes);
  }
  const int y = g.pre_logits;
  b.linear("attn_pool.proj", ctx, y, d.B, d.E, d.E, true, 0);
  const int h = b.act("attn_pool.norm.out", {d.B, d.E});
  b.layernorm("attn_pool.norm", y, h, d.B, d.E, a.layer_norm_eps);
  const int mlp = b.act("attn_pool.mlp.hidden", {d.B, d.M});
  b.linear("attn_pool.mlp.fc1", h, mlp, d.B, d.M, d.E, true, fc1_epilogue(a.act));
  b.linear("attn_pool.mlp.fc2", mlp, y, d.B, d.E, d.M, true, 2);
  if (a.num_classes > 0) {
    g.logits = b.tensor("logits", {d.B, a.num_classes}, TensorKind::kOutput, g.act_elem_bytes());
    b.linear("head", g.pre_logits, g.logits, d.B, a.num_classes, d.E, a.head_bias, 0);
  } else {
    g.logits = g.pre_logits;
  }
}

// Final norm, pooling and head: pre_logits (B, E) and logits (B, classes) (pre_logits when classes == 0).
void add_head(Builder& b, Graph& g, const Dims& d, int x, int xc, int64_t explicit_scratch_bytes) {
  const VitArch& a = g.arch;
  const double eb = static_cast<double>(g.act_elem_bytes());
  g.pre_logits = b.tensor("pre_logits", {d.B, d.E}, TensorKind::kOutput, g.act_elem_bytes());
  const char* pool_name = a.global_pool == GlobalPool::kAvg ? "pool.avg" : "pool.token";
  const bool avg = a.global_pool == GlobalPool::kAvg;
  const double pool_bytes = eb * (avg ? d.B * (d.T - a.num_prefix_tokens()) * d.E + d.B * d.E : 2.0 * d.B * d.E);
  if (a.dist_token) {
    add_distilled_head(b, g, d, x);
    return;
  }
  if (a.global_pool == GlobalPool::kMap) {
    add_map_head(b, g, d, x, explicit_scratch_bytes);
    return;
  }
  if (a.head_mean_tokens) {  // HF Dinov2ForImageClassification (model_spec.h)
    const int hn = normed_tokens(b, g, d, x);
    Op& cls = b.op(OpKind::kPool, "pool.token", {hn}, {g.pre_logits});
    cls.bytes = eb * 2.0 * d.B * d.E;
    const int mean = b.act("pool.patch_mean", {d.B, d.E});
    Op& avg = b.op(OpKind::kPool, "pool.avg", {hn}, {mean});
    avg.avg_pool = true;
    avg.bytes = eb * (d.B * (d.T - a.num_prefix_tokens()) * d.E + d.B * d.E);
    g.logits = b.tensor("logits", {d.B, a.num_classes}, TensorKind::kOutput, g.act_elem_bytes());
    b.linear("head", g.pre_logits, g.logits, d.B, a.num_classes, d.E, true, 0);
    b.linear("head_mean", mean, g.logits, d.B, a.num_classes, d.E, false, 2);
    return;
  }
  if (xc >= 0) {
    b.layernorm(a.fc_norm ? "fc_norm" : "norm", xc, g.pre_logits, d.B, d.E, a.layer_norm_eps);
  } else if (!a.fc_norm) {
    const int hn = normed_tokens(b, g, d, x);
    Op& o = b.op(OpKind::kPool, pool_name, {hn}, {g.pre_logits});
    o.avg_pool = avg;
    o.bytes = pool_bytes;
  } else {
    const int pooled = b.act("pool.out", {d.B, d.E});
    Op& o = b.op(OpKind::kPool, pool_name, {x}, {pooled});
    o.avg_pool = avg;
    o.bytes = pool_bytes;
    b.layernorm("fc_norm", pooled, g.pre_logits, d.B, d.E, a.layer_norm_eps);
  }
  if (a.num_classes > 0) {
    g.logits = b.tensor("logits", {d.B, a.num_classes}, TensorKind::kOutput, g.act_elem_bytes());
    b.linear("head", g.pre_logits, g.logits, d.B, a.num_classes, d.E, a.head_bias, 0);
  } else {
    g.logits = g.pre_logits;  // features only: the model's output is the pooled feature vector
  }
}

// The embedding output (graph.h): HF ViTModel's pooler, dense + tanh over pre_logits (the class token of the
// normed tokens), or the tensor that already holds it.
void add_embedding(Builder& b, Graph& g, const Dims& d) {
  const VitArch& a = g.arch;
  if (!g.outputs.has(OutputKind::kEmbedding)) return;
  if (!a.pooler) {
    g.embedding = a.projection_head ? g.logits : g.pre_logits;
    return;
  }
  g.embedding = b.tensor("embedding", {d.B, d.E}, TensorKind::kOutput, g.act_elem_bytes());
  b.linear("pooler.dense", g.pre_logits, g.embedding, d.B, d.E, d.E, true, 5);
}

}  // namespace

OutputSet available_outputs(const VitArch& a) {
  OutputSet s;
  if (a.num_classes > 0 && !a.projection_head) s.add(OutputKind::kLogits);
  return s.add(OutputKind::kEmbedding).add(OutputKind::kPreLogits).add(OutputKind::kTokens);
}

OutputSet default_outputs(const VitArch& a) { return available_outputs(a).remove(OutputKind::kTokens); }

int output_tensor(const Graph& g, OutputKind k) {
  if (!g.outputs.has(k)) return -1;
  switch (k) {
    case OutputKind::kLogits: return g.logits;
    case OutputKind::kEmbedding: return g.embedding;
    case OutputKind::kPreLogits: return g.pre_logits;
    case OutputKind::kTokens: return g.tokens;
  }
  return -1;
}

Graph build_vit_graph(const VitArch& a, int batch, Precision precision, AttentionPath attention,
                      int64_t explicit_scratch_bytes, bool all_tokens, OutputSet outputs,
                      Int8Activations int8_activations, Precision int8_rest, bool int8_attention) {
  Graph g;
  g.arch = a;
  g.outputs = outputs.empty() ? default_outputs(a) : outputs;
  assert((g.outputs.bits & ~available_outputs(a).bits) == 0);
  const bool want_tokens = g.outputs.has(OutputKind::kTokens);
  g.batch = batch;
  g.precision = precision;
  g.attention = attention;
  if (precision == Precision::kInt8) g.int8_rest = int8_rest;
  // qk-norm normalises float q and k between qkv and the attention: no int8 Q/K then (the plan says so).
  g.int8_attention = precision == Precision::kInt8 && int8_attention && !a.qk_norm;
  Builder b(g);
  const Dims d(a, batch);
  const int x = add_stem(b, g, d);
  // The class-token tail (see graph.h): token pooling reads token 0 only.
  const bool tail =
      !all_tokens && !want_tokens && a.global_pool == GlobalPool::kToken && a.class_token && !a.dist_token &&
      !a.head_mean_tokens;
  int xc = -1;  // tail: the class token's row per image, (B, E)
  if (precision == Precision::kInt8) g.int8_activations = int8_activations;
  for (int i = 0; i < a.depth; ++i) {
    const int c = precision == Precision::kInt8
                      ? add_block_int8(b, g, d, i, x, tail && i == a.depth - 1, explicit_scratch_bytes)
                      : add_block(b, g, d, i, x, tail && i == a.depth - 1, explicit_scratch_bytes);
    if (c >= 0) xc = c;
  }
  add_head(b, g, d, x, xc, explicit_scratch_bytes);
  add_embedding(b, g, d);
  if (want_tokens && g.tokens < 0) {  // fc_norm: no final norm over the tokens (graph.h)
    g.tensors[x].kind = TensorKind::kOutput;
    g.tokens = x;
  }

  // Weights, inputs and outputs live for the whole graph.
  const int last = static_cast<int>(g.ops.size()) - 1;
  for (TensorDesc& t : g.tensors) {
    if (t.kind == TensorKind::kWeight || t.kind == TensorKind::kInput || t.kind == TensorKind::kOutput) {
      t.first_op = 0;
      t.last_op = last;
    }
    assert(t.first_op >= 0);
  }
  return g;
}

}  // namespace edgevit
