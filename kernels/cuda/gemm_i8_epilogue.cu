// The W8A8 GEMM's epilogue as a kernel of its own, over an int32 product already in memory (cuBLASLt IMMA's,
// kernels/cuda/gemm_i8_lt.h): one thread per eight consecutive outputs of a row, two int4 loads of the product,
// the dequantization and store8 of gemm_i8_epilogue.cuh (the mma.sync kernel's own epilogue code), so its
// outputs equal the fused kernel's and the reference's bit for bit. Memory-bound: 4 bytes in per output
// (plus the residual's), 1-4 out. ViT-B/16 batch 8, H200: docs/benchmarks.md ("INT8 GEMM: cuBLASLt IMMA").
#include "kernels/cuda/gemm_i8_epilogue.cuh"
#include "kernels/cuda/gemm_i8_lt.h"

namespace edgevit::gpu {
namespace {

constexpr int kThreads = 256;

template <int kEpilogue>
__global__ void __launch_bounds__(kThreads) epilogue_kernel(const GemmI8Args a, const int32_t* acc) {
  const int64_t groups = a.n / 8;
  const int64_t g = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (g >= a.m * groups) return;
  const int64_t row = g / groups, col = (g - row * groups) * 8;
  const float sx = a.sx[a.sx_per_token ? row : 0];
  const int4 q0 = __ldg(reinterpret_cast<const int4*>(acc + row * a.n + col));
  const int4 q1 = __ldg(reinterpret_cast<const int4*>(acc + row * a.n + col) + 1);
  const int q[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
  float scale[8], bias[8], v[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    scale[j] = __fmul_rn(sx, __ldg(a.sw + col + j));
    bias[j] = a.bias ? __ldg(a.bias + col + j) : 0.f;
  }
  dequantize8(q, scale, bias, v);
  store8<kEpilogue>(a, row * a.n + col, __fdiv_rn(1.f, a.out_scale), v);
}

template <int kEpilogue>
cudaError_t launch(const GemmI8Args& a, const int32_t* acc, cudaStream_t stream) {
  const int64_t groups = a.m * (a.n / 8);
  const unsigned blocks = static_cast<unsigned>((groups + kThreads - 1) / kThreads);
  epilogue_kernel<kEpilogue><<<blocks, kThreads, 0, stream>>>(a, acc);
  return cudaGetLastError();
}

bool aligned(const void* p, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

}  // namespace

cudaError_t gemm_i8_epilogue(const GemmI8Args& a, const int32_t* acc, cudaStream_t stream) {
  const int e = static_cast<int>(a.epilogue);
  if (e < 0 || e >= kGemmI8EpilogueCount) return cudaErrorInvalidValue;
  if (a.m < 1 || a.n < 8 || a.n % 8 != 0 || (a.m * (a.n / 8) + kThreads - 1) / kThreads > 0x7fffffff)
    return cudaErrorInvalidValue;
  if (!acc || !a.sx || !a.sw || !a.y || !aligned(acc, 16)) return cudaErrorInvalidValue;
  if (!aligned(a.y, gemm_i8_epilogue_is_i8(a.epilogue) ? 8 : 16)) return cudaErrorInvalidValue;
  if (gemm_i8_epilogue_is_i8(a.epilogue) && !(a.out_scale > 0.f)) return cudaErrorInvalidValue;
  switch (a.epilogue) {
    case GemmI8Epilogue::kF32:
    case GemmI8Epilogue::kF32BiasResidual: return launch<0>(a, acc, stream);  // store8's branch
    case GemmI8Epilogue::kF16Bias: return launch<1>(a, acc, stream);
    case GemmI8Epilogue::kF16BiasGelu: return launch<2>(a, acc, stream);
    case GemmI8Epilogue::kF16BiasResidual: return launch<3>(a, acc, stream);
    case GemmI8Epilogue::kI8Bias: return launch<4>(a, acc, stream);
    case GemmI8Epilogue::kI8BiasGelu: return launch<5>(a, acc, stream);
    case GemmI8Epilogue::kQkHeadI8: return cudaErrorInvalidValue;  // the mma.sync kernel's fused epilogue only
  }
  return cudaErrorInvalidValue;
}

}  // namespace edgevit::gpu
