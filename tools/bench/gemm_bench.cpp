// gemm_bench: the ViT GEMM shapes (batch 1: M = 197 tokens, head M = 1) through each candidate GEMM
// provider, at 1 and 2 threads. Chooses the CPU backend's GEMM library (docs/kernels-cpu-gemm.md).
//   Linear/...    edgevit's linear_f32 (OpenBLAS sgemm per OpenMP tile; what the backend ran before)
//   DnnlSgemm/... oneDNN's dnnl_sgemm (no pre-packing; oneDNN's own OpenMP threading)
//   DnnlMatmul/.. oneDNN matmul primitive, weights reordered once into the primitive's layout
//   Blis/...      BLIS 0.9 bli_sgemm with its own threading (only with -DGEMM_BENCH_BLIS)
//   Packed/...    edgevit's PackedLinear: libxsmm JIT kernels over weights packed once (what runs now)
// Args: model (0 ViT-Ti, 1 ViT-B), op (0 qkv, 1 proj, 2 fc1, 3 fc2, 4 head), threads.
// Built by hand, not by CMake (it links oneDNN and BLIS, which edgevit does not use):
//   tools/bench/make_gemm_bundle.sh  (builds it and edgevit into .bundle-gemm/ with their libraries)
#include <benchmark/benchmark.h>
#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>
#include <random>
#include <vector>

#include "kernels/cpu/kernels.h"

#ifdef GEMM_BENCH_BLIS
#include <blis.h>
#endif

namespace {

struct Shape {
  int m, n, k;
};

Shape shape_of(int model, int op) {
  const int e = model == 0 ? 192 : 768;
  switch (op) {
    case 0: return {197, 3 * e, e};
    case 1: return {197, e, e};
    case 2: return {197, 4 * e, e};
    case 3: return {197, e, 4 * e};
    default: return {1, 1000, e};
  }
}

std::vector<float> rnd(size_t n, unsigned seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

void set_counters(benchmark::State& st, const Shape& s) {
  st.counters["GFLOP/s"] = benchmark::Counter(2.0 * s.m * s.n * s.k, benchmark::Counter::kIsIterationInvariantRate,
                                              benchmark::Counter::kIs1000);
}

void BM_Linear(benchmark::State& st) {
  const Shape s = shape_of(static_cast<int>(st.range(0)), static_cast<int>(st.range(1)));
  edgevit::cpu_init_threads(static_cast<int>(st.range(2)));
  auto x = rnd(size_t(s.m) * s.k, 1), w = rnd(size_t(s.n) * s.k, 2), b = rnd(s.n, 3);
  std::vector<float> y(size_t(s.m) * s.n);
  for (auto _ : st) {
    edgevit::linear_f32(x.data(), w.data(), b.data(), y.data(), s.m, s.n, s.k, edgevit::Epilogue::kNone);
    benchmark::DoNotOptimize(y.data());
  }
  set_counters(st, s);
}

void BM_Packed(benchmark::State& st) {
  const Shape s = shape_of(static_cast<int>(st.range(0)), static_cast<int>(st.range(1)));
  edgevit::cpu_init_threads(static_cast<int>(st.range(2)));
  auto x = rnd(size_t(s.m) * s.k, 1), w = rnd(size_t(s.n) * s.k, 2), b = rnd(s.n, 3);
  std::vector<float> y(size_t(s.m) * s.n);
  edgevit::PackedLinear lin;
  const std::string why = lin.init(w.data(), s.m, s.n, s.k, edgevit::Epilogue::kNone,
                                     {0, edgevit::PackedLinear::kTileRows, static_cast<int>(st.range(3))});
  if (!why.empty()) {
    st.SkipWithError(why.c_str());
    return;
  }
  for (auto _ : st) {
    lin.run(x.data(), b.data(), y.data(), s.m);
    benchmark::DoNotOptimize(y.data());
  }
  set_counters(st, s);
}

void BM_DnnlSgemm(benchmark::State& st) {
  const Shape s = shape_of(static_cast<int>(st.range(0)), static_cast<int>(st.range(1)));
  edgevit::cpu_init_threads(static_cast<int>(st.range(2)));
  auto x = rnd(size_t(s.m) * s.k, 1), w = rnd(size_t(s.n) * s.k, 2);
  std::vector<float> y(size_t(s.m) * s.n);
  for (auto _ : st) {
    dnnl_sgemm('N', 'T', s.m, s.n, s.k, 1.f, x.data(), s.k, w.data(), s.k, 0.f, y.data(), s.n);
    benchmark::DoNotOptimize(y.data());
  }
  set_counters(st, s);
}

void BM_DnnlMatmul(benchmark::State& st) {
  using namespace dnnl;
  const Shape s = shape_of(static_cast<int>(st.range(0)), static_cast<int>(st.range(1)));
  edgevit::cpu_init_threads(static_cast<int>(st.range(2)));
  auto x = rnd(size_t(s.m) * s.k, 1), w = rnd(size_t(s.n) * s.k, 2), b = rnd(s.n, 3);
  std::vector<float> y(size_t(s.m) * s.n);
  engine eng(engine::kind::cpu, 0);
  stream strm(eng);
  const memory::dims sd{s.m, s.k}, wd{s.k, s.n}, bd{1, s.n}, dd{s.m, s.n};
  memory::desc src_md(sd, memory::data_type::f32, memory::format_tag::ab);
  memory::desc w_any(wd, memory::data_type::f32, memory::format_tag::any);
  memory::desc w_plain(wd, memory::data_type::f32, memory::format_tag::ba);  // torch (N, K) = (K, N) "ba"
  memory::desc b_md(bd, memory::data_type::f32, memory::format_tag::ab);
  memory::desc dst_md(dd, memory::data_type::f32, memory::format_tag::ab);
  primitive_attr attr;
  attr.set_scratchpad_mode(scratchpad_mode::user);
  matmul::primitive_desc pd(matmul::desc(src_md, w_any, b_md, dst_md), attr, eng);
  memory w_packed(pd.weights_desc(), eng);
  memory w_src(w_plain, eng, w.data());
  reorder(w_src, w_packed).execute(strm, w_src, w_packed);
  memory scratch(pd.scratchpad_desc(), eng);
  memory src(src_md, eng, x.data()), bias(b_md, eng, b.data()), dst(dst_md, eng, y.data());
  matmul prim(pd);
  for (auto _ : st) {
    prim.execute(strm, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, w_packed}, {DNNL_ARG_BIAS, bias},
                        {DNNL_ARG_DST, dst}, {DNNL_ARG_SCRATCHPAD, scratch}});
    strm.wait();
    benchmark::DoNotOptimize(y.data());
  }
  st.SetLabel(std::string(pd.impl_info_str()) + " packed " + std::to_string(pd.weights_desc().get_size()) +
              " scratch " + std::to_string(pd.scratchpad_desc().get_size()));
  set_counters(st, s);
}

#ifdef GEMM_BENCH_BLIS
void BM_Blis(benchmark::State& st) {
  const Shape s = shape_of(static_cast<int>(st.range(0)), static_cast<int>(st.range(1)));
  const int threads = static_cast<int>(st.range(2));
  bli_thread_set_num_threads(threads);
  auto x = rnd(size_t(s.m) * s.k, 1), w = rnd(size_t(s.n) * s.k, 2);
  std::vector<float> y(size_t(s.m) * s.n);
  float one = 1.f, zero = 0.f;
  for (auto _ : st) {
    bli_sgemm(BLIS_NO_TRANSPOSE, BLIS_TRANSPOSE, s.m, s.n, s.k, &one, x.data(), s.k, 1, w.data(), s.k, 1, &zero,
              y.data(), s.n, 1);
    benchmark::DoNotOptimize(y.data());
  }
  set_counters(st, s);
}
#endif

void args(benchmark::internal::Benchmark* b) {
  for (int model = 0; model < 2; ++model)
    for (int op = 0; op < 5; ++op)
      for (int t : {1, 2, 16}) b->Args({model, op, t});
  b->ArgNames({"model", "op", "threads"})->Unit(benchmark::kMicrosecond)->UseRealTime();
}

BENCHMARK(BM_Linear)->Apply(args);
// Fourth argument: K chunk (PackedLinear::kKChunk is the default; 4096 = no chunking).
BENCHMARK(BM_Packed)->Apply([](benchmark::internal::Benchmark* b) {
  for (int model = 0; model < 2; ++model)
    for (int op = 0; op < 5; ++op)
      for (int t : {1, 2, 16})
        for (int kc : {128, 256, 512, 4096}) b->Args({model, op, t, kc});
  b->ArgNames({"model", "op", "threads", "kchunk"})->Unit(benchmark::kMicrosecond)->UseRealTime();
});
BENCHMARK(BM_DnnlSgemm)->Apply(args);
BENCHMARK(BM_DnnlMatmul)->Apply(args);
#ifdef GEMM_BENCH_BLIS
BENCHMARK(BM_Blis)->Apply(args);
#endif

}  // namespace

BENCHMARK_MAIN();
