// open_engine and the device-directory search behind it (api/edgevit.hpp).
#include "api/edgevit.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <system_error>

#ifndef EDGEVIT_VERSION_STRING
#error "EDGEVIT_VERSION_STRING is set by api/CMakeLists.txt"
#endif

namespace edgevit {
namespace fs = std::filesystem;

const char* library_version() { return EDGEVIT_VERSION_STRING; }

std::vector<std::string> device_dirs_for(const std::string& config_path) {
  std::vector<std::string> dirs;
  std::error_code ec;
  const auto add = [&](const fs::path& dir) {
    if (dir.empty() || !fs::is_directory(dir, ec)) return;
    const std::string s = dir.lexically_normal().string();
    if (std::find(dirs.begin(), dirs.end(), s) == dirs.end()) dirs.push_back(s);
  };
  if (const char* env = std::getenv("EDGEVIT_CONFIG_DIR"); env != nullptr && *env != '\0') {
    add(fs::path(env) / "devices");
  }
  if (!config_path.empty()) add(fs::absolute(config_path, ec).parent_path().parent_path() / "devices");
  // Where this library is installed: <prefix>/lib/libedgevit.so -> <prefix>/share/edgevit/config/devices
  // (the Python module lives elsewhere; the lookup is harmless when the folder does not exist).
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&device_dirs_for), &info) != 0 && info.dli_fname != nullptr) {
    add(fs::absolute(info.dli_fname, ec).parent_path().parent_path() / "share/edgevit/config/devices");
  }
  for (const std::string& d : config_subdirs(default_config_dirs(nullptr), "devices")) add(d);
  return dirs;
}

Result<DeviceProfile> resolve_device(const std::string& name, const std::vector<std::string>& dirs) {
  if (name.empty() || name == "auto") {
    EV_ASSIGN_OR_RETURN(Detection d, detect_device(dirs));
    return d.profile;
  }
  return find_device_profile(name, dirs);
}

Result<std::unique_ptr<Engine>> open_engine(const std::string& config_path, const std::string& device,
                                            const EngineOptions& options) {
  EV_ASSIGN_OR_RETURN(ModelSpec spec, load_model_spec(config_path));
  EV_ASSIGN_OR_RETURN(DeviceProfile profile, resolve_device(device, device_dirs_for(config_path)));
  return Engine::create(spec, profile, options);
}

}  // namespace edgevit
