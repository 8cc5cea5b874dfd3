// What the command line prints for machines to read: every `--json` output parses as JSON from stdout
// alone, also when the command warns (diagnostics go to stderr, always): plan (with an attention fallback
// and a DOES NOT FIT verdict), devices, devices --detect, bench. `client --json` is covered by
// tests/daemon/daemon_process_test.cpp. And `run --help` names every input format `run` accepts, and a
// model whose outputs are non-finite makes run and bench exit 11 instead of printing an answer.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/selftest/model_fixtures.h"
#include "tests/testutil/testutil.h"

namespace edgevit {
namespace {

using Ran = testutil::ProgramRun;  // code, out (stdout), err (stderr)

Ran run(const std::string& args) { return testutil::run_program("bin/edgevit", args, testutil::Stderr::kSeparate); }

nlohmann::json parse_stdout(const Ran& r) {
  try {
    return nlohmann::json::parse(r.out);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "stdout is not JSON (" << e.what() << "):\n" << r.out << "\nstderr:\n" << r.err;
    return nullptr;
  }
}

// A model no fused attention kernel serves (head_dim 160), at batch 2048 on a 4 GB Nano, warns about the
// attention fallback and does not fit; stdout must still be exactly one JSON object.
TEST(CliJson, PlanWithWarningsIsStillJson) {
  const std::string model = testutil::source_path("tests/data/configs/valid/head_dim_160.yaml");
  const Ran r = run("plan " + model + " --device orin-nano-4gb --batch 2048 --json");
  EXPECT_EQ(r.code, 6) << r.err;
  const auto j = parse_stdout(r);
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["fits"], false);
  EXPECT_TRUE(j["attention_fallback"].get<bool>());
  EXPECT_NE(r.err.find("attention fallback"), std::string::npos) << "the warning goes to stderr: " << r.err;
}

TEST(CliJson, PlanOfEveryShippedModelOnEveryProfile) {
  for (const auto& entry : std::filesystem::directory_iterator(testutil::source_path("config/models"))) {
    if (entry.path().extension() != ".yaml") continue;
    for (const char* dev : {"host-cpu", "orin-nx-16gb", "orin-nano-8gb", "agx-orin-64gb"}) {
      SCOPED_TRACE(entry.path().string() + " on " + dev);
      const Ran r = run("plan " + entry.path().string() + " --device " + dev + " --json");
      EXPECT_TRUE(r.code == 0 || r.code == 6) << r.err;
      const auto j = parse_stdout(r);
      ASSERT_TRUE(j.is_object());
      EXPECT_EQ(j["device"], dev);
    }
  }
}

TEST(CliJson, Devices) {
  const Ran list = run("devices --json");
  EXPECT_EQ(list.code, 0) << list.err;
  const auto arr = parse_stdout(list);
  ASSERT_TRUE(arr.is_array());
  EXPECT_GE(arr.size(), 4u);
  const Ran det = run("devices --detect --json");
  EXPECT_EQ(det.code, 0) << det.err;
  const auto d = parse_stdout(det);
  ASSERT_TRUE(d.is_object());
  EXPECT_FALSE(d["source"].get<std::string>().empty());
  EXPECT_GT(d["profile"]["memory_total_bytes"].get<int64_t>(), 0);
  EXPECT_GE(d["profile"]["cpu_cores"].get<int>(), 1);
}

TEST(CliJson, DevicesDetectTextSaysHowItWasFound) {
  const Ran r = run("devices --detect");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("detected: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("found by: "), std::string::npos) << r.out;
}

TEST(CliJson, Bench) {
  const std::string micro = testutil::source_path("config/models/vit-micro.yaml");
  const Ran r = run("bench " + micro + " --device host-cpu --threads 1 --iters 2 --warmup 1 --json");
  EXPECT_EQ(r.code, 0) << r.err;
  const auto j = parse_stdout(r);
  ASSERT_TRUE(j.is_object());
}

// Issue 21: a model whose weights hold an Inf printed "p=nan" and exited 0. run and bench refuse to answer:
// exit 11 (non_finite_output), the output named, no "nan" printed as a result.
TEST(CliNonFinite, RunAndBenchExitElevenInsteadOfAnswering) {
  const std::string dir = testutil::make_temp_dir("cli_nonfinite");
  const std::string model = testutil::write_nonfinite_digits_model(dir);
  const Ran r = run("run " + model + " --device host-cpu --threads 1 --input " +
                    testutil::source_path("tests/data/digits/digit-3.png"));
  EXPECT_EQ(r.code, 11) << r.out << r.err;
  EXPECT_NE(r.err.find("output 'logits'"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("nan"), std::string::npos) << "a non-finite value printed as an answer: " << r.out;
  EXPECT_EQ(r.out.find("prediction"), std::string::npos) << r.out;
  const Ran b = run("bench " + model + " --device host-cpu --threads 1 --iters 2 --warmup 1 --json");
  EXPECT_EQ(b.code, 11) << b.out << b.err;
  const Ran o = run("run " + model + " --device host-cpu --threads 1 --input " +
                    testutil::source_path("tests/data/digits/digit-3.png") + " --output " + dir + "/out.safetensors");
  EXPECT_EQ(o.code, 11) << o.err;
  EXPECT_FALSE(std::filesystem::exists(dir + "/out.safetensors")) << "no output file for a non-finite answer";
  std::filesystem::remove_all(dir);
}

TEST(CliHelp, RunNamesEveryInputFormatItAccepts) {
  const Ran r = run("run --help");
  EXPECT_EQ(r.code, 0) << r.err;
  for (const char* f : {"PNG", "JPEG", "PPM", "PGM", "BMP", "TGA", "safetensors"})
    EXPECT_NE(r.out.find(f), std::string::npos) << f << " missing from run --help:\n" << r.out;
}

}  // namespace
}  // namespace edgevit
