// bench_mha_i8: the INT8 fused attention rows (kernels/cuda/mha_i8.h) against our fp16 fused kernel
// (kernels/cuda/mha.h) in the same process, on the lent GPU. Built and run by tools/gpu/bench_mha_i8_bundle.sh
// and tools/gpu/bench_mha_i8_run.sh; results in docs/benchmarks.md ("INT8 fused attention").
//
// Per shape (B, H, S, D; Sq = Skv = S unless given): Q, K, V, O as (B, H, S, D) (fp16 for the fp16 kernel;
// int8 Q and K with fp32 scales and fp16 V for the INT8 rows). As tools/gpu/bench_mha.py times: a CUDA graph
// of --calls launches over rotating input sets (>= 256 MB of inputs and outputs, so that inputs come from
// DRAM, not L2), warm-up first, CUDA events around each replay, the median of --reps replays per call.
// Timed: the fp16 table's row (choose_mha for this launch), every fp16 row of the head dim (the fastest is
// what the engine's start-up tuning would pin), and every INT8 row of the head dim with two scale layouts:
// per-token Q with one K scale per (batch, head) ("tq"), and per (token, head) Q and K scales ("th", per-key).
// Each INT8 output is compared with the fp16 kernel's on the same (dequantised) data: a broken row shows as a
// large difference. Ratios are fp16 time / INT8 time (> 1: INT8 faster).
//   usage: bench_mha_i8 [--calls N] [--reps N] [--shapes B,H,Sq,Skv,D;...]
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "kernels/cuda/mha.h"
#include "kernels/cuda/mha_i8.h"
#include "kernels/mha_variants.h"

namespace {

using edgevit::AttnI8Scales;
using edgevit::AttnParams;
using edgevit::AttnStrides;

#define CHECK(expr)                                                                              \
  do {                                                                                           \
    const cudaError_t e_ = (expr);                                                               \
    if (e_ != cudaSuccess) {                                                                     \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(e_)); \
      std::exit(1);                                                                              \
    }                                                                                            \
  } while (0)

struct Shape {
  int b, h, sq, skv, d;
};

__device__ uint32_t hash32(uint32_t x) {
  x ^= x >> 16; x *= 0x7feb352du; x ^= x >> 15; x *= 0x846ca68bu; x ^= x >> 16;
  return x;
}
// Uniform int8 in [-127, 127] and the fp16 value it stands for (value * 2 / 127, so |x| <= 2).
__global__ void fill(int8_t* i8, __half* f16, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const int v = static_cast<int>(hash32(static_cast<uint32_t>(i) * 2654435761u + seed) % 255) - 127;
    if (i8 != nullptr) i8[i] = static_cast<int8_t>(v);
    if (f16 != nullptr) f16[i] = __float2half(v * (2.f / 127.f));
  }
}
__global__ void fill_value(float* x, size_t n, float value) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) x[i] = value;
}

// One rotating input set of a shape: fp16 Q/K/V/O and int8 Q/K (the same values: int8 * 2/127).
struct Set {
  __half *q, *k, *v, *o;
  int8_t *q8, *k8;
};

AttnParams bhsd(const Shape& s) {
  AttnParams p;
  p.batch = s.b; p.heads = s.h; p.seq_q = s.sq; p.seq_kv = s.skv; p.head_dim = s.d;
  p.scale = 1.f / std::sqrt(static_cast<float>(s.d));
  p.q = p.o = AttnStrides{static_cast<int64_t>(s.h) * s.sq * s.d, s.d, static_cast<int64_t>(s.sq) * s.d};
  p.k = p.v = AttnStrides{static_cast<int64_t>(s.h) * s.skv * s.d, s.d, static_cast<int64_t>(s.skv) * s.d};
  return p;
}

// Median microseconds per call of fn(set) over CUDA-graph replays of `calls` calls.
float time_graph(const std::function<void(const Set&, cudaStream_t)>& fn, const std::vector<Set>& sets, int calls,
                 int reps, cudaStream_t stream) {
  for (const Set& s : sets) fn(s, stream);
  CHECK(cudaStreamSynchronize(stream));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  for (int c = 0; c < calls; ++c) fn(sets[c % sets.size()], stream);
  CHECK(cudaStreamEndCapture(stream, &graph));
  CHECK(cudaGraphInstantiate(&exec, graph, nullptr, nullptr, 0));
  CHECK(cudaGraphLaunch(exec, stream));
  CHECK(cudaStreamSynchronize(stream));
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  std::vector<float> t;
  for (int r = 0; r < reps; ++r) {
    CHECK(cudaEventRecord(a, stream));
    CHECK(cudaGraphLaunch(exec, stream));
    CHECK(cudaEventRecord(b, stream));
    CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms * 1e3f / calls);
  }
  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(b));
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

std::vector<float> download(const __half* o, size_t n) {
  std::vector<__half> h(n);
  CHECK(cudaMemcpy(h.data(), o, n * 2, cudaMemcpyDeviceToHost));
  std::vector<float> f(n);
  for (size_t i = 0; i < n; ++i) f[i] = __half2float(h[i]);
  return f;
}
double rel_diff(const std::vector<float>& a, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    num += (a[i] - ref[i]) * static_cast<double>(a[i] - ref[i]);
    den += static_cast<double>(ref[i]) * ref[i];
  }
  return den > 0 ? std::sqrt(num / den) : 0;
}

void bench_shape(const Shape& s, int calls, int reps, int sm, int optin, int sms, cudaStream_t stream) {
  const AttnParams p = bhsd(s);
  const size_t nq = static_cast<size_t>(s.b) * s.h * s.sq * s.d, nkv = static_cast<size_t>(s.b) * s.h * s.skv * s.d;
  const size_t set_bytes = (2 * nq + 2 * nkv) * 2 + nq + nkv;
  const int n_sets = static_cast<int>(std::max<size_t>(1, std::min<size_t>(16, (size_t{256} << 20) / set_bytes + 1)));
  std::vector<Set> sets(n_sets);
  for (int i = 0; i < n_sets; ++i) {
    Set& st = sets[i];
    CHECK(cudaMalloc(&st.q, nq * 2)); CHECK(cudaMalloc(&st.o, nq * 2)); CHECK(cudaMalloc(&st.q8, nq));
    CHECK(cudaMalloc(&st.k, nkv * 2)); CHECK(cudaMalloc(&st.v, nkv * 2)); CHECK(cudaMalloc(&st.k8, nkv));
    fill<<<1024, 256>>>(st.q8, st.q, nq, 3u * i + 1);
    fill<<<1024, 256>>>(st.k8, st.k, nkv, 3u * i + 2);
    fill<<<1024, 256>>>(nullptr, st.v, nkv, 3u * i + 3);
  }
  // Scales: the data is int8 * 2/127 everywhere, so every scale is 2/127 (per-token arrays hold it per row).
  const size_t n_scale_q = static_cast<size_t>(s.b) * s.sq * s.h, n_scale_k = static_cast<size_t>(s.b) * s.skv * s.h;
  float *sq, *sk;
  CHECK(cudaMalloc(&sq, n_scale_q * 4));
  CHECK(cudaMalloc(&sk, n_scale_k * 4));
  fill_value<<<256, 256>>>(sq, n_scale_q, 2.f / 127.f);
  fill_value<<<256, 256>>>(sk, n_scale_k, 2.f / 127.f);
  CHECK(cudaDeviceSynchronize());
  AttnI8Scales tq, th;  // (B, S, H) scale arrays
  tq.q = th.q = sq;
  tq.qs = th.qs = AttnStrides{static_cast<int64_t>(s.sq) * s.h, s.h, 1};
  tq.k = th.k = sk;
  tq.ks = AttnStrides{static_cast<int64_t>(s.skv) * s.h, 0, 1};  // one K scale per (batch, head)
  th.ks = AttnStrides{static_cast<int64_t>(s.skv) * s.h, s.h, 1};

  const edgevit::MhaGrid grid{s.b, s.h, s.sq, sms};
  const edgevit::MhaChoice table = edgevit::choose_mha(sm, optin, s.d, true, false, &grid);
  const double flops = 4.0 * s.b * s.h * s.sq * static_cast<double>(s.skv) * s.d;
  std::printf("\n(B,H,Sq,Skv,D)=(%d,%d,%d,%d,%d)  %.2f GFLOP  %d input sets  fp16 table: %s\n", s.b, s.h, s.sq, s.skv,
              s.d, flops / 1e9, n_sets, table.fused ? table.variant->name : "none");
  float f16_table = 0, f16_best = 1e30f;
  std::string best_name;
  std::vector<float> f16_out;
  for (size_t i = 0; i < edgevit::kNumMhaVariants; ++i) {
    if (edgevit::kMhaVariants[i].head_dim != s.d) continue;
    const int row = static_cast<int>(i);
    const auto fn = [&](const Set& st, cudaStream_t str) {
      CHECK(edgevit::mha_fused_f16(p, st.q, st.k, st.v, st.o, row, str));
    };
    const float us = time_graph(fn, sets, calls, reps, stream);
    if (table.fused && table.variant == &edgevit::kMhaVariants[i]) {
      f16_table = us;
      fn(sets[0], stream);
      CHECK(cudaStreamSynchronize(stream));
      f16_out = download(sets[0].o, nq);
    }
    if (us < f16_best) { f16_best = us; best_name = edgevit::kMhaVariants[i].name; }
    std::printf("  fp16 %-40s %8.2f us  %6.1f TFLOP/s\n", edgevit::kMhaVariants[i].name, us, flops / us / 1e6);
  }
  if (f16_table <= 0) {
    std::printf("  no fp16 table row for this shape\n");
    return;
  }
  float best_i8 = 1e30f;
  std::string best_i8_name;
  for (size_t i = 0; i < edgevit::kNumMhaI8Variants; ++i) {
    const edgevit::MhaI8Variant& v = edgevit::kMhaI8Variants[i];
    if (v.head_dim != s.d) continue;
    for (int mode = 0; mode < 2; ++mode) {
      if (mode == 1 && v.softmax == edgevit::MhaI8Softmax::kScaleMax) continue;
      const AttnI8Scales& sc = mode == 0 ? tq : th;
      const int row = static_cast<int>(i);
      const auto fn = [&](const Set& st, cudaStream_t str) {
        CHECK(edgevit::mha_i8_fused(p, st.q8, st.k8, st.v, sc, st.o, row, str));
      };
      const float us = time_graph(fn, sets, calls, reps, stream);
      fn(sets[0], stream);
      CHECK(cudaStreamSynchronize(stream));
      const double diff = rel_diff(download(sets[0].o, nq), f16_out);
      std::printf("  int8 %-40s %s %8.2f us  %6.1f TOP/s  x%.2f vs fp16 table  x%.2f vs fp16 best  diff vs fp16 %.1e\n",
                  v.name, mode == 0 ? "tq" : "th", us, flops / us / 1e6, f16_table / us, f16_best / us, diff);
      if (mode == 0 && v.softmax == edgevit::MhaI8Softmax::kRowMax && us < best_i8) {
        best_i8 = us;
        best_i8_name = v.name;
      }
    }
  }
  std::printf("  summary (%d,%d,%d,%d,%d): fp16 table %.2f us, fp16 best %.2f us (%s), int8 best row-max (tq) %.2f us "
              "(%s): x%.2f vs table, x%.2f vs best\n",
              s.b, s.h, s.sq, s.skv, s.d, f16_table, f16_best, best_name.c_str(), best_i8, best_i8_name.c_str(),
              f16_table / best_i8, f16_best / best_i8);
  for (Set& st : sets) {
    cudaFree(st.q); cudaFree(st.k); cudaFree(st.v); cudaFree(st.o); cudaFree(st.q8); cudaFree(st.k8);
  }
  cudaFree(sq);
  cudaFree(sk);
}

}  // namespace

int main(int argc, char** argv) {
  int calls = 20, reps = 15;
  std::vector<Shape> shapes = {{1, 12, 197, 197, 64},   {8, 12, 197, 197, 64},  {64, 12, 197, 197, 64},
                               {16, 6, 577, 577, 64},   {4, 16, 1025, 1025, 64}, {8, 12, 1370, 1370, 64},
                               {8, 3, 197, 197, 64},    {64, 12, 1, 197, 64},    {64, 12, 197, 197, 32},
                               {32, 12, 197, 197, 128}};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--calls" && i + 1 < argc) {
      calls = std::atoi(argv[++i]);
    } else if (a == "--reps" && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
    } else if (a == "--shapes" && i + 1 < argc) {
      shapes.clear();
      std::string list = argv[++i];
      size_t pos = 0;
      while (pos < list.size()) {
        const size_t end = std::min(list.find(';', pos), list.size());
        Shape s{};
        if (std::sscanf(list.substr(pos, end - pos).c_str(), "%d,%d,%d,%d,%d", &s.b, &s.h, &s.sq, &s.skv, &s.d) != 5 ||
            s.b < 1 || s.h < 1 || s.sq < 1 || s.skv < 1) {
          std::fprintf(stderr, "--shapes: want B,H,Sq,Skv,D groups separated by ';', got '%s'\n", list.c_str());
          return 2;
        }
        shapes.push_back(s);
        pos = end + 1;
      }
    } else {
      std::fprintf(stderr, "usage: bench_mha_i8 [--calls N] [--reps N] [--shapes B,H,Sq,Skv,D;...]\n");
      return 2;
    }
  }
  if (calls < 1 || reps < 1) {
    std::fprintf(stderr, "--calls and --reps must be >= 1\n");
    return 2;
  }
  int device = 0, major = 0, minor = 0, optin = 0, sms = 0;
  CHECK(cudaGetDevice(&device));
  CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, device));
  std::printf("device: %s, sm_%d%d, %d SMs; %d calls per graph, median of %d replays\n", prop.name, major, minor, sms,
              calls, reps);
  for (int i = 0; i < static_cast<int>(edgevit::kNumMhaI8Variants); ++i) {
    int blocks = 0;
    CHECK(edgevit::mha_i8_resident_blocks(i, &blocks));
    std::printf("  %-40s %6lld B smem, %d blocks/SM\n", edgevit::kMhaI8Variants[i].name,
                static_cast<long long>(edgevit::kMhaI8Variants[i].smem_bytes), blocks);
  }
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (const Shape& s : shapes) bench_shape(s, calls, reps, major * 10 + minor, optin, sms, stream);
  CHECK(cudaStreamDestroy(stream));
  return 0;
}
