// Shared by the INT8 GEMM CUDA tests (gemm_i8_cuda_test, gemm_i8_lt_cuda_test): a device buffer, its upload,
// and one shape's random operands, scales and int32 reference products (signed and unsigned activations).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <thread>
#include <vector>

#include "kernels/cpu/gemm_i8_ref.h"

namespace edgevit::gemmi8test {

template <class T>
struct DeviceBuffer {
  T* p = nullptr;
  explicit DeviceBuffer(size_t n) { cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)); }
  ~DeviceBuffer() { cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

template <class T>
inline void upload(DeviceBuffer<T>& d, const std::vector<T>& h) {
  ASSERT_EQ(cudaMemcpy(d.p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
}

// The inputs of one shape, on the host and the device, and the int32 reference accumulators.
struct Problem {
  int64_t m, n, k;
  std::vector<int8_t> x, w;
  std::vector<float> sx_tensor, sx_token, sw, bias, residual, residual32;  // residual: fp16 values
  std::vector<int32_t> acc;
  std::vector<uint8_t> xu;       // (M, K) unsigned codes
  std::vector<int32_t> acc_u8;   // xu w^T
};

inline Problem make_problem(int64_t m, int64_t n, int64_t k, uint32_t seed) {
  Problem p{m, n, k, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}};
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> q(-127, 127);
  std::uniform_real_distribution<float> u(0.f, 1.f);
  p.x.resize(m * k);
  p.w.resize(n * k);
  for (auto& v : p.x) v = static_cast<int8_t>(q(rng));
  for (auto& v : p.w) v = static_cast<int8_t>(q(rng));
  std::uniform_int_distribution<int> code(0, 255);
  p.xu.resize(m * k);
  for (auto& v : p.xu) v = static_cast<uint8_t>(code(rng));
  p.sx_tensor = {0.0173f};
  p.sx_token.resize(m);
  for (auto& v : p.sx_token) v = 0.002f + 0.03f * u(rng);
  p.sw.resize(n);
  for (auto& v : p.sw) v = 0.0005f + 0.004f * u(rng);
  p.bias.resize(n);
  for (auto& v : p.bias) v = 2.f * u(rng) - 1.f;
  p.residual.resize(m * n);
  for (auto& v : p.residual) v = __half2float(__float2half_rn(8.f * u(rng) - 4.f));
  p.residual32.resize(m * n);
  for (auto& v : p.residual32) v = 80.f * u(rng) - 40.f;  // fp32 values, most not fp16's
  p.acc.resize(m * n);
  p.acc_u8.resize(m * n);
  // Rows split over threads: the reference is a plain loop, and the largest shape is 7 G multiply-adds.
  const int64_t threads = std::max<int64_t>(1, std::min<int64_t>(std::thread::hardware_concurrency(), m));
  std::vector<std::thread> pool;
  for (int64_t t = 0; t < threads; ++t) {
    const int64_t r0 = m * t / threads, r1 = m * (t + 1) / threads;
    pool.emplace_back([&p, r0, r1] {
      gemm_i8_accumulate_ref(r1 - r0, p.n, p.k, p.x.data() + r0 * p.k, p.w.data(), p.acc.data() + r0 * p.n);
      gemm_u8i8_accumulate_ref(r1 - r0, p.n, p.k, p.xu.data() + r0 * p.k, p.w.data(), p.acc_u8.data() + r0 * p.n);
    });
  }
  for (auto& t : pool) t.join();
  return p;
}

}  // namespace edgevit::gemmi8test
