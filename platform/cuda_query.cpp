#include "platform/cuda_query.h"

#include <cctype>

#include "platform/device_registry.h"

#ifdef EDGEVIT_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace edgevit {

std::string cuda_profile_name(const std::string& device_name) {
  std::string out = "cuda";
  bool dash = true;  // a '-' follows "cuda" before the first word
  for (unsigned char c : device_name) {
    if (std::isalnum(c)) {
      if (dash) out += '-';
      out += static_cast<char>(std::tolower(c));
      dash = false;
    } else {
      dash = true;
    }
  }
  return out;
}

double estimate_fp16_dense_tflops(int cc, int sm_count, int clock_mhz) {
  double flops_per_clock_per_sm = 0;
  if (cc >= 90) {
    flops_per_clock_per_sm = 4096;
  } else if (cc == 80 || cc == 87) {
    flops_per_clock_per_sm = 2048;
  } else if (cc >= 70) {
    flops_per_clock_per_sm = 1024;
  }
  return flops_per_clock_per_sm * sm_count * clock_mhz * 1e6 / 1e12;
}

#ifdef EDGEVIT_HAVE_CUDA

namespace {

Status cuda_status(cudaError_t err, int ordinal, const char* what) {
  const std::string m = std::string("cuda:") + std::to_string(ordinal) + ": " + what + ": " +
                        cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")";
  if (err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver || err == cudaErrorInvalidDevice) {
    return not_found(m);
  }
  return device_error(m);
}

}  // namespace

// The CUDA context + libraries footprint of this GPU: measured where we have run on it (the footprint
// test, tests/runtime/footprint_cuda_test.cu; figures in docs/benchmarks.md "Memory footprint"), else the
// default estimate, and the profile says which.
static void set_context_footprint(DeviceProfile* p) {
  struct Measured {
    int compute_capability;
    int64_t device_bytes, host_bytes;
    const char* basis;
  };
  static const Measured kMeasured[] = {
      // H200 (the lent machine), CUDA 13 driver 580.159, 2026-11-26: ViT-Ti/B at batch 1 and 64 fit
      // 555 MB of device memory and 278 MB of host RSS beside the engine's own lines (the host figure
      // includes the kernel images the driver reads at start-up: 266 MB before the int8-output attention
      // rows and the INT8 GEMM's interior main loops were added, refitted on the same machine after).
      {90, int64_t{529} << 20, int64_t{265} << 20,
       "measured on an H200, CUDA 13 driver (docs/benchmarks.md, Memory footprint)"},
  };
  p->cuda_context_bytes = kDefaultCudaContextBytes;
  p->cuda_context_host_bytes = kDefaultCudaContextHostBytes;
  p->cuda_context_basis = "estimate (no measurement for compute capability " + std::to_string(p->compute_capability) + ")";
  for (const Measured& m : kMeasured) {
    if (m.compute_capability != p->compute_capability) continue;
    p->cuda_context_bytes = m.device_bytes;
    p->cuda_context_host_bytes = m.host_bytes;
    p->cuda_context_basis = m.basis;
  }
}

Result<DeviceProfile> query_cuda_device(int ordinal) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) return cuda_status(err, ordinal, "cudaGetDeviceCount");
  if (ordinal < 0 || ordinal >= count) {
    return not_found("cuda:" + std::to_string(ordinal) + ": no such device (" + std::to_string(count) +
                     " CUDA device(s))");
  }
  cudaDeviceProp prop{};
  err = cudaGetDeviceProperties(&prop, ordinal);
  if (err != cudaSuccess) return cuda_status(err, ordinal, "cudaGetDeviceProperties");

  struct Attr {
    cudaDeviceAttr attr;
    int value;
  };
  Attr attrs[] = {
      {cudaDevAttrComputeCapabilityMajor, 0},     {cudaDevAttrComputeCapabilityMinor, 0},
      {cudaDevAttrMultiProcessorCount, 0},        {cudaDevAttrClockRate, 0},
      {cudaDevAttrMaxThreadsPerMultiProcessor, 0}, {cudaDevAttrMaxBlocksPerMultiprocessor, 0},
      {cudaDevAttrMaxSharedMemoryPerMultiprocessor, 0}, {cudaDevAttrMaxSharedMemoryPerBlock, 0},
      {cudaDevAttrMaxSharedMemoryPerBlockOptin, 0}, {cudaDevAttrMaxRegistersPerMultiprocessor, 0},
      {cudaDevAttrL2CacheSize, 0},                {cudaDevAttrIntegrated, 0},
      {cudaDevAttrMemoryClockRate, 0},            {cudaDevAttrGlobalMemoryBusWidth, 0},
  };
  for (Attr& a : attrs) {
    err = cudaDeviceGetAttribute(&a.value, a.attr, ordinal);
    if (err != cudaSuccess) return cuda_status(err, ordinal, "cudaDeviceGetAttribute");
  }
  enum { kMajor, kMinor, kSms, kClock, kThreads, kBlocks, kSmemSm, kSmemBlock, kSmemOptin, kRegs, kL2,
         kIntegrated, kMemClock, kBusWidth };

  DeviceProfile p;
  p.name = cuda_profile_name(prop.name);
  p.source = "cuda:" + std::to_string(ordinal) + " properties";
  p.kind = DeviceKind::kCuda;
  p.compute_capability = attrs[kMajor].value * 10 + attrs[kMinor].value;
  p.sm_count = attrs[kSms].value;
  p.gpu_clock_mhz = attrs[kClock].value / 1000;  // kHz
  p.max_threads_per_sm = attrs[kThreads].value;
  p.max_blocks_per_sm = attrs[kBlocks].value;
  p.smem_per_sm_bytes = attrs[kSmemSm].value;
  p.smem_per_block_bytes = attrs[kSmemBlock].value;
  p.smem_per_block_optin_bytes = attrs[kSmemOptin].value;
  p.registers_per_sm = attrs[kRegs].value;
  p.l2_bytes = attrs[kL2].value;
  p.fp16_dense_tflops = estimate_fp16_dense_tflops(p.compute_capability, p.sm_count, p.gpu_clock_mhz);
  p.int8_dense_tops = p.compute_capability >= 72 ? 2 * p.fp16_dense_tflops : 0.0;
  p.memory_total_bytes = static_cast<int64_t>(prop.totalGlobalMem);
  p.memory_budget_bytes = default_memory_budget(p.memory_total_bytes);
  p.unified_memory = attrs[kIntegrated].value != 0;
  set_context_footprint(&p);
  // Double data rate: 2 transfers per memory clock (kHz) over a bus of kBusWidth bits.
  p.dram_bandwidth_gbps = 2.0 * attrs[kMemClock].value * 1e3 * (attrs[kBusWidth].value / 8.0) / 1e9;
  p.description = std::string(prop.name) + " (SM" + std::to_string(p.compute_capability) + ", " +
                  std::to_string(p.sm_count) + " SMs, " + std::to_string(p.gpu_clock_mhz) + " MHz, " +
                  std::to_string(p.memory_total_bytes >> 20) + " MiB)";
  return p;
}

#else

Result<DeviceProfile> query_cuda_device(int ordinal) {
  return unsupported("cuda:" + std::to_string(ordinal) + ": this build has no CUDA backend (EDGEVIT_CUDA=OFF)");
}

#endif

}  // namespace edgevit
