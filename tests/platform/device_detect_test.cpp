// Device detection with faked /proc files: Jetson device-tree strings map to the right profile, the
// memory size decides when the string does not, and anything else falls back to the host CPU.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "platform/detect.h"
#include "platform/device_registry.h"
#include "tests/testutil/testutil.h"

namespace edgevit {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kGiB = int64_t{1} << 30;

class FakeProc : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("edgevit_detect_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    options_.device_tree_model = (dir_ / "model").string();
    options_.meminfo = (dir_ / "meminfo").string();
    options_.cpuinfo = (dir_ / "cpuinfo").string();
    options_.query_cuda = false;
  }
  void TearDown() override { fs::remove_all(dir_); }

  // The device tree stores the model NUL-terminated.
  void write_model(const std::string& model) {
    std::ofstream out(options_.device_tree_model, std::ios::binary);
    out << model << '\0';
  }
  void write_meminfo(int64_t bytes) {
    std::ofstream out(options_.meminfo);
    out << "MemTotal:       " << bytes / 1024 << " kB\nMemFree:         1234 kB\n";
  }
  std::vector<std::string> dirs() const { return {testutil::source_path("config/devices")}; }

  fs::path dir_;
  DetectOptions options_;
};

TEST_F(FakeProc, OrinNx16FromTheModelString) {
  write_model("NVIDIA Jetson Orin NX 16GB Engine Reference Carrier Board");
  write_meminfo(7 * kGiB);  // the string wins over memory
  auto d = detect_device(dirs(), options_);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->profile.name, "orin-nx-16gb");
  EXPECT_EQ(d->source, "device-tree: " + options_.device_tree_model);
  EXPECT_NE(d->details.find("model string says 16gb"), std::string::npos) << d->details;
}

TEST_F(FakeProc, SizeFromMemTotalWhenTheStringHasNone) {
  struct Case {
    const char* model;
    int64_t mem;
    const char* profile;
  };
  const Case cases[] = {
      {"NVIDIA Jetson Orin NX Engine Reference Carrier Board", 15 * kGiB + kGiB / 2, "orin-nx-16gb"},
      {"NVIDIA Jetson Orin NX Engine Reference Carrier Board", 7 * kGiB, "orin-nx-8gb"},
      {"NVIDIA Jetson Orin Nano Developer Kit", 7 * kGiB + kGiB / 2, "orin-nano-8gb"},
      {"NVIDIA Jetson Orin Nano Developer Kit", 3 * kGiB + kGiB / 2, "orin-nano-4gb"},
      {"Jetson AGX Orin Developer Kit", 61 * kGiB, "agx-orin-64gb"},
      {"Jetson AGX Orin", 30 * kGiB, "agx-orin-32gb"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.model);
    write_model(c.model);
    write_meminfo(c.mem);
    auto d = detect_device(dirs(), options_);
    ASSERT_TRUE(d.ok()) << d.status().to_string();
    EXPECT_EQ(d->profile.name, c.profile);
    EXPECT_NE(d->details.find("MemTotal"), std::string::npos) << d->details;
  }
}

TEST_F(FakeProc, ModelMappingWithoutMemoryAssumesTheSmallerModule) {
  std::string why;
  EXPECT_EQ(jetson_profile_for_model("NVIDIA Jetson Orin NX Engine Reference Carrier Board", 0, &why),
            "orin-nx-8gb");
  EXPECT_NE(why.find("assumed the smaller"), std::string::npos);
  EXPECT_EQ(jetson_profile_for_model("NVIDIA Jetson Orin Nano 8GB", 0, nullptr), "orin-nano-8gb");
  EXPECT_EQ(jetson_profile_for_model("NVIDIA Jetson AGX Orin 32GB", 64 * kGiB, nullptr), "agx-orin-32gb");
  EXPECT_EQ(jetson_profile_for_model("NVIDIA Jetson Xavier NX Developer Kit", 8 * kGiB, nullptr), "");
  EXPECT_EQ(jetson_profile_for_model("Raspberry Pi 4 Model B Rev 1.4", 8 * kGiB, nullptr), "");
}

TEST_F(FakeProc, UnknownBoardFallsBackToTheHostWithRealMemoryAndCores) {
  write_model("Raspberry Pi 4 Model B Rev 1.4");
  write_meminfo(3 * kGiB);
  std::ofstream(options_.cpuinfo) << "processor\t: 0\nmodel name\t: Fake CPU 9000\n";
  auto d = detect_device(dirs(), options_);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->profile.name, "host-cpu");
  EXPECT_EQ(d->profile.kind, DeviceKind::kCpu);
  EXPECT_EQ(d->profile.memory_total_bytes, 3 * kGiB);
  EXPECT_EQ(d->profile.memory_budget_bytes, default_memory_budget(3 * kGiB));
  EXPECT_EQ(d->profile.cpu_cores, usable_cpu_count());
  EXPECT_EQ(d->profile.cpu_model, "Fake CPU 9000");
  EXPECT_EQ(d->source, "host: " + options_.meminfo + ", sched_getaffinity");
  EXPECT_NE(d->details.find("not a known Jetson board"), std::string::npos) << d->details;
}

TEST_F(FakeProc, NoDeviceTreeAndNoMeminfoStillGivesAHostProfile) {
  auto d = detect_device(dirs(), options_);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->profile.name, "host-cpu");
  const DeviceProfile shipped = *find_device_profile("host-cpu", dirs());
  EXPECT_EQ(d->profile.memory_total_bytes, shipped.memory_total_bytes);  // the YAML's default
  EXPECT_NE(d->details.find("no device tree model"), std::string::npos) << d->details;
}

TEST_F(FakeProc, NoProfilesAtAllUsesBuiltInHostDefaults) {
  write_meminfo(5 * kGiB);
  auto d = detect_device({(dir_ / "empty").string()}, options_);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->profile.name, "host-cpu");
  EXPECT_EQ(d->profile.memory_total_bytes, 5 * kGiB);
}

TEST_F(FakeProc, JetsonWithoutItsProfileIsAnError) {
  write_model("NVIDIA Jetson Orin NX 16GB");
  auto d = detect_device({(dir_ / "empty").string()}, options_);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kNotFound);
  EXPECT_NE(d.status().message().find("orin-nx-16gb"), std::string::npos) << d.status().message();
}

TEST_F(FakeProc, MeminfoParsing) {
  write_meminfo(16 * kGiB);
  auto total = read_meminfo_total(options_.meminfo);
  ASSERT_TRUE(total.ok());
  EXPECT_EQ(*total, 16 * kGiB);
  std::ofstream(options_.meminfo) << "MemFree: 12 kB\n";
  EXPECT_FALSE(read_meminfo_total(options_.meminfo).ok());
  EXPECT_EQ(read_meminfo_total((dir_ / "nope").string()).status().code(), StatusCode::kNotFound);
}

TEST(RealMachine, DetectionSucceedsHere) {
  auto d = detect_device({testutil::source_path("config/devices")});
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_FALSE(d->profile.name.empty());
  EXPECT_GT(d->profile.memory_total_bytes, 0);
  EXPECT_GE(d->profile.cpu_cores, 1);
  EXPECT_LE(d->profile.memory_budget_bytes, d->profile.memory_total_bytes);
  std::printf("detected %s via %s: %s\n", d->profile.name.c_str(), d->source.c_str(), d->details.c_str());
}

}  // namespace
}  // namespace edgevit
