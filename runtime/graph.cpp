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
  const int ctx = b.act(blk + ".attn.out", {d.B, sq, d.H, d.D});
  Op& at = b.op(OpKind::kAttention, blk + ".attn.sdpa", {qkv}, {ctx});
  at.seq_q = sq;
  at.flops = 4.0 * d.B * d.H * sq * d.T * d.D + 5.0 * d.B * d.H * sq * d.T;
  at.bytes = eb * (3.0 * d.B * d.T * d.E + d.B * sq * d.E);
  if (g.attention == AttentionPath::kExplicit) {
    b.scratch(at, blk + ".attn.scores", explicit_scratch_bytes);
    at.bytes += 2.0 * static_cast<double>(explicit_scratch_bytes);
  }
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

// DeiT distilled (graph.h): norm over every token, then the class and distillation tokens' mean
// (pre_logits) and their concatenation into the folded head.
void add_distilled_head(Builder& b, Graph& g, const Dims& d, int x) {
  const VitArch& a = g.arch;
  const double eb = static_cast<double>(g.act_elem_bytes());
  const int hn = b.act("norm.out", {d.B, d.T, d.E});
  b.layernorm("norm", x, hn, d.B * d.T, d.E, a.layer_norm_eps);
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
  const int hn = b.act("norm.out", {d.B, d.T, d.E});
  b.layernorm("norm", x, hn, rows, d.E, a.layer_norm_eps);
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
    const int hn = b.act("norm.out", {d.B, d.T, d.E});
    b.layernorm("norm", x, hn, d.B * d.T, d.E, a.layer_norm_eps);
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
    const int hn = b.act("norm.out", {d.B, d.T, d.E});
    b.layernorm("norm", x, hn, d.B * d.T, d.E, a.layer_norm_eps);
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

}  // namespace

Graph build_vit_graph(const VitArch& a, int batch, Precision precision, AttentionPath attention,
                      int64_t explicit_scratch_bytes, bool all_tokens) {
  Graph g;
  g.arch = a;
  g.batch = batch;
  g.precision = precision;
  g.attention = attention;
  Builder b(g);
  const Dims d(a, batch);
  const int x = add_stem(b, g, d);
  // The class-token tail (see graph.h): token pooling reads token 0 only.
  const bool tail =
      !all_tokens && a.global_pool == GlobalPool::kToken && a.class_token && !a.dist_token && !a.head_mean_tokens;
  int xc = -1;  // tail: the class token's row per image, (B, E)
  for (int i = 0; i < a.depth; ++i) {
    const int c = add_block(b, g, d, i, x, tail && i == a.depth - 1, explicit_scratch_bytes);
    if (c >= 0) xc = c;
  }
  add_head(b, g, d, x, xc, explicit_scratch_bytes);

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
