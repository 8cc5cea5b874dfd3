// The INT8 ops' part of the shared op-case list (runtime/op_check.h; docs/int8.md): their input values, their
// reference (kernels/cpu/gemm_i8_ref.h, quantize_i8_ref.h, layernorm_ref) and their outputs dequantized, so an
// INT8 row is checked like any other, normwise against base/tolerances.h's kInt8Kernel. fc2's input
// `mlp.hidden` holds uint8 codes of GELU + kGemmI8GeluShift (int8_tensor_is_u8): its values are codes in
// [0, 255], the devices write and read it as uint8, and fc1's output dequantizes as q * s - shift. On CUDA INT8
// graphs the attention writes proj's int8 input at proj's per-tensor scale (its weight): reference
// mha_i8out_ref, dequantized with that scale. With runtime.int8_attention: int8, qkv's checked output is the
// int8 Q|K (dequantized per (token, head)) and the attention reads it (reference mha_i8_ref).
#include <cmath>

#include "kernels/cpu/gemm_i8_ref.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/mha_i8_ref.h"
#include "kernels/cpu/quantize_i8_ref.h"
#include "runtime/int8_scales.h"
#include "runtime/op_check.h"

namespace edgevit {

namespace {

float next(uint32_t* state, float lo, float hi) {
  *state = *state * 1664525u + 1013904223u;
  return lo + (hi - lo) * static_cast<float>(*state >> 8) / static_cast<float>(1u << 24);
}

bool ends_with(const std::string& s, const char* suffix) {
  const std::string x(suffix);
  return s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
}

const std::vector<float>* weight_ending(const Plan& plan, const Op& op, const std::vector<std::vector<float>>& v,
                                        const char* suffix) {
  for (int id : op.weights)
    if (ends_with(plan.graph.tensors[static_cast<size_t>(id)].name, suffix)) return &v[static_cast<size_t>(id)];
  return nullptr;
}

std::vector<int8_t> to_i8(const std::vector<float>& v) {
  std::vector<int8_t> q(v.size());
  for (size_t i = 0; i < v.size(); ++i) q[i] = static_cast<int8_t>(v[i]);
  return q;
}

std::vector<uint8_t> to_u8(const std::vector<float>& v) {
  std::vector<uint8_t> q(v.size());
  for (size_t i = 0; i < v.size(); ++i) q[i] = static_cast<uint8_t>(v[i]);
  return q;
}

// q (m, k) int8 with row scales s -> fp32.
std::vector<float> dequantize(const std::vector<int8_t>& q, const std::vector<float>& s, int64_t k) {
  std::vector<float> out(q.size());
  for (size_t i = 0; i < q.size(); ++i) out[i] = static_cast<float>(q[i]) * s[i / static_cast<size_t>(k)];
  return out;
}

// qkv for the INT8 attention: the Q and K columns of v (m, n) as gemm_i8_head_quantize_ref codes, dequantized
// with their head's scale (the checked output `attn.qk`, (m, 2E)).
std::vector<float> qk_heads(const Plan& plan, const std::vector<float>& v, int64_t m, int64_t n) {
  const int64_t d = plan.graph.arch.head_dim(), qk = 2 * int64_t{plan.graph.arch.embed_dim};
  std::vector<float> out(static_cast<size_t>(m * qk));
  std::vector<int8_t> q(static_cast<size_t>(d));
  for (int64_t r = 0; r < m; ++r)
    for (int64_t h = 0; h < qk / d; ++h) {
      const float s = gemm_i8_head_quantize_ref(v.data() + r * n + h * d, d, q.data());
      for (int64_t i = 0; i < d; ++i) out[static_cast<size_t>(r * qk + h * d + i)] = static_cast<float>(q[i]) * s;
    }
  return out;
}

std::vector<float> linear_reference(const Plan& plan, const Op& op, const std::vector<std::vector<float>>& v) {
  const Graph& g = plan.graph;
  const int64_t m = op.m, n = op.n, k = op.k;
  const std::vector<float>* scale = weight_ending(plan, op, v, ".input_scale");
  std::vector<int8_t> xq;
  std::vector<float> sx(static_cast<size_t>(m));
  const bool x_u8 = int8_tensor_is_u8(g.tensors[static_cast<size_t>(op.inputs[0])]);  // fc2
  if (g.tensors[static_cast<size_t>(op.inputs[0])].elem_bytes == 1) {
    if (!x_u8) xq = to_i8(v[static_cast<size_t>(op.inputs[0])]);
    if (scale != nullptr && op.epilogue != 1) {  // fc2, per tensor: its input is at its own calibrated scale
      for (float& x : sx) x = (*scale)[0];
    } else {
      sx = v[static_cast<size_t>(op.inputs[1])];
    }
  } else {  // proj: quantizes its fp32 input itself
    xq.resize(static_cast<size_t>(m * k));
    quantize_rows_i8_ref(v[static_cast<size_t>(op.inputs[0])].data(), m, k, scale ? (*scale)[0] : 0.f, xq.data(),
                         sx.data());
  }
  const std::vector<int8_t> wq = to_i8(v[static_cast<size_t>(op.weights[0])]);
  const std::vector<float>& sw = *weight_ending(plan, op, v, ".weight_scale");
  const std::vector<float>* bias = weight_ending(plan, op, v, ".bias");
  std::vector<int32_t> acc(static_cast<size_t>(m * n));
  if (x_u8) {
    gemm_u8i8_accumulate_ref(m, n, k, to_u8(v[static_cast<size_t>(op.inputs[0])]).data(), wq.data(), acc.data());
  } else {
    gemm_i8_accumulate_ref(m, n, k, xq.data(), wq.data(), acc.data());
  }
  std::vector<float> out(static_cast<size_t>(m * n));
  if (op.epilogue == 2) out = v[static_cast<size_t>(op.outputs[0])];
  for (int64_t r = 0; r < m; ++r)
    for (int64_t j = 0; j < n; ++j) {
      const size_t o = static_cast<size_t>(r * n + j);
      const float d = gemm_i8_dequant_ref(acc[o], sx[static_cast<size_t>(r)], sw[static_cast<size_t>(j)],
                                          bias ? (*bias)[static_cast<size_t>(j)] : 0.f);
      out[o] = op.epilogue == 2 ? out[o] + d : op.epilogue == 1 ? gemm_i8_gelu_ref(d) + kGemmI8GeluShift : d;
    }
  if (op.outputs.size() == 3) return qk_heads(plan, out, m, n);
  if (op.epilogue != 1) return out;
  // fc1: u = GELU + shift in uint8 codes (gemm_i8_ref's kI8BiasGelu), dequantized as q * s - shift
  std::vector<uint8_t> q(out.size());
  std::vector<float> s(static_cast<size_t>(m));
  if (scale != nullptr) {  // per tensor: q = rne(u * (1 / out_scale))
    const float inv = 1.f / (*scale)[0];
    for (size_t i = 0; i < out.size(); ++i) q[i] = gemm_i8_quantize_u8_ref(out[i] * inv);
    for (float& x : s) x = (*scale)[0];
  } else {
    quantize_rows_u8_ref(out.data(), m, n, 0.f, q.data(), s.data());
  }
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<float>(q[i]) * s[i / static_cast<size_t>(n)] - kGemmI8GeluShift;
  return out;
}

// The CUDA INT8 graph's attention (int8 output at proj's per-tensor scale): mha_i8out_ref, dequantized.
std::vector<float> attention_reference(const Plan& plan, const Op& op, const std::vector<std::vector<float>>& v) {
  const VitArch& a = plan.graph.arch;
  const AttnParams p = attn_params_packed_qkv(plan.graph.batch, a.num_tokens(), a.num_heads, a.head_dim(),
                                              1.0f / std::sqrt(static_cast<float>(a.head_dim())),
                                              static_cast<int>(op.seq_q));
  const float* q = v[static_cast<size_t>(op.inputs[0])].data();
  const float s = v[static_cast<size_t>(op.weights[0])][0];
  std::vector<int8_t> codes(static_cast<size_t>(plan.graph.tensors[static_cast<size_t>(op.outputs[0])].numel()));
  mha_i8out_ref(p, q, q + packed_k_offset(a.num_heads, a.head_dim()), q + packed_v_offset(a.num_heads, a.head_dim()),
                s, codes.data());
  std::vector<float> out(codes.size());
  for (size_t i = 0; i < codes.size(); ++i) out[i] = static_cast<float>(codes[i]) * s;
  return out;
}

// The INT8 attention over qkv's int8 Q|K, their scales and V (runtime.int8_attention: int8): mha_i8_ref; on CUDA
// (an int8 output at proj's per-tensor scale, its weight) those values quantized as the kernel's epilogue does
// (rne(o / s)) and dequantized.
std::vector<float> attention_i8_reference(const Plan& plan, const Op& op, const std::vector<std::vector<float>>& v) {
  const VitArch& a = plan.graph.arch;
  const int heads = a.num_heads, d = a.head_dim(), t = a.num_tokens();
  const AttnParams p = attn_params_qk_i8(plan.graph.batch, t, heads, d, 1.0f / std::sqrt(static_cast<float>(d)),
                                         static_cast<int>(op.seq_q));
  const std::vector<int8_t> qk = to_i8(v[static_cast<size_t>(op.inputs[0])]);
  const float* sc = v[static_cast<size_t>(op.inputs[1])].data();
  AttnI8Scales s;
  s.q = sc;
  s.k = sc + heads;
  s.qs = s.ks = attn_i8_scale_strides(t, heads);
  std::vector<float> out(static_cast<size_t>(plan.graph.tensors[static_cast<size_t>(op.outputs[0])].numel()));
  mha_i8_ref(p, qk.data(), qk.data() + packed_k_offset(heads, d), v[static_cast<size_t>(op.inputs[2])].data(), s,
             MhaI8Softmax::kRowMax, out.data());
  if (plan.graph.tensors[static_cast<size_t>(op.outputs[0])].elem_bytes != 1) return out;
  const float os = v[static_cast<size_t>(op.weights[0])][0];
  for (float& x : out) x = static_cast<float>(gemm_i8_quantize_ref(x / os)) * os;
  return out;
}

}  // namespace

bool int8_case_values(const Op& op, const TensorDesc& t, uint32_t* state, std::vector<float>* out) {
  const size_t n = static_cast<size_t>(t.numel());
  out->resize(n);
  if (int8_tensor_is_u8(t)) {  // fc2's unsigned input: codes in [0, 255]
    for (float& x : *out) x = std::nearbyint(next(state, 0.f, 255.f));
    return true;
  }
  if (t.elem_bytes == 1) {  // int8 activations and weights: integers in [-127, 127]
    for (float& x : *out) x = std::nearbyint(next(state, -127.f, 127.f));
    return true;
  }
  if (t.kind != TensorKind::kWeight && ends_with(t.name, "_scale")) {  // per-row activation scales
    for (float& x : *out) x = next(state, 0.005f, 0.02f);
    return true;
  }
  if (ends_with(t.name, ".weight_scale")) {  // weights of order 1 / sqrt(K)
    const float s = 1.f / (127.f * std::sqrt(static_cast<float>(op.k)));
    for (float& x : *out) x = next(state, 0.5f * s, 1.5f * s);
    return true;
  }
  if (ends_with(t.name, ".input_scale")) {
    // The attention's output (|o| <~ 0.5 for values in [-1, 1]) at finer steps: codes of ~20, so that the rare
    // code one step off from another fp32 summation order weighs little (tol::kInt8AttnOutCase).
    const bool attention = op.kind == OpKind::kAttention;
    for (float& x : *out) x = attention ? next(state, 0.004f, 0.006f) : next(state, 0.008f, 0.012f);
    return true;
  }
  return false;
}

std::vector<float> int8_case_reference(const Plan& plan, const Op& op, const std::vector<std::vector<float>>& v) {
  if (op.kind == OpKind::kLinear) return linear_reference(plan, op, v);
  if (op.kind == OpKind::kAttention)
    return op.inputs.size() == 3 ? attention_i8_reference(plan, op, v) : attention_reference(plan, op, v);
  const int64_t m = op.m, c = op.n;  // LayerNorm -> int8
  std::vector<float> y(static_cast<size_t>(m * c));
  layernorm_ref(v[static_cast<size_t>(op.inputs[0])].data(), v[static_cast<size_t>(op.weights[0])].data(),
                v[static_cast<size_t>(op.weights[1])].data(), y.data(), static_cast<int>(m), static_cast<int>(c),
                static_cast<float>(op.eps), 1);
  const std::vector<float>* scale = weight_ending(plan, op, v, ".input_scale");
  std::vector<int8_t> q(y.size());
  std::vector<float> s(static_cast<size_t>(m));
  quantize_rows_i8_ref(y.data(), m, c, scale ? (*scale)[0] : 0.f, q.data(), s.data());
  return dequantize(q, s, c);
}

Status int8_case_dequantize(const Plan& plan, const Op& op, Arena& arena, OpCaseDevice& device,
                            std::vector<float>* got) {
  const TensorDesc& t = plan.graph.tensors[static_cast<size_t>(op.outputs[0])];
  if (t.elem_bytes != 1) return Status::Ok();
  // fc1 per tensor (it carries fc2's calibrated scale): its output is at that scale and its row-scale output
  // is not part of the contract (docs/int8.md; the CUDA fc1 does not write it). The LayerNorm's row scales
  // are (qkv and fc1 read them), so they dequantize its output.
  int scale_id = -1;  // the attention's int8 output: at proj's per-tensor scale, its weight
  // (qkv's int8 Q|K for the INT8 attention: its per-(token, head) scales, outputs[1], whatever its input's scale)
  if ((op.kind == OpKind::kLinear && op.outputs.size() != 3) || op.kind == OpKind::kAttention)
    for (int id : op.weights)
      if (ends_with(plan.graph.tensors[static_cast<size_t>(id)].name, ".input_scale")) scale_id = id;
  const int scales = scale_id >= 0 ? scale_id : op.outputs[1];
  std::vector<float> s;
  EV_RETURN_IF_ERROR(device.read(arena, plan.graph.tensors[static_cast<size_t>(scales)], &s));
  const size_t k = static_cast<size_t>(t.shape.back());
  const float shift = int8_tensor_is_u8(t) ? kGemmI8GeluShift : 0.f;  // fc1's output: codes of GELU + shift
  for (size_t i = 0; i < got->size(); ++i) (*got)[i] = (*got)[i] * (scale_id >= 0 ? s[0] : s[i / k]) - shift;
  return Status::Ok();
}

}  // namespace edgevit
