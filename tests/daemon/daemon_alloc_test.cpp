// Steady-state tensor requests through the daemon allocate nothing: the C allocator is interposed in this
// binary (as in tests/runtime/engine_alloc_test.cpp) and counts every malloc/calloc/realloc/memalign in
// every thread (connection threads, the worker, OpenBLAS, libgomp) while 500 requests go through the
// socket. The test's own client uses preallocated buffers and raw send/recv.
#include <gtest/gtest.h>

#include <execinfo.h>

#include <atomic>

#include "tests/daemon/daemon_fixture.h"
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
constexpr int kMaxTraces = 4, kDepth = 14;
void* g_traces[kMaxTraces][kDepth];
int g_trace_len[kMaxTraces];
std::atomic<int> g_trace_count{0};
void note_alloc() {
  g_allocs.fetch_add(1, std::memory_order_relaxed);
  const int i = g_trace_count.fetch_add(1);
  if (i < kMaxTraces) g_trace_len[i] = backtrace(g_traces[i], kDepth);
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
void* memalign(size_t align, size_t n) {
  if (g_counting.load(std::memory_order_relaxed)) note_alloc();
  return __libc_memalign(align, n);
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
void free(void* p) { __libc_free(p); }
}

namespace edgevit::daemon {
namespace {

using namespace testing;

// One request/answer on a raw fd with caller-owned buffers (no allocation). Returns false on any error.
bool round_trip(int fd, const std::vector<uint8_t>& request, std::vector<uint8_t>& answer) {
  if (!write_all(fd, request.data(), request.size())) return false;
  size_t got = 0, want = protocol::kHeaderBytes;
  while (got < want) {
    const ssize_t r = recv(fd, answer.data() + got, want - got, 0);
    if (r <= 0) return false;
    got += static_cast<size_t>(r);
    if (got == protocol::kHeaderBytes && want == protocol::kHeaderBytes) {
      const protocol::Header h = protocol::decode_header(answer.data());
      if ((h.flags & protocol::kFlagError) != 0 || protocol::kHeaderBytes + h.payload_bytes > answer.size()) return false;
      want += h.payload_bytes;
    }
  }
  return true;
}

TEST(DaemonAlloc, CountingWorks) {
  g_allocs = 0;
  g_counting = true;
  void* volatile p = std::malloc(16);
  g_counting = false;
  std::free(p);
  EXPECT_GE(g_allocs.load(), 1);
}

TEST(DaemonAlloc, TensorRequestsAllocateNothingInTheSteadyState) {
  EDGEVIT_SKIP_IF_EMULATED();  // minutes under qemu; engine_alloc_test covers the engine there
  const std::string dir = make_temp_dir();
  DaemonConfig cfg = digits_config(dir, 4);
  auto server = Server::start(server_options(cfg));
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  const auto in = testutil::random_floats(kDigitsPerImage, 11);
  const auto request = frame(static_cast<uint16_t>(protocol::Op::kInferTensor),
                             tensor_payload(in.data(), {1, 8, 8}, kDigitsPerImage));
  std::vector<uint8_t> answer(1 << 16), first;
  const int fd = raw_connect(cfg.socket_path);
  ASSERT_GE(fd, 0);
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(round_trip(fd, request, answer));
  first.assign(answer.begin(), answer.begin() + 200);
  {
    void* warm[2];
    backtrace(warm, 2);
  }
  g_allocs = 0;
  g_trace_count = 0;
  g_counting = true;
  bool ok = true;
  for (int i = 0; i < 500 && ok; ++i) ok = round_trip(fd, request, answer);
  g_counting = false;
  EXPECT_TRUE(ok);
  EXPECT_EQ(g_allocs.load(), 0) << "heap allocations while serving tensor requests";
  for (int i = 0; i < std::min<int>(g_trace_count.load(), kMaxTraces); ++i) {
    std::fprintf(stderr, "allocation %d:\n", i);
    backtrace_symbols_fd(g_traces[i], g_trace_len[i], 2);
  }
  // Top-k part of the answer identical run to run (latency fields at 16..31 of the payload differ).
  const size_t top = protocol::kHeaderBytes + protocol::kInferAnswerFixedBytes;
  EXPECT_EQ(std::memcmp(first.data() + top, answer.data() + top, 200 - top), 0);
  close(fd);
  (*server)->stop();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace edgevit::daemon
