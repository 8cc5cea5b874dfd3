// Which device are we running on? Order: the Jetson device tree (a board we have a profile for), then the
// CUDA runtime (any GPU, described from its properties), then the host CPU (host-cpu profile with the
// real memory and core count). Every source file is injectable so tests can fake a Jetson.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "platform/device_profile.h"
#include "base/status.h"

namespace edgevit {

struct DetectOptions {
  std::string device_tree_model = "/proc/device-tree/model";  // "NVIDIA Jetson Orin NX ... 16GB ..."
  std::string meminfo = "/proc/meminfo";
  std::string cpuinfo = "/proc/cpuinfo";
  bool query_cuda = true;  // false: skip the CUDA runtime (tests, or a CPU-only run on a GPU host)
};

struct Detection {
  DeviceProfile profile;
  std::string source;   // "device-tree: /proc/device-tree/model", "cuda:0 properties", "host: /proc/meminfo"
  std::string details;  // how the choice was made, for `edgevit devices --detect`
};

// Profile name for a Jetson device-tree model string, or "" when it is not a board we know. When the
// string does not give the memory size, `mem_total_bytes` (MemTotal) picks it (0: assume the smallest).
// `*why` (optional) says which.
std::string jetson_profile_for_model(const std::string& model, int64_t mem_total_bytes, std::string* why);

// MemTotal of a /proc/meminfo-format file in bytes; kNotFound/kIoError when absent or malformed.
Result<int64_t> read_meminfo_total(const std::string& path);

// CPUs this process may run on (sched_getaffinity), else std::thread::hardware_concurrency, at least 1.
int usable_cpu_count();

// See the header comment. `search_dirs` are device-profile directories (as for find_device_profile).
Result<Detection> detect_device(const std::vector<std::string>& search_dirs,
                                const DetectOptions& options = DetectOptions());

}  // namespace edgevit
