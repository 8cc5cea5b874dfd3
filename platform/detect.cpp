#include "platform/detect.h"

#include <sched.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <sstream>
#include <thread>

#include "platform/cuda_query.h"
#include "platform/device_registry.h"

namespace edgevit {

namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

bool contains(const std::string& haystack, const char* needle) { return haystack.find(needle) != std::string::npos; }

// The device-tree model is NUL-terminated and small; read at most 4 KiB.
Result<std::string> read_small_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found(path + ": cannot open");
  std::string text(4096, '\0');
  in.read(&text[0], static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  while (!text.empty() && (text.back() == '\0' || std::isspace(static_cast<unsigned char>(text.back())))) {
    text.pop_back();
  }
  return text;
}

std::string cpu_model_from_cpuinfo(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) {
        std::string v = line.substr(colon + 1);
        v.erase(0, v.find_first_not_of(" \t"));
        return v;
      }
    }
  }
  return "";
}

// Struct defaults for a host without config/devices/host-cpu.yaml.
DeviceProfile builtin_host_profile() {
  DeviceProfile p;
  p.name = "host-cpu";
  p.description = "host CPU (built-in defaults; no host-cpu.yaml found)";
  p.kind = DeviceKind::kCpu;
  p.memory_total_bytes = 8 * kGiB;
  p.memory_budget_bytes = default_memory_budget(p.memory_total_bytes);
  p.cpu_cores = 1;
  return p;
}

}  // namespace

std::string jetson_profile_for_model(const std::string& model, int64_t mem_total_bytes, std::string* why) {
  const std::string m = lower(model);
  struct Family {
    const char* key;        // substring of the lower-case model string
    const char* small;      // profile when the memory is small
    const char* large;
    const char* small_tag;  // size tag in the model string
    const char* large_tag;
    int64_t threshold;      // MemTotal above this -> large
  };
  static const Family kFamilies[] = {
      {"agx orin", "agx-orin-32gb", "agx-orin-64gb", "32gb", "64gb", 40 * kGiB},
      {"orin nx", "orin-nx-8gb", "orin-nx-16gb", "8gb", "16gb", 12 * kGiB},
      {"orin nano", "orin-nano-4gb", "orin-nano-8gb", "4gb", "8gb", 6 * kGiB},
  };
  std::string note;
  std::string name;
  const std::string squeezed = [&] {
    std::string s;
    for (char c : m) {
      if (c != ' ' && c != '-' && c != '_') s += c;
    }
    return s;
  }();
  for (const Family& f : kFamilies) {
    if (!contains(m, f.key)) continue;
    if (contains(squeezed, f.large_tag)) {
      name = f.large;
      note = std::string("model string says ") + f.large_tag;
    } else if (contains(squeezed, f.small_tag)) {
      name = f.small;
      note = std::string("model string says ") + f.small_tag;
    } else if (mem_total_bytes > 0) {
      name = mem_total_bytes > f.threshold ? f.large : f.small;
      note = "memory size from MemTotal " + std::to_string(mem_total_bytes >> 20) + " MiB";
    } else {
      name = f.small;
      note = "memory size unknown: assumed the smaller module";
    }
    break;
  }
  if (why != nullptr) *why = note;
  return name;
}

Result<int64_t> read_meminfo_total(const std::string& path) {
  std::ifstream in(path);
  if (!in) return not_found(path + ": cannot open");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("MemTotal:", 0) != 0) continue;
    std::istringstream fields(line.substr(9));
    int64_t kib = 0;
    std::string unit;
    fields >> kib >> unit;
    if (fields.fail() || kib <= 0 || unit != "kB") return io_error(path + ": malformed MemTotal line '" + line + "'");
    return kib * 1024;
  }
  return io_error(path + ": no MemTotal line");
}

int usable_cpu_count() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

Result<Detection> detect_device(const std::vector<std::string>& search_dirs, const DetectOptions& options) {
  std::string details;
  const auto mem_total = read_meminfo_total(options.meminfo);

  // 1. Jetson device tree.
  auto model = read_small_file(options.device_tree_model);
  if (model.ok() && !model->empty()) {
    std::string why;
    const std::string name = jetson_profile_for_model(*model, mem_total.ok() ? *mem_total : 0, &why);
    if (!name.empty()) {
      auto profile = find_device_profile(name, search_dirs);
      if (!profile.ok()) {
        return profile.status().with_context("device tree " + options.device_tree_model + " names '" + *model +
                                             "' (profile " + name + ")");
      }
      return Detection{std::move(profile).value(), "device-tree: " + options.device_tree_model,
                       "model '" + *model + "' -> " + name + " (" + why + ")"};
    }
    details += "device tree model '" + *model + "' is not a known Jetson board; ";
  } else {
    details += "no device tree model at " + options.device_tree_model + "; ";
  }

  // 2. Any CUDA GPU, described from its properties.
  if (options.query_cuda) {
    auto gpu = query_cuda_device(0);
    if (gpu.ok()) {
      DeviceProfile p = std::move(gpu).value();
      p.cpu_cores = usable_cpu_count();
      p.cpu_model = cpu_model_from_cpuinfo(options.cpuinfo);
      return Detection{std::move(p), "cuda:0 properties", details + "CUDA device 0 queried"};
    }
    details += "no CUDA device (" + gpu.status().message() + "); ";
  } else {
    details += "CUDA query skipped; ";
  }

  // 3. The host CPU: host-cpu.yaml as the default, real memory and cores over it.
  auto host = find_device_profile("host-cpu", search_dirs);
  DeviceProfile p = host.ok() ? std::move(host).value() : builtin_host_profile();
  if (!host.ok()) details += "host-cpu profile not loaded (" + host.status().message() + "); ";
  if (mem_total.ok()) {
    p.memory_total_bytes = *mem_total;
    p.memory_budget_bytes = default_memory_budget(*mem_total);
    details += "memory from " + options.meminfo + " (" + std::to_string(*mem_total >> 20) + " MiB); ";
  } else {
    details += "memory from the profile (" + mem_total.status().message() + "); ";
  }
  p.cpu_cores = usable_cpu_count();
  const std::string cpu_model = cpu_model_from_cpuinfo(options.cpuinfo);
  if (!cpu_model.empty()) p.cpu_model = cpu_model;
  details += std::to_string(p.cpu_cores) + " usable CPU(s) from sched_getaffinity";
  return Detection{std::move(p), "host: " + options.meminfo + ", sched_getaffinity", details};
}

}  // namespace edgevit
