// Attention problem description shared by every attention kernel (CPU fused/explicit/reference, CUDA
// fused/unfused). Layout-agnostic: Q, K, V and O are addressed through element strides, so timm's packed
// qkv output (B, S, 3, H, D) and separate (B, S, H, D) or (B, H, S, D) tensors are all served without copies.
//
//   element (b, s, h, d) of Q lives at q[b*q.batch + s*q.row + h*q.head + d]   (d is contiguous)
//
// Semantics: O[b,s,h,:] = softmax_j( scale * <Q[b,s,h,:], K[b,j,h,:]> + mask ) V[b,j,h,:]
// The scale is applied exactly once, to Q K^T (TensorRT 10.7 got this wrong). key_mask, when given, is
// (B, Skv) bytes, 1 = attend, 0 = masked out; a query row whose keys are all masked yields zeros
// (not NaN, not the mean of V): there is nothing to attend to, so the row contributes nothing.
#pragma once

#include <cstdint>

namespace edgevit {

struct AttnStrides {
  int64_t batch = 0;  // elements between consecutive b
  int64_t row = 0;    // elements between consecutive s
  int64_t head = 0;   // elements between consecutive h
};

struct AttnParams {
  int batch = 0;     // B
  int heads = 0;     // H
  int seq_q = 0;     // Sq
  int seq_kv = 0;    // Skv (may differ from Sq: cross-attention)
  int head_dim = 0;  // D
  float scale = 0;   // normally 1/sqrt(D)
  AttnStrides q, k, v, o;
  const uint8_t* key_mask = nullptr;  // (B, Skv) or nullptr; host pointer for CPU, device for CUDA
};

// timm's fused qkv Linear output: (B, S, 3, H, D) row-major; o is (B, Sq, H, D). Sq (default S) queries
// are the first Sq tokens of each image (the class-token tail asks for 1); keys and values are all S.
inline AttnParams attn_params_packed_qkv(int batch, int seq, int heads, int head_dim, float scale, int seq_q = -1) {
  AttnParams p;
  if (seq_q < 0) seq_q = seq;
  p.batch = batch; p.heads = heads; p.seq_q = seq_q; p.seq_kv = seq; p.head_dim = head_dim; p.scale = scale;
  const int64_t e = static_cast<int64_t>(heads) * head_dim;
  p.q = p.k = p.v = AttnStrides{seq * 3 * e, 3 * e, head_dim};
  p.o = AttnStrides{seq_q * e, e, head_dim};
  return p;
}
// INT8 attention's inputs (runtime.int8_attention: int8): int8 Q|K packed (B, S, 2, H, D), K at
// packed_k_offset; V alone (B, S, H, D); o (B, Sq, H, D). Their scales (B, S, 2, H): attn_i8_scale_strides,
// K's at offset H.
inline AttnParams attn_params_qk_i8(int batch, int seq, int heads, int head_dim, float scale, int seq_q) {
  AttnParams p = attn_params_packed_qkv(batch, seq, heads, head_dim, scale, seq_q);
  const int64_t e = static_cast<int64_t>(heads) * head_dim;
  p.q = p.k = AttnStrides{seq * 2 * e, 2 * e, head_dim};
  p.v = AttnStrides{seq * e, e, head_dim};
  return p;
}
inline AttnStrides attn_i8_scale_strides(int seq, int heads) { return AttnStrides{int64_t{seq} * 2 * heads, 2 * heads, 1}; }
// Offsets (in elements) of K and V inside the packed qkv buffer, relative to Q.
inline int64_t packed_k_offset(int heads, int head_dim) { return static_cast<int64_t>(heads) * head_dim; }
inline int64_t packed_v_offset(int heads, int head_dim) { return 2 * static_cast<int64_t>(heads) * head_dim; }

}  // namespace edgevit
