// What a device can do, with the reason in words users can act on. The planner (runtime/plan) filters
// its kernel table with these; platform/ itself knows nothing of kernels or models.
#pragma once

#include <cstdint>
#include <string>

#include "platform/device_profile.h"

namespace edgevit {

struct Decision {
  bool yes = false;
  std::string reason;  // "yes: ..." / "no: ..."
};

// "8.7" from 87.
std::string format_compute_capability(int cc);

// Tensor-core path of the fused kernels: mma.sync m16n8k16 (fp16 in, fp32 accumulate), ldmatrix and
// cp.async, which need a CUDA device of compute capability 8.0 or newer.
Decision supports_tensor_core_mma(const DeviceProfile& profile);

// fp16 storage and arithmetic: CUDA devices of compute capability 5.3+; the CPU backend is fp32 only.
Decision supports_fp16(const DeviceProfile& profile);

// Largest dynamic shared memory one block may use (the opt-in limit, else the default), bytes; 0 on CPU.
int64_t max_smem_per_block(const DeviceProfile& profile);

}  // namespace edgevit
