// Device profiles: the shipped boards carry the documented facts, malformed profiles are rejected with
// file:line: key messages, lookup by name/path and listing work, capability decisions give reasons.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "platform/capabilities.h"
#include "platform/cuda_query.h"
#include "platform/device_registry.h"
#include "tests/testutil/testutil.h"

namespace edgevit {
namespace {

namespace fs = std::filesystem;

const std::string& devices_dir() {
  static const std::string dir = testutil::source_path("config/devices");
  return dir;
}

DeviceProfile must_find(const std::string& name) {
  auto p = find_device_profile(name, {devices_dir()});
  EXPECT_TRUE(p.ok()) << p.status().to_string();
  return p.ok() ? *p : DeviceProfile();
}

TEST(DeviceProfiles, ShippedBoardsCarryTheDocumentedFacts) {
  struct Fact {
    const char* name;
    int sms;
    int clock_mhz;
    int64_t total_gib;
    double bandwidth;
    int64_t l2_mib;
    double fp16;  // NVIDIA's approximate dense fp16 TFLOP/s
    int cores;
  };
  const Fact facts[] = {
      {"orin-nx-16gb", 8, 918, 16, 102.4, 2, 15.0, 8},   {"orin-nx-8gb", 8, 765, 8, 102.4, 2, 12.5, 6},
      {"orin-nano-8gb", 8, 625, 8, 68.0, 2, 10.0, 6},    {"orin-nano-4gb", 4, 625, 4, 34.0, 2, 5.0, 6},
      {"agx-orin-64gb", 16, 1300, 64, 204.8, 4, 42.5, 12}, {"agx-orin-32gb", 14, 939, 32, 204.8, 4, 27.0, 8},
  };
  for (const Fact& f : facts) {
    SCOPED_TRACE(f.name);
    const DeviceProfile p = must_find(f.name);
    EXPECT_EQ(p.kind, DeviceKind::kCuda);
    EXPECT_EQ(p.compute_capability, 87);
    EXPECT_EQ(p.sm_count, f.sms);
    EXPECT_EQ(p.gpu_clock_mhz, f.clock_mhz);
    EXPECT_EQ(p.max_threads_per_sm, 1536);
    EXPECT_EQ(p.max_blocks_per_sm, 16);
    EXPECT_EQ(p.smem_per_sm_bytes, 164 * 1024);
    EXPECT_EQ(p.smem_per_block_bytes, 48 * 1024);
    EXPECT_EQ(p.smem_per_block_optin_bytes, 163 * 1024);
    EXPECT_EQ(p.registers_per_sm, 65536);
    EXPECT_EQ(p.l2_bytes, f.l2_mib << 20);
    EXPECT_EQ(p.memory_total_bytes, f.total_gib << 30);
    EXPECT_EQ(p.memory_budget_bytes, default_memory_budget(p.memory_total_bytes));
    EXPECT_TRUE(p.unified_memory);
    EXPECT_GT(p.cuda_context_bytes, 100 << 20);
    EXPECT_LT(p.cuda_context_bytes, 1 << 30);
    EXPECT_DOUBLE_EQ(p.dram_bandwidth_gbps, f.bandwidth);
    // NVIDIA's rounded figure (the "~" column), and exactly the documented derivation, to 2 decimals.
    EXPECT_NEAR(p.fp16_dense_tflops, f.fp16, 0.03 * f.fp16);
    EXPECT_NEAR(p.fp16_dense_tflops, estimate_fp16_dense_tflops(87, f.sms, f.clock_mhz), 0.005);
    EXPECT_NEAR(p.int8_dense_tops, 2 * p.fp16_dense_tflops, 0.005);
    EXPECT_EQ(p.cpu_cores, f.cores);
    EXPECT_EQ(p.cpu_model, "Cortex-A78AE");
    EXPECT_NE(p.source.find("orin"), std::string::npos);
  }
}

TEST(DeviceProfiles, HostCpuIsACpuProfileWithoutGpuFacts) {
  const DeviceProfile p = must_find("host-cpu");
  EXPECT_EQ(p.kind, DeviceKind::kCpu);
  EXPECT_EQ(p.compute_capability, 0);
  EXPECT_EQ(p.cuda_context_bytes, 0);
  EXPECT_GT(p.memory_budget_bytes, 0);
  EXPECT_LE(p.memory_budget_bytes, p.memory_total_bytes);
}

TEST(DeviceProfiles, BudgetRule) {
  const int64_t gib = int64_t{1} << 30;
  EXPECT_EQ(default_memory_budget(4 * gib), 3 * gib);    // 1 GiB reserve
  EXPECT_EQ(default_memory_budget(16 * gib), 12 * gib);  // 25% reserve
  EXPECT_EQ(default_memory_budget(2 * gib), 1 * gib);
  EXPECT_EQ(default_memory_budget(gib / 2), gib / 16);   // never below 1/8
}

TEST(DeviceProfiles, FindByPathAndByName) {
  const DeviceProfile by_name = must_find("orin-nano-4gb");
  auto by_path = find_device_profile(devices_dir() + "/orin-nano-4gb.yaml", {});
  ASSERT_TRUE(by_path.ok()) << by_path.status().to_string();
  EXPECT_EQ(by_path->name, by_name.name);
  EXPECT_EQ(by_path->sm_count, 4);

  auto missing = find_device_profile("orin-nx-32gb", {devices_dir()});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("orin-nx-16gb"), std::string::npos) << missing.status().message();

  auto traversal = find_device_profile("..", {devices_dir()});
  EXPECT_EQ(traversal.status().code(), StatusCode::kInvalidArgument);
}

TEST(DeviceProfiles, ListIsSortedByName) {
  std::vector<Status> errors;
  const auto all = list_device_profiles({devices_dir()}, &errors);
  EXPECT_TRUE(errors.empty()) << errors.front().to_string();
  std::vector<std::string> names;
  for (const auto& p : all) names.push_back(p.name);
  const std::vector<std::string> expected = {"agx-orin-32gb", "agx-orin-64gb", "host-cpu",   "orin-nano-4gb",
                                             "orin-nano-8gb", "orin-nx-16gb",  "orin-nx-8gb"};
  EXPECT_EQ(names, expected);
}

class ProfileDir {
 public:
  ProfileDir() : dir_(fs::temp_directory_path() / ("edgevit_profiles_" + std::to_string(::getpid()))) {
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  ~ProfileDir() { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) const {
    const std::string path = (dir_ / (name + ".yaml")).string();
    std::ofstream(path) << text;
    return path;
  }
  std::string dir() const { return dir_.string(); }

 private:
  fs::path dir_;
};

std::string shipped_text(const std::string& name) {
  std::ifstream in(devices_dir() + "/" + name + ".yaml");
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string replace(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

TEST(DeviceProfiles, EarlierDirectoryHidesLaterOnesAndBrokenFilesAreReported) {
  ProfileDir tmp;
  tmp.write("orin-nx-16gb", replace(shipped_text("orin-nx-16gb"), "sm_count: 8", "sm_count: 7"));
  tmp.write("broken", "name: broken\nkind: gpu\n");
  std::vector<Status> errors;
  const auto all = list_device_profiles({tmp.dir(), devices_dir()}, &errors);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].message().find("broken.yaml:2:7: kind: 'gpu' is not one of: cpu, cuda"), std::string::npos)
      << errors[0].message();
  int found = 0;
  for (const auto& p : all) {
    if (p.name == "orin-nx-16gb") {
      ++found;
      EXPECT_EQ(p.sm_count, 7);
    }
  }
  EXPECT_EQ(found, 1);
  EXPECT_EQ(must_find("orin-nx-16gb").sm_count, 8);
}

struct BadProfile {
  const char* what;
  const char* from;  // replaced in orin-nx-16gb.yaml
  const char* to;
  const char* fragment;
};

TEST(DeviceProfiles, MalformedProfilesAreRejectedWithKeyPaths) {
  const BadProfile cases[] = {
      {"unknown key", "  sm_count: 8\n", "  sm_count: 8\n  sm_cont: 8\n", ":9:3: gpu.sm_cont: unknown key"},
      {"string for int", "sm_count: 8", "sm_count: eight", "gpu.sm_count: expected an integer"},
      {"zero SMs", "sm_count: 8", "sm_count: 0", "gpu.sm_count: 0 is out of range [1, 1024]"},
      {"optin below default", "smem_per_block_optin_kib: 163", "smem_per_block_optin_kib: 32",
       "gpu.smem_per_block_optin_kib: 32 is out of range [48, 164]"},
      {"budget over total", "budget_mib: 12288", "budget_mib: 20000",
       "memory.budget_mib: 20000 is out of range [1, 16384]"},
      {"context over budget", "cuda_context_mib: 384", "cuda_context_mib: 13000", "memory.cuda_context_mib"},
      {"negative bandwidth", "bandwidth_gbps: 102.4", "bandwidth_gbps: -1", "memory.bandwidth_gbps"},
      {"bad kind", "kind: cuda", "kind: tpu", "kind: 'tpu' is not one of: cpu, cuda"},
      {"name mismatch", "name: orin-nx-16gb", "name: orin-nx-8gb", "name: 'orin-nx-8gb' does not match"},
      {"missing gpu", "gpu:\n", "gpux:\n", "gpu: required section is missing"},
      {"unified not bool", "unified: true", "unified: 1", "memory.unified: expected true or false"},
      {"alias", "cores: 8", "cores: *eight", "alias not allowed"},
      {"duplicate", "  sm: 87", "  sm: 87\n  sm: 72", "gpu.sm: duplicate key"},
  };
  ProfileDir tmp;
  for (const BadProfile& c : cases) {
    SCOPED_TRACE(c.what);
    const std::string path = tmp.write("orin-nx-16gb", replace(shipped_text("orin-nx-16gb"), c.from, c.to));
    auto p = load_device_profile(path);
    ASSERT_FALSE(p.ok());
    EXPECT_EQ(p.status().code(), StatusCode::kConfigError);
    EXPECT_EQ(p.status().message().rfind(path + ":", 0), 0u) << p.status().message();
    EXPECT_NE(p.status().message().find(c.fragment), std::string::npos) << p.status().message();
  }
  const std::string gpu_on_cpu =
      tmp.write("host-cpu", shipped_text("host-cpu") + "gpu:\n  sm: 87\n");
  auto p = load_device_profile(gpu_on_cpu);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("gpu: not allowed for kind cpu"), std::string::npos) << p.status().message();
}

TEST(DeviceProfiles, DefaultConfigDirsHonourTheEnvironment) {
  ProfileDir tmp;
  ::setenv("EDGEVIT_CONFIG_DIR", tmp.dir().c_str(), 1);
  const auto dirs = default_config_dirs(nullptr);
  ::unsetenv("EDGEVIT_CONFIG_DIR");
  ASSERT_FALSE(dirs.empty());
  EXPECT_EQ(dirs.front(), fs::path(tmp.dir()).lexically_normal().string());
  fs::create_directories(fs::path(tmp.dir()) / "devices");
  EXPECT_EQ(config_subdirs({tmp.dir(), tmp.dir() + "/nope"}, "devices"),
            std::vector<std::string>{(fs::path(tmp.dir()) / "devices").string()});
}

TEST(DeviceProfiles, DefaultConfigDirsFindTheRepositoryFromTheTestBinary) {
  // Test binaries live in <build>/tests/; <build> is inside the repository in this project's layout.
  const auto dirs = default_config_dirs(nullptr);
  bool has_repo_config = false;
  for (const auto& d : dirs) {
    has_repo_config = has_repo_config || fs::equivalent(d, testutil::source_path("config"));
  }
  const std::string source = fs::path(EDGEVIT_SOURCE_DIR).lexically_normal().string();
  const bool build_inside_source =
      fs::path(EDGEVIT_BINARY_DIR).lexically_normal().string().rfind(source, 0) == 0;
  if (!build_inside_source) GTEST_SKIP() << "skipped: build directory outside the source tree";
  EXPECT_TRUE(has_repo_config);
}

TEST(Capabilities, TensorCoreMmaNeedsSm80) {
  const Decision orin = supports_tensor_core_mma(must_find("orin-nx-16gb"));
  EXPECT_TRUE(orin.yes);
  EXPECT_EQ(orin.reason.rfind("yes: SM87 has mma.sync m16n8k16", 0), 0u) << orin.reason;

  DeviceProfile xavier = must_find("orin-nx-16gb");
  xavier.name = "xavier";
  xavier.compute_capability = 72;
  const Decision old = supports_tensor_core_mma(xavier);
  EXPECT_FALSE(old.yes);
  EXPECT_EQ(old.reason, "no: compute capability 7.2 < 8.0 (mma.sync m16n8k16 needs SM80+)");

  const Decision cpu = supports_tensor_core_mma(must_find("host-cpu"));
  EXPECT_FALSE(cpu.yes);
  EXPECT_NE(cpu.reason.find("kind cpu"), std::string::npos) << cpu.reason;
}

TEST(Capabilities, Fp16AndSharedMemory) {
  const DeviceProfile orin = must_find("orin-nano-4gb");
  EXPECT_TRUE(supports_fp16(orin).yes);
  EXPECT_EQ(supports_fp16(orin).reason.rfind("yes: ", 0), 0u);
  const DeviceProfile host = must_find("host-cpu");
  EXPECT_FALSE(supports_fp16(host).yes);
  EXPECT_EQ(supports_fp16(host).reason.rfind("no: ", 0), 0u);
  DeviceProfile maxwell = orin;
  maxwell.compute_capability = 52;
  EXPECT_FALSE(supports_fp16(maxwell).yes);
  EXPECT_NE(supports_fp16(maxwell).reason.find("5.2 < 5.3"), std::string::npos);

  EXPECT_EQ(max_smem_per_block(orin), 163 * 1024);
  DeviceProfile no_optin = orin;
  no_optin.smem_per_block_optin_bytes = 0;
  EXPECT_EQ(max_smem_per_block(no_optin), 48 * 1024);
  EXPECT_EQ(max_smem_per_block(host), 0);
  EXPECT_EQ(format_compute_capability(87), "8.7");
  EXPECT_EQ(format_compute_capability(100), "10.0");
}

TEST(CudaQuery, NamesAndEstimates) {
  EXPECT_EQ(cuda_profile_name("NVIDIA H100 80GB HBM3"), "cuda-nvidia-h100-80gb-hbm3");
  EXPECT_EQ(cuda_profile_name("  Orin (nvgpu) "), "cuda-orin-nvgpu");
  EXPECT_NEAR(estimate_fp16_dense_tflops(80, 108, 1410), 312.0, 1.0);  // A100 datasheet
  EXPECT_NEAR(estimate_fp16_dense_tflops(90, 132, 1830), 989.0, 2.0);  // H100 SXM datasheet
  EXPECT_EQ(estimate_fp16_dense_tflops(61, 28, 1500), 0.0);
}

}  // namespace
}  // namespace edgevit
