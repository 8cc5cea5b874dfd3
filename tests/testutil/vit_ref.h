// The ViT forward composed only of the kernels' plain references (kernels/cpu/*_ref.cpp), op after op in
// timm's order, over every token: an independent check of the engine, which plans, packs weights, fuses
// epilogues and prunes the class-token tail. Slow (reference loops): for small test models.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "kernels/cpu/kernels.h"
#include "runtime/model_spec.h"
#include "tests/runtime/checkpoint_fixtures.h"

namespace edgevit::testutil {

struct VitRefOutputs {
  std::vector<float> logits;      // (B, num_classes), or the pooled features when num_classes == 0
  std::vector<float> pre_logits;  // (B, E)
};

// input (B, C, H, W) already normalized; w holds every tensor of expected_names(a), timm names.
inline VitRefOutputs vit_forward_ref(const VitArch& a, const TensorMap& w, const float* input, int batch) {
  const auto W = [&](const std::string& name) { return w.at(name).data.data(); };
  const int e = a.embed_dim, t = a.num_tokens(), p = a.num_patches(), hid = a.mlp_hidden();
  const int k_patch = a.in_chans * a.patch_size * a.patch_size;
  const int rows = batch * t;
  const float eps = static_cast<float>(a.layer_norm_eps);
  std::vector<float> cols(static_cast<size_t>(batch) * p * k_patch), patches(static_cast<size_t>(batch) * p * e);
  im2col_patches_ref(input, cols.data(), batch, a.in_chans, a.img_h, a.img_w, a.patch_size);
  linear_ref(cols.data(), W("patch_embed.proj.weight"), a.patch_bias ? W("patch_embed.proj.bias") : nullptr,
             patches.data(), batch * p, e, k_patch, Epilogue::kNone);
  std::vector<float> x(static_cast<size_t>(rows) * e), h(x.size()), qkv(static_cast<size_t>(rows) * 3 * e),
      att(x.size()), mlp(static_cast<size_t>(rows) * hid);
  const float* extra = a.dist_token ? W("dist_token") : a.reg_tokens > 0 ? W("reg_token") : nullptr;
  assemble_tokens_ref(patches.data(), a.class_token ? W("cls_token") : nullptr, extra, a.extra_prefix_tokens(),
                      W("pos_embed"), a.no_embed_class, x.data(), batch, p, e);
  if (a.pre_norm) {  // CLIP's norm_pre over the assembled tokens
    std::vector<float> pre(x.size());
    layernorm_ref(x.data(), W("norm_pre.weight"), W("norm_pre.bias"), pre.data(), rows, e, eps, 1);
    x = pre;
  }
  // LayerScale (timm ls1/ls2): the branch's output times gamma, per channel, before the residual add.
  const auto layer_scale = [&](std::vector<float>& v, const std::string& gamma) {
    if (!a.layer_scale) return;
    const float* g = W(gamma);
    for (size_t j = 0; j < v.size(); ++j) v[j] *= g[j % static_cast<size_t>(e)];
  };
  const int d = a.head_dim();
  const auto hid_len = [](const VitArch& arch) { return arch.mlp_hidden(); };
  const auto activation = [&](std::vector<float>& v) {
    if (a.act == Activation::kGeluTanh) {
      gelu_tanh_ref(v.data(), static_cast<int64_t>(v.size()), 1);
    } else if (a.act == Activation::kQuickGelu) {
      quick_gelu_ref(v.data(), static_cast<int64_t>(v.size()), 1);
    } else {
      gelu_ref(v.data(), static_cast<int64_t>(v.size()), 1);
    }
  };
  const AttnParams ap = attn_params_packed_qkv(batch, t, a.num_heads, d, 1.f / std::sqrt(static_cast<float>(d)));
  for (int i = 0; i < a.depth; ++i) {
    const std::string b = "blocks." + std::to_string(i) + ".";
    layernorm_ref(x.data(), W(b + "norm1.weight"), W(b + "norm1.bias"), h.data(), rows, e, eps, 1);
    linear_ref(h.data(), W(b + "attn.qkv.weight"), a.qkv_bias ? W(b + "attn.qkv.bias") : nullptr, qkv.data(), rows,
               3 * e, e, Epilogue::kNone);
    if (a.qk_norm)
      qk_norm_ref(qkv.data(), W(b + "attn.q_norm.weight"), W(b + "attn.q_norm.bias"), W(b + "attn.k_norm.weight"),
                  W(b + "attn.k_norm.bias"), rows, a.num_heads, d, eps, 1);
    mha_ref(ap, qkv.data(), qkv.data() + packed_k_offset(a.num_heads, d), qkv.data() + packed_v_offset(a.num_heads, d),
            att.data(), 1);
    linear_ref(att.data(), W(b + "attn.proj.weight"), W(b + "attn.proj.bias"), h.data(), rows, e, e, Epilogue::kNone);
    layer_scale(h, b + "ls1.gamma");
    for (size_t j = 0; j < x.size(); ++j) x[j] += h[j];
    layernorm_ref(x.data(), W(b + "norm2.weight"), W(b + "norm2.bias"), h.data(), rows, e, eps, 1);
    linear_ref(h.data(), W(b + "mlp.fc1.weight"), W(b + "mlp.fc1.bias"), mlp.data(), rows, hid, e, Epilogue::kNone);
    activation(mlp);
    linear_ref(mlp.data(), W(b + "mlp.fc2.weight"), W(b + "mlp.fc2.bias"), h.data(), rows, e, hid, Epilogue::kNone);
    layer_scale(h, b + "ls2.gamma");
    for (size_t j = 0; j < x.size(); ++j) x[j] += h[j];
  }
  VitRefOutputs out;
  out.pre_logits.resize(static_cast<size_t>(batch) * e);
  const bool avg = a.global_pool == GlobalPool::kAvg;
  if (a.dist_token) {  // timm VisionTransformerDistilled: tokens 0 and 1 of the normed sequence, two heads
    layernorm_ref(x.data(), W("norm.weight"), W("norm.bias"), h.data(), rows, e, eps, 1);
    std::vector<float> x0(static_cast<size_t>(batch) * e), x1(x0.size());
    for (int n = 0; n < batch; ++n)
      for (int j = 0; j < e; ++j) {
        x0[static_cast<size_t>(n) * e + j] = h[static_cast<size_t>(n) * t * e + j];
        x1[static_cast<size_t>(n) * e + j] = h[(static_cast<size_t>(n) * t + 1) * e + j];
        out.pre_logits[static_cast<size_t>(n) * e + j] =
            (x0[static_cast<size_t>(n) * e + j] + x1[static_cast<size_t>(n) * e + j]) / 2;
      }
    if (a.num_classes == 0) {
      out.logits = out.pre_logits;
      return out;
    }
    const size_t c = static_cast<size_t>(a.num_classes);
    std::vector<float> l0(batch * c), l1(batch * c);
    linear_ref(x0.data(), W("head.weight"), W("head.bias"), l0.data(), batch, a.num_classes, e, Epilogue::kNone);
    linear_ref(x1.data(), W("head_dist.weight"), W("head_dist.bias"), l1.data(), batch, a.num_classes, e,
               Epilogue::kNone);
    out.logits.resize(batch * c);
    for (size_t j = 0; j < out.logits.size(); ++j) out.logits[j] = (l0[j] + l1[j]) / 2;
    return out;
  }
  if (a.global_pool == GlobalPool::kMap) {  // timm AttentionPoolLatent, unfolded: latent query, kv, attention
    layernorm_ref(x.data(), W("norm.weight"), W("norm.bias"), h.data(), rows, e, eps, 1);
    std::vector<float> q(e), kv(static_cast<size_t>(rows) * 2 * e), packed(static_cast<size_t>(rows) * 3 * e),
        ctx(static_cast<size_t>(batch) * e), y(ctx.size()), hy(ctx.size()), hid(static_cast<size_t>(batch) * hid_len(a));
    linear_ref(W("attn_pool.latent"), W("attn_pool.q.weight"), W("attn_pool.q.bias"), q.data(), 1, e, e, Epilogue::kNone);
    linear_ref(h.data(), W("attn_pool.kv.weight"), W("attn_pool.kv.bias"), kv.data(), rows, 2 * e, e, Epilogue::kNone);
    for (int r = 0; r < rows; ++r)
      for (int j = 0; j < e; ++j) {
        packed[static_cast<size_t>(r) * 3 * e + j] = q[static_cast<size_t>(j)];
        packed[static_cast<size_t>(r) * 3 * e + e + j] = kv[static_cast<size_t>(r) * 2 * e + j];
        packed[static_cast<size_t>(r) * 3 * e + 2 * e + j] = kv[static_cast<size_t>(r) * 2 * e + e + j];
      }
    const AttnParams pp = attn_params_packed_qkv(batch, t, a.num_heads, d, 1.f / std::sqrt(static_cast<float>(d)), 1);
    mha_ref(pp, packed.data(), packed.data() + packed_k_offset(a.num_heads, d),
            packed.data() + packed_v_offset(a.num_heads, d), ctx.data(), 1);
    linear_ref(ctx.data(), W("attn_pool.proj.weight"), W("attn_pool.proj.bias"), y.data(), batch, e, e, Epilogue::kNone);
    layernorm_ref(y.data(), W("attn_pool.norm.weight"), W("attn_pool.norm.bias"), hy.data(), batch, e, eps, 1);
    linear_ref(hy.data(), W("attn_pool.mlp.fc1.weight"), W("attn_pool.mlp.fc1.bias"), hid.data(), batch, hid_len(a), e,
               Epilogue::kNone);
    activation(hid);
    linear_ref(hid.data(), W("attn_pool.mlp.fc2.weight"), W("attn_pool.mlp.fc2.bias"), hy.data(), batch, e, hid_len(a),
               Epilogue::kNone);
    for (size_t j = 0; j < y.size(); ++j) out.pre_logits[j] = y[j] + hy[j];
  } else if (a.fc_norm) {  // pool, then LayerNorm (timm fc_norm)
    pool_ref(x.data(), h.data(), batch, t, e, avg, a.num_prefix_tokens());
    layernorm_ref(h.data(), W("fc_norm.weight"), W("fc_norm.bias"), out.pre_logits.data(), batch, e, eps, 1);
  } else {
    layernorm_ref(x.data(), W("norm.weight"), W("norm.bias"), h.data(), rows, e, eps, 1);
    pool_ref(h.data(), out.pre_logits.data(), batch, t, e, avg, a.num_prefix_tokens());
  }
  if (a.num_classes == 0) {
    out.logits = out.pre_logits;
    return out;
  }
  out.logits.resize(static_cast<size_t>(batch) * a.num_classes);
  if (a.head_mean_tokens) {  // HF Dinov2ForImageClassification: classifier([cls, mean(patch tokens)]), unsplit
    std::vector<float> cat(static_cast<size_t>(batch) * 2 * e), mean(static_cast<size_t>(batch) * e),
        wcat(static_cast<size_t>(a.num_classes) * 2 * e);
    pool_ref(h.data(), mean.data(), batch, t, e, true, a.num_prefix_tokens());
    for (int n = 0; n < batch; ++n)
      for (int j = 0; j < e; ++j) {
        cat[static_cast<size_t>(n) * 2 * e + j] = out.pre_logits[static_cast<size_t>(n) * e + j];
        cat[static_cast<size_t>(n) * 2 * e + e + j] = mean[static_cast<size_t>(n) * e + j];
      }
    for (int c = 0; c < a.num_classes; ++c)
      for (int j = 0; j < e; ++j) {
        wcat[static_cast<size_t>(c) * 2 * e + j] = W("head.weight")[static_cast<size_t>(c) * e + j];
        wcat[static_cast<size_t>(c) * 2 * e + e + j] = W("head_mean.weight")[static_cast<size_t>(c) * e + j];
      }
    linear_ref(cat.data(), wcat.data(), W("head.bias"), out.logits.data(), batch, a.num_classes, 2 * e,
               Epilogue::kNone);
    return out;
  }
  linear_ref(out.pre_logits.data(), W("head.weight"), a.head_bias ? W("head.bias") : nullptr, out.logits.data(),
             batch, a.num_classes, e, Epilogue::kNone);
  return out;
}

}  // namespace edgevit::testutil
