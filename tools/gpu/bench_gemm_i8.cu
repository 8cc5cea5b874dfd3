// Times the W8A8 GEMM variants (kernels/cuda/gemm_i8.h) at ViT-B/16's four block GEMMs, batch 1, 8 and 64
// (M = 197 B; qkv 2304 x 768, proj 768 x 768, fc1 3072 x 768, fc2 768 x 3072), side by side in the same run
// with the fp16 cuBLASLt GEMMs the runtime uses today (kernels/cuda/gemm_lt.h: the best of the heuristic's
// first 4 algorithms), each with the epilogue the block uses (qkv: bias -> fp16; proj, fc2: bias + residual
// into fp16; fc1: bias + GELU, INT8 out for fc2 (cuBLASLt: fp16 out)). Also measures the SM80-class
// instruction ceilings (mma.sync m16n8k32 s8 and m16n8k16 f16) on the same GPU.
// CUDA events around each launch, 10 warm-up launches, the median of 60 (20 with --sms).
// --sms N: the GEMMs run on N multiprocessors only (Orin NX has 8): a spinning block holding all of a
// multiprocessor's shared memory parks on every other one for the duration (no ceilings or cuBLASLt then:
// its Hopper kernels use thread-block clusters).
// --profile ROW GEMM BATCH [EPILOGUE]: three launches of one row at one shape (optionally with another
// epilogue, by gemm_i8_epilogue_name), nothing timed (for ncu).
// --rows LIST: time only these rows (comma-separated ids); the others print "-".
// --split: the epilogue's share instead of the table: each GEMM at batch 8 and 64, the listed rows (--rows,
// else all) with the block's epilogue and with cheaper ones (i8_bias: dequantize + requantize to int8, the
// same output bytes as fc1's; f16_bias), in us.
// --imma: cuBLASLt IMMA (kernels/cuda/gemm_i8_lt.h, the runtime's tuning candidate) against the fastest row and
// cuBLASLt fp16 at each GEMM and batch: the best of its heuristic's first 8 algorithms, the int32 matmul alone
// and with the epilogue kernel after it (the candidate as the runtime times it), and whether cuBLASLt offers a
// uint8 x int8 algorithm for fc2's input.
//   build: tools/gpu/make_i8_bundle.sh
//   usage: bench_gemm_i8 [--sms N | --profile ROW qkv|proj|fc1|fc2 BATCH [EPILOGUE] | --split | --imma]
//          [--rows LIST]
//   prints a table (TOP/s = 2MNK / t)
#include <cublasLt.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/gemm_i8.h"
#include "tools/gpu/bench_timing.cuh"
#include "kernels/cuda/gemm_i8_lt.h"
#include "kernels/cuda/gemm_lt.h"
#include "kernels/cuda/mma_sm80.cuh"
#include "kernels/cuda/mma_sm80_s8.cuh"

namespace {

using namespace edgevit;

constexpr int kWarmup = 10;
int g_runs = 60;
constexpr int kCeilIters = 4096;

float median_ms(const std::function<void()>& launch) { return bench::median_ms(launch, g_runs, kWarmup); }

// Eight independent accumulators per warp so the tensor pipe, not mma latency, is the limit.
__global__ void mma_s8_kernel(int* sink, uint32_t seed) {
  const uint32_t a[4] = {seed, seed ^ 1u, seed ^ 2u, seed ^ 3u};
  const uint32_t b0 = seed * 3u, b1 = seed * 5u;
  int c[8][4] = {};
  for (int i = 0; i < kCeilIters; ++i) {
#pragma unroll
    for (int j = 0; j < 8; ++j) cuda::mma_16832_s8(c[j], a, b0, b1);
  }
  int s = 0;
  for (auto& r : c) s += r[0] + r[1] + r[2] + r[3];
  if (s == 0x7fffffff) sink[threadIdx.x] = s;
}

__global__ void mma_f16_kernel(float* sink, uint32_t seed) {
  const uint32_t a[4] = {seed, seed ^ 1u, seed ^ 2u, seed ^ 3u};
  const uint32_t b0 = seed * 3u, b1 = seed * 5u;
  float c[8][4] = {};
  for (int i = 0; i < kCeilIters; ++i) {
#pragma unroll
    for (int j = 0; j < 8; ++j) cuda::mma_16816(c[j], a, b0, b1);
  }
  float s = 0.f;
  for (auto& r : c) s += r[0] + r[1] + r[2] + r[3];
  if (s == 1234.5f) sink[threadIdx.x] = s;
}

void ceilings(double* i8_tops, double* f16_tflops) {
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  const int blocks = prop.multiProcessorCount * 4, threads = 256;
  const double warps = blocks * threads / 32.0;
  int* sink = nullptr;
  CHECK(cudaMalloc(&sink, 4096 * sizeof(int)));
  const float ms8 = median_ms([&] { mma_s8_kernel<<<blocks, threads>>>(sink, 7u); });
  const float ms16 = median_ms([&] { mma_f16_kernel<<<blocks, threads>>>(reinterpret_cast<float*>(sink), 7u); });
  CHECK(cudaGetLastError());
  *i8_tops = warps * kCeilIters * 8 * (2.0 * 16 * 8 * 32) / (ms8 * 1e-3) / 1e12;
  *f16_tflops = warps * kCeilIters * 8 * (2.0 * 16 * 8 * 16) / (ms16 * 1e-3) / 1e12;
  CHECK(cudaFree(sink));
}

// Parks one block on each of the multiprocessors it lands on (all their shared memory: nothing else fits
// beside it) until *release is set; counts itself into *started.
// Gives up after 100 s (globaltimer) so that a lost release cannot hang the machine.
__global__ void park_kernel(volatile int* release, int* started) {
  extern __shared__ int park_smem[];
  park_smem[threadIdx.x] = 0;
  if (threadIdx.x == 0) atomicAdd(started, 1);
  uint64_t t0 = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  uint64_t t = t0;
  while (*release == 0 && t - t0 < 100000000000ull) {
    __nanosleep(1000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  }
}

struct Parking {
  int* flags = nullptr;  // [0] release, [1] started
  cudaStream_t stream = nullptr;
};

// Leaves `keep` multiprocessors free for the timed kernels; returns once every parking block runs.
Parking park_all_but(int keep) {
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  Parking p;
  const int blocks = prop.multiProcessorCount - keep;
  CHECK(cudaMalloc(&p.flags, 2 * sizeof(int)));
  CHECK(cudaMemset(p.flags, 0, 2 * sizeof(int)));
  CHECK(cudaStreamCreateWithFlags(&p.stream, cudaStreamNonBlocking));
  const int smem = static_cast<int>(prop.sharedMemPerBlockOptin);
  CHECK(cudaFuncSetAttribute(park_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  park_kernel<<<blocks, 32, smem, p.stream>>>(p.flags, p.flags + 1);
  CHECK(cudaGetLastError());
  for (int started = 0; started < blocks;)
    CHECK(cudaMemcpy(&started, p.flags + 1, sizeof(int), cudaMemcpyDeviceToHost));
  std::printf("parked %d blocks: the kernels below run on %d multiprocessors\n", blocks, keep);
  return p;
}

void release(Parking* p) {
  const int one = 1;
  CHECK(cudaMemcpy(p->flags, &one, sizeof(int), cudaMemcpyHostToDevice));
  CHECK(cudaStreamSynchronize(p->stream));
  CHECK(cudaStreamDestroy(p->stream));
  CHECK(cudaFree(p->flags));
}

// A zeroed split-K workspace of at least `bytes` (grown on demand; split rows leave it zeroed).
void* workspace(size_t bytes) {
  static void* p = nullptr;
  static size_t have = 0;
  if (bytes > have) {
    if (p) CHECK(cudaFree(p));
    CHECK(cudaMalloc(&p, bytes));
    CHECK(cudaMemset(p, 0, bytes));
    have = bytes;
  }
  return p;
}

struct Gemm {
  const char* name;
  int64_t n, k;
  GemmI8Epilogue i8_epilogue;
  gpu::LtGelu lt_gelu;
  bool lt_accumulate;
};
constexpr Gemm kGemms[] = {
    {"qkv", 2304, 768, GemmI8Epilogue::kF16Bias, gpu::LtGelu::kNone, false},
    {"proj", 768, 768, GemmI8Epilogue::kF16BiasResidual, gpu::LtGelu::kNone, true},
    {"fc1", 3072, 768, GemmI8Epilogue::kI8BiasGelu, gpu::LtGelu::kErf, false},
    {"fc2", 768, 3072, GemmI8Epilogue::kF16BiasResidual, gpu::LtGelu::kNone, true},
};

// The fp16 cuBLASLt GEMM's median time (best of the heuristic's first 4 algorithms), or -1.
float time_lt(cublasLtHandle_t lt, int64_t m, const Gemm& g, const void* w, const void* x, const void* bias, void* y,
              void* ws, size_t ws_bytes) {
  gpu::LtGemmShape s;
  s.m = m;
  s.n = g.n;
  s.k = g.k;
  s.bias = true;
  s.gelu = g.lt_gelu;
  s.accumulate = g.lt_accumulate;
  gpu::LtGemm d;
  float best = -1.f;
  std::vector<cublasLtMatmulAlgo_t> algos;
  if (gpu::lt_gemm_create(s, bias, &d) == CUBLAS_STATUS_SUCCESS &&
      gpu::lt_gemm_heuristic(lt, d, 4, ws_bytes, &algos) == CUBLAS_STATUS_SUCCESS) {
    for (const auto& algo : algos) {
      if (!gpu::lt_gemm_run(lt, d, algo, w, x, y, ws, ws_bytes, nullptr).ok()) continue;
      const float ms = median_ms([&] { gpu::lt_gemm_run(lt, d, algo, w, x, y, ws, ws_bytes, nullptr); });
      if (best < 0.f || ms < best) best = ms;
    }
  }
  gpu::lt_gemm_destroy(&d);
  return best;
}

// The device buffers every mode reads (sized for the largest GEMM at batch 64).
struct Buffers {
  const int8_t *xq, *wq;
  const __half *xh, *wh, *bh;
  __half* y;
  const float *sx, *sw, *bias;
  void* ws;
  size_t ws_bytes;
};

// --split: each GEMM at batch 8 and 64, the timed rows with the block's epilogue and cheaper ones.
void bench_split(const Buffers& b, const std::vector<bool>& timed) {
  int count = 0;
  const gpu::GemmI8Variant* rows = gpu::gemm_i8_variants(&count);
  for (int batch : {8, 64})
    for (const Gemm& g : kGemms)
      for (int v = 0; v < count; ++v) {
        if (!timed[v] || rows[v].split_k > 1) continue;
        std::printf("split batch %2d %-4s %-26s", batch, g.name, rows[v].name);
        for (GemmI8Epilogue e : {g.i8_epilogue, GemmI8Epilogue::kI8Bias, GemmI8Epilogue::kF16Bias}) {
          gpu::GemmI8Args a;
          a.m = 197 * batch, a.n = g.n, a.k = g.k, a.x = b.xq, a.w = b.wq, a.sx = b.sx, a.sw = b.sw, a.bias = b.bias;
          a.epilogue = e, a.y = b.y, a.out_scale = 0.05f, a.variant = v;
          CHECK(gpu::gemm_i8(a, nullptr));
          std::printf("  %s %7.1f", gemm_i8_epilogue_name(e), median_ms([&] { gpu::gemm_i8(a, nullptr); }) * 1e3);
        }
        std::printf("\n");
      }
}

// The fastest gemm_i8 row for args a (its variant set in *best); its median time.
float best_row(gpu::GemmI8Args a, int* best) {
  int count = 0;
  gpu::gemm_i8_variants(&count);
  float best_ms = INFINITY;
  for (int v = 0; v < count; ++v) {
    a.variant = v;
    a.workspace = workspace(gpu::gemm_i8_workspace_bytes(a));
    const cudaError_t e = gpu::gemm_i8(a, nullptr);
    if (e == cudaErrorInvalidValue) continue;  // a split row past its tile limit
    CHECK(e);
    const float ms = median_ms([&] { gpu::gemm_i8(a, nullptr); });
    if (ms < best_ms) best_ms = ms, *best = v;
  }
  return best_ms;
}

// --imma: cuBLASLt IMMA (matmul alone, matmul + epilogue) against the fastest row and cuBLASLt fp16.
void bench_imma(cublasLtHandle_t lt, const Buffers& b) {
  int32_t* acc = nullptr;
  CHECK(cudaMalloc(&acc, size_t{197} * 64 * 3072 * 4));
  int count = 0;
  const gpu::GemmI8Variant* rows = gpu::gemm_i8_variants(&count);
  std::printf("%-5s %-5s %6s | %-24s %8s | %8s %8s %8s %-34s | %8s | %6s %6s\n", "batch", "gemm", "M", "best row", "us",
              "imma mm", "+epi us", "TOP/s", "imma algorithm", "fp16 us", "row/im", "f16/im");
  for (int batch : {1, 8, 64}) {
    const int64_t m = 197 * batch;
    double row_all = 0, imma_all = 0, f16_all = 0, ops_all = 0;
    for (const Gemm& g : kGemms) {
      gpu::GemmI8Args a;
      a.m = m, a.n = g.n, a.k = g.k, a.x = b.xq, a.w = b.wq, a.sx = b.sx, a.sx_per_token = true, a.sw = b.sw;
      a.bias = b.bias, a.epilogue = g.i8_epilogue, a.y = b.y, a.out_scale = 0.05f;
      int row = 0;
      const float row_ms = best_row(a, &row);
      gpu::LtI8Gemm d, du8;
      std::vector<cublasLtMatmulAlgo_t> algos, u8;
      if (gpu::lt_i8_create(m, g.n, g.k, false, &d) != CUBLAS_STATUS_SUCCESS ||
          gpu::lt_i8_heuristic(lt, d, 8, b.ws_bytes, &algos) != CUBLAS_STATUS_SUCCESS)
        algos.clear();
      if (gpu::lt_i8_create(m, g.n, g.k, true, &du8) != CUBLAS_STATUS_SUCCESS ||
          gpu::lt_i8_heuristic(lt, du8, 8, b.ws_bytes, &u8) != CUBLAS_STATUS_SUCCESS)
        u8.clear();
      float mm_ms = INFINITY, full_ms = INFINITY;
      std::string desc = "none offered";
      for (const cublasLtMatmulAlgo_t& algo : algos) {
        auto matmul = [&] { return gpu::lt_i8_matmul(lt, d, algo, b.wq, b.xq, acc, b.ws, b.ws_bytes, nullptr); };
        if (matmul() != CUBLAS_STATUS_SUCCESS) continue;
        const float mm = median_ms([&] { matmul(); });
        const float full = median_ms([&] {
          matmul();
          gpu::gemm_i8_epilogue(a, acc, nullptr);
        });
        if (full < full_ms) full_ms = full, mm_ms = mm, desc = gpu::lt_describe_algo(algo);
      }
      CHECK(cudaGetLastError());
      const float f16_ms = time_lt(lt, m, g, b.wh, b.xh, b.bh, b.y, b.ws, b.ws_bytes);
      const double ops = 2.0 * m * g.n * g.k;
      ops_all += ops, row_all += row_ms, imma_all += full_ms, f16_all += f16_ms;
      std::printf("%-5d %-5s %6lld | %-24s %8.1f | %8.1f %8.1f %8.0f %-34s | %8.1f | %6.2f %6.2f  u8 x s8: %zu "
                  "offered\n",
                  batch, g.name, static_cast<long long>(m), rows[row].name, row_ms * 1e3, mm_ms * 1e3, full_ms * 1e3,
                  ops / (full_ms * 1e-3) / 1e12, desc.c_str(), f16_ms * 1e3, row_ms / full_ms, f16_ms / full_ms,
                  u8.size());
      gpu::lt_i8_destroy(&d);
      gpu::lt_i8_destroy(&du8);
    }
    std::printf("%-5d all four: rows %.1f us, imma + epilogue %.1f us (%.0f TOP/s), cuBLASLt fp16 %.1f us\n", batch,
                row_all * 1e3, imma_all * 1e3, ops_all / (imma_all * 1e-3) / 1e12, f16_all * 1e3);
  }
  CHECK(cudaFree(acc));
}

struct Options {
  int sms = 0;  // > 0: confine the GEMMs to this many multiprocessors
  int profile_row = -1, profile_batch = 0;
  std::string mode;  // "--split", "--imma" or empty
  std::string profile_gemm, profile_epilogue, row_list;
};

bool parse_options(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--sms" && i + 1 < argc) {
      o->sms = std::atoi(argv[++i]);
    } else if (arg == "--profile" && i + 3 < argc) {
      o->profile_row = std::atoi(argv[++i]);
      o->profile_gemm = argv[++i];
      o->profile_batch = std::atoi(argv[++i]);
      if (i + 1 < argc && argv[i + 1][0] != '-') o->profile_epilogue = argv[++i];
    } else if (arg == "--rows" && i + 1 < argc) {
      o->row_list = argv[++i];
    } else if (arg == "--split" || arg == "--imma") {
      o->mode = arg;
    } else {
      std::fprintf(stderr,
                   "usage: bench_gemm_i8 [--sms N | --profile ROW qkv|proj|fc1|fc2 BATCH [EPILOGUE] | --split | "
                   "--imma] [--rows LIST]\n");
      return false;
    }
  }
  return true;
}

// Inputs for the largest shape (batch 64, N and K up to 3072), random int8 codes and their fp16 values; owned
// for the process's life.
Buffers make_buffers() {
  const int64_t max_m = 197 * 64, max_n = 3072, max_k = 3072;
  std::vector<int8_t> hq(std::max(max_m, max_n) * max_k);
  std::mt19937 rng(3);
  for (auto& v : hq) v = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
  std::vector<__half> hh(hq.size());
  for (size_t i = 0; i < hh.size(); ++i) hh[i] = __float2half(hq[i] / 127.f);
  std::vector<float> hs(max_m, 0.01f);
  int8_t *xq, *wq;
  __half *xh, *wh, *bh, *y;
  float *sx, *sw, *bias;
  void* ws;
  const size_t ws_bytes = 4 << 20;
  CHECK(cudaMalloc(&xq, max_m * max_k));
  CHECK(cudaMalloc(&wq, max_n * max_k));
  CHECK(cudaMalloc(&xh, max_m * max_k * 2));
  CHECK(cudaMalloc(&wh, max_n * max_k * 2));
  CHECK(cudaMalloc(&bh, max_n * 2));
  CHECK(cudaMalloc(&y, max_m * max_n * 2));
  CHECK(cudaMalloc(&sx, max_m * 4));
  CHECK(cudaMalloc(&sw, max_n * 4));
  CHECK(cudaMalloc(&bias, max_n * 4));
  CHECK(cudaMalloc(&ws, ws_bytes));
  CHECK(cudaMemcpy(xq, hq.data(), max_m * max_k, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(wq, hq.data(), max_n * max_k, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(xh, hh.data(), max_m * max_k * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(wh, hh.data(), max_n * max_k * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemset(bh, 0, max_n * 2));
  CHECK(cudaMemset(y, 0, max_m * max_n * 2));
  CHECK(cudaMemcpy(sx, hs.data(), max_m * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(sw, hs.data(), max_n * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMemset(bias, 0, max_n * 4));
  return Buffers{xq, wq, xh, wh, bh, y, sx, sw, bias, ws, ws_bytes};
}

// --rows LIST: which rows are timed (all without the option).
std::vector<bool> timed_rows(const std::string& row_list, int count) {
  std::vector<bool> timed(count, row_list.empty());
  for (size_t pos = 0; !row_list.empty() && pos != std::string::npos;) {
    const size_t comma = row_list.find(',', pos);
    const int v = std::atoi(row_list.substr(pos, comma == std::string::npos ? comma : comma - pos).c_str());
    if (v >= 0 && v < count) timed[v] = true;
    pos = comma == std::string::npos ? comma : comma + 1;
  }
  return timed;
}

// The arguments of one GEMM of the table (the block's epilogue, per-token activation scales).
gpu::GemmI8Args table_args(const Buffers& b, const Gemm& g, int64_t m, int variant, GemmI8Epilogue epilogue) {
  gpu::GemmI8Args a;
  a.m = m, a.n = g.n, a.k = g.k, a.x = b.xq, a.w = b.wq, a.sx = b.sx, a.sx_per_token = true, a.sw = b.sw;
  a.bias = b.bias, a.epilogue = epilogue, a.y = b.y, a.out_scale = 0.05f, a.variant = variant;
  a.workspace = workspace(gpu::gemm_i8_workspace_bytes(a));
  return a;
}

// --profile: three launches of one row at one shape (for ncu), nothing timed.
void run_profile(const Buffers& b, const Options& o) {
  int count = 0;
  const gpu::GemmI8Variant* rows = gpu::gemm_i8_variants(&count);
  auto epilogue_named = [](const std::string& name, GemmI8Epilogue fallback) {
    for (int e = 0; e < kGemmI8EpilogueCount; ++e)
      if (name == gemm_i8_epilogue_name(static_cast<GemmI8Epilogue>(e))) return static_cast<GemmI8Epilogue>(e);
    return fallback;
  };
  for (const Gemm& g : kGemms) {
    if (o.profile_gemm != g.name || o.profile_row >= count) continue;
    const gpu::GemmI8Args a = table_args(b, g, 197 * o.profile_batch, o.profile_row,
                                         epilogue_named(o.profile_epilogue, g.i8_epilogue));
    for (int i = 0; i < 3; ++i) CHECK(gpu::gemm_i8(a, nullptr));
    CHECK(cudaDeviceSynchronize());
    std::printf("profiled %s at %s batch %d, epilogue %s\n", rows[o.profile_row].name, g.name, o.profile_batch,
                gemm_i8_epilogue_name(a.epilogue));
  }
}

// --sms: every kernel loaded and the workspace sized before the other multiprocessors are parked (nothing may
// wait on the parked blocks).
Parking prepare_and_park(const Buffers& b, int sms, int count) {
  g_runs = 20;
  for (int batch : {1, 8, 64})
    for (const Gemm& g : kGemms)
      for (int v = 0; v < count; ++v) {
        gpu::GemmI8Args a = table_args(b, g, 197 * batch, v, g.i8_epilogue);
        a.sx_per_token = false;
        const cudaError_t e = gpu::gemm_i8(a, nullptr);
        if (e != cudaErrorInvalidValue) CHECK(e);  // a split row past its tile limit is refused
      }
  CHECK(cudaDeviceSynchronize());
  return park_all_but(sms);
}

// One line of the table: every timed row at one GEMM and batch, the best of them and cuBLASLt fp16 (none with
// --sms). Adds the best row's and cuBLASLt's times to *i8_all and *lt_all.
void table_line(cublasLtHandle_t lt, const Buffers& b, const Gemm& g, int batch, int sms,
                const std::vector<bool>& timed, double* i8_all, double* lt_all) {
  int count = 0;
  const gpu::GemmI8Variant* rows = gpu::gemm_i8_variants(&count);
  const int64_t m = 197 * batch;
  const double ops = 2.0 * m * g.n * g.k;
  std::vector<float> t(count, INFINITY);
  int best = 0;
  for (int v = 0; v < count; ++v) {
    if (!timed[v]) continue;
    const gpu::GemmI8Args a = table_args(b, g, m, v, g.i8_epilogue);
    const cudaError_t e = gpu::gemm_i8(a, nullptr);
    if (e == cudaErrorInvalidValue) continue;  // a split row past its tile limit: not timed
    CHECK(e);
    t[v] = median_ms([&] { gpu::gemm_i8(a, nullptr); });
    if (t[v] < t[best]) best = v;
  }
  CHECK(cudaGetLastError());
  // cuBLASLt's Hopper kernels use thread-block clusters, which need free neighbours: not with --sms.
  const float lt_ms = sms > 0 ? -1.f : time_lt(lt, m, g, b.wh, b.xh, b.bh, b.y, b.ws, b.ws_bytes);
  *i8_all += t[best];
  *lt_all += lt_ms;
  std::printf("%-5d %-5s %6lld %5lld %5lld | %-24s %8.1f %8.0f |", batch, g.name, static_cast<long long>(m),
              static_cast<long long>(g.n), static_cast<long long>(g.k), rows[best].name, t[best] * 1e3,
              ops / (t[best] * 1e-3) / 1e12);
  if (lt_ms > 0.f) {
    std::printf(" %8.1f %8.0f | %6.2f |", lt_ms * 1e3, ops / (lt_ms * 1e-3) / 1e12, lt_ms / t[best]);
  } else {
    std::printf(" %8s %8s | %6s |", "n/a", "n/a", "n/a");
  }
  for (int v = 0; v < count; ++v) {
    if (std::isinf(t[v])) {
      std::printf(" -");
    } else {
      std::printf(" %.0f", ops / (t[v] * 1e-3) / 1e12);
    }
  }
  std::printf("\n");
  std::fflush(stdout);
}

// The table: each GEMM at batch 1, 8 and 64, every timed row, then the four GEMMs' sums.
void run_table(cublasLtHandle_t lt, const Buffers& b, int sms, const std::vector<bool>& timed) {
  int count = 0;
  const gpu::GemmI8Variant* rows = gpu::gemm_i8_variants(&count);
  for (int v = 0; v < count; ++v)
    std::printf("row %2d %-26s %2d warps, %6d B shared memory\n", v, rows[v].name, rows[v].warps, rows[v].smem_bytes);
  Parking parking;
  if (sms > 0) parking = prepare_and_park(b, sms, count);
  std::printf("%-5s %-5s %6s %5s %5s | %-24s %8s %8s | %8s %8s | %6s |", "batch", "gemm", "M", "N", "K",
              "best int8 variant", "us", "TOP/s", "lt us", "TFLOP/s", "ratio");
  for (int v = 0; v < count; ++v) std::printf(" r%d", v);
  std::printf("  (TOP/s)\n");
  for (int batch : {1, 8, 64}) {
    double ops_all = 0, i8_all = 0, lt_all = 0;
    for (const Gemm& g : kGemms) {
      ops_all += 2.0 * 197 * batch * g.n * g.k;
      table_line(lt, b, g, batch, sms, timed, &i8_all, &lt_all);
    }
    std::printf("%-5d %-5s four GEMMs: int8 %.1f us (%.0f TOP/s)", batch, "all", i8_all * 1e3,
                ops_all / (i8_all * 1e-3) / 1e12);
    if (sms == 0) {
      std::printf(", cuBLASLt fp16 %.1f us (%.0f TFLOP/s), ratio %.2fx", lt_all * 1e3, ops_all / (lt_all * 1e-3) / 1e12,
                  lt_all / i8_all);
    }
    std::printf("\n");
  }
  if (sms > 0) release(&parking);
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  Options o;
  if (!parse_options(argc, argv, &o)) return 2;
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  if (o.sms == 0 && o.profile_row < 0) {
    double i8_ceil = 0, f16_ceil = 0;
    ceilings(&i8_ceil, &f16_ceil);
    std::printf("ceilings: mma.sync m16n8k32 s8 %.0f TOP/s, m16n8k16 f16 %.0f TFLOP/s (%.2fx)\n", i8_ceil, f16_ceil,
                i8_ceil / f16_ceil);
  }
  const Buffers buffers = make_buffers();
  cublasLtHandle_t lt;
  if (cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS) return 2;
  int count = 0;
  gpu::gemm_i8_variants(&count);
  const std::vector<bool> timed = timed_rows(o.row_list, count);
  if (o.mode == "--split") {
    bench_split(buffers, timed);
  } else if (o.mode == "--imma") {
    bench_imma(lt, buffers);
  } else if (o.profile_row >= 0) {
    run_profile(buffers, o);
  } else {
    run_table(lt, buffers, o.sms, timed);
  }
  cublasLtDestroy(lt);
  return 0;
}
