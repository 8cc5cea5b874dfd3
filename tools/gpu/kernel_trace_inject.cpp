// A CUDA injection library for kernel timelines where Nsight Systems is not installed (the lent GPU machine
// has ncu only): loaded by the driver at cuInit through CUDA_INJECTION64_PATH, it records every kernel's GPU
// start and end with CUPTI's activity API (CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: kernels are not
// serialised, graph replays keep their node ids) and appends them to $EDGEVIT_TRACE_OUT as CSV:
//   start_ns,end_ns,stream,graph_id,graph_node_id,name
// Buffers are flushed every 50 ms and at exit. A developer tool, not linked into anything shipped. Build and
// use: tools/gpu/kernel_timeline.sh (it builds this file with the toolkit's CUPTI and summarises the trace).
#include <cupti.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace {

constexpr size_t kBufferBytes = 8 << 20;
std::FILE* g_out = nullptr;
std::mutex g_mu;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer != nullptr ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* record = nullptr;
  std::lock_guard<std::mutex> lock(g_mu);
  while (g_out != nullptr && cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) continue;
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
    std::fprintf(g_out, "%llu,%llu,%u,%u,%llu,\"%s\"\n", static_cast<unsigned long long>(k->start),
                 static_cast<unsigned long long>(k->end), k->streamId, k->graphId,
                 static_cast<unsigned long long>(k->graphNodeId), k->name != nullptr ? k->name : "?");
  }
  std::free(buffer);
}

void flush_at_exit() {
  cuptiActivityFlushAll(1);
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_out != nullptr) std::fclose(g_out);
  g_out = nullptr;
}

}  // namespace

extern "C" int InitializeInjection(void) {
  const char* path = std::getenv("EDGEVIT_TRACE_OUT");
  g_out = std::fopen(path != nullptr ? path : "kernel_trace.csv", "w");
  if (g_out == nullptr) return 0;
  std::fprintf(g_out, "start_ns,end_ns,stream,graph_id,graph_node_id,name\n");
  if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS ||
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) {
    std::fprintf(stderr, "kernel_trace_inject: CUPTI activity could not be enabled\n");
    return 0;
  }
  cuptiActivityFlushPeriod(50);
  std::atexit(flush_at_exit);
  return 1;
}
