// The ViT as an ordered list of ops over tensor descriptors (runtime/graph: ModelSpec -> Graph).
// The graph is backend-neutral: the same op list runs on the CPU (fp32) and CUDA (fp16/fp32) backends,
// and the planner gives every non-weight tensor an arena offset from the lifetimes recorded here.
//
// One image's path (B = batch, P = patches, T = tokens, E = embed, M = MLP hidden, C/p = chans/patch):
//   input (B,C,H,W) -im2col-> cols (B*P, C*p*p) -linear-> patches (B,P,E) -assemble-> x (B,T,E)
//   [pre_norm (CLIP): x -ln (norm_pre, in place)-> x]
//   per block:  x -ln-> h -linear-> qkv (B,T,3,H,D) [-qk_norm (in place)->] -attention-> ctx (B,T,E) -linear(+=)-> x
//               x -ln-> h -linear+gelu-> mlp (B,T,M) -linear(+=)-> x
//   head: x -ln-> h -pool-> pre_logits (B,E) -linear-> logits (B,classes)     (fc_norm: pool, then ln)
//
// Class-token tail (token pooling, the default unless all_tokens): the outputs read only token 0 of the
// last block's output, and every op after that block's attention is per token, so the last block runs
// its attention for the class token's query only and the rest of the block on one row per image:
//   last block: x -ln-> h -linear-> qkv (B,T,3,H,D) -attention(Sq = 1)-> ctx (B,1,E)
//               x -pool(token 0)-> xc (B,E) ; ctx -linear(+=)-> xc -ln-> -linear+gelu-> -linear(+=)-> xc
//   head: xc -ln-> pre_logits (fc_norm: the same ln named fc_norm) -linear-> logits
//
// DeiT distilled (arch.dist_token; no class-token tail): the head reads tokens 0 and 1 of the normed tokens:
//   x -ln-> h -pool(mean of tokens 0, 1)-> pre_logits ; h -pool(tokens 0, 1 concatenated)-> (B, 2E)
//   -linear-> logits, one GEMM over K = 2E whose weights head_distilled.{weight,bias} the loader makes from
//   head and head_dist ([W, W_dist] / 2, (b + b_dist) / 2: runtime/weights.h).
// Same outputs (the dropped rows are never read); the last block's proj and MLP shrink by T x (ViT-B/16:
// 6.3% of the forward's FLOPs).
//
// Named outputs (runtime/outputs.h; Graph::outputs says which were asked for, and only those are sized):
//   tokens      the final norm's output over every token, (B, T, E), a kOutput tensor named "tokens" (no
//               class-token tail then); with fc_norm (timm: no final norm, the LayerNorm follows the pooling)
//               the residual stream x itself, as timm's forward_features returns it
//   embedding   a new tensor only for HF ViTModel's pooler: pre_logits -linear+tanh (pooler.dense)-> embedding
//               (B, E); else the projection head's output (arch.projection_head: logits) or pre_logits
//   logits, pre_logits  as above (the head always runs when the model has one)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/model_spec.h"
#include "runtime/outputs.h"

namespace edgevit {

enum class TensorKind {
  kWeight,      // persistent, read-only after load; lives in the arena's weight region
  kInput,       // I/O region: written by the caller before infer()
  kOutput,      // I/O region: read by the caller after infer()
  kActivation,  // planned region: reused once dead
  kScratch,     // planned region, live for exactly one op (workspace)
};
const char* to_string(TensorKind k);

struct TensorDesc {
  int id = -1;
  std::string name;            // "blocks.3.qkv", or the canonical timm weight name for weights
  std::vector<int64_t> shape;  // logical shape at max batch (scratch: flat element count)
  int64_t elem_bytes = 4;      // 4 (fp32) or 2 (fp16); scratch: 1 and shape = bytes
  TensorKind kind = TensorKind::kActivation;
  int first_op = -1;           // inclusive lifetime over the op list (weights/IO: whole graph)
  int last_op = -1;
  int64_t numel() const;
  int64_t bytes() const { return numel() * elem_bytes; }
};

enum class OpKind {
  kIm2col,          // in: input              out: cols
  kLinear,          // in: x [, residual]     out: y            weights: w, b
  kAssembleTokens,  // in: patches            out: x            weights: cls, reg, pos
  kLayerNorm,       // in: x                  out: y            weights: gamma, beta
  kAttention,       // in: qkv                out: ctx          scratch: explicit path's S x S
  kPool,            // in: x                  out: pooled
  kQkNorm,          // in/out: qkv (in place)                   weights: q_norm gamma, beta, k_norm gamma, beta
};
const char* to_string(OpKind k);

enum class AttentionPath { kFused, kExplicit };
const char* to_string(AttentionPath p);

struct Op {
  OpKind kind;
  std::string name;              // "blocks.3.attn.qkv"
  std::vector<int> inputs;       // tensor ids
  std::vector<int> outputs;      // tensor ids (an in-place op lists the same id in inputs and outputs)
  std::vector<int> weights;      // tensor ids
  int scratch = -1;              // tensor id of this op's workspace, or -1
  // Parameters (meaning depends on kind).
  int epilogue = 0;              // kLinear: 0 none, 1 gelu (erf), 2 residual add (in place into outputs[0]),
                                 // 3 gelu_tanh, 4 quick_gelu, 5 tanh (HF ViTModel's pooler)
  int64_t m = 0, n = 0, k = 0;   // kLinear: per max batch
  int64_t seq_q = 0;             // kAttention: query tokens per image (T, or 1 in a class-token tail)
  double eps = 0;                // kLayerNorm, kQkNorm
  bool avg_pool = false;         // kPool
  int pool_count = 0;            // kPool: > 0 reads tokens [0, pool_count) instead: their mean (B, E), or
  bool pool_concat = false;      //        with pool_concat their concatenation (B, pool_count * E)
  // Runs at INT8 (docs/int8.md): a block GEMM reading int8 activations, or the LayerNorm / quantize that
  // writes them. Its rows are the table's kInt8 rows; the graph's other ops take its fp32 rows.
  bool int8 = false;
  std::string row;               // the op-table row that serves it (runtime/op_table.h), e.g. "cpu.mha_fused_f32"
  std::string kernel;            // what runs: the row's name, or a more specific one (CUDA fused attention:
                                 // "cuda.flash_fwd_f16_d64_..."; after resolve: the GEMM library, algorithm)
  std::string reason;            // why this kernel
  // Cost model at max batch (for the roofline estimate and the per-op profile).
  double flops = 0;
  double bytes = 0;              // minimum device-memory traffic: each input once, each output once
};

struct Graph {
  VitArch arch;
  int batch = 1;                 // max batch the graph is built for
  Precision precision = Precision::kFp32;
  AttentionPath attention = AttentionPath::kFused;
  AttentionImpl attention_request = AttentionImpl::kAuto;  // the config's or flag's ask (op-table rows read it)
  // precision kInt8: where the activation scales come from (model_spec.h Int8Activations)
  Int8Activations int8_activations = Int8Activations::kNormPerToken;
  bool int8_per_token() const { return int8_activations == Int8Activations::kPerToken; }
  Precision int8_rest = Precision::kFp32;  // precision kInt8: every other op's (fp32 on the CPU, fp16 on CUDA)
  // precision kInt8, runtime.int8_attention: int8: each block's qkv writes int8 Q|K `attn.qk` (B, T, 2, H, D)
  // with fp32 scales `attn.qk_scale` (B, T, 2, H) and float V `attn.v` (B, T, H, D); its attention (Op::int8)
  // reads those three (the INT8 attention rows).
  bool int8_attention = false;
  std::vector<TensorDesc> tensors;
  std::vector<Op> ops;
  int input = -1, pre_logits = -1, logits = -1;  // tensor ids
  int embedding = -1, tokens = -1;               // tensor ids of those outputs when asked for, else -1
  OutputSet outputs;                             // the named outputs this graph produces (never empty)
  int64_t act_elem_bytes() const {
    const Precision p = precision == Precision::kInt8 ? int8_rest : precision;
    return p == Precision::kFp16 ? 2 : 4;
  }
};

// The outputs a model can produce: logits when it has a classifier head (num_classes > 0 and not a
// projection head), embedding, pre_logits and tokens always.
OutputSet available_outputs(const VitArch& arch);
// What a model produces unless told otherwise: available_outputs without tokens.
OutputSet default_outputs(const VitArch& arch);

// The tensor id of output `k` in `g`, or -1 when the graph does not produce it.
int output_tensor(const Graph& g, OutputKind k);

// An INT8 proj's scratch (its quantized input): int8 (rows, k) at 0, then fp32 row scales at this offset.
inline int64_t int8_scratch_scales_offset(int64_t rows, int64_t k) { return (rows * k + 15) / 16 * 16; }

// The precision of the op-table rows that serve `op`: kInt8 for the INT8 ops (Op::int8), Graph::int8_rest for
// the other ops of an INT8 graph, else the graph's.
Precision op_precision(const Op& op, const Graph& graph);

// Builds the op list. explicit_scratch_bytes is the explicit attention path's workspace (backend-
// dependent; 0 for the fused path). `outputs`: the named outputs to produce, a subset of
// available_outputs(arch) (empty: default_outputs(arch)). Never fails on a validated ModelSpec. Precision
// kInt8: each block's qkv, proj, fc1 and fc2 run W8A8 (add_block_int8 in graph.cpp, docs/int8.md);
// int8_activations says which activation scales are per row at run time and which the scale file's;
// int8_rest is the other ops' precision; int8_attention: Graph::int8_attention.
Graph build_vit_graph(const VitArch& arch, int batch, Precision precision, AttentionPath attention,
                      int64_t explicit_scratch_bytes, bool all_tokens = false, OutputSet outputs = {},
                      Int8Activations int8_activations = Int8Activations::kNormPerToken,
                      Precision int8_rest = Precision::kFp32, bool int8_attention = false);

}  // namespace edgevit
