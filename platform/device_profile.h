// DeviceProfile: what the runtime knows about a device. Loaded from config/devices/NAME.yaml (boards we
// cannot query from a host) or filled from CUDA properties at run time. platform/ knows nothing of models.
#pragma once

#include <cstdint>
#include <string>

namespace edgevit {

enum class DeviceKind { kCpu, kCuda };
const char* to_string(DeviceKind k);  // "cpu" | "cuda"

struct DeviceProfile {
  std::string name;         // "orin-nx-16gb"
  std::string description;  // human words: "Jetson Orin NX 16GB (SM87, 8 SMs)"
  std::string source;       // where it came from: "config/devices/orin-nx-16gb.yaml" or "cuda:0 properties"
  DeviceKind kind = DeviceKind::kCpu;

  // GPU facts (kind == kCuda). CC as major*10+minor (87 for Orin).
  int compute_capability = 0;
  int sm_count = 0;
  int gpu_clock_mhz = 0;
  int max_threads_per_sm = 0;
  int max_blocks_per_sm = 0;               // resident blocks per SM (16 on CC 8.7); occupancy
  int64_t smem_per_sm_bytes = 0;
  int64_t smem_per_block_bytes = 0;        // default (48 KB)
  int64_t smem_per_block_optin_bytes = 0;  // opt-in (163 KB on CC 8.7)
  int registers_per_sm = 0;
  int64_t l2_bytes = 0;
  double fp16_dense_tflops = 0;  // tensor-core dense fp16, fp32 accumulate
  double int8_dense_tops = 0;

  // Memory.
  int64_t memory_total_bytes = 0;
  int64_t memory_budget_bytes = 0;     // what edgevit may use (arena + context), <= total
  bool unified_memory = false;         // CPU and GPU share DRAM (Jetson)
  // The CUDA context and the libraries loaded into it (cuBLASLt, the kernels' modules): device memory, and
  // host memory (the driver's and the libraries' resident pages). Measured on the GPUs we can run; an
  // estimate elsewhere (the Orin profiles), which `cuda_context_basis` says.
  int64_t cuda_context_bytes = 0;
  int64_t cuda_context_host_bytes = 0;
  std::string cuda_context_basis;      // "estimate (...)" or "measured on ... (docs/benchmarks.md)"
  double dram_bandwidth_gbps = 0;      // GB/s (1e9 bytes/s)

  // CPU.
  int cpu_cores = 0;
  std::string cpu_model;               // "8x Cortex-A78AE"
};

}  // namespace edgevit
