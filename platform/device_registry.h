// Device profiles on disk: config/devices/NAME.yaml <-> DeviceProfile, and where to look for them.
// Schema (every key, unit, default, range): docs/config.md. Loading goes through base/yaml_guard, so
// errors read "<file>:<line>:<col>: <key.path>: <reason>" (kConfigError).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "platform/device_profile.h"
#include "base/status.h"

namespace edgevit {

// Memory edgevit may use on a device with `total_bytes` of DRAM when the profile gives no budget:
// total minus an OS reserve of max(1 GiB, 25% of total) (L4T, the display stack and other processes
// live in the same DRAM on Jetson). Never below 1/8 of total.
int64_t default_memory_budget(int64_t total_bytes);

// Estimated CUDA context + cuBLASLt handle/workspace on Jetson when a profile does not say (bytes).
constexpr int64_t kDefaultCudaContextBytes = int64_t{384} << 20;
// Host memory of the CUDA driver and libraries once a context and cuBLASLt are up (resident pages of
// libcuda, libcudart, libcublasLt and the driver's own allocations): an estimate where not measured.
constexpr int64_t kDefaultCudaContextHostBytes = int64_t{256} << 20;

// Parses profile text. `display_name` prefixes messages; `expected_name` (the file stem, or "") must
// equal the `name` key when both are given, and is the name when the key is absent.
Result<DeviceProfile> parse_device_profile(const std::string& yaml_text, const std::string& display_name,
                                           const std::string& expected_name);

// Reads config/devices/NAME.yaml style files. source = path.
Result<DeviceProfile> load_device_profile(const std::string& path);

// Base config directories, most specific first, only those that exist:
//   $EDGEVIT_CONFIG_DIR, then relative to the running executable (/proc/self/exe, else argv0):
//   <exe>/../config, <exe>/../../config, <exe>/../share/edgevit/config.
// `argv0` may be null.
std::vector<std::string> default_config_dirs(const char* argv0);

// `sub` under each base that exists as a directory ("devices", "models").
std::vector<std::string> config_subdirs(const std::vector<std::string>& bases, const std::string& sub);

// A path (contains '/' or ends in .yaml/.yml) is loaded as is; a name looks up NAME.yaml in
// `search_dirs` in order (empty: config_subdirs(default_config_dirs(nullptr), "devices")).
// kNotFound lists the directories searched and the names available.
Result<DeviceProfile> find_device_profile(const std::string& name_or_path,
                                          const std::vector<std::string>& search_dirs);

// Every *.yaml in `search_dirs` that loads, sorted by name; a name found in an earlier directory hides
// later ones. Files that fail to load are skipped and their errors appended to `errors` when given.
std::vector<DeviceProfile> list_device_profiles(const std::vector<std::string>& search_dirs,
                                                std::vector<Status>* errors = nullptr);

}  // namespace edgevit
