// Google Benchmark for the CPU kernels at ViT-Ti/16 shapes (B=1, T=197, E=192, H=3, D=64, MLP 768).
// Not run by ctest: build target `kernels_bench`, run ./kernels_bench [--benchmark_filter=Mha].
// Second argument of the Mha/GELU/LayerNorm benchmarks is the thread count.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/cpu/kernels.h"
#include "tests/testutil/testutil.h"

namespace edgevit {
namespace {

constexpr int kTokens = 197, kEmbed = 192, kHeads = 3, kHeadDim = 64, kMlp = 768;

// Args: n, k, epilogue (0 none, 1 gelu, 2 residual).
void BM_Linear(benchmark::State& st) {
  const int n = static_cast<int>(st.range(0)), k = static_cast<int>(st.range(1));
  const auto ep = static_cast<Epilogue>(st.range(2));
  cpu_init_threads(static_cast<int>(st.range(3)));
  auto x = testutil::random_floats(static_cast<size_t>(kTokens) * k, 1);
  auto w = testutil::random_floats(static_cast<size_t>(n) * k, 2);
  auto b = testutil::random_floats(n, 3);
  std::vector<float> y(static_cast<size_t>(kTokens) * n, 0.f);
  for (auto _ : st) {
    linear_f32(x.data(), w.data(), b.data(), y.data(), kTokens, n, k, ep);
    benchmark::DoNotOptimize(y.data());
  }
  st.counters["GFLOP/s"] = benchmark::Counter(2.0 * kTokens * n * k, benchmark::Counter::kIsIterationInvariantRate,
                                              benchmark::Counter::kIs1000);
}
BENCHMARK(BM_Linear)->Args({576, 192, 0, 1})->Args({768, 192, 1, 1})->Args({192, 768, 2, 1})
    ->Args({576, 192, 0, 2})->Args({768, 192, 1, 2})->Args({192, 768, 2, 2})->Unit(benchmark::kMicrosecond);

void BM_Gelu(benchmark::State& st) {
  const int threads = static_cast<int>(st.range(0));
  auto x0 = testutil::random_floats(static_cast<size_t>(kTokens) * kMlp, 4, -4.f, 4.f);
  auto x = x0;
  for (auto _ : st) {
    st.PauseTiming();
    x = x0;
    st.ResumeTiming();
    gelu_f32(x.data(), static_cast<int64_t>(x.size()), threads);
  }
}
BENCHMARK(BM_Gelu)->Arg(1)->Arg(2)->Unit(benchmark::kMicrosecond);

void BM_LayerNorm(benchmark::State& st) {
  const int threads = static_cast<int>(st.range(0));
  auto x = testutil::random_floats(static_cast<size_t>(kTokens) * kEmbed, 5);
  auto g = testutil::random_floats(kEmbed, 6), b = testutil::random_floats(kEmbed, 7);
  std::vector<float> y(x.size());
  for (auto _ : st) {
    layernorm_f32(x.data(), g.data(), b.data(), y.data(), kTokens, kEmbed, 1e-6f, threads);
    benchmark::DoNotOptimize(y.data());
  }
}
BENCHMARK(BM_LayerNorm)->Arg(1)->Arg(2)->Unit(benchmark::kMicrosecond);

void BM_Im2col(benchmark::State& st) {
  auto img = testutil::random_floats(3 * 224 * 224, 8);
  std::vector<float> cols(img.size());
  for (auto _ : st) {
    im2col_patches_f32(img.data(), cols.data(), 1, 3, 224, 224, 16);
    benchmark::DoNotOptimize(cols.data());
  }
}
BENCHMARK(BM_Im2col)->Unit(benchmark::kMicrosecond);

// Args: variant (0 fused, 1 explicit), threads, shape (0 ViT-Ti/16: 3 heads, qkv 454 KB, in L2; 1 ViT-B/16:
// 12 heads, qkv 1.8 MB, over a 1-2 MB L2, as in the model). Packed qkv as the runtime lays it out.
void BM_Mha(benchmark::State& st) {
  const bool fused = st.range(0) == 0;
  const int threads = static_cast<int>(st.range(1));
  const int heads = st.range(2) == 0 ? kHeads : 12;
  const int embed = heads * kHeadDim;
  cpu_init_threads(threads);
  const AttnParams p = attn_params_packed_qkv(1, kTokens, heads, kHeadDim, 1.f / std::sqrt(float(kHeadDim)));
  auto qkv = testutil::random_floats(static_cast<size_t>(kTokens) * 3 * embed, 9);
  std::vector<float> o(static_cast<size_t>(kTokens) * embed);
  std::vector<float> scratch(mha_explicit_scratch_floats(p, threads));
  const float* q = qkv.data();
  const float* k = q + packed_k_offset(heads, kHeadDim);
  const float* v = q + packed_v_offset(heads, kHeadDim);
  for (auto _ : st) {
    if (fused) {
      mha_fused_f32(p, q, k, v, o.data(), threads);
    } else {
      mha_explicit_f32(p, q, k, v, o.data(), scratch.data(), threads);
    }
    benchmark::DoNotOptimize(o.data());
  }
  st.counters["GFLOP/s"] = benchmark::Counter(4.0 * heads * kTokens * kTokens * kHeadDim,
                                              benchmark::Counter::kIsIterationInvariantRate,
                                              benchmark::Counter::kIs1000);
}
BENCHMARK(BM_Mha)
    ->ArgsProduct({{0, 1}, {1, 2}, {0, 1}})
    ->ArgNames({"variant", "threads", "vitb"})
    ->Unit(benchmark::kMicrosecond);

// PackedLinear's tile geometry at ViT-B/16's batch-1 GEMM shapes (197 tokens), each with the model's epilogue
// (qkv + bias, proj + bias + residual, fc1 + bias + GELU, fc2 + bias + residual). Args: op (0 qkv 2304x768,
// 1 proj 768x768, 2 fc1 3072x768, 3 fc2 768x3072), col_block (0: auto), tile_rows, k_chunk, prefetch of the next
// block (0/1), threads. Meant to be run with --benchmark_enable_random_interleaving=true
// --benchmark_repetitions=N: the "min" statistic (the least disturbed repetition) is what compares geometries on
// a noisy host (docs/kernels-cpu-gemm.md).
void BM_PackedTiling(benchmark::State& st) {
  const int shapes[4][2] = {{2304, 768}, {768, 768}, {3072, 768}, {768, 3072}};
  const Epilogue eps[4] = {Epilogue::kNone, Epilogue::kResidualAdd, Epilogue::kGelu, Epilogue::kResidualAdd};
  const int op = static_cast<int>(st.range(0));
  const int n = shapes[op][0], k = shapes[op][1];
  PackedTiling t{static_cast<int>(st.range(1)), static_cast<int>(st.range(2)), static_cast<int>(st.range(3))};
  t.prefetch_next_block = st.range(4) != 0;
  cpu_init_threads(static_cast<int>(st.range(5)));
  if (!cpu_packed_gemm_available()) {
    st.SkipWithError("no libxsmm JIT target");
    return;
  }
  auto x = testutil::random_floats(static_cast<size_t>(kTokens) * k, 11);
  auto w = testutil::random_floats(static_cast<size_t>(n) * k, 12);
  auto b = testutil::random_floats(n, 13);
  std::vector<float> y(static_cast<size_t>(kTokens) * n, 0.f);
  PackedLinear lin;
  const std::string why = lin.init(w.data(), kTokens, n, k, eps[op], t);
  if (!why.empty()) {
    st.SkipWithError(why.c_str());
    return;
  }
  for (auto _ : st) {
    lin.run(x.data(), b.data(), y.data(), kTokens);
    benchmark::DoNotOptimize(y.data());
  }
  st.counters["GFLOP/s"] = benchmark::Counter(2.0 * kTokens * n * k, benchmark::Counter::kIsIterationInvariantRate,
                                              benchmark::Counter::kIs1000);
}
void packed_tiling_args(benchmark::internal::Benchmark* b) {
  const int geometries[][4] = {{0, 32, 256, 1}, {64, 32, 256, 0}, {48, 32, 256, 0}, {64, 32, 256, 1},
                               {0, 32, 128, 1}, {0, 48, 256, 1}, {32, 32, 256, 1}};
  for (int threads : {1, 2})
    for (int op = 0; op < 4; ++op)
      for (const auto& g : geometries) b->Args({op, g[0], g[1], g[2], g[3], threads});
}
BENCHMARK(BM_PackedTiling)->Apply(packed_tiling_args)->Unit(benchmark::kMicrosecond)->ComputeStatistics(
    "min", [](const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); });

}  // namespace
}  // namespace edgevit

BENCHMARK_MAIN();
