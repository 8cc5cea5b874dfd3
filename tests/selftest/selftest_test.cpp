// The self-test library: platform facts read from faked Jetson files, a clean run passes every check, each
// injected fault fails the checks it must (and only those), missing inputs are "could not run", the GPIO
// loopback passes wired and fails unwired, the allocation counter counts, and both report formats carry
// every check with its measured value and bound.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <atomic>
#include <set>
#include <thread>

#include "kernels/cpu/kernels.h"
#include "platform/cuda_query.h"
#include "platform/device_registry.h"
#include "runtime/config.h"
#include "runtime/importer.h"
#include "runtime/plan.h"
#include "platform/gpio.h"
#include <sys/mman.h>

#include "selftest/alloc_counter.h"
#include "selftest/checks.h"
#include "tests/selftest/model_fixtures.h"
#include "selftest/selftest.h"
#include "tests/testutil/testutil.h"

#if defined(EDGEVIT_SANITIZER_BUILD)
constexpr bool kAsanBuild = true;
#else
constexpr bool kAsanBuild = false;
#endif

namespace edgevit::selftest {
namespace {
namespace fs = std::filesystem;

void write_file(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}

SelftestOptions repo_options() {
  SelftestOptions o;
  o.config_dirs = {testutil::source_path("config")};
  o.quick = true;
  o.threads = 2;
  o.seed = 1234;
  // A host, whatever machine runs the tests: no device tree, no CUDA.
  o.paths.detect.device_tree_model = "";
  o.paths.detect.query_cuda = false;
  return o;
}

const CheckResult* find(const SelftestReport& r, const std::string& name) {
  for (const auto& c : r.checks)
    if (c.name == name) return &c;
  return nullptr;
}

std::set<std::string> failed(const SelftestReport& r) {
  std::set<std::string> s;
  for (const auto& c : r.checks)
    if (c.outcome == Outcome::kFail) s.insert(c.name);
  return s;
}

class FakeJetson : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(::testing::TempDir()) / ("selftest_jetson_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    paths_.detect.device_tree_model = (root_ / "model").string();
    paths_.detect.meminfo = (root_ / "meminfo").string();
    paths_.detect.cpuinfo = (root_ / "cpuinfo").string();
    paths_.detect.query_cuda = false;
    paths_.nvpmodel_conf = (root_ / "nvpmodel.conf").string();
    paths_.nvpmodel_status = (root_ / "nvpmodel_status").string();
    paths_.devfreq_dirs = {(root_ / "gpu.0/devfreq").string(), (root_ / "class_devfreq").string()};
    paths_.cpu_sysfs = (root_ / "cpu").string();
    write_file(root_ / "model", std::string("NVIDIA Jetson Orin NX Engine Reference Carrier Board") + '\0');
    write_file(root_ / "meminfo", "MemTotal:       15896572 kB\nMemFree:         9000000 kB\nMemAvailable:   12000000 kB\n");
    write_file(root_ / "cpuinfo", "processor\t: 0\n");
  }
  void TearDown() override { fs::remove_all(root_); }
  fs::path root_;
  PlatformPaths paths_;
  std::vector<std::string> dev_dirs_{testutil::source_path("config/devices")};
};

TEST_F(FakeJetson, ReadsDevicePowerModeClocksAndMemory) {
  write_file(root_ / "nvpmodel.conf",
             "< POWER_MODEL ID=0 NAME=MAXN >\nCPU_ONLINE CORE_0 1\n< POWER_MODEL ID=1 NAME=10W >\n"
             "< POWER_MODEL ID=2 NAME=15W >\n< PM_CONFIG DEFAULT=2 >\n");
  write_file(root_ / "nvpmodel_status", "pmode:0001 fmode:quiet\n");
  const fs::path gpu = root_ / "gpu.0/devfreq/17000000.ga10b";
  write_file(gpu / "cur_freq", "918000000\n");
  write_file(gpu / "min_freq", "306000000\n");
  write_file(gpu / "max_freq", "918000000\n");
  write_file(root_ / "class_devfreq/15340000.vic/cur_freq", "115200000\n");  // not a GPU: not listed
  write_file(root_ / "cpu/cpu0/cpufreq/scaling_cur_freq", "1984000\n");
  write_file(root_ / "cpu/cpu1/cpufreq/scaling_cur_freq", "729600\n");

  auto info = read_platform_info(dev_dirs_, paths_);
  ASSERT_TRUE(info.ok()) << info.status().to_string();
  EXPECT_EQ(info->detected.profile.name, "orin-nx-16gb");
  EXPECT_EQ(info->power_mode, "10W (id 1)");
  EXPECT_NE(info->power_mode_source.find("nvpmodel_status"), std::string::npos);
  ASSERT_EQ(info->clocks.size(), 3u);
  EXPECT_EQ(info->clocks[0].name, "gpu 17000000.ga10b");
  EXPECT_EQ(info->clocks[0].cur_hz, 918000000);
  EXPECT_EQ(info->clocks[0].min_hz, 306000000);
  EXPECT_EQ(info->clocks[1].name, "cpu0");
  EXPECT_EQ(info->clocks[1].cur_hz, 1984000000);
  EXPECT_EQ(info->clocks[2].cur_hz, 729600000);
  EXPECT_EQ(info->mem_total_bytes, int64_t{15896572} * 1024);
  EXPECT_EQ(info->mem_available_bytes, int64_t{12000000} * 1024);
}

TEST_F(FakeJetson, PowerModeFallsBackToTheDefaultThenToUnknown) {
  write_file(root_ / "nvpmodel.conf", "< POWER_MODEL ID=0 NAME=MAXN >\n< POWER_MODEL ID=2 NAME=15W >\n< PM_CONFIG DEFAULT=2 >\n");
  auto info = read_platform_info(dev_dirs_, paths_);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->power_mode, "15W (id 2, the default)");
  EXPECT_NE(info->power_mode_source.find("current mode not readable"), std::string::npos);
  fs::remove(root_ / "nvpmodel.conf");
  info = read_platform_info(dev_dirs_, paths_);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->power_mode, "");
  EXPECT_NE(info->power_mode_source.find("no "), std::string::npos) << info->power_mode_source;
  EXPECT_TRUE(info->clocks.empty());
}

TEST(Selftest, CleanQuickRunPassesEveryCheck) {
  EDGEVIT_SKIP_IF_EMULATED();
  auto r = run_selftest(repo_options());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(r->passed()) << format_report_text(*r);
  EXPECT_EQ(selftest_exit_code(r), 0);
  // The shared op-case list at the model's shapes: every op of the stem, first block and head, on every CPU
  // row this build runs (the packed GEMM too where libxsmm is built in).
  int op_checks = 0;
  for (const CheckResult& c : r->checks) op_checks += c.name.rfind("kernel.op.", 0) == 0;
  EXPECT_GE(op_checks, 13);
  if (cpu_packed_gemm_available()) {
    ASSERT_NE(find(*r, "kernel.op.blocks.0.mlp.fc1[cpu.gemm_libxsmm_packed]"), nullptr);
    EXPECT_EQ(find(*r, "kernel.op.blocks.0.mlp.fc1[cpu.gemm_libxsmm_packed]")->outcome, Outcome::kPass);
  }
  for (const char* name : {"memory.plan_fits", "kernel.attention.planned_vs_ref", "kernel.attention.fused_vs_ref",
                           "kernel.attention.explicit_vs_ref", "numerics.outputs_finite",
                           "kernel.op.blocks.0.norm1[cpu.layernorm_f32]",
                           "kernel.op.blocks.0.attn.qkv[cpu.sgemm_openblas]",
                           "kernel.op.blocks.0.mlp.fc1[cpu.sgemm_openblas]",
                           "kernel.op.blocks.0.mlp.fc2[cpu.sgemm_openblas]", "kernel.op.patch_embed.im2col[cpu.im2col]",
                           "kernel.op.assemble_tokens[cpu.assemble_tokens]", "kernel.op.head[cpu.sgemm_openblas]",
                           "e2e.predictions", "e2e.logits", "int8.vs_fp32",
                           "memory.available_now", "memory.arena_single_allocation", "memory.zero_allocations",
                           "memory.no_new_mappings", "memory.bit_identical"}) {
    const CheckResult* c = find(*r, name);
    ASSERT_NE(c, nullptr) << name;
    if (kAsanBuild &&
        (std::string(name) == "memory.no_new_mappings" || std::string(name) == "memory.arena_single_allocation")) {
      EXPECT_EQ(c->outcome, Outcome::kSkip) << name;  // ASan's allocator maps memory itself
      continue;
    }
    EXPECT_EQ(c->outcome, Outcome::kPass) << name << ": " << c->measured << " " << c->detail;
    EXPECT_EQ(c->model, "vit-digits");
  }
  EXPECT_NE(find(*r, "e2e.logits")->detail.find("64 of 360"), std::string::npos) << find(*r, "e2e.logits")->detail;
  EXPECT_EQ(find(*r, "gpio.loopback")->outcome, Outcome::kSkip);
  // This binary links the exact counter (sanitizer builds cannot: the sanitizer owns malloc).
  if (!kAsanBuild) {
    EXPECT_NE(find(*r, "memory.zero_allocations")->detail.find("exact"), std::string::npos);
  }
  ASSERT_EQ(r->decisions.size(), 1u);
  EXPECT_EQ(r->decisions[0].attention_kernel, "cpu.mha_fused_f32");
  EXPECT_FALSE(r->decisions[0].ops.empty());
  EXPECT_EQ(r->seed, 1234u);
}

TEST(Selftest, FullRunChecksAllStoredImages) {
  EDGEVIT_SKIP_IF_EMULATED();
  SelftestOptions o = repo_options();
  o.quick = false;
  o.repeat_runs = 5;
  auto r = run_selftest(o);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(r->passed()) << format_report_text(*r);
  EXPECT_NE(find(*r, "e2e.predictions")->detail.find("360 of 360"), std::string::npos);
  EXPECT_NE(find(*r, "kernel.attention.fused_vs_ref")->detail.find("B=64"), std::string::npos);
}

TEST(Selftest, WrongAttentionScaleFailsTheAttentionAndEndToEndChecks) {
  EDGEVIT_SKIP_IF_EMULATED();
  SelftestOptions o = repo_options();
  o.fault = Fault::kAttentionScale;
  auto r = run_selftest(o);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(selftest_exit_code(r), 1);
  const std::set<std::string> f = failed(*r);
  EXPECT_TRUE(f.count("kernel.attention.fused_vs_ref")) << format_report_text(*r);
  EXPECT_TRUE(f.count("kernel.attention.explicit_vs_ref"));
  EXPECT_TRUE(f.count("kernel.attention.planned_vs_ref"));
  EXPECT_TRUE(f.count("e2e.logits"));
  EXPECT_FALSE(f.count("kernel.op.blocks.0.norm1[cpu.layernorm_f32]"));
  EXPECT_FALSE(f.count("memory.zero_allocations"));
  EXPECT_EQ(r->fault, "attention-scale");
  const std::string text = format_report_text(*r);
  EXPECT_NE(text.find("FAILED kernel.attention.fused_vs_ref (vit-digits): rel_err "), std::string::npos) << text;
  EXPECT_NE(text.find("violates bound <= 1e-05"), std::string::npos) << text;
}

TEST(Selftest, CorruptWeightFailsTheEndToEndLogits) {
  EDGEVIT_SKIP_IF_EMULATED();
  SelftestOptions o = repo_options();
  o.fault = Fault::kCorruptWeight;
  auto r = run_selftest(o);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(selftest_exit_code(r), 1);
  const std::set<std::string> f = failed(*r);
  EXPECT_TRUE(f.count("e2e.logits")) << format_report_text(*r);
  EXPECT_FALSE(f.count("kernel.attention.fused_vs_ref"));  // the kernels are fine; the weights are not
}

// The leading number of a check's `measured` text ("14982016 bytes allocated ...").
int64_t leading_number(const CheckResult* c) {
  if (c == nullptr) return -1;
  return std::strtoll(c->measured.c_str(), nullptr, 10);
}

// memory.arena_single_allocation observes: memory allocated beside the engine inside its window (a mapping
// and a heap block of unplanned_fault_bytes() each, more than the plan's host lines together) is counted,
// byte for byte, and fails the check.
TEST(Selftest, UnplannedAllocationFailsTheArenaCheck) {
  EDGEVIT_SKIP_IF_EMULATED();
  if (kAsanBuild) GTEST_SKIP() << "skipped: sanitizer build (the sanitizer owns malloc and maps memory itself)";
  // The first engine of a process also pays for libxsmm's and OpenBLAS's one-time state: compare two runs
  // that both come after it.
  ASSERT_TRUE(run_selftest(repo_options()).ok());
  auto clean = run_selftest(repo_options());
  ASSERT_TRUE(clean.ok()) << clean.status().to_string();
  EXPECT_EQ(find(*clean, "memory.arena_single_allocation")->outcome, Outcome::kPass);
  SelftestOptions o = repo_options();
  o.fault = Fault::kUnplannedAllocation;
  auto r = run_selftest(o);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(selftest_exit_code(r), 1);
  EXPECT_EQ(r->fault, "unplanned-allocation");
  EXPECT_EQ(failed(*r), std::set<std::string>{"memory.arena_single_allocation"}) << format_report_text(*r);
  const CheckResult* c = find(*r, "memory.arena_single_allocation");
  ASSERT_NE(c, nullptr);
  PlanOptions po;
  po.threads = 2;  // as repo_options() runs the engine
  auto plan = make_plan(*load_model_spec(testutil::source_path("config/models/vit-digits.yaml")),
                   *find_device_profile("host-cpu", {testutil::source_path("config/devices")}), po);
  ASSERT_TRUE(plan.ok());
  const int64_t fault = 2 * unplanned_fault_bytes(*plan);
  const int64_t extra = leading_number(c) - leading_number(find(*clean, "memory.arena_single_allocation"));
  // Both blocks, touched; the rest of the two runs may differ by a few pages of heap and JIT code.
  EXPECT_GE(extra, fault - (256 << 10)) << c->measured;
  EXPECT_LE(extra, fault + (256 << 10)) << c->measured;
  EXPECT_NE(c->detail.find("interposed mmap/munmap"), std::string::npos) << c->detail;
}

// A model whose weights hold an Inf: every output is non-finite, and the self-test says so by name
// (with the engine's kNonFinite, infer() itself refuses; either way the check fails).
TEST(Selftest, NonFiniteOutputsFailTheNumericsCheck) {
  const std::string dir = testutil::make_temp_dir("selftest_inf");
  SelftestOptions o = repo_options();
  o.models = {testutil::write_nonfinite_digits_model(dir)};
  auto r = run_selftest(o);
  fs::remove_all(dir);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(selftest_exit_code(r), 1);
  const CheckResult* c = find(*r, "numerics.outputs_finite");
  ASSERT_NE(c, nullptr) << format_report_text(*r);
  EXPECT_EQ(c->outcome, Outcome::kFail) << c->measured;
  EXPECT_EQ(c->model, "vit-digits-inf");
  EXPECT_TRUE(c->measured.find("non_finite") != std::string::npos ||
              c->measured.find("non-finite (first: ") != std::string::npos)
      << c->measured;
  // The kernels are fine: only what the model computes is wrong.
  EXPECT_FALSE(failed(*r).count("kernel.attention.planned_vs_ref"));
  EXPECT_NE(format_report_text(*r).find("FAILED numerics.outputs_finite (vit-digits-inf)"), std::string::npos);
}

// head_dim 160 (above kMhaFusedMaxHeadDim): the attention kernel the CPU plan runs is checked against the
// float64 reference at the model's own head_dim and sequence length, never skipped, and it passes.
TEST(Selftest, AttentionIsCheckedAtTheModelsHeadDimAbove128) {
  const std::string dir = testutil::make_temp_dir("selftest_hd160");
  SelftestOptions o = repo_options();
  o.models = {testutil::write_head_dim_160_model(dir)};
  auto r = run_selftest(o);
  fs::remove_all(dir);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const CheckResult* c = find(*r, "kernel.attention.planned_vs_ref");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->outcome, Outcome::kPass) << c->measured << " " << c->detail;
  EXPECT_NE(c->detail.find("S=5 H=2 D=160"), std::string::npos) << c->detail;
  ASSERT_EQ(r->decisions.size(), 1u);
  EXPECT_NE(c->detail.find(r->decisions[0].attention_kernel + ", "), std::string::npos) << c->detail;
  EXPECT_EQ(find(*r, "kernel.attention.explicit_vs_ref")->outcome, Outcome::kPass);
  EXPECT_EQ(find(*r, "numerics.outputs_finite")->outcome, Outcome::kPass) << find(*r, "numerics.outputs_finite")->measured;
  EXPECT_EQ(r->decisions[0].attention_kernel, "cpu.mha_explicit_f32");
  const CheckResult* fused = find(*r, "kernel.attention.fused_vs_ref");
  ASSERT_NE(fused, nullptr);
  EXPECT_EQ(fused->outcome, Outcome::kSkip);
  EXPECT_NE(fused->detail.find("kernel.attention.planned_vs_ref"), std::string::npos) << fused->detail;
}

// Issue 21's defect, at the level of the checks: a CPU plan that runs the fused kernel above its head_dim
// limit fails both attention checks that concern it (the self-test used to skip them as "the plan uses the
// explicit one" while the plan said fused), and the explicit kernel is still held to the reference.
TEST(KernelChecks, APlanRunningTheFusedKernelAboveItsLimitFails) {
  KernelCheckSpec ks;
  ks.model = "hd160";
  ks.arch = testutil::head_dim_160_arch();
  ks.seed = 7;
  ks.threads = 2;
  for (const char* kernel : {"cpu.mha_fused_f32", "cpu.mha_explicit_f32"}) {
    SCOPED_TRACE(kernel);
    ks.cpu_attention_kernel = kernel;
    ks.cpu_attention_reason = "test";
    std::vector<CheckResult> out;
    run_cpu_kernel_checks(ks, &out);
    SelftestReport r;
    r.checks = out;
    const bool fused = std::string(kernel) == "cpu.mha_fused_f32";
    EXPECT_EQ(find(r, "kernel.attention.planned_vs_ref")->outcome, fused ? Outcome::kFail : Outcome::kPass);
    EXPECT_EQ(find(r, "kernel.attention.fused_vs_ref")->outcome, fused ? Outcome::kFail : Outcome::kSkip);
    EXPECT_EQ(find(r, "kernel.attention.explicit_vs_ref")->outcome, Outcome::kPass);
    EXPECT_NE(find(r, "kernel.attention.explicit_vs_ref")->detail.find("D=160"), std::string::npos);
  }
}

TEST(Selftest, FaultNames) {
  EXPECT_EQ(*parse_fault("attention-scale"), Fault::kAttentionScale);
  EXPECT_EQ(*parse_fault("corrupt-weight"), Fault::kCorruptWeight);
  EXPECT_EQ(*parse_fault("unplanned-allocation"), Fault::kUnplannedAllocation);
  EXPECT_EQ(*parse_fault("none"), Fault::kNone);
  EXPECT_EQ(parse_fault("scale").status().code(), StatusCode::kInvalidArgument);
}

TEST(Selftest, MissingModelOrExpectedOutputsCannotRun) {
  SelftestOptions o = repo_options();
  o.models = {"no-such-model"};
  auto r = run_selftest(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("no-such-model"), std::string::npos);
  EXPECT_EQ(selftest_exit_code(r), 2);

  o = repo_options();
  o.testdata_dir = testutil::temp_dir() + "selftest_empty_testdata";
  fs::create_directories(o.testdata_dir);
  r = run_selftest(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("digits/test_split.safetensors"), std::string::npos) << r.status().message();
  EXPECT_EQ(selftest_exit_code(r), 2);
}

TEST(Selftest, ModelWithoutExpectedOutputsSkipsEndToEndOnly) {
  SelftestOptions o = repo_options();
  o.models = {"vit-micro"};  // weights from ../shared/testdata/golden, no stored test split
  // The golden data is part of the test data every run has (importer_test and engine_golden_test read it).
  ASSERT_TRUE(fs::exists(testutil::golden_path("vit-micro.safetensors"))) << testutil::golden_path("vit-micro.safetensors");
  auto r = run_selftest(o);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(r->passed()) << format_report_text(*r);
  EXPECT_EQ(find(*r, "e2e.logits")->outcome, Outcome::kSkip);
  EXPECT_EQ(find(*r, "memory.bit_identical")->outcome, Outcome::kPass);
}

TEST(Selftest, CudaProfileWithoutCudaBackendRunsTheEngineOnTheHost) {
#ifdef EDGEVIT_HAVE_CUDA
  // A CUDA build runs the engine on the GPU itself; without a usable one, the self-test must fail (it is
  // the on-target check), which selftest_cli_test covers elsewhere. Nothing to check here then.
  if (!query_cuda_device(0).ok()) GTEST_SKIP() << "skipped: no GPU";
#endif
  SelftestOptions o = repo_options();
  o.device = "orin-nx-16gb";
  auto r = run_selftest(o);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(r->passed()) << format_report_text(*r);
  ASSERT_GE(r->decisions.size(), 1u);
  EXPECT_EQ(r->decisions[0].device, "orin-nx-16gb");
  EXPECT_EQ(r->decisions[0].attention_kernel.rfind("cuda.", 0), 0u) << r->decisions[0].attention_kernel;
#ifndef EDGEVIT_HAVE_CUDA
  ASSERT_EQ(r->decisions.size(), 2u);
  EXPECT_EQ(r->decisions[1].device, "host-cpu");
  EXPECT_EQ(find(*r, "kernel.attention.cuda_fused_vs_ref")->outcome, Outcome::kSkip);
#endif
}

TEST(Selftest, PlanThatDoesNotFitFailsAndSkipsTheEngineChecks) {
  const fs::path dir = fs::path(testutil::temp_dir()) / "selftest_tiny_device";
  write_file(dir / "tiny.yaml",
             "name: tiny\ndescription: 1 MiB budget\nkind: cpu\nmemory:\n  total_mib: 64\n  budget_mib: 1\n"
             "  unified: false\n  cuda_context_mib: 0\n  bandwidth_gbps: 1\ncpu:\n  cores: 1\n  model: test\n");
  SelftestOptions o = repo_options();
  o.device = (dir / "tiny.yaml").string();
  auto r = run_selftest(o);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(failed(*r), std::set<std::string>{"memory.plan_fits"}) << format_report_text(*r);
  EXPECT_EQ(find(*r, "memory.zero_allocations")->outcome, Outcome::kSkip);
  EXPECT_NE(find(*r, "memory.plan_fits")->bound.find("1048576"), std::string::npos) << find(*r, "memory.plan_fits")->bound;
}

// Output line `out` drives input line `in` of the same simulated chip.
class WiredGpio : public GpioBackend {
 public:
  explicit WiredGpio(bool connected) : connected_(connected) {}
  const char* name() const override { return "wired-test"; }
  Result<std::unique_ptr<GpioOutput>> request_output(const GpioLineRequest&, bool) override {
    struct Out : GpioOutput {
      explicit Out(WiredGpio* g) : g_(g) {}
      Status set(bool active) override {
        if (g_->connected_ && active != g_->level_) ++g_->pending_;
        g_->level_ = active;
        return Status::Ok();
      }
      WiredGpio* g_;
    };
    return std::unique_ptr<GpioOutput>(new Out(this));
  }
  Result<std::unique_ptr<GpioEdgeInput>> request_edges(const GpioLineRequest&, GpioEdge) override {
    struct In : GpioEdgeInput {
      explicit In(WiredGpio* g) : g_(g) {}
      Result<int> wait_edges(int) override {
        const int n = g_->pending_;
        g_->pending_ = 0;
        return n;
      }
      WiredGpio* g_;
    };
    return std::unique_ptr<GpioEdgeInput>(new In(this));
  }

 private:
  bool connected_;
  bool level_ = false;
  int pending_ = 0;
};

TEST(Selftest, GpioLoopbackPassesWiredAndFailsOpen) {
  const GpioLoopback g{"gpiochip0", 3, 4};
  WiredGpio wired(true), open(false);
  CheckResult c = run_gpio_loopback_on(wired, g);
  EXPECT_EQ(c.outcome, Outcome::kPass) << c.measured;
  c = run_gpio_loopback_on(open, g);
  EXPECT_EQ(c.outcome, Outcome::kFail);
  EXPECT_EQ(c.measured, "0 of 4 edges seen");
  SimulatedGpio sim;  // lines exist but nothing connects them
  c = run_gpio_loopback_on(sim, g);
  EXPECT_EQ(c.outcome, Outcome::kFail) << c.measured;
  c = run_gpio_loopback_on(wired, GpioLoopback{"gpiochip0", 3, 3});
  EXPECT_EQ(c.outcome, Outcome::kFail);
  EXPECT_NE(c.measured.find("distinct"), std::string::npos);
  sim.hold_externally(4);
  c = run_gpio_loopback_on(sim, g);
  EXPECT_EQ(c.outcome, Outcome::kFail);
  EXPECT_NE(c.measured.find("input line"), std::string::npos) << c.measured;
}

// The memory window sees a mapping made inside it by its resident bytes (an untouched reserve costs
// nothing), forgets one unmapped inside it, and sees heap growth.
TEST(MemoryWindow, CountsMappingsAndHeapMadeInsideTheWindow) {
  if (kAsanBuild) GTEST_SKIP() << "skipped: sanitizer build (the sanitizer owns malloc; no exact counter)";
  const size_t touched = 3 << 20, reserve = 64 << 20, gone = 5 << 20, heap = 4 << 20;
  MemoryWindow w;
  void* a = mmap(nullptr, touched, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  void* b = mmap(nullptr, reserve, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  void* c = mmap(nullptr, gone, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(a, MAP_FAILED);
  ASSERT_NE(b, MAP_FAILED);
  ASSERT_NE(c, MAP_FAILED);
  std::memset(a, 1, touched);
  std::memset(c, 1, gone);
  munmap(c, gone);
  char* volatile h = static_cast<char*>(std::malloc(heap));
  std::memset(h, 1, heap);
  const MemoryUse u = w.finish();
  std::free(h);
  munmap(a, touched);
  munmap(b, reserve);
  ASSERT_TRUE(u.exact);
  ASSERT_TRUE(u.host_known);
  ASSERT_EQ(u.anon_maps.size(), 2u);
  EXPECT_EQ(u.anon_maps[0].bytes, static_cast<int64_t>(touched));
  EXPECT_EQ(u.anon_maps[0].resident, static_cast<int64_t>(touched));
  EXPECT_EQ(u.anon_maps[1].bytes, static_cast<int64_t>(reserve));
  EXPECT_EQ(u.anon_maps[1].resident, 0);
  EXPECT_GE(u.heap_bytes, static_cast<int64_t>(heap));
  EXPECT_LT(u.heap_bytes, static_cast<int64_t>(heap) + (64 << 10));
  EXPECT_EQ(u.host_bytes(), u.heap_bytes + static_cast<int64_t>(touched));
}

TEST(AllocCounter, CountsAllocationsInsideTheWindowOnly) {
  if (kAsanBuild) GTEST_SKIP() << "skipped: sanitizer build (the sanitizer owns malloc; no exact counter)";
  ASSERT_TRUE(AllocWindow::exact()) << "malloc_interpose.cpp is not linked into this test";
  void* before = std::malloc(32);
  AllocWindow w;
  void* volatile p = std::malloc(16);
  auto* v = new std::vector<int>(10);
  const int64_t n = w.finish();
  std::free(p);
  std::free(before);
  delete v;
  EXPECT_GE(n, 2);
  AllocWindow empty;
  EXPECT_EQ(empty.finish(), 0);
}

// The window names the threads that allocated; a CUDA driver service thread (named cuda-*) is marked as
// such (memory.zero_allocations names it without counting it), any other thread is the inference's.
TEST(AllocCounter, NamesTheThreadsThatAllocatedAndMarksDriverThreads) {
  if (kAsanBuild) GTEST_SKIP() << "skipped: sanitizer build (the sanitizer owns malloc; no exact counter)";
  ASSERT_TRUE(AllocWindow::exact());
  std::atomic<int> done{0};
  std::atomic<bool> release{false};
  // Each thread names itself, allocates `count` times, then stays alive until released, so that its
  // /proc comm name can still be read when the window reports.
  const auto body = [&](const char* name, int count) {
    pthread_setname_np(pthread_self(), name);
    for (int i = 0; i < count; ++i) {
      void* volatile p = std::malloc(24);
      std::free(p);
    }
    done.fetch_add(1);
    while (!release.load()) std::this_thread::yield();
  };
  AllocWindow w;
  std::thread b(body, "cuda-EvtTest", 2), c(body, "ev-worker", 1);
  while (done.load() < 2) std::this_thread::yield();
  const int64_t n = w.finish();
  const std::vector<AllocThread> ts = w.threads();
  release.store(true);
  b.join();
  c.join();
  EXPECT_GE(n, 3);
  int driver = 0, other = 0;
  for (const AllocThread& t : ts) {
    if (t.name == "cuda-EvtTest") { EXPECT_TRUE(t.driver); EXPECT_EQ(t.allocs, 2); ++driver; }
    if (t.name == "ev-worker") { EXPECT_FALSE(t.driver); EXPECT_EQ(t.allocs, 1); ++other; }
  }
  EXPECT_EQ(driver, 1);
  EXPECT_EQ(other, 1);
}

TEST(Selftest, JsonReportCarriesEveryCheckWithItsBound) {
  SelftestOptions o = repo_options();
  o.fault = Fault::kAttentionScale;
  auto r = run_selftest(o);
  ASSERT_TRUE(r.ok());
  const auto j = nlohmann::json::parse(format_report_json(*r));
  EXPECT_EQ(j["result"], "fail");
  EXPECT_EQ(j["fault"], "attention-scale");
  EXPECT_EQ(j["checks"].size(), r->checks.size());
  EXPECT_EQ(j["failed"].get<int>(), r->count(Outcome::kFail));
  bool saw = false;
  for (const auto& c : j["checks"]) {
    if (c["name"] == "kernel.attention.fused_vs_ref") {
      saw = true;
      EXPECT_EQ(c["outcome"], "fail");
      EXPECT_EQ(c["bound"], "<= 1e-05");
      EXPECT_EQ(c["measured"].get<std::string>().rfind("rel_err ", 0), 0u);
    }
  }
  EXPECT_TRUE(saw);
  EXPECT_EQ(j["models"][0]["attention_kernel"], "cpu.mha_fused_f32");
  EXPECT_TRUE(j["platform"].contains("power_mode"));
}

// The ViT families (tests/data/families, timm and Hugging Face checkpoints) through the self-test as a user
// runs it on their own model: every check that applies passes, including the op cases of the ops only these
// families have (qk-norm, CLIP's pre-norm, SigLIP's MAP head, DeiT's folded heads); the end-to-end checks,
// which need stored expected outputs, are skipped with that reason.
TEST(Selftest, FamilyModelsPassTheirChecks) {
  EDGEVIT_SKIP_IF_EMULATED();
  const std::string dir = testutil::make_temp_dir("selftest_families");
  const std::string data = testutil::source_path("tests/data/families/");
  struct Family {
    const char* name;
    bool timm;
    int heads;
    std::optional<GlobalPool> pool;
    std::optional<Activation> act;
    const char* op;  // a family-only op whose op case must be among the checks
  };
  const Family families[] = {
      {"timm_qknorm", true, 2, {}, {}, "kernel.op.blocks.0.attn.qk_norm"},
      {"timm_clip", true, 2, {}, {}, "kernel.op.norm_pre"},
      {"timm_siglip", true, 2, GlobalPool::kMap, Activation::kGeluTanh, "kernel.op.attn_pool.sdpa"},
      {"timm_deit_distilled", true, 2, {}, {}, "kernel.op.head_distilled"},
      {"hf_dinov2_reg4", false, 0, {}, {}, "kernel.op.blocks.0.attn.sdpa"},
  };
  SelftestOptions o = repo_options();
  for (const Family& f : families) {
    ImportOptions io;
    if (f.timm) io.heads = f.heads;
    io.pool = f.pool;
    io.act = f.act;
    auto spec = f.timm ? infer_model_spec_timm(data + f.name + ".safetensors", io) : infer_model_spec_hf(data + f.name, io);
    ASSERT_TRUE(spec.ok()) << f.name << ": " << spec.status().to_string();
    const std::string yaml = dir + "/" + f.name + ".yaml";
    ASSERT_TRUE(save_imported_spec(*spec, yaml).ok()) << yaml;
    o.models.push_back(yaml);
  }
  auto r = run_selftest(o);
  fs::remove_all(dir);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(r->passed()) << format_report_text(*r);
  EXPECT_EQ(selftest_exit_code(r), 0);
  ASSERT_EQ(r->decisions.size(), std::size(families));
  for (const Family& f : families) {
    SCOPED_TRACE(f.name);
    int op_checks = 0, family_op = 0;
    for (const CheckResult& c : r->checks) {
      if (c.model != f.name) continue;
      if (c.name.rfind("kernel.op.", 0) == 0) {
        ++op_checks;
        EXPECT_EQ(c.outcome, Outcome::kPass) << c.name << ": " << c.measured << " " << c.detail;
      }
      family_op += c.name.rfind(std::string(f.op) + "[", 0) == 0;
      if (c.name == "e2e.logits") {
        EXPECT_EQ(c.outcome, Outcome::kSkip);
        EXPECT_NE(c.detail.find("no stored expected outputs"), std::string::npos) << c.detail;
      }
      if (c.name == "numerics.outputs_finite") {
        EXPECT_EQ(c.outcome, Outcome::kPass);
      }
    }
    EXPECT_GE(op_checks, 8);
    EXPECT_GE(family_op, 1) << "no op case " << f.op << " among the checks:\n" << format_report_text(*r);
  }
}

}  // namespace
}  // namespace edgevit::selftest
