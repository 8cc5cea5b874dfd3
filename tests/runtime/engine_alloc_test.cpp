// infer() performs zero heap allocations (malloc/calloc/realloc/new, counted by interposing the C
// allocator in this binary, which catches OpenBLAS, libgomp and libstdc++ too) over 100 inferences after
// warm-up, and its outputs are bit-identical run to run. Engine::input_buffer(): images written there run
// without the copy, give the same bits as from a separate array, allocate nothing and stay unmodified.
#include <gtest/gtest.h>

#include <execinfo.h>

#include <atomic>
#include <cstring>

#include "platform/device_registry.h"
#include "runtime/config.h"
#include "runtime/engine.h"
#include "tests/testutil/testutil.h"

extern "C" {
void* __libc_malloc(size_t);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void* __libc_memalign(size_t, size_t);
void __libc_free(void*);
}

namespace {
std::atomic<bool> g_counting{false};
std::atomic<long> g_allocs{0};
// The first few offending call stacks, printed on failure (backtrace() does not allocate once warmed).
constexpr int kMaxTraces = 4, kDepth = 12;
void* g_traces[kMaxTraces][kDepth];
int g_trace_len[kMaxTraces];
std::atomic<int> g_trace_count{0};
void note_alloc() {
  g_allocs.fetch_add(1, std::memory_order_relaxed);
  const int i = g_trace_count.fetch_add(1);
  if (i < kMaxTraces) g_trace_len[i] = backtrace(g_traces[i], kDepth);
}
// Resets the counters and starts counting. backtrace() allocates on its first call (it loads libgcc's
// unwinder), so it is called once before counting: note_alloc's traces must not count themselves.
void start_counting() {
  void* warm[2];
  backtrace(warm, 2);
  g_allocs = 0;
  g_trace_count = 0;
  g_counting = true;
}
}  // namespace

extern "C" {
void* malloc(size_t n) {
  if (g_counting.load(std::memory_order_relaxed)) note_alloc();
  return __libc_malloc(n);
}
void* calloc(size_t a, size_t b) {
  if (g_counting.load(std::memory_order_relaxed)) note_alloc();
  return __libc_calloc(a, b);
}
void* realloc(void* p, size_t n) {
  if (g_counting.load(std::memory_order_relaxed)) note_alloc();
  return __libc_realloc(p, n);
}
int posix_memalign(void** out, size_t align, size_t n) {
  if (g_counting.load(std::memory_order_relaxed)) note_alloc();
  void* p = __libc_memalign(align, n);
  if (p == nullptr) return ENOMEM;
  *out = p;
  return 0;
}
void* aligned_alloc(size_t align, size_t n) {
  if (g_counting.load(std::memory_order_relaxed)) note_alloc();
  return __libc_memalign(align, n);
}
void* memalign(size_t align, size_t n) {  // libgomp allocates its teams with memalign
  if (g_counting.load(std::memory_order_relaxed)) note_alloc();
  return __libc_memalign(align, n);
}
void free(void* p) { __libc_free(p); }
}

namespace edgevit {
namespace {

void run_case(const char* config, AttentionImpl attention, int threads) {
  auto spec = load_model_spec(testutil::source_path(std::string("config/models/") + config));
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  auto dev = find_device_profile("host-cpu", {testutil::source_path("config/devices")});
  ASSERT_TRUE(dev.ok());
  EngineOptions o;
  o.plan.batch = 2;
  o.plan.attention = attention;
  o.threads = threads;
  auto engine = Engine::create(*spec, *dev, o);
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  Engine& e = **engine;
  const auto input = testutil::random_floats(2 * e.input_numel_per_image(), 7);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(e.infer(input.data(), 2).ok());
  const std::vector<float> first(e.logits(), e.logits() + 2 * e.output_dim());

  start_counting();
  bool ok = true, identical = true;
  for (int i = 0; i < 100; ++i) {
    ok = ok && e.infer(input.data(), 2).ok();
    identical = identical && std::memcmp(first.data(), e.logits(), first.size() * sizeof(float)) == 0;
  }
  g_counting = false;
  EXPECT_TRUE(ok);
  EXPECT_TRUE(identical) << "outputs differ between runs";
  EXPECT_EQ(g_allocs.load(), 0) << config << ": heap allocations inside infer()";
  for (int i = 0; i < std::min<int>(g_trace_count.load(), kMaxTraces); ++i) {
    std::fprintf(stderr, "allocation %d:\n", i);
    backtrace_symbols_fd(g_traces[i], g_trace_len[i], 2);
  }
}

TEST(EngineAlloc, CountingWorks) {
  g_allocs = 0;
  g_counting = true;
  void* volatile p = std::malloc(16);
  auto* q = new std::vector<int>(10);
  g_counting = false;
  std::free(p);
  delete q;
  EXPECT_GE(g_allocs.load(), 2) << "the interposed allocator is not seeing allocations";
}

TEST(EngineAlloc, CpuHasNoDeviceInput) {
  auto spec = load_model_spec(testutil::source_path("config/models/vit-micro.yaml"));
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  auto dev = find_device_profile("host-cpu", {testutil::source_path("config/devices")});
  ASSERT_TRUE(dev.ok());
  EngineOptions o;
  o.plan.batch = 1;
  o.threads = 1;
  auto engine = Engine::create(*spec, *dev, o);
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  EXPECT_EQ((*engine)->device_input(), nullptr);
  const Status s = (*engine)->infer_device(1);
  EXPECT_EQ(s.code(), StatusCode::kUnsupported) << s.to_string();
  EXPECT_NE(s.message().find("infer()"), std::string::npos) << s.to_string();
}

TEST(EngineAlloc, InputBufferSameLogitsNoCopyNoAllocation) {
  auto spec = load_model_spec(testutil::source_path("config/models/vit-micro.yaml"));
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  auto dev = find_device_profile("host-cpu", {testutil::source_path("config/devices")});
  ASSERT_TRUE(dev.ok());
  EngineOptions o;
  o.plan.batch = 2;
  o.threads = 1;
  auto engine = Engine::create(*spec, *dev, o);
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  Engine& e = **engine;
  const int64_t per = e.input_numel_per_image();
  const size_t out = static_cast<size_t>(e.output_dim());
  const auto input = testutil::random_floats(2 * per, 11), other = testutil::random_floats(2 * per, 12);
  float* buf = e.input_buffer();
  ASSERT_NE(buf, nullptr);
  EXPECT_EQ(e.input_buffer(), buf) << "the buffer must not move";

  // Reference: from a separate array (the copying path), the batch and image 1 alone.
  ASSERT_TRUE(e.infer(input.data(), 2).ok());
  const std::vector<float> ref(e.logits(), e.logits() + 2 * out), ref_pre(e.pre_logits(), e.pre_logits() + 2 * e.embed_dim());
  ASSERT_TRUE(e.infer(input.data() + per, 1).ok());
  const std::vector<float> ref1(e.logits(), e.logits() + out);

  // The buffer's contents are what runs: other images give other logits, these images the same bits.
  std::copy(other.begin(), other.end(), buf);
  ASSERT_TRUE(e.infer(buf, 2).ok());
  EXPECT_NE(std::memcmp(ref.data(), e.logits(), ref.size() * sizeof(float)), 0) << "infer(input_buffer()) ignored the buffer";
  std::copy(input.begin(), input.end(), buf);
  start_counting();
  bool ok = true, identical = true;
  for (int i = 0; i < 100; ++i) {
    ok = ok && e.infer(buf, 2).ok();
    identical = identical && std::memcmp(ref.data(), e.logits(), ref.size() * sizeof(float)) == 0 &&
                std::memcmp(ref_pre.data(), e.pre_logits(), ref_pre.size() * sizeof(float)) == 0;
  }
  // A pointer inside the buffer (image 1 as a batch of one) is legal: the copy overlaps, so it must move.
  ok = ok && e.infer(buf + per, 1).ok();
  g_counting = false;
  EXPECT_TRUE(ok);
  EXPECT_TRUE(identical) << "input_buffer() path differs from the copying path";
  EXPECT_EQ(std::memcmp(ref1.data(), e.logits(), out * sizeof(float)), 0) << "infer(input_buffer() + one image, 1)";
  EXPECT_EQ(g_allocs.load(), 0) << "heap allocations inside infer(input_buffer())";
  for (int i = 0; i < std::min<int>(g_trace_count.load(), kMaxTraces); ++i) {
    std::fprintf(stderr, "allocation %d:\n", i);
    backtrace_symbols_fd(g_traces[i], g_trace_len[i], 2);
  }
  // infer(buf, 2) never wrote the buffer; image 1 moved to slot 0 by the last call, slot 1 untouched.
  EXPECT_EQ(std::memcmp(buf, input.data() + per, sizeof(float) * per), 0);
  EXPECT_EQ(std::memcmp(buf + per, input.data() + per, sizeof(float) * per), 0);
}

TEST(EngineAlloc, ZeroAllocationsAndBitIdenticalFusedOneThread) { run_case("vit-micro.yaml", AttentionImpl::kFused, 1); }
TEST(EngineAlloc, ZeroAllocationsAndBitIdenticalFusedTwoThreads) { run_case("vit-avgpool.yaml", AttentionImpl::kFused, 2); }
TEST(EngineAlloc, ZeroAllocationsAndBitIdenticalExplicit) { run_case("vit-micro.yaml", AttentionImpl::kExplicit, 2); }

}  // namespace
}  // namespace edgevit
