// Platform report of the self-test: detected device, nvpmodel power mode, devfreq/cpufreq clocks, memory.
// Files only (no nvpmodel or tegrastats processes); anything missing is said, never an error.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "selftest/selftest.h"

namespace edgevit::selftest {
namespace fs = std::filesystem;
namespace {

bool read_text(const std::string& path, std::string* out) {
  std::ifstream in(path);
  if (!in) return false;
  std::ostringstream s;
  s << in.rdbuf();
  *out = s.str();
  return true;
}

// First integer of a small sysfs file, or 0.
int64_t read_int(const fs::path& path) {
  std::string text;
  if (!read_text(path.string(), &text)) return 0;
  try {
    return std::stoll(text);
  } catch (const std::exception&) {
    return 0;
  }
}

// Digits of a regex match as an int; -1 when out of range.
int to_int(const std::string& digits) {
  if (digits.empty() || digits.size() > 9) return -1;
  return std::stoi(digits);
}

bool is_gpu_devfreq(const std::string& name) {
  for (const char* key : {"gpu", "ga10b", "gv11b", "gp10b"})
    if (name.find(key) != std::string::npos) return true;
  return false;
}

void read_power_mode(const PlatformPaths& paths, PlatformInfo* info) {
  std::string conf, status;
  const bool have_conf = read_text(paths.nvpmodel_conf, &conf);
  const bool have_status = read_text(paths.nvpmodel_status, &status);
  if (!have_conf && !have_status) {
    info->power_mode_source = "not a Jetson power-model system: no " + paths.nvpmodel_conf + ", no " + paths.nvpmodel_status;
    return;
  }
  // id -> name from "< POWER_MODEL ID=0 NAME=MAXN >"; the default from "< PM_CONFIG DEFAULT=2 >".
  std::vector<std::pair<int, std::string>> modes;
  int default_id = -1;
  static const std::regex model_re(R"(<\s*POWER_MODEL\s+ID\s*=\s*(\d+)\s+NAME\s*=\s*([^\s>]+))");
  static const std::regex default_re(R"(<\s*PM_CONFIG\s+DEFAULT\s*=\s*(\d+))");
  for (std::sregex_iterator it(conf.begin(), conf.end(), model_re), end; it != end; ++it)
    modes.emplace_back(to_int((*it)[1]), (*it)[2]);
  std::smatch m;
  if (std::regex_search(conf, m, default_re)) default_id = to_int(m[1]);
  auto name_of = [&](int id) {
    for (const auto& [i, n] : modes)
      if (i == id) return n;
    return std::string("mode ") + std::to_string(id);
  };
  static const std::regex pmode_re(R"(pmode\s*:\s*(\d+))");
  if (have_status && std::regex_search(status, m, pmode_re)) {
    const int id = to_int(m[1]);
    info->power_mode = name_of(id) + " (id " + std::to_string(id) + ")";
    info->power_mode_source = paths.nvpmodel_status + (have_conf ? " + " + paths.nvpmodel_conf : "");
  } else if (default_id >= 0) {
    info->power_mode = name_of(default_id) + " (id " + std::to_string(default_id) + ", the default)";
    info->power_mode_source = paths.nvpmodel_conf + " (current mode not readable from " + paths.nvpmodel_status + ")";
  } else {
    info->power_mode_source = "no power mode found in " + paths.nvpmodel_conf + " / " + paths.nvpmodel_status;
  }
}

void read_clocks(const PlatformPaths& paths, PlatformInfo* info) {
  std::vector<std::string> seen;  // canonical paths, so gpu.0/devfreq and class/devfreq list one device once
  std::error_code ec;
  for (const std::string& dir : paths.devfreq_dirs) {
    if (!fs::is_directory(dir, ec)) continue;
    std::vector<fs::path> entries;
    for (const auto& e : fs::directory_iterator(dir, ec)) entries.push_back(e.path());
    std::sort(entries.begin(), entries.end());
    for (const fs::path& dev : entries) {
      const std::string name = dev.filename().string();
      if (!is_gpu_devfreq(name)) continue;
      const std::string canon = fs::weakly_canonical(dev, ec).string();
      if (std::find(seen.begin(), seen.end(), canon) != seen.end()) continue;
      seen.push_back(canon);
      ClockInfo c;
      c.name = "gpu " + name;
      c.path = (dev / "cur_freq").string();
      c.cur_hz = read_int(dev / "cur_freq");
      c.min_hz = read_int(dev / "min_freq");
      c.max_hz = read_int(dev / "max_freq");
      if (c.cur_hz > 0) info->clocks.push_back(c);
    }
  }
  for (int cpu = 0; cpu < 256; ++cpu) {
    const fs::path dir = fs::path(paths.cpu_sysfs) / ("cpu" + std::to_string(cpu)) / "cpufreq";
    if (!fs::is_directory(dir, ec)) {
      if (cpu > 0) break;
      continue;
    }
    ClockInfo c;
    c.name = "cpu" + std::to_string(cpu);
    c.path = (dir / "scaling_cur_freq").string();
    c.cur_hz = read_int(dir / "scaling_cur_freq") * 1000;
    c.min_hz = read_int(dir / "scaling_min_freq") * 1000;
    c.max_hz = read_int(dir / "scaling_max_freq") * 1000;
    if (c.cur_hz > 0) info->clocks.push_back(c);
  }
}

void read_memory(const std::string& meminfo, PlatformInfo* info) {
  std::ifstream in(meminfo);
  if (!in) {
    info->meminfo_source = meminfo + ": not readable";
    return;
  }
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string key, unit;
    int64_t kib = 0;
    f >> key >> kib >> unit;
    if (f.fail() || unit != "kB") continue;
    if (key == "MemTotal:") info->mem_total_bytes = kib * 1024;
    if (key == "MemAvailable:") info->mem_available_bytes = kib * 1024;
  }
  info->meminfo_source = meminfo;
}

}  // namespace

Result<PlatformInfo> read_platform_info(const std::vector<std::string>& device_dirs, const PlatformPaths& paths) {
  PlatformInfo info;
  auto detected = detect_device(device_dirs, paths.detect);
  if (!detected.ok()) return detected.status().with_context("device detection");
  info.detected = std::move(detected).value();
  read_power_mode(paths, &info);
  read_clocks(paths, &info);
  read_memory(paths.detect.meminfo, &info);
  return info;
}

}  // namespace edgevit::selftest
