// What the process holds for an engine, line by line, so that `plan` tells the memory the process will
// take before it takes it (tests/runtime/memory_footprint_slow_test.cpp and footprint_cuda_test.cu compare
// these totals with the measured footprint). Every line is computed from the plan's shapes and the device
// profile; the constants below are measured (docs/benchmarks.md, "Memory footprint").
#include <algorithm>

#include "runtime/plan.h"

namespace edgevit {

namespace {

constexpr int64_t kPage = 4096;
int64_t pages(int64_t bytes) { return (bytes + kPage - 1) / kPage * kPage; }

// CPU: each kernel thread's resident stack (the fused attention's tiles, prefaulted at start-up,
// kernels/cpu/threads.cpp) and its OpenMP / OpenBLAS per-thread state: 0.65 MB per added thread, measured
// with 1, 2, 4 and 8 threads (x86-64, Debian 12's libgomp and OpenBLAS 0.3.21).
constexpr int64_t kCpuThreadBytes = int64_t{640} << 10;
// CPU: the libraries' state once the engine has run (OpenBLAS's buffers, libxsmm's code registry and JIT
// kernels, libgomp's pool): 15.1 MB beside one thread's 0.65 MB in a fresh process, same machine.
constexpr int64_t kCpuRuntimeBytes = int64_t{29} << 19;  // 14.5 MiB
// CUDA: one instantiated graph executable of the forward (device memory the driver keeps per exec): 0.92 MB,
// from 2 vs 14 executables of ViT-Ti and ViT-B on an H200.
constexpr int64_t kCudaGraphExecBytes = int64_t{904} << 10;
// CUDA, host side, per captured batch size: its two graph executables and the cuBLASLt algorithms and kernel
// images its GEMM shapes load (8.9 MB for ViT-Ti, 10.4 MB for ViT-B on an H200).
constexpr int64_t kCudaHostPerCapturedSize = int64_t{9830} << 10;

void add(Plan* p, std::string name, MemorySpace space, int64_t bytes, std::string basis, bool load_only = false) {
  p->memory.push_back({std::move(name), space, bytes, std::move(basis), load_only});
}

void cpu_lines(Plan* p, int threads) {
  add(p, "arena (weights, io, activations, scratch)", MemorySpace::kHost, p->arena_bytes, "planned");
  add(p, "kernel threads: " + std::to_string(threads) + " stacks and per-thread state", MemorySpace::kHost,
      int64_t{threads} * kCpuThreadBytes, "measured per thread on x86-64");
  add(p, "CPU libraries (OpenBLAS buffers, libxsmm kernels, OpenMP)", MemorySpace::kHost, kCpuRuntimeBytes,
      "measured on x86-64");
}

void cuda_lines(Plan* p) {
  const Graph& g = p->graph;
  const VitArch& a = g.arch;
  // The captured batch sizes: powers of two below the plan's batch, and the batch itself; two graphs each
  // (input from the host staging, input already on the device).
  int sizes = 1;
  for (int s = 1; s < g.batch; s *= 2) ++sizes;
  add(p,
      p->int8_split_workspace_bytes > 0 ? "arena (weights, io, activations, INT8 split-K + cuBLASLt)"
                                        : "arena (weights, io, activations, cuBLASLt workspace)",
      MemorySpace::kDevice, p->arena_bytes, "planned");
  add(p, "CUDA graphs: " + std::to_string(2 * sizes) + " executables (" + std::to_string(sizes) +
             " batch sizes x host/device input)",
      MemorySpace::kDevice, 2 * sizes * kCudaGraphExecBytes, "measured per executable on an H200");
  add(p, "CUDA context + libraries (device)", MemorySpace::kDevice, p->device.cuda_context_bytes,
      p->device.cuda_context_basis);
  const int64_t in = int64_t{g.batch} * a.in_chans * a.img_h * a.img_w * 4;
  add(p, "pinned input staging (fp32)", MemorySpace::kHost, pages(in), "from the plan's shapes");
  // One fp32 buffer per output tensor the graph has (pre_logits, logits, and tokens / the pooler's embedding
  // when asked for: runtime/graph.h), as the CUDA backend allocates them.
  int64_t staging = kPage;
  std::string names;
  for (const TensorDesc& t : g.tensors) {
    if (t.kind != TensorKind::kOutput) continue;
    staging += pages(t.numel() * 4);
    names += (names.empty() ? "" : ", ") + t.name;
  }
  add(p, "pinned output staging (fp32: " + names + ") + non-finite counter", MemorySpace::kHost, staging,
      "from the plan's shapes");
  add(p, "CUDA graphs and GEMM algorithms: " + std::to_string(sizes) + " batch sizes (host side)", MemorySpace::kHost,
      sizes * kCudaHostPerCapturedSize, "measured per batch size");
  add(p, "CUDA driver + libraries (host)", MemorySpace::kHost, p->device.cuda_context_host_bytes,
      p->device.cuda_context_basis);
  int64_t largest = 0;
  for (const TensorDesc& t : g.tensors)
    if (t.kind == TensorKind::kWeight) largest = std::max(largest, t.bytes());
  add(p, "weight staging (pinned, freed after load)", MemorySpace::kHost, pages(largest), "from the plan's shapes",
      true);
}

}  // namespace

const char* to_string(MemorySpace s) { return s == MemorySpace::kHost ? "host" : "device"; }

void account_memory(Plan* p, int threads) {
  p->memory.clear();
  if (p->device.kind == DeviceKind::kCuda) {
    cuda_lines(p);
  } else {
    cpu_lines(p, threads);
  }
  p->host_total_bytes = p->device_total_bytes = p->load_peak_extra_bytes = 0;
  for (const MemoryLine& l : p->memory) {
    if (l.load_only) {
      p->load_peak_extra_bytes += l.bytes;
      continue;
    }
    (l.space == MemorySpace::kHost ? p->host_total_bytes : p->device_total_bytes) += l.bytes;
  }
  if (p->device.kind == DeviceKind::kCpu) {
    p->total_bytes = p->host_total_bytes;
  } else if (p->device.unified_memory) {
    p->total_bytes = p->host_total_bytes + p->device_total_bytes;
  } else {
    p->total_bytes = p->device_total_bytes;
  }
}

}  // namespace edgevit
