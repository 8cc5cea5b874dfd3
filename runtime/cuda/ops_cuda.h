// The CUDA op table (rows: runtime/cuda_rows.cpp, compiled in every build, so plans for CUDA devices are
// made on any machine; kernels: runtime/cuda/*.cpp, compiled only with CUDA). Includes no CUDA header.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/op_table.h"

namespace edgevit {

// Rows in order of preference per op kind and precision (runtime/op_table.h).
const std::vector<OpRow>& cuda_op_table();

// The kernel name of a linear op on CUDA: "cuda.cublaslt_f16+bias", "...+bias_gelu", "...+bias_residual",
// "...+bias_gelu_tanh", "...+bias_quick_gelu" (epilogue: Op::epilogue). The row serves it; the name says the epilogue.
std::string cuda_linear_kernel_name(bool fp16, int epilogue);

// Kernel makers the rows bind to (runtime/cuda/; defined only in a CUDA build).
namespace cuda_kernels {
std::unique_ptr<OpKernel> make_im2col(const Op& op);
std::unique_ptr<OpKernel> make_assemble_tokens(const Op& op);
std::unique_ptr<OpKernel> make_qk_norm(const Op& op);
std::unique_ptr<OpKernel> make_layernorm(const Op& op);
std::unique_ptr<OpKernel> make_pool(const Op& op);
std::unique_ptr<OpKernel> make_linear(const Op& op);
std::unique_ptr<OpKernel> make_mha_fused(const Op& op);
std::unique_ptr<OpKernel> make_mha_unfused(const Op& op);
std::unique_ptr<OpKernel> make_mha_f32(const Op& op);
std::unique_ptr<OpKernel> make_mha_f64(const Op& op);        // INT8 twin rows (runtime/cuda/ops_twin_cuda.cpp,
std::unique_ptr<OpKernel> make_linear_f64(const Op& op);     // attention: runtime/cuda/attention_cuda.cpp)
std::unique_ptr<OpKernel> make_layernorm_f64(const Op& op);
std::unique_ptr<OpKernel> make_qk_norm_f64(const Op& op);
std::unique_ptr<OpKernel> make_layernorm_i8(const Op& op);  // INT8 (runtime/cuda/ops_int8_cuda.cpp)
std::unique_ptr<OpKernel> make_gemm_i8(const Op& op);
std::unique_ptr<OpKernel> make_mha_i8(const Op& op);        // INT8 attention (runtime/cuda/attention_i8_cuda.cpp)
}  // namespace cuda_kernels

// The scratch of the INT8 graph's unfused attention row (cuda.mha_unfused_cublas->int8): the unfused path's
// workspace at 0 (`workspace` bytes), its fp16 output O (rows x e halves) at o_offset, then the fp32 row scales
// gpu::quantize_rows_i8_f16 writes (rows floats; proj reads the per-tensor scale, not these) at scales_offset.
struct AttnI8Scratch {
  int64_t o_offset = 0, scales_offset = 0, bytes = 0;
};
inline AttnI8Scratch attn_i8_unfused_scratch(int64_t workspace, int64_t rows, int64_t e) {
  AttnI8Scratch s;
  s.o_offset = (workspace + 255) / 256 * 256;
  s.scales_offset = (s.o_offset + 2 * rows * e + 255) / 256 * 256;
  s.bytes = s.scales_offset + 4 * rows;
  return s;
}

// fp32 attention (gpu::mha_f32) holds a query and its scores in shared memory: head_dim + tokens floats at
// most (gpu::kMhaF32MaxSmemFloats, static_asserted equal where CUDA is built).
constexpr int64_t kCudaMhaF32MaxSmemFloats = 48 * 1024 / 4;
// The INT8 twin's float64 attention (gpu::mha_f64) the same in doubles (gpu::kMhaF64MaxSmemDoubles).
constexpr int64_t kCudaMhaF64MaxSmemDoubles = 48 * 1024 / 8;

}  // namespace edgevit
