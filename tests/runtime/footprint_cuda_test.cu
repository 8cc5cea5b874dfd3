// `plan` says how much memory the process will take before it takes it, on a GPU too: the plan's device
// total against the device memory a fresh process really takes (the GPU's free memory, read by this
// parent process, before the child touches CUDA and after its first inference: context, libraries, arena,
// graphs and all), and the plan's host total against the child's RSS growth over the same span. ViT-Ti and
// ViT-B at batch 1 and 64, fp16: within 5% or 8 MiB, whichever is larger. The child is this binary run
// again with EDGEVIT_FOOTPRINT_CASE set (a CUDA context cannot be forked).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "platform/cuda_query.h"
#include "runtime/config.h"
#include "runtime/engine.h"
#include "runtime/plan.h"
#include "tests/runtime/checkpoint_fixtures.h"
#include "tests/runtime/footprint_fixtures.h"
#include "tests/testutil/cuda_main.h"
#include "tests/testutil/testutil.h"

namespace edgevit {
namespace {

ModelSpec load_case_spec(const std::string& config, const std::string& weights) {
  auto spec = load_model_spec(testutil::source_path("config/models/" + config));
  EXPECT_TRUE(spec.ok()) << spec.status().to_string();
  spec->weights_path = weights;
  return *spec;
}

// The measured process. Protocol on stdin/stdout: "ready" -> (waits for a line) -> create + first infer ->
// "done <rss growth after create> <rss growth after infer>" -> (waits for a line) -> exit.
int measure_child(const char* c) {
  const int64_t before = testutil::rss_bytes();
  char config[256], weights[4096];
  int batch = 0;
  if (std::sscanf(c, "%255s %d %4095s", config, &batch, weights) != 3) return 3;
  const ModelSpec spec = load_case_spec(config, weights);
  std::printf("ready\n");
  std::fflush(stdout);
  char line[64];
  if (std::fgets(line, sizeof line, stdin) == nullptr) return 4;
  auto dev = query_cuda_device(0);
  if (!dev.ok()) return 5;
  EngineOptions o;
  o.plan.batch = batch;
  auto engine = Engine::create(spec, *dev, o);
  if (!engine.ok()) {
    std::fprintf(stderr, "%s\n", engine.status().to_string().c_str());
    return 6;
  }
  const int64_t after_create = testutil::rss_bytes();
  // The images go into the engine's own (pinned) input buffer: a buffer of the caller's is not the engine's.
  float* input = (*engine)->input_buffer();
  std::fill(input, input + batch * (*engine)->input_numel_per_image(), 0.1f);
  if (!(*engine)->infer(input, batch).ok()) return 7;
  std::printf("done %lld %lld\n", static_cast<long long>(after_create - before),
              static_cast<long long>(testutil::rss_bytes() - before));
  std::fflush(stdout);
  if (std::fgets(line, sizeof line, stdin) == nullptr) return 8;
  return 0;
}

int64_t free_device_bytes() {
  size_t free_b = 0, total = 0;
  EXPECT_EQ(cudaMemGetInfo(&free_b, &total), cudaSuccess);
  return static_cast<int64_t>(free_b);
}

class CudaFootprint : public ::testing::TestWithParam<testutil::FootprintCase> {};

TEST_P(CudaFootprint, PlanTotalsAreTheProcessFootprint) {
  const testutil::FootprintCase c = GetParam();
  const std::string dir = testutil::make_temp_dir("cudafootprint");
  const std::string weights = dir + "/w.safetensors";
  const ModelSpec spec = load_case_spec(c.config, weights);
  ASSERT_TRUE(testutil::write_tensors(weights, testutil::random_checkpoint(spec.arch, 9)).ok());
  auto dev = query_cuda_device(0);
  ASSERT_TRUE(dev.ok()) << dev.status().to_string();
  PlanOptions po;
  po.batch = c.batch;
  auto plan = make_plan(spec, *dev, po);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  free_device_bytes();  // this process's own context exists before the child starts

  int to_child[2], from_child[2];
  ASSERT_EQ(pipe(to_child), 0);
  ASSERT_EQ(pipe(from_child), 0);
  const std::string env = std::string(c.config) + " " + std::to_string(c.batch) + " " + weights;
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    dup2(to_child[0], 0);
    dup2(from_child[1], 1);
    close(to_child[1]);
    close(from_child[0]);
    setenv("EDGEVIT_FOOTPRINT_CASE", env.c_str(), 1);
    execl("/proc/self/exe", "footprint_cuda_test", static_cast<char*>(nullptr));
    _exit(127);
  }
  close(to_child[0]);
  close(from_child[1]);
  FILE* in = fdopen(from_child[0], "r");
  FILE* out = fdopen(to_child[1], "w");
  char line[256] = {};
  ASSERT_NE(std::fgets(line, sizeof line, in), nullptr);
  ASSERT_STREQ(line, "ready\n");
  const int64_t free0 = free_device_bytes();
  std::fputs("go\n", out);
  std::fflush(out);
  long long rss_create = -1, rss_infer = -1;
  ASSERT_NE(std::fgets(line, sizeof line, in), nullptr) << "the child failed";
  ASSERT_EQ(std::sscanf(line, "done %lld %lld", &rss_create, &rss_infer), 2) << line;
  const int64_t device = free0 - free_device_bytes();
  std::fputs("exit\n", out);
  std::fflush(out);
  std::fclose(out);
  std::fclose(in);
  int st = 0;
  waitpid(pid, &st, 0);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "child status " << st;

  std::printf("%s batch %d on %s: device: plan %lld, measured %lld; host: plan %lld, measured %lld (after create "
              "%lld)\n",
              c.config, c.batch, dev->name.c_str(), static_cast<long long>(plan->device_total_bytes),
              static_cast<long long>(device), static_cast<long long>(plan->host_total_bytes), rss_infer, rss_create);
  testutil::print_memory_lines(*plan);
  testutil::expect_footprint("device", plan->device_total_bytes, device);
  testutil::expect_footprint("host", plan->host_total_bytes, rss_infer);
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Fp16, CudaFootprint, testutil::footprint_cases(), testutil::footprint_case_name);

}  // namespace
}  // namespace edgevit

// Its own main (instead of edgevit_cuda_test_main's): the measured child must start without gtest, and
// without a GPU the binary reports "skipped: no GPU" (exit 77) as every CUDA test does.
int main(int argc, char** argv) {
  if (const char* c = std::getenv("EDGEVIT_FOOTPRINT_CASE")) return edgevit::measure_child(c);
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("skipped: no GPU\n");
    return edgevit::testutil::kExitSkipped;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
