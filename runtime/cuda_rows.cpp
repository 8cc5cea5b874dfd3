// The CUDA op table's rows (runtime/op_table.h). Compiled in every build: a plan for a CUDA device is made
// on any machine (`plan --device orin-nx-16gb` on a CPU-only host), from the rows' names and supports(),
// which read only the op, the graph and the device profile. available() and bind() reach the kernels of
// runtime/cuda/ only in a build with CUDA.
//
//   im2col, assemble_tokens, pool   one row per precision: kernels/cuda/ops.h
//   layernorm                       one row per precision, statistics in fp32
//   qk_norm                         one row per precision (timm qk_norm, in place on qkv), statistics in fp32
//   linear                          cuBLASLt (kernels/cuda/gemm_lt.h), the epilogue in the kernel name
//   attention, fp16                 the fused kernel (its kMhaVariants row in the kernel name), then the
//                                   unfused cuBLASLt path (S x S scratch)
//   attention, fp32                 gpu::mha_f32
//   attention, INT8 graphs          with runtime.int8_attention: int8, the INT8 attention over qkv's int8 Q|K
//                                   (mha_i8_fused_i8out, kernels/cuda/mha_i8.h); else the fused kernel writing
//                                   proj's int8 input (mha_fused_f16_i8out), then the unfused path plus a
//                                   quantizing pass (docs/int8.md)
//   INT8 twin rows, first (OpRow::int8_twin: an INT8 graph's float ops in the fp32 mode, runtime.int8_float:
//   fp32; docs/int8.md "fp32 mode"): cuda.linear_f64, cuda.layernorm_f64, cuda.qk_norm_f64, cuda.mha_f64
//   (kernels/cuda/twin_f64.h, kernels/cuda/layernorm_i8_f64.h), the CPU INT8 path's float64 arithmetic
//   (runtime/cpu/ops_cpu_twin.cpp)
#include <string>
#include <vector>

#include "kernels/cuda/mha_i8_variants.h"
#include "kernels/mha_variants.h"
#include "runtime/cuda/ops_cuda.h"

namespace edgevit {

namespace {

std::string available_with_cuda() {
#ifdef EDGEVIT_HAVE_CUDA
  return "";
#else
  return "built without CUDA";
#endif
}

#ifdef EDGEVIT_HAVE_CUDA
#define EV_CUDA_BIND(make) cuda_kernels::make
#else
// A build without CUDA has no kernels to bind (available() says why first).
std::unique_ptr<OpKernel> bind_unavailable(const Op& op) {
  (void)op;
  return nullptr;
}
#define EV_CUDA_BIND(make) bind_unavailable
#endif

Support serves(const char* kernel, std::string reason) {
  Support s;
  s.ok = true;
  s.kernel = kernel;
  s.reason = std::move(reason);
  return s;
}

Support im2col(const Op&, const Graph&, const DeviceProfile&) {
  return serves("cuda.im2col", "patch extraction, one thread per element");
}
Support assemble_tokens(const Op&, const Graph&, const DeviceProfile&) {
  return serves("cuda.assemble_tokens", "prefix tokens and position embedding in one pass");
}
Support pool(const Op&, const Graph&, const DeviceProfile&) {
  return serves("cuda.pool", "class token or mean over tokens, accumulated in fp32");
}
Support layernorm(const Op&, const Graph&, const DeviceProfile&) {
  return serves("cuda.layernorm_fp32stats", "statistics in fp32");
}

Support qk_norm(const Op&, const Graph&, const DeviceProfile&) {
  return serves("cuda.qk_norm_fp32stats", "LayerNorm per head on q and k in place, one warp per vector, fp32 statistics");
}

Support linear(const Op& op, const Graph& graph, const DeviceProfile&) {
  const bool fp16 = op_precision(op, graph) == Precision::kFp16;
  Support s;
  s.ok = true;
  s.kernel = cuda_linear_kernel_name(fp16, op.epilogue);
  s.reason = op.epilogue == 2   ? "residual add fused as GEMM accumulate (in place)"
             : op.epilogue == 0 ? "bias fused into the GEMM epilogue"
             : op.epilogue == 4 ? "bias fused into the GEMM epilogue, then QuickGELU (gpu::quick_gelu)"
             : op.epilogue == 5 ? "bias fused into the GEMM epilogue, then tanh (gpu::tanh: HF ViTModel's pooler)"
             : fp16             ? "GELU fused into the GEMM epilogue (cuBLASLt's GELU: the tanh form)"
             : op.epilogue == 3 ? "bias fused into the GEMM epilogue, then tanh GELU (gpu::gelu_tanh_f32)"
                                : "bias fused into the GEMM epilogue, then exact erf GELU (gpu::gelu_f32)";
  return s;
}

// The fused kernel's row for the full blocks' launch (every token) at the plan's batch on the profile's SMs.
MhaChoice full_block_choice(const Graph& graph, const DeviceProfile& dev) {
  const VitArch& a = graph.arch;
  const MhaGrid grid{graph.batch, a.num_heads, a.num_tokens(), dev.sm_count};
  return choose_mha(dev.compute_capability, dev.smem_per_block_optin_bytes, a.head_dim(), true, false, &grid);
}

// The fused kernel serves when the table has a row for the full blocks' launch on this device; the
// class-token tail's launch (one query row per image and head) has its own grid and takes its own row
// where the table has one, else the full blocks'. The launcher judges each captured size again on the
// real device.
Support mha_fused(const Op& op, const Graph& graph, const DeviceProfile& dev) {
  Support s;
  if (graph.attention_request == AttentionImpl::kExplicit) {
    s.reason = "unfused attention forced by config/flag";
    s.by_request = true;
    return s;
  }
  MhaChoice choice = full_block_choice(graph, dev);
  if (!choice.fused) {
    s.reason = choice.reason;
    return s;
  }
  const VitArch& a = graph.arch;
  if (op.seq_q < a.num_tokens()) {
    const MhaGrid tail_grid{graph.batch, a.num_heads, static_cast<int>(op.seq_q), dev.sm_count};
    MhaChoice tail = choose_mha(dev.compute_capability, dev.smem_per_block_optin_bytes, a.head_dim(), true, false,
                                &tail_grid);
    if (tail.fused) choice = std::move(tail);
  }
  s.ok = true;
  s.kernel = std::string("cuda.") + choice.variant->name;
  s.reason = choice.reason;
  return s;
}

// Serves every head_dim and launch: the fused row before it says why it was passed over (choose_row adds
// that reason), so this row's own reason is what it does.
Support mha_unfused(const Op&, const Graph&, const DeviceProfile&) {
  return serves("cuda.mha_unfused_cublas",
                "unfused: cuBLASLt S = scale Q K^T (fp32), softmax with fp32 statistics, cuBLASLt O = P V; any "
                "head_dim, S x S scratch per head");
}

int64_t mha_unfused_scratch(const Graph& graph, const DeviceProfile&) {
  const int tokens = graph.arch.num_tokens();
  return mha_unfused_workspace_bytes_for(graph.arch.num_heads, tokens, tokens);
}

// runtime.int8_attention: int8 (Graph::int8_attention): the attention reads qkv's int8 Q|K with their scales per
// (token, head) and fp16 V (an op of three inputs) and writes proj's int8 input (mha_i8_fused_i8out). The rows of
// the float q, k, v refuse such an op and this row refuses the others; `by_request` keeps either refusal from
// counting as a fallback (the plan reports the int8 attention's own fallback, runtime/plan.cpp).
Support mha_i8(const Op& op, const Graph& graph, const DeviceProfile& dev) {
  Support s;
  s.by_request = true;
  if (op.inputs.size() != 3) {
    s.reason = "reads qkv's int8 Q/K (runtime.int8_attention: int8)";
    return s;
  }
  s.by_request = false;
  if (graph.attention_request == AttentionImpl::kExplicit) {
    s.reason = "int8 attention is fused only; unfused attention forced by config/flag";
    return s;
  }
  if (graph.tensors[static_cast<size_t>(op.outputs[0])].elem_bytes != 1) {
    s.reason = "int8 attention writes proj's int8 input at a per-tensor scale (runtime.int8_activations "
               "per_tensor or norm_per_token, fp16 float ops)";
    return s;
  }
  MhaI8Request r;
  r.sm = dev.compute_capability;
  r.smem_optin_bytes = dev.smem_per_block_optin_bytes;
  r.head_dim = graph.arch.head_dim();
  r.per_key_k_scale = true;
  r.int8_output = true;
  const MhaI8Support i8 = mha_i8_supports(r);
  s.reason = i8.reason;
  if (!i8.ok) return s;
  s.ok = true;
  s.kernel = std::string("cuda.") + i8.variant->name + "->int8";
  s.reason += " (Q.K^T on the int8 tensor cores with per-(token, head) scales from qkv's epilogue, fp32 softmax, "
              "fp16 P.V; writes int8 codes at proj's calibrated input scale)";
  return s;
}

// A float-q, k, v attention row's refusal of an INT8 attention op (three inputs), else nothing.
bool refuses_int8_qk(const Op& op, Support* s) {
  if (op.inputs.size() != 3) return false;
  s->ok = false;
  s->by_request = true;
  s->reason = "reads fp16 q, k, v (this op reads int8 Q/K)";
  return true;
}

// INT8 graphs' attention (Op::int8: an int8 `attn.out` at proj's calibrated input scale, docs/int8.md).
Support mha_fused_i8(const Op& op, const Graph& graph, const DeviceProfile& dev) {
  Support s;
  if (refuses_int8_qk(op, &s)) return s;
  s = mha_fused(op, graph, dev);
  if (!s.ok) return s;
  s.kernel += "->int8";
  s.reason += "; writes int8 codes at proj's calibrated input scale from its fp32 output (no quantizing pass)";
  return s;
}

Support mha_unfused_i8(const Op& op, const Graph&, const DeviceProfile&) {
  Support s;
  if (refuses_int8_qk(op, &s)) return s;
  return serves("cuda.mha_unfused_cublas->int8",
                "unfused, WITH A SEPARATE QUANTIZING PASS: cuBLASLt S = scale Q K^T (fp32), softmax with fp32 "
                "statistics, cuBLASLt O = P V into fp16 scratch, then gpu::quantize_rows_i8_f16 at proj's calibrated "
                "input scale (the fused row writes the int8 codes itself); any head_dim");
}

int64_t mha_unfused_i8_scratch(const Graph& graph, const DeviceProfile& dev) {
  const int64_t rows = static_cast<int64_t>(graph.batch) * graph.arch.num_tokens();
  return attn_i8_unfused_scratch(mha_unfused_scratch(graph, dev), rows, graph.arch.embed_dim).bytes;
}

Support mha_f32(const Op&, const Graph& graph, const DeviceProfile&) {
  const VitArch& a = graph.arch;
  if (int64_t{a.head_dim()} + a.num_tokens() > kCudaMhaF32MaxSmemFloats) {
    Support s;
    s.reason = "fp32 attention holds a query row and its " + std::to_string(a.num_tokens()) +
               " scores in shared memory: head_dim + tokens = " + std::to_string(a.head_dim() + a.num_tokens()) +
               " floats > " + std::to_string(kCudaMhaF32MaxSmemFloats) + "; use fp16";
    return s;
  }
  return serves("cuda.mha_f32",
                "fp32: gpu::mha_f32 (one block per query row, fp32 FMAs, no tensor cores; the fused kernels are "
                "fp16 only)");
}

Support twin_linear(const Op&, const Graph&, const DeviceProfile&) {
  return serves("cuda.linear_f64",
                "INT8 twin: linear_ref's float64 dot product and epilogue, rounded once (gpu::linear_f64; the CPU "
                "INT8 path's cpu.linear_f64)");
}
Support twin_layernorm(const Op&, const Graph&, const DeviceProfile&) {
  return serves("cuda.layernorm_f64",
                "INT8 twin: float64 statistics and affine, rounded once (gpu::layernorm_f32_f64; the CPU INT8 path's "
                "cpu.layernorm_f64)");
}
Support twin_qk_norm(const Op&, const Graph&, const DeviceProfile&) {
  return serves("cuda.qk_norm_f64",
                "INT8 twin: LayerNorm per head on q and k in float64, rounded once (gpu::qk_norm_f32_f64; the CPU INT8 "
                "path's cpu.qk_norm_f64)");
}
Support twin_mha(const Op&, const Graph& graph, const DeviceProfile&) {
  const VitArch& a = graph.arch;
  if (int64_t{a.head_dim()} + a.num_tokens() > kCudaMhaF64MaxSmemDoubles) {
    Support s;
    s.reason = "float64 attention holds a query row and its " + std::to_string(a.num_tokens()) +
               " weights in shared memory: head_dim + tokens = " + std::to_string(a.head_dim() + a.num_tokens()) +
               " doubles > " + std::to_string(kCudaMhaF64MaxSmemDoubles);
    return s;
  }
  return serves("cuda.mha_f64",
                "INT8 twin: QK^T, softmax (exp in float64) and PV in float64, rounded once (gpu::mha_f64; the CPU "
                "INT8 path's cpu.mha_f64)");
}

}  // namespace

std::string cuda_linear_kernel_name(bool fp16, int epilogue) {
  static const char* kEpilogue[] = {"+bias", "+bias_gelu", "+bias_residual", "+bias_gelu_tanh",
                                    "+bias_quick_gelu", "+bias_tanh"};
  const int e = epilogue >= 0 && epilogue < 6 ? epilogue : 0;
  return std::string("cuda.cublaslt_") + (fp16 ? "f16" : "f32") + kEpilogue[e];
}

// The INT8 rows (runtime/cuda_rows_int8.cpp, docs/int8.md) after the others.
void append_cuda_int8_rows(std::vector<OpRow>* rows);
namespace {
std::vector<OpRow> with_int8_rows(std::vector<OpRow> rows) {
  append_cuda_int8_rows(&rows);
  return rows;
}
}  // namespace

const std::vector<OpRow>& cuda_op_table() {
  constexpr Precision kF16 = Precision::kFp16, kF32 = Precision::kFp32, kI8 = Precision::kInt8;
  static const std::vector<OpRow> rows = with_int8_rows({
      {OpKind::kLinear, kF32, "cuda.linear_f64", twin_linear, available_with_cuda, EV_CUDA_BIND(make_linear_f64),
       nullptr, true},
      {OpKind::kLayerNorm, kF32, "cuda.layernorm_f64", twin_layernorm, available_with_cuda,
       EV_CUDA_BIND(make_layernorm_f64), nullptr, true},
      {OpKind::kQkNorm, kF32, "cuda.qk_norm_f64", twin_qk_norm, available_with_cuda, EV_CUDA_BIND(make_qk_norm_f64),
       nullptr, true},
      {OpKind::kAttention, kF32, "cuda.mha_f64", twin_mha, available_with_cuda, EV_CUDA_BIND(make_mha_f64), nullptr,
       true},
      {OpKind::kIm2col, kF16, "cuda.im2col_f16", im2col, available_with_cuda, EV_CUDA_BIND(make_im2col)},
      {OpKind::kIm2col, kF32, "cuda.im2col_f32", im2col, available_with_cuda, EV_CUDA_BIND(make_im2col)},
      {OpKind::kAssembleTokens, kF16, "cuda.assemble_tokens_f16", assemble_tokens, available_with_cuda,
       EV_CUDA_BIND(make_assemble_tokens)},
      {OpKind::kAssembleTokens, kF32, "cuda.assemble_tokens_f32", assemble_tokens, available_with_cuda,
       EV_CUDA_BIND(make_assemble_tokens)},
      {OpKind::kLayerNorm, kF16, "cuda.layernorm_f16", layernorm, available_with_cuda, EV_CUDA_BIND(make_layernorm)},
      {OpKind::kLayerNorm, kF32, "cuda.layernorm_f32", layernorm, available_with_cuda, EV_CUDA_BIND(make_layernorm)},
      {OpKind::kLinear, kF16, "cuda.cublaslt_f16", linear, available_with_cuda, EV_CUDA_BIND(make_linear)},
      {OpKind::kLinear, kF32, "cuda.cublaslt_f32", linear, available_with_cuda, EV_CUDA_BIND(make_linear)},
      {OpKind::kAttention, kF16, "cuda.mha_fused_f16", mha_fused, available_with_cuda, EV_CUDA_BIND(make_mha_fused)},
      {OpKind::kAttention, kF16, "cuda.mha_unfused_cublas", mha_unfused, available_with_cuda,
       EV_CUDA_BIND(make_mha_unfused), mha_unfused_scratch},
      {OpKind::kAttention, kF32, "cuda.mha_f32", mha_f32, available_with_cuda, EV_CUDA_BIND(make_mha_f32)},
      {OpKind::kAttention, kI8, "cuda.mha_i8->int8", mha_i8, available_with_cuda, EV_CUDA_BIND(make_mha_i8)},
      {OpKind::kAttention, kI8, "cuda.mha_fused_f16->int8", mha_fused_i8, available_with_cuda,
       EV_CUDA_BIND(make_mha_fused)},
      {OpKind::kAttention, kI8, "cuda.mha_unfused_cublas->int8", mha_unfused_i8, available_with_cuda,
       EV_CUDA_BIND(make_mha_unfused), mha_unfused_i8_scratch},
      {OpKind::kQkNorm, kF16, "cuda.qk_norm_f16", qk_norm, available_with_cuda, EV_CUDA_BIND(make_qk_norm)},
      {OpKind::kQkNorm, kF32, "cuda.qk_norm_f32", qk_norm, available_with_cuda, EV_CUDA_BIND(make_qk_norm)},
      {OpKind::kPool, kF16, "cuda.pool_f16", pool, available_with_cuda, EV_CUDA_BIND(make_pool)},
      {OpKind::kPool, kF32, "cuda.pool_f32", pool, available_with_cuda, EV_CUDA_BIND(make_pool)},
  });
  return rows;
}
#undef EV_CUDA_BIND

}  // namespace edgevit
