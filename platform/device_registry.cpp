#include "platform/device_registry.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <utility>

#include <yaml-cpp/yaml.h>

#include "base/yaml_guard.h"

namespace edgevit {

namespace fs = std::filesystem;

namespace {

constexpr int64_t kKiB = 1024;
constexpr int64_t kMiB = 1024 * 1024;

const std::vector<std::pair<const char*, DeviceKind>> kKinds = {{"cpu", DeviceKind::kCpu},
                                                                 {"cuda", DeviceKind::kCuda}};

bool valid_name(const std::string& name) {
  if (name.empty() || name.size() > 128 || name[0] == '.') return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
  });
}

Status read_gpu(ConfigMap& m, DeviceProfile* p) {
  EV_RETURN_IF_ERROR(m.get_int("sm", true, 30, 199, &p->compute_capability));
  EV_RETURN_IF_ERROR(m.get_int("sm_count", true, 1, 1024, &p->sm_count));
  EV_RETURN_IF_ERROR(m.get_int("clock_mhz", true, 1, 10000, &p->gpu_clock_mhz));
  EV_RETURN_IF_ERROR(m.get_int("max_threads_per_sm", true, 32, 4096, &p->max_threads_per_sm));
  EV_RETURN_IF_ERROR(m.get_int("max_blocks_per_sm", true, 1, 256, &p->max_blocks_per_sm));
  int64_t smem_sm = 0;
  int64_t smem_block = 48;
  int64_t smem_optin = 0;
  EV_RETURN_IF_ERROR(m.get_int("smem_per_sm_kib", true, 1, 4096, &smem_sm));
  EV_RETURN_IF_ERROR(m.get_int("smem_per_block_kib", false, 1, smem_sm, &smem_block));
  smem_optin = smem_block;
  EV_RETURN_IF_ERROR(m.get_int("smem_per_block_optin_kib", false, smem_block, smem_sm, &smem_optin));
  p->smem_per_sm_bytes = smem_sm * kKiB;
  p->smem_per_block_bytes = smem_block * kKiB;
  p->smem_per_block_optin_bytes = smem_optin * kKiB;
  EV_RETURN_IF_ERROR(m.get_int("registers_per_sm", true, 1024, 1 << 20, &p->registers_per_sm));
  int64_t l2_kib = 0;
  EV_RETURN_IF_ERROR(m.get_int("l2_kib", true, 0, 1 << 20, &l2_kib));
  p->l2_bytes = l2_kib * kKiB;
  EV_RETURN_IF_ERROR(m.get_double("fp16_dense_tflops", true, 0.0, 1e4, &p->fp16_dense_tflops, true));
  EV_RETURN_IF_ERROR(m.get_double("int8_dense_tops", false, 0.0, 2e4, &p->int8_dense_tops));
  return m.finish();
}

Status read_memory(ConfigMap& m, DeviceProfile* p) {
  int64_t total_mib = 0;
  EV_RETURN_IF_ERROR(m.get_int("total_mib", true, 64, int64_t{1} << 24, &total_mib));
  p->memory_total_bytes = total_mib * kMiB;
  int64_t budget_mib = default_memory_budget(p->memory_total_bytes) / kMiB;
  EV_RETURN_IF_ERROR(m.get_int("budget_mib", false, 1, total_mib, &budget_mib));
  p->memory_budget_bytes = budget_mib * kMiB;
  p->unified_memory = false;
  EV_RETURN_IF_ERROR(m.get_bool("unified", false, &p->unified_memory));
  int64_t context_mib = p->kind == DeviceKind::kCuda ? kDefaultCudaContextBytes / kMiB : 0;
  EV_RETURN_IF_ERROR(m.get_int("cuda_context_mib", false, 0, budget_mib - 1, &context_mib));
  if (p->kind == DeviceKind::kCpu && context_mib != 0) {
    return m.error("cuda_context_mib", "must be 0 for kind cpu");
  }
  if (context_mib >= budget_mib) {
    // Reached when cuda_context_mib is absent and its default does not fit (found by fuzz_device_profile).
    return m.error("budget_mib", std::to_string(budget_mib) + " MiB leaves nothing after the CUDA context estimate (" +
                                     std::to_string(context_mib) + " MiB, cuda_context_mib)");
  }
  p->cuda_context_bytes = context_mib * kMiB;
  int64_t context_host_mib = p->kind == DeviceKind::kCuda ? kDefaultCudaContextHostBytes / kMiB : 0;
  EV_RETURN_IF_ERROR(m.get_int("cuda_context_host_mib", false, 0, total_mib, &context_host_mib));
  if (p->kind == DeviceKind::kCpu && context_host_mib != 0) {
    return m.error("cuda_context_host_mib", "must be 0 for kind cpu");
  }
  p->cuda_context_host_bytes = context_host_mib * kMiB;
  if (p->kind == DeviceKind::kCuda)
    p->cuda_context_basis = "estimate (memory.cuda_context_mib / cuda_context_host_mib of the profile; not measured on this board)";
  EV_RETURN_IF_ERROR(m.get_double("bandwidth_gbps", true, 0.0, 1e5, &p->dram_bandwidth_gbps, true));
  return m.finish();
}

Status parse_into(const YAML::Node& root, const std::string& display_name, const std::string& expected_name,
                  DeviceProfile* p) {
  ConfigMap top(root, display_name, "");
  p->name = expected_name;
  EV_RETURN_IF_ERROR(top.get_string("name", expected_name.empty(), &p->name));
  if (!valid_name(p->name)) {
    return top.error("name", "'" + p->name + "' is not a valid profile name (use a-z, 0-9, '-', '_', '.')");
  }
  if (!expected_name.empty() && p->name != expected_name) {
    return top.error("name", "'" + p->name + "' does not match the file name '" + expected_name + ".yaml'");
  }
  EV_RETURN_IF_ERROR(top.get_string("description", false, &p->description, /*allow_empty=*/true));
  EV_RETURN_IF_ERROR(top.get_enum("kind", true, kKinds, &p->kind));

  ConfigMap gpu;
  if (p->kind == DeviceKind::kCuda) {
    EV_RETURN_IF_ERROR(top.get_map("gpu", true, &gpu));
    EV_RETURN_IF_ERROR(read_gpu(gpu, p));
  } else if (top.has("gpu")) {
    return top.error("gpu", "not allowed for kind cpu (set kind: cuda)");
  }

  ConfigMap memory;
  EV_RETURN_IF_ERROR(top.get_map("memory", true, &memory));
  EV_RETURN_IF_ERROR(read_memory(memory, p));

  ConfigMap cpu;
  EV_RETURN_IF_ERROR(top.get_map("cpu", true, &cpu));
  EV_RETURN_IF_ERROR(cpu.get_int("cores", true, 1, 4096, &p->cpu_cores));
  EV_RETURN_IF_ERROR(cpu.get_string("model", false, &p->cpu_model));
  EV_RETURN_IF_ERROR(cpu.finish());
  return top.finish();
}

bool is_path(const std::string& s) {
  const auto ends_with = [&](const char* suffix) {
    const std::string x(suffix);
    return s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  return s.find('/') != std::string::npos || ends_with(".yaml") || ends_with(".yml");
}

std::vector<std::string> resolve_dirs(const std::vector<std::string>& search_dirs) {
  if (!search_dirs.empty()) return search_dirs;
  return config_subdirs(default_config_dirs(nullptr), "devices");
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : ", ") + s;
  return out.empty() ? "(none)" : out;
}

}  // namespace

int64_t default_memory_budget(int64_t total_bytes) {
  const int64_t reserve = std::max<int64_t>(int64_t{1} << 30, total_bytes / 4);
  return std::max(total_bytes - reserve, total_bytes / 8);
}

Result<DeviceProfile> parse_device_profile(const std::string& yaml_text, const std::string& display_name,
                                           const std::string& expected_name) {
  EV_ASSIGN_OR_RETURN(YAML::Node root, parse_yaml_mapping(yaml_text, display_name));
  DeviceProfile profile;
  try {
    EV_RETURN_IF_ERROR(parse_into(root, display_name, expected_name, &profile));
  } catch (const YAML::Exception& e) {
    return yaml_error(display_name, e.mark, "", std::string("YAML error: ") + e.msg);
  }
  profile.source = display_name;
  return profile;
}

Result<DeviceProfile> load_device_profile(const std::string& path) {
  EV_ASSIGN_OR_RETURN(std::string text, read_config_file(path));
  return parse_device_profile(text, path, fs::path(path).stem().string());
}

std::vector<std::string> default_config_dirs(const char* argv0) {
  std::vector<std::string> dirs;
  std::error_code ec;
  const auto add = [&](const fs::path& dir) {
    if (dir.empty() || !fs::is_directory(dir, ec)) return;
    const std::string s = dir.lexically_normal().string();
    if (std::find(dirs.begin(), dirs.end(), s) == dirs.end()) dirs.push_back(s);
  };
  if (const char* env = std::getenv("EDGEVIT_CONFIG_DIR"); env != nullptr && *env != '\0') add(env);

  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec && argv0 != nullptr && std::string(argv0).find('/') != std::string::npos) {
    ec.clear();
    exe = fs::absolute(argv0, ec);
  }
  if (!ec && !exe.empty()) {
    const fs::path dir = exe.parent_path();
    add(dir / ".." / "config");
    add(dir / ".." / ".." / "config");
    add(dir / ".." / "share" / "edgevit" / "config");
  }
  return dirs;
}

std::vector<std::string> config_subdirs(const std::vector<std::string>& bases, const std::string& sub) {
  std::vector<std::string> dirs;
  std::error_code ec;
  for (const auto& base : bases) {
    const fs::path dir = fs::path(base) / sub;
    if (fs::is_directory(dir, ec)) dirs.push_back(dir.lexically_normal().string());
  }
  return dirs;
}

Result<DeviceProfile> find_device_profile(const std::string& name_or_path,
                                          const std::vector<std::string>& search_dirs) {
  if (is_path(name_or_path)) return load_device_profile(name_or_path);
  if (!valid_name(name_or_path)) {
    return invalid_argument("device profile name '" + name_or_path +
                            "' is not valid (use a-z, 0-9, '-', '_', '.', or give a path to a .yaml file)");
  }
  const std::vector<std::string> dirs = resolve_dirs(search_dirs);
  std::error_code ec;
  for (const auto& dir : dirs) {
    const fs::path candidate = fs::path(dir) / (name_or_path + ".yaml");
    if (fs::exists(candidate, ec)) return load_device_profile(candidate.string());
  }
  std::vector<std::string> known;
  for (const auto& p : list_device_profiles(dirs)) known.push_back(p.name);
  return not_found("device profile '" + name_or_path + "' not found in: " + join(dirs) +
                   " (available: " + join(known) + "; set EDGEVIT_CONFIG_DIR or pass a path)");
}

std::vector<DeviceProfile> list_device_profiles(const std::vector<std::string>& search_dirs,
                                                std::vector<Status>* errors) {
  std::vector<DeviceProfile> profiles;
  std::error_code ec;
  for (const auto& dir : resolve_dirs(search_dirs)) {
    std::vector<fs::path> files;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      if (it->path().extension() == ".yaml" && it->is_regular_file(ec)) files.push_back(it->path());
    }
    std::sort(files.begin(), files.end());
    for (const auto& file : files) {
      const std::string stem = file.stem().string();
      const bool hidden = std::any_of(profiles.begin(), profiles.end(),
                                      [&](const DeviceProfile& p) { return p.name == stem; });
      if (hidden) continue;
      auto profile = load_device_profile(file.string());
      if (profile.ok()) {
        profiles.push_back(std::move(profile).value());
      } else if (errors != nullptr) {
        errors->push_back(profile.status());
      }
    }
  }
  std::sort(profiles.begin(), profiles.end(),
            [](const DeviceProfile& a, const DeviceProfile& b) { return a.name < b.name; });
  return profiles;
}

}  // namespace edgevit
