// The CUDA table's INT8 rows (docs/int8.md), compiled in every build so `plan --device orin-nx-16gb
// --precision int8` plans an INT8 engine from any host:
//   layernorm  cuda.layernorm_f16->int8   fp32 statistics over the fp16 residual, int8 output + row scales
//              cuda.layernorm_f32->int8   over the fp32 residual (runtime.int8_float: fp32): float64
//                                         statistics and affine, the CPU INT8 path's arithmetic
//   linear     cuda.gemm_i8_mma           kernels/cuda/gemm_i8 (mma.sync m16n8k32, int32 accumulate, fused
//                                         dequantization, bias, GELU, residual or int8 requantization;
//                                         fp16 or fp32 output and residual as Graph::int8_rest says)
// Kernels: runtime/cuda/ops_int8_cuda.cpp (a CUDA build); elsewhere available() says "built without CUDA".
// fc1's GELU -> int8 needs fc2's per-tensor scale before the GEMM starts, so per-token INT8 graphs are refused
// on CUDA (runtime.int8_activations: per_token runs on the CPU).
#include <string>
#include <vector>

#include "runtime/cuda/ops_cuda.h"

namespace edgevit {

namespace {

std::string available_with_cuda_i8() {
#ifdef EDGEVIT_HAVE_CUDA
  return "";
#else
  return "built without CUDA";
#endif
}

#ifdef EDGEVIT_HAVE_CUDA
std::unique_ptr<OpKernel> bind_layernorm_i8(const Op& op) { return cuda_kernels::make_layernorm_i8(op); }
std::unique_ptr<OpKernel> bind_gemm_i8(const Op& op) { return cuda_kernels::make_gemm_i8(op); }
#else
std::unique_ptr<OpKernel> bind_layernorm_i8(const Op&) { return nullptr; }  // available() refuses first
std::unique_ptr<OpKernel> bind_gemm_i8(const Op&) { return nullptr; }
#endif

// The LayerNorm -> int8 row reading a residual stream of precision `in` (Graph::int8_rest).
Support layernorm_i8(const Graph& g, Precision in) {
  Support s;
  if (g.int8_rest != in) {
    s.reason = std::string("reads an ") + to_string(in) + " residual; this graph's float ops are " +
               to_string(g.int8_rest) + " (runtime.int8_float)";
    return s;
  }
  s.ok = true;
  s.reason = std::string(in == Precision::kFp32 ? "float64 statistics and affine (the CPU INT8 path's)"
                                                 : "fp32 statistics") +
             " over the " + to_string(in) + " residual; int8 output with " +
             (g.int8_activations != Int8Activations::kPerTensor ? "per-token scales" : "the calibrated per-tensor scale");
  return s;
}
Support layernorm_f16_i8(const Op&, const Graph& g, const DeviceProfile&) { return layernorm_i8(g, Precision::kFp16); }
Support layernorm_f32_i8(const Op&, const Graph& g, const DeviceProfile&) { return layernorm_i8(g, Precision::kFp32); }

Support gemm_i8(const Op& op, const Graph& g, const DeviceProfile& d) {
  Support s;
  if (g.int8_per_token() && op.epilogue == 1) {
    s.reason = "GELU -> int8 in the GEMM epilogue needs fc2's per-tensor scale; per_token INT8 runs on the CPU";
    return s;
  }
  if (d.compute_capability < 80) {
    s.reason = "needs SM80-class int8 mma.sync (compute capability >= 8.0), device has " +
               std::to_string(d.compute_capability);
    return s;
  }
  if (op.k % 32 != 0 || op.n % 8 != 0) {
    s.reason = "kernels/cuda/gemm_i8 needs K % 32 == 0 and N % 8 == 0 (K " + std::to_string(op.k) + ", N " +
               std::to_string(op.n) + ")";
    return s;
  }
  if (op.epilogue != 0 && op.epilogue != 1 && op.epilogue != 2) {
    s.reason = "INT8 fc1 has the erf GELU epilogue only (act: gelu)";
    return s;
  }
  s.ok = true;
  const std::string f = g.int8_rest == Precision::kFp32 ? "f32" : "f16";
  s.kernel = std::string("cuda.gemm_i8_mma") +
             (op.epilogue == 1 ? "+bias_gelu->int8" : op.epilogue == 2 ? "+bias_residual_" + f : "+bias_" + f);
  s.reason = "W8A8 mma.sync m16n8k32, int32 accumulate, per-channel weight scales, epilogue fused";
  return s;
}

}  // namespace

void append_cuda_int8_rows(std::vector<OpRow>* rows) {
  rows->push_back({OpKind::kLayerNorm, Precision::kInt8, "cuda.layernorm_f16->int8", layernorm_f16_i8,
                   available_with_cuda_i8, bind_layernorm_i8});
  rows->push_back({OpKind::kLayerNorm, Precision::kInt8, "cuda.layernorm_f32->int8", layernorm_f32_i8,
                   available_with_cuda_i8, bind_layernorm_i8});
  rows->push_back({OpKind::kLinear, Precision::kInt8, "cuda.gemm_i8_mma", gemm_i8, available_with_cuda_i8, bind_gemm_i8});
}

}  // namespace edgevit
