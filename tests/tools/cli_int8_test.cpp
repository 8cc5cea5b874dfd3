// `edgevit calibrate`, `edgevit compare` and `--precision int8` through the real binary (docs/int8.md): the
// calibrated config runs, compare prints every block's tensors with finite errors, plan says int8 per op,
// and bad input exits with its documented code.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "base/tolerances.h"
#include "tests/testutil/testutil.h"

namespace edgevit {
namespace {

using Ran = testutil::ProgramRun;  // code, out (stdout), err (stderr)

Ran run(const std::string& args) { return testutil::run_program("bin/edgevit", args, testutil::Stderr::kSeparate); }

const std::string kDigits = testutil::source_path("config/models/vit-digits.yaml");
const std::string kCalib = testutil::source_path("tests/data/digits/calib_split.safetensors");

// --ln-fold (docs/int8.md "The LayerNorm fold"): the factors are in the scale file, the folded config runs,
// and compare reads it.
TEST(CliInt8, CalibrateWithTheLayerNormFold) {
  const std::string out = testutil::temp_dir() + "cli_int8_fold.yaml";
  const Ran c = run("calibrate " + kDigits + " --images " + kCalib + " --samples 64 --ln-fold -o " + out);
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_NE(c.out.find("(mse, LayerNorm fold, bias correction): 16 scales and 8 channel factors"), std::string::npos)
      << c.out;
  std::ifstream f(testutil::temp_dir() + "cli_int8_fold.scales.safetensors", std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_NE(bytes.find("\"ln_fold\":\"repq\""), std::string::npos);
  EXPECT_NE(bytes.find("blocks.3.norm2.channel_factor"), std::string::npos);
  const Ran r = run("run " + out + " -i " + testutil::source_path("tests/data/digits/digit-7.png") + " -v");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("1. 7"), std::string::npos) << r.out;
  const Ran cmp = run("compare " + out + " -i " + testutil::source_path("tests/data/digits/digit-3.png"));
  ASSERT_EQ(cmp.code, 0) << cmp.err;
  EXPECT_NE(cmp.out.find("blocks.0.norm1.out"), std::string::npos) << cmp.out;
}

// The bias correction (docs/int8.md "Bias correction", on by default; --bias-correction says so explicitly): the
// means are in the scale file, the config runs, and with the fold too both go in; --no-bias-correction leaves them out.
TEST(CliInt8, CalibrateWithBiasCorrection) {
  const std::string out = testutil::temp_dir() + "cli_int8_bias.yaml";
  const Ran c = run("calibrate " + kDigits + " --images " + kCalib + " --samples 64 --bias-correction -o " + out);
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_NE(c.out.find("(mse, bias correction): 16 scales and 16 input means"), std::string::npos) << c.out;
  std::ifstream f(testutil::temp_dir() + "cli_int8_bias.scales.safetensors", std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_NE(bytes.find("\"bias_correction\":\"input_mean\""), std::string::npos);
  EXPECT_NE(bytes.find("blocks.3.mlp.fc2.input_mean"), std::string::npos);
  const Ran r = run("run " + out + " -i " + testutil::source_path("tests/data/digits/digit-7.png") + " -v");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("1. 7"), std::string::npos) << r.out;
  const Ran both = run("calibrate " + kDigits + " --images " + kCalib + " --samples 64 --bias-correction --ln-fold -o " +
                       testutil::temp_dir() + "cli_int8_bias_fold.yaml");
  ASSERT_EQ(both.code, 0) << both.err;
  EXPECT_NE(both.out.find("16 scales and 8 channel factors and 16 input means"), std::string::npos) << both.out;
  const std::string plain = testutil::temp_dir() + "cli_int8_nobias.yaml";
  const Ran off =
      run("calibrate " + kDigits + " --images " + kCalib + " --samples 64 --no-bias-correction -o " + plain);
  ASSERT_EQ(off.code, 0) << off.err;
  EXPECT_NE(off.out.find("calibrated vit-digits on 64 images (mse): 16 scales ->"), std::string::npos) << off.out;
  std::ifstream g(testutil::temp_dir() + "cli_int8_nobias.scales.safetensors", std::ios::binary);
  const std::string plain_bytes((std::istreambuf_iterator<char>(g)), std::istreambuf_iterator<char>());
  EXPECT_EQ(plain_bytes.find("input_mean"), std::string::npos);
}

TEST(CliInt8, CalibrateWritesScalesAndAConfigThatRunsAtInt8) {
  const std::string out = testutil::temp_dir() + "cli_int8_digits.yaml";
  const Ran c = run("calibrate " + kDigits + " --images " + kCalib + " --samples 64 --method mse -o " + out);
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_NE(c.out.find("calibrated vit-digits on 64 images (mse, bias correction): 16 scales and 16 input means"),
            std::string::npos)
      << c.out;
  for (const char* t : {"blocks.0.attn.qkv.out", "blocks.3.mlp.hidden", "logits"})
    EXPECT_NE(c.out.find(t), std::string::npos) << t << " missing from\n" << c.out;
  std::ifstream yaml(out);
  const std::string text((std::istreambuf_iterator<char>(yaml)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("precision: int8"), std::string::npos) << text;
  EXPECT_NE(text.find("int8_scales: cli_int8_digits.scales.safetensors"), std::string::npos) << text;

  const Ran r = run("run " + out + " -i " + testutil::source_path("tests/data/digits/digit-7.png") + " -v");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("1. 7"), std::string::npos) << r.out;

  const Ran p = run("plan " + out + " --device host-cpu --json");
  ASSERT_EQ(p.code, 0) << p.err;
  const nlohmann::json j = nlohmann::json::parse(p.out);
  EXPECT_EQ(j["precision"], "int8");
  EXPECT_EQ(j["int8"]["gemms"], 16);
  EXPECT_EQ(j["int8"]["weight_bytes"], 4 * (3 * 64 * 64 + 64 * 64 + 2 * 64 * 256));
  int int8_ops = 0;
  for (const auto& o : j["ops"]) {
    ASSERT_TRUE(o.contains("precision")) << o.dump();
    if (o["precision"] == "int8") {
      ++int8_ops;
      EXPECT_TRUE(o["row"] == "cpu.gemm_i8_ref" || o["row"] == "cpu.layernorm_f32->int8") << o.dump();
    }
  }
  EXPECT_EQ(int8_ops, 4 * 6);  // per block: norm1, qkv, proj, norm2, fc1, fc2

  const Ran b = run("bench " + out + " --device host-cpu -n 3 --warmup 1 --json");
  ASSERT_EQ(b.code, 0) << b.err;
  EXPECT_EQ(nlohmann::json::parse(b.out)["precision"], "int8");

  // --int8-float: the float ops of a CUDA INT8 plan (docs/int8.md "fp32 mode"); the CPU's are fp32 regardless.
  EXPECT_EQ(j["int8"]["float"], "fp32");
  const Ran cpu16 = run("plan " + out + " --device host-cpu --int8-float fp16 --json");
  ASSERT_EQ(cpu16.code, 0) << cpu16.err;
  EXPECT_EQ(nlohmann::json::parse(cpu16.out)["plan_hash"], j["plan_hash"]);
  for (const char* f : {"fp16", "fp32"}) {
    const Ran orin = run("plan " + out + " --device orin-nx-16gb --int8-float " + f + " --json");
    ASSERT_EQ(orin.code, 0) << orin.err;
    const nlohmann::json jo = nlohmann::json::parse(orin.out);
    EXPECT_EQ(jo["int8"]["float"], f);
    for (const auto& o : jo["ops"]) {
      if (o["op"] == "layernorm" && o["precision"] == "int8") {
        EXPECT_EQ(o["row"], std::string("cuda.layernorm_f") + (f + 2) + "->int8") << o.dump();
      }
    }
  }
  const Ran bad = run("plan " + out + " --device orin-nx-16gb --int8-float bf16");
  EXPECT_EQ(bad.code, 2) << bad.err;
  EXPECT_NE(bad.err.find("--int8-float must be fp16 or fp32, got 'bf16'"), std::string::npos) << bad.err;
}

TEST(CliInt8, ComparePrintsEveryBlocksTensorsWithFiniteErrors) {
  const std::string out = testutil::temp_dir() + "cli_int8_cmp.yaml";
  ASSERT_EQ(run("calibrate " + kDigits + " --images " + kCalib + " --samples 32 -o " + out).code, 0);
  const Ran c = run("compare " + out + " --precisions fp32,int8 -i " +
                    testutil::source_path("tests/data/digits/test_split.safetensors") + " --samples 40");
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_NE(c.out.find("vit-digits: 40 images"), std::string::npos) << c.out;
  int rows = 0;
  std::istringstream lines(c.out);
  std::string line;
  while (std::getline(lines, line)) {
    char name[128];
    double rel = 0, sqnr = 0, max_abs = 0;
    if (std::sscanf(line.c_str(), "%127s %lf %lf %lf", name, &rel, &sqnr, &max_abs) != 4) continue;
    ++rows;
    EXPECT_TRUE(std::isfinite(rel) && std::isfinite(sqnr)) << line;
    const std::string n(name);
    // Before the first INT8 op: the same values, but the INT8 path's patch embedding is float64 rounded once
    // (the twin row cpu.linear_f64, docs/int8.md "fp32 mode") where the fp32 path's is an fp32 GEMM: ulps apart.
    if (n.find("patch_embed") == 0) {
      EXPECT_LE(rel, tol::kFp32Reordered) << line;
    }
    if (n.find(".attn.qkv.out") != std::string::npos || n == "logits") {
      EXPECT_GT(rel, 0.0) << "INT8 ran: " << line;
      EXPECT_GT(sqnr, 20.0) << line;
    }
  }
  EXPECT_EQ(rows, 2 + 4 * 5 + 3) << c.out;  // stem, 5 per block, pre_logits, norm.out, logits
  // fp32 against itself: identical.
  const Ran same = run("compare " + out + " --precisions fp32,fp32 -i " +
                       testutil::source_path("tests/data/digits/digit-3.png"));
  ASSERT_EQ(same.code, 0) << same.err;
  EXPECT_EQ(same.out.find("e-0"), std::string::npos) << "fp32 vs fp32 must be exact:\n" << same.out;
}

TEST(CliInt8, BadInputExitsWithItsDocumentedCode) {
  const std::string out = testutil::temp_dir() + "cli_int8_bad.yaml";
  EXPECT_EQ(run("calibrate " + kDigits + " --images /nonexistent.safetensors -o " + out).code, 8);
  EXPECT_EQ(run("calibrate " + kDigits + " --images " + kCalib + " --method wrong -o " + out).code, 2);
  EXPECT_EQ(run("compare " + kDigits + " --precisions fp32,fp16 -i " + kCalib).code, 2);
  // int8 without a scale file on a per-tensor config: a config error naming the key.
  const Ran r = run("run " + kDigits + " --precision int8 -i " + testutil::source_path("tests/data/digits/digit-1.png"));
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_NE(r.err.find("runtime.int8_scales"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace edgevit
