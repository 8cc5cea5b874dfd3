// xsmm_tile_bench: where ViT-B's in-model GEMM loses against the core's FMA peak, level by level (1 thread).
// PackedLinear (kernels/cpu/gemm_packed.cpp) runs libxsmm kernels C (w x rows) += A (w x kc) B (kc x rows) in
// libxsmm's column-major terms: A = one packed weight chunk (K-major, w wide), B = rows of the activations x
// (ldb = K), C = rows of y (ldc = N). This times, on one core, in one process, interleaved, best of R runs:
//   peak    12 independent zmm FMA chains (as tools/bench/fma_peak.cpp)
//   kernel  one tile's kernel call on the same buffers over and over (everything in L1/L2): the microkernel
//   blockL2 one column block: every row tile x every K chunk, as PackedLinear walks it; the same block every
//           time, so its weights stay in L2
//   block   the same over 20 different column blocks (weights from L3)
//   gemm    the whole GEMM, every column block (weights from L3), i.e. PackedLinear's loop
//   cold    the same with each call's weights, inputs and outputs cold (the next of many copies): as in a
//           forward pass
//   ...pf   with a software prefetch of the next column block's weights into L2 spread over the calls
//   ...al2  the first row tile through libxsmm's AL2 kernels, prefetching the next block's weights
//   ...al2c and each tile prefetching the next tile's output rows for writing
//   ...pair tiles two column blocks wide, each input chunk serving both (with AL2 on the first row tile)
//   ...al2s AL2 kernels spread over the block's full row tiles, each prefetching one K chunk of the next block
//   ...ko   K-outer order: for each K chunk, every column block and row tile (the inputs' chunk stays in L2
//           across all blocks; the outputs are re-read per chunk); ...koal2 with AL2 kernels on each
//           (chunk, block)'s first row tile prefetching the next (chunk, block)
// for ViT-B's shapes and a few tile geometries, with constant and with random data (an FMA's power, so the
// clock the core holds, depends on the bits it toggles), and prints GFLOP/s and the fraction of peak.
// Built by hand (not part of the CMake build): g++ -O2 -std=c++17 -march=x86-64-v2 tools/bench/xsmm_tile_bench.cpp
//   -o xsmm_tile_bench -lxsmm -lopenblas -ldl -lpthread
// usage: xsmm_tile_bench [repeats [const|random [FILTER]]]   (default 7; const: also with constant data; FILTER:
// only the cases whose name contains it, e.g. "fc2 48")
#include <immintrin.h>
#include <libxsmm.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

namespace {

__attribute__((target("avx512f"))) float fma_chains(long iters) {
  __m512 a[12];
  const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
  for (int i = 0; i < 12; ++i) a[i] = _mm512_set1_ps(1.f + i);
  for (long it = 0; it < iters; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) a[i] = _mm512_fmadd_ps(a[i], m, c);
  }
  __m512 s = a[0];
  for (int i = 1; i < 12; ++i) s = _mm512_add_ps(s, a[i]);
  return _mm512_reduce_add_ps(s);
}

double seconds(const std::function<void()>& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct Case {
  std::string name;
  double flop = 0;  // per call of run
  std::function<void()> run;
  double best = 1e30;
};

libxsmm_smmfunction dispatch(int w, int rows, int kc, int ldb, int ldc, float beta,
                             int prefetch = LIBXSMM_PREFETCH_NONE) {
  const libxsmm_blasint lda = w, lb = ldb, lc = ldc;
  const float alpha = 1.f;
  const int flags = LIBXSMM_GEMM_FLAGS('N', 'N');
  return libxsmm_smmdispatch(w, rows, kc, &lda, &lb, &lc, &alpha, &beta, &flags, &prefetch);
}

void fill(std::vector<float>& v, size_t n, bool random, float c, unsigned seed) {
  v.resize(n);
  unsigned s = seed * 2654435761u + 1;
  for (auto& f : v) {
    s = s * 1664525u + 1013904223u;
    f = random ? (static_cast<float>(s >> 8) / 16777216.f - 0.5f) * 0.2f : c;
  }
}

// One GEMM shape (M tokens, N outputs, K inputs) with one geometry; buffers owned here. random: weights and
// inputs uniform in [-0.1, 0.1) (as real ones vary) instead of one constant each; copies > 1: that many
// copies of the weights, used in turn by gemm(), so that each call finds its weights cold (past the L3).
struct Gemm {
  int m, n, k, w, tr, kc, copies, next = 0;
  std::vector<float> wts, x, y;
  libxsmm_smmfunction first[257], acc[257];  // by tile height
  libxsmm_smmfunction first_al2, acc_al2;     // height tr, prefetching a given A (the next block's) into L2
  Gemm(int m_, int n_, int k_, int w_, int tr_, int kc_, bool random, int copies_ = 1)
      : m(m_), n(n_), k(k_), w(w_), tr(tr_), kc(kc_), copies(copies_) {
    fill(wts, static_cast<size_t>(n) * k * copies, random, 0.01f, 1);
    fill(x, static_cast<size_t>(m) * k * copies, random, 0.02f, 2);
    y.assign(static_cast<size_t>(m) * n * copies, 0.f);
    for (int h = 1; h <= tr; ++h) {
      first[h] = dispatch(w, h, kc, k, n, 0.f);
      acc[h] = dispatch(w, h, kc, k, n, 1.f);
      if (!first[h] || !acc[h]) {
        std::fprintf(stderr, "no kernel for %dx%dx%d\n", w, h, kc);
        std::exit(1);
      }
    }
    first_al2 = dispatch(w, tr, kc, k, n, 0.f, LIBXSMM_GEMM_PREFETCH_AL2);
    acc_al2 = dispatch(w, tr, kc, k, n, 1.f, LIBXSMM_GEMM_PREFETCH_AL2);
  }
  // One tile: column block cb, rows [r0, r0 + h), every K chunk (N and K multiples of w and kc here).
  // pf 1: before each kernel call, prefetch (prefetcht1, into L2) the next slice of the next column block's
  // weights, so that the block after this one starts from L2 instead of L3 / DRAM. pf 2: the first row tile's
  // calls run libxsmm's AL2 kernels, which prefetch the next block's same K chunk while they compute.
  int pf = 0;
  // pfc: each tile first prefetches (for writing) the output rows of the tile after it, which no tile before
  // has touched when the copies rotate (as a forward pass writes each activation once).
  bool pfc = false;
  void tile(int cb, int r0, int h, int& call) {
    const size_t block_floats = static_cast<size_t>(w) * k;
    const float* a = wts.data() + static_cast<size_t>(next) * n * k + cb * block_floats;
    const float* xs = x.data() + static_cast<size_t>(next) * m * k;
    float* ys = y.data() + static_cast<size_t>(next) * m * n;
    if (pfc) {  // the next tile: the next row tile of this block, or the first of the next block
      const int nr0 = r0 + tr < m ? r0 + tr : 0, ncb = r0 + tr < m ? cb : cb + 1;
      if (ncb < n / w)
        for (int i = nr0; i < std::min(m, nr0 + tr); ++i)
          for (int c = 0; c < w; c += 16) __builtin_prefetch(ys + static_cast<size_t>(i) * n + ncb * w + c, 1, 3);
    }
    const int calls = (m + tr - 1) / tr * (k / kc);
    const size_t lines = block_floats * 4 / 64, slice = (lines + calls - 1) / calls;
    for (int k0 = 0; k0 < k; k0 += kc, ++call) {
      const float* an = a + block_floats + static_cast<size_t>(k0) * w;
      if (pf == 3 && h == tr && cb + 1 < n / w) {
        // spread: the block's calls over its full row tiles, evenly; call j prefetches next-block chunk p
        // when j == p * full_calls / chunks
        const int chunks = k / kc, full_calls = (m / tr) * chunks;
        const int j = (r0 / tr) * chunks + k0 / kc;
        const int p = j * chunks / full_calls;
        if (j * chunks % full_calls == 0 && p < chunks) {
          const float* b = xs + static_cast<size_t>(r0) * k + k0;
          float* c = ys + static_cast<size_t>(r0) * n + static_cast<size_t>(cb) * w;
          const float* target = a + block_floats + static_cast<size_t>(p) * kc * w;
          (k0 == 0 ? first_al2 : acc_al2)(a + static_cast<size_t>(k0) * w, b, c, target, b, c);
          continue;
        }
      }
      if (pf == 2 && r0 == 0 && h == tr && cb + 1 < n / w) {
        const float* b = xs + static_cast<size_t>(r0) * k + k0;
        float* c = ys + static_cast<size_t>(r0) * n + static_cast<size_t>(cb) * w;
        (k0 == 0 ? first_al2 : acc_al2)(a + static_cast<size_t>(k0) * w, b, c, an, b, c);
        continue;
      }
      if (pf == 1 && cb + 1 < n / w) {
        const char* nb = reinterpret_cast<const char*>(a + block_floats);
        for (size_t l = call * slice; l < std::min(lines, (call + 1) * slice); ++l)
          _mm_prefetch(nb + l * 64, _MM_HINT_T1);
      }
      (k0 == 0 ? first[h] : acc[h])(a + static_cast<size_t>(k0) * w, xs + static_cast<size_t>(r0) * k + k0,
                                    ys + static_cast<size_t>(r0) * n + static_cast<size_t>(cb) * w);
    }
  }
  void block(int cb) {
    int call = 0;
    for (int r0 = 0; r0 < m; r0 += tr) tile(cb, r0, std::min(tr, m - r0), call);
  }
  void gemm() {
    for (int cb = 0; cb < n / w; ++cb) block(cb);
    next = (next + 1) % copies;
  }
  // K-outer: each K chunk of every tile before the next chunk. Per output the same kernels in the same K order
  // as gemm(): the same bits. al2: each (chunk, block)'s first row tile prefetches the next (chunk, block).
  void gemm_kouter(bool al2) {
    const size_t block_floats = static_cast<size_t>(w) * k;
    const float* a0 = wts.data() + static_cast<size_t>(next) * n * k;
    const float* xs = x.data() + static_cast<size_t>(next) * m * k;
    float* ys = y.data() + static_cast<size_t>(next) * m * n;
    const int blocks = n / w;
    for (int k0 = 0; k0 < k; k0 += kc)
      for (int cb = 0; cb < blocks; ++cb) {
        const float* a = a0 + cb * block_floats + static_cast<size_t>(k0) * w;
        const float* an = cb + 1 < blocks ? a + block_floats
                           : k0 + kc < k  ? a0 + static_cast<size_t>(k0 + kc) * w  // the next chunk of block 0
                                          : nullptr;
        for (int r0 = 0; r0 < m; r0 += tr) {
          const int h = std::min(tr, m - r0);
          const float* b = xs + static_cast<size_t>(r0) * k + k0;
          float* c = ys + static_cast<size_t>(r0) * n + static_cast<size_t>(cb) * w;
          if (al2 && r0 == 0 && h == tr && an != nullptr)
            (k0 == 0 ? first_al2 : acc_al2)(a, b, c, an, b, c);
          else
            (k0 == 0 ? first[h] : acc[h])(a, b, c);
        }
      }
    next = (next + 1) % copies;
  }
  // Tiles two column blocks wide: each K chunk of a row tile's inputs serves both blocks while it is in L1, so
  // the inputs are read once per pair of blocks (N / w even here). The first row tile of a pair runs the AL2
  // kernels, prefetching the next pair's chunks.
  void gemm_pairs() {
    const size_t block_floats = static_cast<size_t>(w) * k;
    const float* a0 = wts.data() + static_cast<size_t>(next) * n * k;
    const float* xs = x.data() + static_cast<size_t>(next) * m * k;
    float* ys = y.data() + static_cast<size_t>(next) * m * n;
    const int blocks = n / w;
    for (int cb = 0; cb + 1 < blocks; cb += 2)
      for (int r0 = 0; r0 < m; r0 += tr) {
        const int h = std::min(tr, m - r0);
        const bool al2 = r0 == 0 && h == tr && cb + 3 < blocks;
        for (int k0 = 0; k0 < k; k0 += kc)
          for (int j = 0; j < 2; ++j) {
            const float* a = a0 + (cb + j) * block_floats + static_cast<size_t>(k0) * w;
            const float* b = xs + static_cast<size_t>(r0) * k + k0;
            float* c = ys + static_cast<size_t>(r0) * n + static_cast<size_t>(cb + j) * w;
            if (al2)
              (k0 == 0 ? first_al2 : acc_al2)(a, b, c, a + 2 * block_floats, b, c);
            else
              (k0 == 0 ? first[h] : acc[h])(a, b, c);
          }
      }
    next = (next + 1) % copies;
  }
};

}  // namespace

int main(int argc, char** argv) {
  const int repeats = argc > 1 ? std::atoi(argv[1]) : 7;
  libxsmm_init();
  std::printf("libxsmm target: %s\n", libxsmm_get_target_arch());
  const int M = 197;
  struct Shape {
    const char* name;
    int n, k;
  } shapes[] = {{"qkv", 2304, 768}, {"proj", 768, 768}, {"fc1", 3072, 768}, {"fc2", 768, 3072}};
  struct Geo {
    int w, tr, kc;
  } geos[] = {{64, 32, 256}, {48, 32, 256}};
  std::vector<Gemm*> gemms;
  std::vector<Case> cases;
  cases.push_back({"peak (12 zmm FMA chains)", 12.0 * 16 * 2 * 2e7, [] {
                     volatile float s = fma_chains(20000000);
                     (void)s;
                   }});
  const bool with_const = argc > 2 && std::string(argv[2]) == "const";  // "random" (or anything else): not
  for (bool random : {false, true})
    for (const auto& s : shapes)
      for (const auto& g : geos) {
        if (!random && !with_const) continue;
        auto* G = new Gemm(M, s.n, s.k, g.w, g.tr, g.kc, random);  // lives to the end of main
        gemms.push_back(G);
        const std::string geo = std::to_string(g.w) + "x" + std::to_string(g.tr) + "x" + std::to_string(g.kc) +
                                (random ? " random" : " const");
        const double tile_flop = 2.0 * g.w * g.tr * g.kc;
        if (s.k == 768 && s.n == 2304) {  // the kernel alone: the same for every shape with this geometry
          cases.push_back({std::string("kernel ") + geo, tile_flop * 1000, [G] {
                             for (int i = 0; i < 1000; ++i) G->acc[G->tr](G->wts.data(), G->x.data(), G->y.data());
                           }});
        }
        cases.push_back({std::string("blockL2 ") + s.name + " " + geo, 2.0 * M * g.w * s.k * 20, [G] {
                           for (int i = 0; i < 20; ++i) G->block(0);  // the same block: weights stay in L2
                         }});
        cases.push_back({std::string("block  ") + s.name + " " + geo, 2.0 * M * g.w * s.k * 20, [G] {
                           for (int i = 0; i < 20; ++i) G->block(i % (G->n / G->w));
                         }});
        cases.push_back({std::string("gemm   ") + s.name + " " + geo, 2.0 * M * s.n * s.k * 3, [G] {
                           for (int i = 0; i < 3; ++i) G->gemm();
                         }});
        cases.push_back({std::string("gemmpf ") + s.name + " " + geo, 2.0 * M * s.n * s.k * 3, [G] {
                           G->pf = 1;
                           for (int i = 0; i < 3; ++i) G->gemm();
                           G->pf = 0;
                         }});
        cases.push_back({std::string("gemmko ") + s.name + " " + geo, 2.0 * M * s.n * s.k * 3, [G] {
                           for (int i = 0; i < 3; ++i) G->gemm_kouter(true);
                         }});
        cases.push_back({std::string("gemmal2 ") + s.name + " " + geo, 2.0 * M * s.n * s.k * 3, [G] {
                           G->pf = 2;
                           for (int i = 0; i < 3; ++i) G->gemm();
                           G->pf = 0;
                         }});
        if (g.w == 48) {  // weights, inputs and outputs cold: ~450 MB of copies, each call the next
          auto* C = new Gemm(M, s.n, s.k, g.w, g.tr, g.kc, random,
                             450 * 1024 * 1024 / ((s.n * s.k + M * (s.n + s.k)) * 4));
          gemms.push_back(C);
          cases.push_back({std::string("cold   ") + s.name + " " + geo, 2.0 * M * s.n * s.k * 3, [C] {
                             for (int i = 0; i < 3; ++i) C->gemm();
                           }});
          cases.push_back({std::string("coldal2 ") + s.name + " " + geo, 2.0 * M * s.n * s.k * 3, [C] {
                             C->pf = 2;
                             for (int i = 0; i < 3; ++i) C->gemm();
                             C->pf = 0;
                           }});
          cases.push_back({std::string("coldal2s ") + s.name + " " + geo, 2.0 * M * s.n * s.k * 3, [C] {
                             C->pf = 3;
                             for (int i = 0; i < 3; ++i) C->gemm();
                             C->pf = 0;
                           }});
          cases.push_back({std::string("coldko ") + s.name + " " + geo, 2.0 * M * s.n * s.k * 3, [C] {
                             for (int i = 0; i < 3; ++i) C->gemm_kouter(false);
                           }});
          cases.push_back({std::string("coldkoal2 ") + s.name + " " + geo, 2.0 * M * s.n * s.k * 3, [C] {
                             for (int i = 0; i < 3; ++i) C->gemm_kouter(true);
                           }});
        }
      }
  {  // the pair order computes the same FMAs in the same order per output: same bits
    Gemm g(M, 768, 3072, 48, 32, 256, true);
    g.gemm();
    const std::vector<float> plain = g.y;
    g.gemm_pairs();
    std::printf("pairs give the plain loop's bits: %s\n", plain == g.y ? "yes" : "NO");
    g.gemm_kouter(true);
    std::printf("K-outer gives the plain loop's bits: %s\n", plain == g.y ? "yes" : "NO");
  }
  if (argc > 3) {  // keep the peak and the cases whose name contains FILTER
    const std::string filter = argv[3];
    std::vector<Case> kept{cases[0]};
    for (size_t i = 1; i < cases.size(); ++i)
      if (cases[i].name.find(filter) != std::string::npos) kept.push_back(cases[i]);
    cases.swap(kept);
  }
  for (auto& c : cases) c.run();  // warm-up: JIT, page faults
  for (int r = 0; r < repeats; ++r)
    for (size_t i = 0; i < cases.size(); ++i) {
      auto& c = cases[(i + r * 7) % cases.size()];  // a different order each repeat
      c.best = std::min(c.best, seconds(c.run));
    }
  const double peak = cases[0].flop / cases[0].best / 1e9;
  std::printf("%-40s %10s %8s\n", "case (w x rows x kc)", "GFLOP/s", "of peak");
  for (auto& c : cases) {
    const double gf = c.flop / c.best / 1e9;
    std::printf("%-40s %10.1f %7.1f%%\n", c.name.c_str(), gf, 100.0 * gf / peak);
  }
  for (auto* g : gemms) delete g;
  libxsmm_finalize();
  return 0;
}
