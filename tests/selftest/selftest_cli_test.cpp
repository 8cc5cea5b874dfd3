// The edgevit-selftest binary as an engineer or the daemon's unit runs it: exit 0 on a clean run (text and
// JSON), exit 1 naming the failing checks under each injected fault, exit 2 when it cannot run.
// Under a cross build's emulator, EDGEVIT_TEST_EMULATOR (e.g. "qemu-aarch64 -L /usr/aarch64-linux-gnu")
// prefixes the command, since the child process is not emulated by itself.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>

#include <filesystem>

#include "tests/selftest/model_fixtures.h"
#include "tests/testutil/testutil.h"

namespace edgevit {
namespace {

using Ran = testutil::ProgramRun;  // code, out (stdout, and stderr when merged)

// A fixed host profile and 2 threads, whatever machine runs the tests.
Ran run(const std::string& args, bool merge_stderr = true) {
  return testutil::run_program("bin/edgevit-selftest", "--device host-cpu --threads 2 --seed 99 " + args,
                               merge_stderr ? testutil::Stderr::kMerged : testutil::Stderr::kDropped);
}

TEST(SelftestCli, QuickRunPasses) {
  const Ran r = run("--quick");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("PASS: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("PASS e2e.predictions (vit-digits): 0 differ"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("attention: cpu.mha_fused_f32"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("FAIL"), std::string::npos) << r.out;
}

TEST(SelftestCli, JsonReport) {
  EDGEVIT_SKIP_IF_EMULATED();
  const Ran r = run("--quick --json", false);
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["result"], "pass");
  EXPECT_EQ(j["mode"], "quick");
  EXPECT_EQ(j["seed"], 99);
  EXPECT_EQ(j["failed"], 0);
#if defined(EDGEVIT_SANITIZER_BUILD)
  EXPECT_GE(j["passed"].get<int>(), 14);  // memory.no_new_mappings and arena_single_allocation skip under ASan
#else
  EXPECT_GE(j["passed"].get<int>(), 16);
#endif
  EXPECT_EQ(j["models"][0]["model"], "vit-digits");
}

TEST(SelftestCli, AttentionScaleFaultExitsOneNamingTheChecks) {
  EDGEVIT_SKIP_IF_EMULATED();
  const Ran r = run("--quick --inject-fault=attention-scale");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("FAILED kernel.attention.fused_vs_ref (vit-digits): rel_err"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("FAILED kernel.attention.explicit_vs_ref (vit-digits)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("FAILED e2e.logits (vit-digits)"), std::string::npos) << r.out;
}

TEST(SelftestCli, CorruptWeightFaultExitsOneNamingTheChecks) {
  EDGEVIT_SKIP_IF_EMULATED();
  const Ran r = run("--quick --json --inject-fault=corrupt-weight");
  EXPECT_EQ(r.code, 1) << r.out;
  // --json: the report on stdout, one line per failure on stderr.
  EXPECT_NE(r.out.find("edgevit-selftest: FAIL e2e.logits (vit-digits): rel_err"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("FAIL kernel."), std::string::npos) << r.out;
}

// Issue 21: a model whose outputs are NaN/Inf must not pass the self-test.
TEST(SelftestCli, NonFiniteModelExitsOneNamingTheCheck) {
  const std::string dir = testutil::make_temp_dir("selftest_cli_inf");
  const Ran r = run("--quick --model " + testutil::write_nonfinite_digits_model(dir));
  std::filesystem::remove_all(dir);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("FAILED numerics.outputs_finite (vit-digits-inf)"), std::string::npos) << r.out;
}

TEST(SelftestCli, UnplannedAllocationFaultExitsOneNamingTheCheck) {
  EDGEVIT_SKIP_IF_EMULATED();
#if defined(EDGEVIT_SANITIZER_BUILD)
  GTEST_SKIP() << "skipped: sanitizer build (the sanitizer owns malloc and maps memory itself)";
#endif
  const Ran r = run("--quick --inject-fault=unplanned-allocation");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("FAILED memory.arena_single_allocation (vit-digits): "), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("FAILED e2e."), std::string::npos) << r.out;
}

TEST(SelftestCli, CannotRunExitsTwo) {
  Ran r = run("--quick --model no-such-model");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("could not run: not_found"), std::string::npos) << r.out;
  r = run("--quick --testdata /nonexistent-testdata");
  EXPECT_EQ(r.code, 2) << r.out;
  r = run("--inject-fault=bogus");
  EXPECT_EQ(r.code, 2) << r.out;
  r = run("--gpio-loopback gpiochip0:x:4");
  EXPECT_EQ(r.code, 2) << r.out;
  r = run("--no-such-flag");
  EXPECT_EQ(r.code, 2) << r.out;
}

}  // namespace
}  // namespace edgevit
