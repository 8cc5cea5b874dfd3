// Attention: mha_fused_f32 and mha_explicit_f32 against mha_ref (double), which is itself checked on a
// case computed by hand. Layouts: timm's packed qkv (B, S, 3, H, D) and separate (B, H, S, D) tensors.
#include <gtest/gtest.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include <cmath>
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "kernels/cpu/kernels.h"
#include "tests/testutil/testutil.h"

namespace edgevit {
namespace {

const float kNaN = std::numeric_limits<float>::quiet_NaN();

// The reference on a hand-computed case: B=1, H=1, Sq=1, Skv=2, D=2, q = (1, 0), k0 = (1, 0), k1 = (0, 1),
// v0 = (1, 2), v1 = (3, 4), scale = ln 3: logits (ln 3, 0) -> softmax (3/4, 1/4) -> o = (1.5, 2.5).
// With key 0 masked: o = v1. With both masked: zeros.
TEST(MhaRef, HandComputed) {
  AttnParams p;
  p.batch = 1; p.heads = 1; p.seq_q = 1; p.seq_kv = 2; p.head_dim = 2; p.scale = std::log(3.f);
  p.q = p.k = p.v = p.o = AttnStrides{4, 2, 2};
  const float q[2] = {1, 0};
  const float k[4] = {1, 0, 0, 1};
  const float v[4] = {1, 2, 3, 4};
  float o[2] = {kNaN, kNaN};
  mha_ref(p, q, k, v, o, 1);
  EXPECT_NEAR(o[0], 1.5f, 1e-6f);
  EXPECT_NEAR(o[1], 2.5f, 1e-6f);

  const uint8_t mask_first[2] = {0, 1};
  p.key_mask = mask_first;
  mha_ref(p, q, k, v, o, 1);
  EXPECT_FLOAT_EQ(o[0], 3.f);
  EXPECT_FLOAT_EQ(o[1], 4.f);

  const uint8_t mask_none[2] = {0, 0};
  p.key_mask = mask_none;
  mha_ref(p, q, k, v, o, 1);
  EXPECT_EQ(o[0], 0.f);
  EXPECT_EQ(o[1], 0.f);
}

enum class Layout { kPacked, kSeparate };

struct Case {
  int batch, heads, seq_q, seq_kv, head_dim;
  Layout layout;
  bool masked;  // random key mask with batch 0's keys all masked
  bool large;   // logits of +-3e3..1.2e4 after scaling (see make_large)
};

std::string describe(const Case& c) {
  return "B=" + std::to_string(c.batch) + " H=" + std::to_string(c.heads) + " Sq=" + std::to_string(c.seq_q) +
         " Skv=" + std::to_string(c.seq_kv) + " D=" + std::to_string(c.head_dim) +
         (c.layout == Layout::kPacked ? " packed" : " separate") + (c.masked ? " masked" : "") +
         (c.large ? " large-logits" : "");
}

// Large logits that fp32 still computes exactly, so the comparison stays meaningful at 1e-5: Q and K
// become integers in [5, 45] (Q's sign flipped on every other row), the scale is 8/D (D in {16, 64, 128}:
// a power of 2, exact), and every partial
// dot product (<= 45 * 45 * 128 < 2^24) is an exact fp32 integer. |logit| then reaches 3e3..1.2e4, where
// an exp without the running max overflows to Inf and a naive softmax gives NaN.
void make_large(float* x, int64_t n, bool flip) {  // x (n) uniform in [-1, 1)
  for (int64_t i = 0; i < n; ++i) x[i] = (flip ? -1.f : 1.f) * std::round(25.f + 20.f * x[i]);
}

// Runs fused and explicit with `threads` on one case and compares both with the reference.
void check_case(const Case& c, int threads, uint32_t seed) {
  SCOPED_TRACE(describe(c) + " threads=" + std::to_string(threads));
  const float scale = c.large ? 8.f / static_cast<float>(c.head_dim) : 1.f / std::sqrt(static_cast<float>(c.head_dim));
  AttnParams p;
  std::vector<float> qbuf, kbuf, vbuf;
  const float *q, *k, *v;
  const float amp = 1.f;
  const int64_t e = static_cast<int64_t>(c.heads) * c.head_dim;
  if (c.layout == Layout::kPacked) {
    // timm's qkv buffer holds Skv tokens; the queries are its first Sq (Sq < Skv: the class-token tail).
    p = attn_params_packed_qkv(c.batch, c.seq_kv, c.heads, c.head_dim, scale, c.seq_q);
    qbuf = testutil::random_floats(static_cast<size_t>(c.batch) * c.seq_kv * 3 * e, seed, -amp, amp);
    q = qbuf.data();
    k = q + packed_k_offset(c.heads, c.head_dim);
    v = q + packed_v_offset(c.heads, c.head_dim);
    if (c.large)
      for (int64_t r = 0; r < static_cast<int64_t>(c.batch) * c.seq_kv; ++r)
        for (int h = 0; h < c.heads; ++h) {
          make_large(qbuf.data() + r * 3 * e + h * c.head_dim, c.head_dim, (r + h) % 2 == 1);
          make_large(qbuf.data() + r * 3 * e + e + h * c.head_dim, c.head_dim, false);
        }
  } else {
    // (B, H, S, D) with a padded row stride, so that the strides are really used.
    const int64_t row = c.head_dim + 3;
    p.batch = c.batch; p.heads = c.heads; p.seq_q = c.seq_q; p.seq_kv = c.seq_kv; p.head_dim = c.head_dim;
    p.scale = scale;
    p.q = AttnStrides{c.heads * c.seq_q * row, row, c.seq_q * row};
    p.k = p.v = AttnStrides{c.heads * c.seq_kv * row, row, c.seq_kv * row};
    p.o = AttnStrides{c.seq_q * e, e, c.head_dim};  // (B, Sq, H, D)
    qbuf = testutil::random_floats(static_cast<size_t>(c.batch * p.q.batch), seed, -amp, amp);
    kbuf = testutil::random_floats(static_cast<size_t>(c.batch * p.k.batch), seed + 1, -amp, amp);
    vbuf = testutil::random_floats(static_cast<size_t>(c.batch * p.v.batch), seed + 2);
    if (c.large) {
      for (int64_t r = 0; r < static_cast<int64_t>(qbuf.size()) / row; ++r)
        make_large(qbuf.data() + r * row, row, r % 2 == 1);
      make_large(kbuf.data(), static_cast<int64_t>(kbuf.size()), false);
    }
    q = qbuf.data(); k = kbuf.data(); v = vbuf.data();
  }
  std::vector<uint8_t> mask;
  if (c.masked) {
    const auto r = testutil::random_floats(static_cast<size_t>(c.batch) * c.seq_kv, seed + 3, 0.f, 1.f);
    mask.resize(r.size());
    for (size_t i = 0; i < r.size(); ++i) mask[i] = r[i] < 0.7f ? 1 : 0;
    for (int j = 0; j < c.seq_kv; ++j) mask[j] = 0;  // batch 0: every key masked -> zeros
    p.key_mask = mask.data();
  }

  const size_t n = static_cast<size_t>(c.batch) * c.seq_q * e;
  std::vector<float> ref(n, kNaN), fused(n, kNaN), expl(n, kNaN);
  std::vector<float> scratch(mha_explicit_scratch_floats(p, threads), kNaN);
  if (c.large) {  // the premise of the case: logits really are ~1e4
    double max_logit = 0;
    for (int j = 0; j < c.seq_kv; ++j) {
      double dot = 0;
      for (int d = 0; d < c.head_dim; ++d) dot += static_cast<double>(q[d]) * k[j * p.k.row + d];
      max_logit = std::fmax(max_logit, std::fabs(dot * scale));
    }
    ASSERT_GT(max_logit, 2e3);
  }
  mha_ref(p, q, k, v, ref.data(), threads);
  // The fused kernel serves head_dim <= kMhaFusedMaxHeadDim; above it the planner chooses the explicit one
  // (tests/runtime/engine_numerics_test.cpp), so only the explicit kernel is held to the reference there.
  const bool fused_serves = c.head_dim <= kMhaFusedMaxHeadDim;
  if (fused_serves) mha_fused_f32(p, q, k, v, fused.data(), threads);
  mha_explicit_f32(p, q, k, v, expl.data(), scratch.data(), threads);

  ASSERT_TRUE(testutil::all_finite(ref.data(), n));
  EXPECT_TRUE(testutil::all_finite(expl.data(), n)) << "explicit wrote NaN/Inf or left an element unwritten";
  EXPECT_LE(testutil::rel_error(expl.data(), ref.data(), n), tol::kFp32Kernel);
  if (fused_serves) {
    EXPECT_TRUE(testutil::all_finite(fused.data(), n)) << "fused wrote NaN/Inf or left an element unwritten";
    EXPECT_LE(testutil::rel_error(fused.data(), ref.data(), n), tol::kFp32Kernel);
  }
  if (c.masked) {  // batch 0 is fully masked: exact zeros
    for (int64_t i = 0; i < c.seq_q * e; ++i) {
      if (fused_serves) {
        ASSERT_EQ(fused[i], 0.f) << "fused, fully masked row, element " << i;
      }
      ASSERT_EQ(expl[i], 0.f) << "explicit, fully masked row, element " << i;
    }
  }
}

TEST(Mha, HeadDimsAndSequenceLengths) {
  uint32_t seed = 100;
  for (int d : {16, 32, 40, 64, 80, 96, 128})
    for (int s : {1, 7, 64, 197})
      for (int threads : {1, 2}) check_case({1, 2, s, s, d, Layout::kPacked, false, false}, threads, seed += 10);
}

// The head dims the planner's boundary sits between: odd multiples of 8 below it, and 160 / 256 above it
// (where only the explicit kernel runs; a model with embed 320 and 2 heads is one).
TEST(Mha, HeadDimsAroundTheFusedLimit) {
  uint32_t seed = 1500;
  for (int d : {8, 24, 48, 72, 160, 256})
    for (int s : {1, 7, 197})
      for (int threads : {1, 2}) {
        check_case({1, 2, s, s, d, Layout::kPacked, false, false}, threads, seed += 10);
        check_case({2, 3, 1, s, d, Layout::kPacked, true, false}, threads, seed += 10);
      }
}

TEST(Mha, LongSequence577) {
  EDGEVIT_SKIP_IF_EMULATED();
  uint32_t seed = 2000;
  for (int d : {64, 80})
    for (int threads : {1, 2}) check_case({1, 2, 577, 577, d, Layout::kPacked, false, false}, threads, seed += 10);
}

TEST(Mha, CrossAttentionSeparateLayout) {
  EDGEVIT_SKIP_IF_EMULATED();
  uint32_t seed = 3000;
  const int pairs[][2] = {{1, 7}, {7, 1}, {64, 197}, {197, 64}, {7, 577}, {577, 7}};
  for (int d : {16, 40, 64, 128})
    for (const auto& sq : pairs)
      for (int b : {1, 3})
        for (int threads : {1, 2})
          check_case({b, 3, sq[0], sq[1], d, Layout::kSeparate, false, false}, threads, seed += 10);
}

// The class-token tail's attention (runtime/graph.h): the first query token of each image over every key of
// timm's packed qkv buffer, so Q's batch stride is the buffer's (Skv tokens), not Sq's.
TEST(Mha, ClassTokenQueryOverPackedQkv) {
  EDGEVIT_SKIP_IF_EMULATED();
  uint32_t seed = 3500;
  for (int d : {32, 64})
    for (int skv : {7, 197})
      for (int b : {1, 3})
        for (int threads : {1, 2}) {
          check_case({b, 3, 1, skv, d, Layout::kPacked, false, false}, threads, seed += 10);
          check_case({b, 3, 1, skv, d, Layout::kPacked, true, false}, threads, seed += 10);
        }
}

TEST(Mha, KeyMaskWithFullyMaskedBatch) {
  EDGEVIT_SKIP_IF_EMULATED();
  uint32_t seed = 4000;
  for (int d : {32, 64, 80})
    for (int s : {7, 64, 197})
      for (int threads : {1, 2}) {
        check_case({2, 3, s, s, d, Layout::kPacked, true, false}, threads, seed += 10);
        check_case({3, 2, s, s + 13, d, Layout::kSeparate, true, false}, threads, seed += 10);
      }
}

TEST(Mha, LargeLogits) {
  EDGEVIT_SKIP_IF_EMULATED();
  uint32_t seed = 5000;
  for (int d : {16, 64, 128})
    for (int s : {7, 197})
      for (int threads : {1, 2}) {
        check_case({1, 3, s, s, d, Layout::kPacked, false, true}, threads, seed += 10);
        check_case({2, 2, s, s + 5, d, Layout::kSeparate, true, true}, threads, seed += 10);
      }
}

// With a single-threaded OpenBLAS the explicit kernel spreads (b, h) over `threads`, one scratch slice
// each (with a threaded OpenBLAS, the cases above, it runs (b, h) in order).
TEST(Mha, ExplicitPerThreadSlices) {
  cpu_init_threads(1);
  uint32_t seed = 6000;
  for (int d : {32, 64})
    for (int s : {7, 197}) {
      check_case({2, 3, s, s, d, Layout::kPacked, true, false}, 2, seed += 10);
      check_case({3, 2, s, s + 9, d, Layout::kSeparate, false, false}, 2, seed += 10);
    }
  cpu_init_threads(2);
}

// The fused kernel splits (b, h, query block) tasks over the team in contiguous runs and reuses K^T
// between a thread's tasks of one head: query blocks and tile shapes depend on the shape only, so the
// output is bit-identical for every thread count (including more threads than tasks), and run to run.
TEST(Mha, FusedBitIdenticalAcrossThreadCounts) {
  for (int s : {197, 300}) {  // one key block (ViT at 224) and two (the online-softmax rescaling)
    SCOPED_TRACE("S=" + std::to_string(s));
    const AttnParams p = attn_params_packed_qkv(2, s, 3, 64, 0.125f);
    const auto qkv = testutil::random_floats(static_cast<size_t>(2) * s * 3 * 3 * 64, 7100 + s);
    const float* q = qkv.data();
    const float* k = q + packed_k_offset(3, 64);
    const float* v = q + packed_v_offset(3, 64);
    const size_t n = static_cast<size_t>(2) * s * 3 * 64;
    std::vector<float> first(n, kNaN), out(n, kNaN);
    mha_fused_f32(p, q, k, v, first.data(), 1);
    for (int threads : {1, 2, 3, 5, 16, 40}) {
      std::fill(out.begin(), out.end(), kNaN);
      mha_fused_f32(p, q, k, v, out.data(), threads);
      EXPECT_EQ(std::memcmp(first.data(), out.data(), n * sizeof(float)), 0) << "threads=" << threads;
    }
  }
}

// Runs fn on a new thread whose stack is a fresh, untouched mapping (not one of glibc's cached thread stacks),
// and returns the minor page faults that thread took inside fn.
long faults_on_fresh_stack(const std::function<void()>& before, const std::function<void()>& fn) {
  constexpr size_t kStack = size_t{8} << 20;
  void* stack = mmap(nullptr, kStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (stack == MAP_FAILED) return -1;
  struct Job {
    const std::function<void()>* before;
    const std::function<void()>* fn;
    long faults = -1;
  } job{&before, &fn};
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstack(&attr, stack, kStack);
  pthread_t t;
  const int rc = pthread_create(
      &t, &attr,
      [](void* arg) -> void* {
        auto* j = static_cast<Job*>(arg);
        (*j->before)();
        rusage r0{}, r1{};
        getrusage(RUSAGE_THREAD, &r0);
        (*j->fn)();
        getrusage(RUSAGE_THREAD, &r1);
        j->faults = r1.ru_minflt - r0.ru_minflt;
        return nullptr;
      },
      &job);
  if (rc == 0) pthread_join(t, nullptr);
  pthread_attr_destroy(&attr);
  munmap(stack, kStack);
  return job.faults;
}

// The fused kernel's tiles live on the running thread's stack. After cpu_prefault_stack(cpu_kernel_stack_bytes())
// the deepest fused shape (head_dim 128, one full 256-key block) takes no page fault on a fresh stack, where
// without it the same call faults the tiles' pages in (on the main thread, whose stack mapping grows on demand,
// that was new memory mapped mid-inference).
TEST(Mha, PrefaultedStackCoversTheFusedTiles) {
  if (testutil::under_emulator()) GTEST_SKIP() << "qemu-user's page faults are its own (translation buffers, guest map)";
#if defined(EDGEVIT_SANITIZER_BUILD)
  GTEST_SKIP() << "ASan maps shadow pages for every stack page touched and may move frames to its fake stack";
#endif
  const int s = 256, h = 2, d = kMhaFusedMaxHeadDim;
  const AttnParams p = attn_params_packed_qkv(1, s, h, d, 0.1f);
  mha_fused_prepare(p);  // JIT at load, as the backend does
  const auto qkv = testutil::random_floats(static_cast<size_t>(s) * 3 * h * d, 7300);
  std::vector<float> out(static_cast<size_t>(s) * h * d, 0.f);
  const float* q = qkv.data();
  const float* k = q + packed_k_offset(h, d);
  const float* v = q + packed_v_offset(h, d);
  const auto run = [&] { mha_fused_f32(p, q, k, v, out.data(), 1); };
  const long cold = faults_on_fresh_stack([] {}, run);
  const long warm = faults_on_fresh_stack([] { cpu_prefault_stack(cpu_kernel_stack_bytes()); }, run);
  EXPECT_GE(cold, 16) << "the tiles (" << mha_fused_stack_bytes() << " bytes) should fault pages on a fresh stack";
  EXPECT_EQ(warm, 0);
  EXPECT_GE(cpu_kernel_stack_bytes(), mha_fused_stack_bytes());
}

TEST(Mha, ExplicitScratchDependsOnlyOnShapeAndThreads) {
  AttnParams p = attn_params_packed_qkv(2, 197, 3, 64, 0.125f);
  EXPECT_EQ(mha_explicit_scratch_floats(p, 1), size_t{197} * 197);
  EXPECT_EQ(mha_explicit_scratch_floats(p, 2), size_t{2} * 197 * 197);
  p.seq_kv = 50;
  EXPECT_EQ(mha_explicit_scratch_floats(p, 2), size_t{2} * 197 * 50);
}

}  // namespace
}  // namespace edgevit
