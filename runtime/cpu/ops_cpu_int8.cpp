// CPU INT8 rows (docs/int8.md): the W8A8 block GEMMs and the LayerNorm that writes their int8 input, with
// the arithmetic of kernels/cpu/gemm_i8_ref.h (int8 x int8 -> int32, fp32 dequantization with the bias,
// GELU, residual, requantization) and kernels/cpu/quantize_i8_ref.h. Plain single-threaded loops: a
// reference-speed path for boards without a GPU and the reference of the CUDA INT8 rows.
//   layernorm  cpu.layernorm_f32->int8     layernorm_ref's arithmetic (float64 statistics and affine, y rounded
//                                          once to fp32), then y / s rounded to int8 with its row's scale: so a
//                                          GPU computing the same (gpu::layernorm_i8_f32_f64) agrees code for
//                                          code, whatever its summation order (docs/int8.md "fp32 mode")
//   linear     cpu.gemm_i8_ref             int8 input (+ per-row scales) -> fp32 out (qkv), int8 out through
//                                          GELU (fc1), or += into the fp32 residual (fc2); proj quantizes the
//                                          attention's fp32 output itself into its scratch first; with
//                                          runtime.int8_attention: int8, qkv writes int8 Q|K with a scale per
//                                          (token, head) and fp32 V (gemm_i8_head_quantize_ref)
//   attention  cpu.mha_i8_ref              the INT8 attention's reference (kernels/cpu/mha_i8_ref.h) over those
//                                          three on the thread team; fp32 output, which proj quantizes
// Scales: each weight row's (per output channel, made at load: runtime/int8_scales.h) and each activation
// row's: the calibrated `<gemm>.input_scale` (per tensor) or the row's amax / 127 (per token). Per tensor,
// fc2 reads its input at its own `.input_scale` (the scale fc1 wrote with), not fc1's row scales.
// fc2's input `mlp.hidden` is unsigned in both modes: fc1 writes u = GELU + kGemmI8GeluShift as uint8 codes
// (per tensor at fc2's scale, per token at the row's umax / 255), fc2 accumulates uint8 x int8 and its bias
// carries the shift (folded at load: runtime/int8_scales.h).
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/gemm_i8_ref.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/mha_i8_ref.h"
#include "kernels/cpu/quantize_i8_ref.h"
#include "runtime/cpu/ops_cpu.h"
#include "runtime/int8_scales.h"

namespace edgevit {

namespace {

bool ends_with(const std::string& s, const char* suffix) {
  const std::string x(suffix);
  return s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
}

// The weight of `op` whose name ends with `suffix`, or -1.
int weight_named(const Op& op, const Graph& g, const char* suffix) {
  for (int id : op.weights)
    if (ends_with(g.tensors[static_cast<size_t>(id)].name, suffix)) return id;
  return -1;
}

class LayerNormI8 final : public CpuKernel {
 public:
  using CpuKernel::CpuKernel;
  Status prepare(ExecContext& c) override {
    scale_id_ = weight_named(op_, c.plan.graph, ".input_scale");
    row_.assign(static_cast<size_t>(op_.n), 0.f);
    return Status::Ok();
  }
  Status run(ExecContext& c, int n) override {
    auto& ctx = static_cast<CpuContext&>(c);
    const int64_t rows = op_.m / ctx.plan.graph.batch * n, cols = op_.n;
    const float scale = scale_id_ >= 0 ? *ctx.f32(scale_id_) : 0.f;
    const float* x = ctx.f32(op_.inputs[0]);
    const float* gamma = ctx.f32(op_.weights[0]);
    const float* beta = ctx.f32(op_.weights[1]);
    int8_t* q = ctx.arena.as<int8_t>(op_.outputs[0]);
    float* s = ctx.f32(op_.outputs[1]);
    float* y = row_.data();
    for (int64_t r = 0; r < rows; ++r) {
      layernorm_ref(x + r * cols, gamma, beta, y, 1, static_cast<int>(cols), static_cast<float>(op_.eps), 1);
      quantize_rows_i8_ref(y, 1, cols, scale, q + r * cols, s + r);
    }
    return Status::Ok();
  }
  std::string resolved(int) const override {
    return std::string("cpu.layernorm_f32->int8") + (scale_id_ >= 0 ? "" : "+per_token");
  }

 private:
  int scale_id_ = -1;
  std::vector<float> row_;  // one fp32 row (made at prepare)
};

class GemmI8 final : public CpuKernel {
 public:
  using CpuKernel::CpuKernel;
  Status prepare(ExecContext& c) override {
    auto& ctx = static_cast<CpuContext&>(c);
    const Graph& g = ctx.plan.graph;
    sw_ = weight_named(op_, g, ".weight_scale");
    bias_ = weight_named(op_, g, ".bias");
    scale_ = weight_named(op_, g, ".input_scale");  // proj, fc2: its input's; fc1: its output's (fc2's input)
    quantize_input_ = g.tensors[static_cast<size_t>(op_.inputs[0])].elem_bytes != 1;
    x_u8_ = int8_tensor_is_u8(g.tensors[static_cast<size_t>(op_.inputs[0])]);
    qk_i8_ = op_.outputs.size() == 3;
    if (!quantize_input_ && op_.epilogue != 1 && scale_ >= 0) sx_rows_.assign(static_cast<size_t>(op_.m), 0.f);
    acc_.assign(static_cast<size_t>(op_.n), 0);
    row_.assign(static_cast<size_t>(op_.n), 0.f);
    return Status::Ok();
  }
  Status run(ExecContext& c, int n) override {
    auto& ctx = static_cast<CpuContext&>(c);
    const int64_t rows = op_.m / ctx.plan.graph.batch * n;
    const int8_t* x = ctx.arena.as<int8_t>(op_.inputs[0]);
    const float* sx = nullptr;
    if (quantize_input_) {  // proj: the attention's fp32 output, quantized into the scratch
      int8_t* q = ctx.arena.as<int8_t>(op_.scratch);  // (m, k) int8, then (m) scales (runtime/graph.h)
      float* s = reinterpret_cast<float*>(q + int8_scratch_scales_offset(op_.m, op_.k));
      quantize_rows_i8_ref(ctx.f32(op_.inputs[0]), rows, op_.k, scale_ >= 0 ? *ctx.f32(scale_) : 0.f, q, s);
      x = q;
      sx = s;
    } else if (!sx_rows_.empty()) {  // fc2, per tensor: fc1's output is at fc2's calibrated scale
      std::fill(sx_rows_.begin(), sx_rows_.end(), *ctx.f32(scale_));
      sx = sx_rows_.data();
    } else {  // the producer's row scales
      sx = ctx.f32(op_.inputs[1]);
    }
    gemm_rows(ctx, x, sx, rows);
    return Status::Ok();
  }
  std::string resolved(int) const override {
    std::string s = "cpu.gemm_i8_ref";
    if (quantize_input_) s += "+quantize_input";
    if (qk_i8_) s += "+qk_heads->int8";
    if (x_u8_) s += "+u8_input";
    s += op_.epilogue == 1 ? "+bias_gelu->u8" : op_.epilogue == 2 ? "+bias_residual" : "+bias";
    return s;
  }

 private:
  void gemm_rows(CpuContext& ctx, const int8_t* x, const float* sx, int64_t rows) {
    const int64_t n = op_.n, k = op_.k;
    const int8_t* w = ctx.arena.as<int8_t>(op_.weights[0]);
    const float* sw = ctx.f32(sw_);
    const float* bias = bias_ >= 0 ? ctx.f32(bias_) : nullptr;
    const float out_scale = op_.epilogue == 1 && scale_ >= 0 ? *ctx.f32(scale_) : 0.f;
    int32_t* acc = acc_.data();
    float* v = row_.data();
    for (int64_t r = 0; r < rows; ++r) {
      if (x_u8_) {  // fc2: uint8 codes of GELU + shift (the shift is in its bias)
        gemm_u8i8_accumulate_ref(1, n, k, reinterpret_cast<const uint8_t*>(x) + r * k, w, acc);
      } else {
        gemm_i8_accumulate_ref(1, n, k, x + r * k, w, acc);
      }
      for (int64_t j = 0; j < n; ++j) v[j] = gemm_i8_dequant_ref(acc[j], sx[r], sw[j], bias ? bias[j] : 0.f);
      if (op_.epilogue == 1) {  // fc1: GELU, shift, then uint8 for fc2
        for (int64_t j = 0; j < n; ++j) v[j] = gemm_i8_gelu_ref(v[j]) + kGemmI8GeluShift;
        uint8_t* q = ctx.arena.as<uint8_t>(op_.outputs[0]) + r * n;
        if (out_scale > 0) {  // per tensor: gemm_i8_ref's kI8BiasGelu, q = rne((g + shift) * (1 / out_scale))
          const float inv = 1.f / out_scale;
          for (int64_t j = 0; j < n; ++j) q[j] = gemm_i8_quantize_u8_ref(v[j] * inv);
          ctx.f32(op_.outputs[1])[r] = out_scale;
        } else {  // per token: the row's own scale, umax / 255 (quantize_i8_ref.h)
          quantize_rows_u8_ref(v, 1, n, 0.f, q, ctx.f32(op_.outputs[1]) + r);
        }
      } else if (op_.epilogue == 2) {
        float* y = ctx.f32(op_.outputs[0]) + r * n;
        for (int64_t j = 0; j < n; ++j) y[j] += v[j];
      } else if (qk_i8_) {
        qk_heads(ctx, v, r);
      } else {
        std::copy(v, v + n, ctx.f32(op_.outputs[0]) + r * n);
      }
    }
  }

  // qkv for the INT8 attention: row r's Q and K heads to int8 with their scales, V to fp32 (graph.h).
  void qk_heads(CpuContext& ctx, const float* v, int64_t r) {
    const VitArch& a = ctx.plan.graph.arch;
    const int64_t d = a.head_dim(), e = a.embed_dim, heads2 = 2 * int64_t{a.num_heads};
    int8_t* q = ctx.arena.as<int8_t>(op_.outputs[0]) + r * 2 * e;
    float* s = ctx.f32(op_.outputs[1]) + r * heads2;
    for (int64_t h = 0; h < heads2; ++h) s[h] = gemm_i8_head_quantize_ref(v + h * d, d, q + h * d);
    std::copy(v + 2 * e, v + 3 * e, ctx.f32(op_.outputs[2]) + r * e);
  }

  int sw_ = -1, bias_ = -1, scale_ = -1;
  bool quantize_input_ = false;
  bool x_u8_ = false;  // fc2: its input is fc1's uint8 output
  bool qk_i8_ = false;  // qkv with runtime.int8_attention: int8 (outputs int8 Q|K, their scales, fp32 V)
  std::vector<int32_t> acc_;  // one int32 row of N (made at prepare)
  std::vector<float> row_;    // one fp32 row of N
  std::vector<float> sx_rows_;  // fc2, per tensor: M copies of its input scale (made at prepare)
};

// The INT8 attention over qkv's int8 Q|K (B, T, 2, H, D), scales (B, T, 2, H) and fp32 V (B, T, H, D) -> fp32
// (B, seq_q, H, D): mha_i8_ref's arithmetic (row-max softmax) on the thread team.
class AttentionI8 final : public CpuKernel {
 public:
  using CpuKernel::CpuKernel;
  Status run(ExecContext& c, int n) override {
    auto& ctx = static_cast<CpuContext&>(c);
    const VitArch& a = ctx.plan.graph.arch;
    const int heads = a.num_heads, d = a.head_dim(), t = a.num_tokens();
    float scale = 1.0f / std::sqrt(static_cast<float>(d));
    if (ctx.fault == InjectedFault::kWrongAttentionScale) scale = 1.0f;  // as the float rows
    const AttnParams p = attn_params_qk_i8(n, t, heads, d, scale, static_cast<int>(op_.seq_q));
    const int8_t* qk = ctx.arena.as<int8_t>(op_.inputs[0]);
    const float* sc = ctx.f32(op_.inputs[1]);
    AttnI8Scales s;
    s.q = sc;
    s.k = sc + heads;
    s.qs = s.ks = attn_i8_scale_strides(t, heads);
    mha_i8_ref_team(p, qk, qk + packed_k_offset(heads, d), ctx.f32(op_.inputs[2]), s, MhaI8Softmax::kRowMax,
                    ctx.f32(op_.outputs[0]), ctx.threads);
    return Status::Ok();
  }
  std::string resolved(int) const override { return planned_; }
};

Support attention_i8_supports(const Op& o, const Graph&, const DeviceProfile&) {
  if (o.inputs.size() != 3)
    return Support{false, "reads qkv's int8 Q/K (runtime.int8_attention: int8)", "", false};
  return Support{true, "INT8 attention: Q.K^T exact in integers with a scale per (token, head), softmax and P.V in "
                       "float64 with P rounded to fp16 (mha_i8_ref, docs/kernels-mha-i8.md)",
                 "", false};
}

Support layernorm_i8_supports(const Op&, const Graph& g, const DeviceProfile&) {
  return Support{true, std::string("float64 statistics and affine (layernorm_ref's arithmetic); int8 output with ") +
                           (g.int8_activations != Int8Activations::kPerTensor ? "per-token scales (amax / 127)"
                                                                              : "the calibrated per-tensor scale"),
                 "", false};
}
Support gemm_i8_supports(const Op& o, const Graph& g, const DeviceProfile&) {
  if (o.epilogue != 0 && o.epilogue != 1 && o.epilogue != 2)
    return Support{false, "INT8 fc1 has the erf GELU epilogue only (act: gelu); use precision fp32", "", false};
  if (int8_tensor_is_u8(g.tensors[static_cast<size_t>(o.inputs[0])]) && o.k > (int64_t{1} << 16))
    return Support{false, "fc2's uint8 input needs K <= 65536 (exact int32 accumulation); use precision fp32", "",
                   false};
  return Support{true, "W8A8: int8 x int8 -> int32, dequantized in fp32 with per-channel weight scales (gemm_i8_ref)",
                 "", false};
}

}  // namespace

void append_cpu_int8_rows(std::vector<OpRow>* rows) {
  rows->push_back({OpKind::kLayerNorm, Precision::kInt8, "cpu.layernorm_f32->int8", layernorm_i8_supports,
                   cpu_row_runs_everywhere, bind_cpu_kernel<LayerNormI8>});
  rows->push_back({OpKind::kLinear, Precision::kInt8, "cpu.gemm_i8_ref", gemm_i8_supports, cpu_row_runs_everywhere,
                   bind_cpu_kernel<GemmI8>});
  rows->push_back({OpKind::kAttention, Precision::kInt8, "cpu.mha_i8_ref", attention_i8_supports,
                   cpu_row_runs_everywhere, bind_cpu_kernel<AttentionI8>});
}

}  // namespace edgevit
