// `plan` says how much memory the process will take before it takes it: the plan's host total (every line
// of Plan::memory) against the process's real footprint, RSS growth from before Engine::create to after the
// first inference, for ViT-Ti and ViT-B at batch 1 and 64 on the CPU backend: within 5% or 8 MiB,
// whichever is larger. Each case is measured in a fresh process (this binary run again with
// EDGEVIT_FOOTPRINT_CASE set), so the libraries' first-use state counts as it does for a user's process;
// the checkpoint is written before the baseline and its pages are not the engine's.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "platform/device_registry.h"
#include "runtime/config.h"
#include "runtime/engine.h"
#include "runtime/plan.h"
#include "tests/runtime/checkpoint_fixtures.h"
#include "tests/runtime/footprint_fixtures.h"
#include "tests/testutil/testutil.h"

namespace edgevit {
namespace {

// Writes a random checkpoint for `a` from a child process (its heap never touches ours).
void write_checkpoint_in_child(const VitArch& a, const std::string& path) {
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const testutil::TensorMap w = testutil::random_checkpoint(a, 5);
    _exit(testutil::write_tensors(path, w).ok() ? 0 : 1);
  }
  int st = 0;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "writing " << path;
}

constexpr int kThreads = 2;

ModelSpec load_case_spec(const std::string& config, const std::string& weights) {
  auto spec = load_model_spec(testutil::source_path("config/models/" + config));
  EXPECT_TRUE(spec.ok()) << spec.status().to_string();
  spec->weights_path = weights;
  return *spec;
}

DeviceProfile host_cpu() {
  auto dev = find_device_profile("host-cpu", {testutil::source_path("config/devices")});
  EXPECT_TRUE(dev.ok());
  return *dev;
}

// The measuring process: "config batch weights" in EDGEVIT_FOOTPRINT_CASE. Prints
// "footprint <create growth> <after first infer growth>" and exits (main() below calls it before gtest).
int measure_child(const char* c) {
  {
    char config[256], weights[4096];
    int batch = 0, threads = kThreads;
    if (std::sscanf(c, "%255s %d %4095s %d", config, &batch, weights, &threads) < 3) _exit(3);
    const ModelSpec spec = load_case_spec(config, weights);
    const DeviceProfile dev = host_cpu();
    std::vector<float> input(static_cast<size_t>(batch) * spec.arch.in_chans * spec.arch.img_h * spec.arch.img_w,
                             0.1f);
    EngineOptions o;
    o.plan.batch = batch;
    o.threads = threads;
    const int64_t before = testutil::rss_bytes();
    auto engine = Engine::create(spec, dev, o);
    if (!engine.ok()) {
      std::fprintf(stderr, "%s\n", engine.status().to_string().c_str());
      _exit(4);
    }
    const int64_t after_create = testutil::rss_bytes();
    if (!(*engine)->infer(input.data(), batch).ok()) _exit(5);
    std::printf("footprint %lld %lld\n", static_cast<long long>(after_create - before),
                static_cast<long long>(testutil::rss_bytes() - before));
    std::fflush(stdout);
    _exit(0);
  }
}

class MemoryFootprint : public ::testing::TestWithParam<testutil::FootprintCase> {};

TEST_P(MemoryFootprint, PlanTotalIsTheProcessFootprint) {
  EDGEVIT_SKIP_IF_EMULATED();
  const testutil::FootprintCase c = GetParam();
  const std::string dir = testutil::make_temp_dir("footprint");
  const std::string weights = dir + "/w.safetensors";
  const ModelSpec spec = load_case_spec(c.config, weights);
  write_checkpoint_in_child(spec.arch, weights);
  PlanOptions po;
  po.batch = c.batch;
  po.threads = kThreads;
  auto plan = make_plan(spec, host_cpu(), po);
  ASSERT_TRUE(plan.ok());
  const std::string cmd = "EDGEVIT_FOOTPRINT_CASE='" + std::string(c.config) + " " + std::to_string(c.batch) + " " +
                          weights + "' /proc/" + std::to_string(getpid()) + "/exe";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  long long create_growth = -1, measured = -1;
  const int got = std::fscanf(p, "footprint %lld %lld", &create_growth, &measured);
  const int st = pclose(p);
  ASSERT_EQ(got, 2) << "the measuring process failed (status " << st << ")";
  std::printf("%s batch %d: plan host total %lld bytes (arena %lld); RSS growth: create %lld, + first infer %lld\n",
              c.config, c.batch, static_cast<long long>(plan->host_total_bytes),
              static_cast<long long>(plan->arena_bytes), create_growth, measured);
  testutil::print_memory_lines(*plan);
  testutil::expect_footprint("host", plan->host_total_bytes, measured);
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(CpuBackend, MemoryFootprint, testutil::footprint_cases(), testutil::footprint_case_name);

}  // namespace
}  // namespace edgevit

int main(int argc, char** argv) {
  if (const char* c = std::getenv("EDGEVIT_FOOTPRINT_CASE")) return edgevit::measure_child(c);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
