// Throughput ceilings of the SM80-class instructions the fused attention kernel is made of, measured on the
// GPU it runs on: mma.sync m16n8k16 (fp16 x fp16 -> fp32), ldmatrix.x4 (shared-memory bandwidth) and
// ex2.approx (the softmax's MUFU op). They bound what any mma.sync kernel can reach on that GPU, whatever its
// tiling: docs/kernels-mha.md compares the attention times against them. Hopper's wgmma is not SM80-class and
// not measured here (cuBLAS's matmul rate in tools/gpu/bench_mha.py is that ceiling).
//   build: nvcc -std=c++17 -O3 -arch=sm_90 -I. tools/gpu/sm80_ceilings.cu -o sm80_ceilings   (tools/gpu/make_bundle.sh)
//   usage: sm80_ceilings          prints one line per instruction: rate per SM per clock and per second
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <algorithm>
#include <cstdlib>
#include <vector>

#include "kernels/cuda/mma_sm80.cuh"
#include "tools/gpu/bench_timing.cuh"

namespace {

constexpr int kIters = 4096;

// Eight independent accumulators per warp so the tensor pipe, not mma latency, is the limit.
__global__ void mma_kernel(float* sink, uint32_t seed) {
  uint32_t a[4] = {seed, seed ^ 1u, seed ^ 2u, seed ^ 3u};
  const uint32_t b0 = seed * 3u, b1 = seed * 5u;
  float c[8][4] = {};
  for (int i = 0; i < kIters; ++i) {
#pragma unroll
    for (int j = 0; j < 8; ++j) edgevit::cuda::mma_16816(c[j], a, b0, b1);
  }
  float s = 0.f;
#pragma unroll
  for (int j = 0; j < 8; ++j) s += c[j][0] + c[j][1] + c[j][2] + c[j][3];
  if (s == 12345.f) sink[threadIdx.x] = s;
}

// ldmatrix.x4 from a 16 KB shared tile, rows padded by 16 bytes as in the attention kernel.
__global__ void ldmatrix_kernel(float* sink) {
  __shared__ __align__(16) __half tile[128 * 72];
  for (int i = threadIdx.x; i < 128 * 72; i += blockDim.x) tile[i] = __float2half(static_cast<float>(i & 7));
  __syncthreads();
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  uint32_t acc = 0;
  for (int i = 0; i < kIters; ++i) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      uint32_t r[4];
      const int row = ((warp * 4 + j + i) & 7) * 16 + lane % 16;
      edgevit::cuda::ldmatrix_x4(r, tile + row * 72 + (lane / 16) * 8);
      acc ^= r[0] ^ r[1] ^ r[2] ^ r[3];
    }
  }
  if (acc == 0x12345678u) sink[threadIdx.x] = 1.f;
}

__global__ void ex2_kernel(float* sink, float x0) {
  float x[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) x[j] = x0 + j * 1e-3f + threadIdx.x * 1e-6f;
  for (int i = 0; i < kIters; ++i) {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      float y;
      asm volatile("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x[j]));
      x[j] = y * -0.5f;
    }
  }
  float s = 0.f;
#pragma unroll
  for (int j = 0; j < 8; ++j) s += x[j];
  if (s == 12345.f) sink[threadIdx.x] = s;
}

// One warm-up launch, then the median of 7.
template <class Launch>
float time_ms(Launch launch) {
  return edgevit::bench::median_ms(launch, 7, 1);
}

}  // namespace

int main() {
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  int clock_khz = 0;
  CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
  const int sms = prop.multiProcessorCount;
  float* sink = nullptr;
  CHECK(cudaMalloc(&sink, 4096 * sizeof(float)));
  std::printf("device: %s, %d SMs, max SM clock %.0f MHz (rates per SM-clock use this clock)\n", prop.name, sms,
              clock_khz / 1e3);
  const double clk = clock_khz * 1e3;
  const int blocks = sms * 4, threads = 256;  // 32 warps per SM
  const int warps = blocks * threads / 32;

  const float mma_ms = time_ms([&] { mma_kernel<<<blocks, threads>>>(sink, 7u); });
  const double mma_flops = static_cast<double>(warps) * kIters * 8 * 4096 / (mma_ms * 1e-3);
  std::printf("mma.sync.m16n8k16 f16->f32: %.0f TFLOP/s (%.0f FLOP/clk/SM)\n", mma_flops / 1e12,
              mma_flops / (clk * sms));

  const float ld_ms = time_ms([&] { ldmatrix_kernel<<<blocks, threads>>>(sink); });
  const double ld_bytes = static_cast<double>(warps) * kIters * 4 * 512 / (ld_ms * 1e-3);
  std::printf("ldmatrix.x4 (shared memory): %.1f TB/s (%.0f B/clk/SM)\n", ld_bytes / 1e12, ld_bytes / (clk * sms));

  const float ex_ms = time_ms([&] { ex2_kernel<<<blocks, threads>>>(sink, 0.25f); });
  const double ex_rate = static_cast<double>(warps) * 32 * kIters * 8 / (ex_ms * 1e-3);
  std::printf("ex2.approx.f32: %.2f Tops/s (%.1f /clk/SM)\n", ex_rate / 1e12, ex_rate / (clk * sms));
  CHECK(cudaFree(sink));
  return 0;
}
