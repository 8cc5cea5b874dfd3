// Fills a DeviceProfile from the CUDA runtime (cudaGetDeviceProperties + cudaDeviceGetAttribute). Only
// platform/cuda_query.cpp touches the CUDA API, and only when built with EDGEVIT_HAVE_CUDA.
#pragma once

#include <string>

#include "platform/device_profile.h"
#include "base/status.h"

namespace edgevit {

// Profile of CUDA device `ordinal`: name "cuda-<sanitized device name>", source "cuda:<ordinal> properties".
// kUnsupported when built without CUDA; kNotFound when there is no driver or no such device.
// Tensor-core throughput is an estimate (estimate_fp16_dense_tflops); memory budget follows
// default_memory_budget; the context size is kDefaultCudaContextBytes.
Result<DeviceProfile> query_cuda_device(int ordinal);

// "NVIDIA H100 80GB HBM3" -> "cuda-nvidia-h100-80gb-hbm3": lower case, runs of other characters -> '-'.
std::string cuda_profile_name(const std::string& device_name);

// Dense fp16 tensor-core TFLOP/s (fp32 accumulate) from flops/clock/SM by architecture:
// 1024 (SM70-SM75, SM86, SM89, SM72), 2048 (SM80, SM87), 4096 (SM90+); 0 below SM70 (no tensor cores).
// Checked against the Orin table in docs/config.md: SM87, 8 SMs, 918 MHz -> 15.0.
double estimate_fp16_dense_tflops(int compute_capability, int sm_count, int clock_mhz);

}  // namespace edgevit
