// The edgevit command line as a user drives it: import + run against timm's golden outputs, and every
// documented exit code for bad input (docs/exit-codes.md). Runs the real binary.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <filesystem>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "runtime/safetensors.h"
#include "base/status.h"
#include "base/tolerances.h"
#include "tests/runtime/checkpoint_fixtures.h"
#include "tests/testutil/testutil.h"

namespace edgevit {
namespace {

struct Ran {
  int code;
  std::string out;  // stdout + stderr
};

Ran run(const std::string& args) {
  const testutil::ProgramRun p =
      testutil::run_command(testutil::binary_path("bin/edgevit") + " " + args, testutil::Stderr::kMerged);
  return Ran{p.code, p.out};
}

std::string tmp(const std::string& name) { return testutil::temp_dir() + "edgevit_cli_" + name; }

void write_file(const std::string& path, const std::string& data) {
  std::ofstream(path, std::ios::binary) << data;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<float> tensor(const std::string& file, const std::string& name) {
  auto f = SafetensorsFile::open(file);
  EXPECT_TRUE(f.ok()) << f.status().to_string();
  if (!f.ok()) return {};
  const TensorInfo* t = f->find(name);
  EXPECT_NE(t, nullptr);
  if (!t) return {};
  std::vector<float> v(static_cast<size_t>(t->numel));
  convert_to_f32(*t, f->data(*t), v.data());
  return v;
}

TEST(Cli, ImportThenRunMatchesTimm) {
  struct M { const char* name; const char* heads; };
  for (M m : {M{"vit-micro", "4"}, M{"vit-avgpool", "3"}, M{"vit-tiny-patch16-224", "3"}}) {
    SCOPED_TRACE(m.name);
    const std::string yaml = tmp(std::string(m.name) + ".yaml");
    Ran imp = run("import --from timm " + testutil::golden_path(std::string(m.name) + ".safetensors") + " --heads " +
                  m.heads + " -o " + yaml);
    ASSERT_EQ(imp.code, 0) << imp.out;
    // The golden inputs are already normalized: an imported config's preprocessing is irrelevant for
    // safetensors inputs, which bypass it.
    const std::string out = tmp(std::string(m.name) + ".out.safetensors");
    const std::string golden = testutil::golden_path(std::string(m.name) + ".golden.safetensors");
    Ran r = run("run " + yaml + " --device host-cpu --threads 2 --input " + golden + " --output " + out);
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("latency"), std::string::npos) << r.out;
    for (const char* t : {"logits", "pre_logits"}) {
      const auto got = tensor(out, t), want = tensor(golden, t);
      ASSERT_EQ(got.size(), want.size());
      EXPECT_LE(testutil::rel_error(got.data(), want.data(), want.size()), tol::kFp32EndToEnd) << t;
    }
  }
}

// Peak RSS of one child run of edgevit (posix_spawn + wait4: that child's own ru_maxrss), output discarded.
long long child_peak_rss(const std::vector<std::string>& args) {
  std::vector<std::string> argv_s{testutil::binary_path("bin/edgevit")};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return -1;
  int status = 0;
  struct rusage ru {};
  if (wait4(pid, &status, 0, &ru) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return -1;
  return static_cast<long long>(ru.ru_maxrss) * 1024;
}

// Peak RSS of `edgevit run` stays within weights + planned arena + 64 MiB above the process's baseline
// (`edgevit --version`: the executable and its shared libraries once loaded; a CUDA build maps cuBLASLt,
// ~210 MB of RSS on x86-64, before main() runs). The mmap'd checkpoint pages are the "weights" term; the
// arena holds the converted copy.
TEST(Cli, PeakRssWithinWeightsPlusArenaPlus64MiB) {
  const std::string cfg = testutil::source_path("config/models/vit-tiny-golden.yaml");
  const std::string ckpt = testutil::golden_path("vit-tiny-patch16-224.safetensors");
  Ran plan = run("plan " + cfg + " --device host-cpu --batch 2 --json");
  ASSERT_EQ(plan.code, 0) << plan.out;
  const auto key = plan.out.find("\"arena_bytes\": ");
  ASSERT_NE(key, std::string::npos);
  const long long arena = std::stoll(plan.out.substr(key + 15));
  struct stat st {};
  ASSERT_EQ(stat(ckpt.c_str(), &st), 0);
  const long long baseline = child_peak_rss({"--version"});
  const long long peak = child_peak_rss({"run", cfg, "--device", "host-cpu", "--threads", "2", "--input",
                                         testutil::golden_path("vit-tiny-patch16-224.golden.safetensors")});
  ASSERT_GT(baseline, 0);
  ASSERT_GT(peak, 0);
  const long long bound = static_cast<long long>(st.st_size) + arena + (64ll << 20);
  EXPECT_LE(peak - baseline, bound) << "peak RSS " << peak << " - baseline " << baseline << " > weights "
                                    << st.st_size << " + arena " << arena << " + 64 MiB";
  std::printf("peak RSS %lld bytes (baseline %lld), bound on the difference %lld\n", peak, baseline, bound);
}

// A real checkpoint saved by transformers 5.17 (tests/data/hf/README.md), in both its naming conventions:
// `import --from hf DIR` then `run` reproduces transformers' float64 outputs (eps 1e-12 from config.json).
TEST(Cli, ImportHuggingFaceThenRunMatchesTransformers) {
  const std::string golden = testutil::source_path("tests/data/hf/vit-hf-micro.golden.safetensors");
  for (const char* dir : {"vit-hf-micro", "vit-hf-micro-v4"}) {
    SCOPED_TRACE(dir);
    const std::string yaml = tmp(std::string(dir) + ".yaml");
    Ran imp = run("import --from hf " + testutil::source_path(std::string("tests/data/hf/") + dir) + " -o " + yaml);
    ASSERT_EQ(imp.code, 0) << imp.out;
    EXPECT_NE(read_file(yaml).find("layer_norm_eps: 1e-12"), std::string::npos) << read_file(yaml);
    const std::string out = tmp(std::string(dir) + ".out.safetensors");
    Ran r = run("run " + yaml + " --device host-cpu --threads 2 --input " + golden + " --output " + out);
    ASSERT_EQ(r.code, 0) << r.out;
    for (const char* t : {"logits", "pre_logits"}) {
      const auto got = tensor(out, t), want = tensor(golden, t);
      ASSERT_EQ(got.size(), want.size());
      EXPECT_LE(testutil::rel_error(got.data(), want.data(), want.size()), tol::kFp32EndToEnd) << t;
    }
  }
}

// The named outputs through the CLI (docs/models.md "Outputs"): HF ViTModel (pooler, no classifier) imported as
// a user would, `run --tokens --output` writes embedding (the pooler's dense + tanh), pre_logits and tokens,
// and no logits, matching transformers' float64 outputs; the embedding's L2 norm is printed; `plan --tokens
// --json` lists the tokens output and sizes its buffer (arena and io grow), `plan` without it does not.
TEST(Cli, RunOutputWritesTheNamedOutputs) {
  const std::string yaml = tmp("hf_vit_model.yaml");
  const std::string src = testutil::source_path("tests/data/families/hf_vit_model");
  Ran imp = run("import --from hf " + src + " -o " + yaml);
  ASSERT_EQ(imp.code, 0) << imp.out;
  const std::string golden = src + ".golden.safetensors";
  const std::string out = tmp("hf_vit_model.out.safetensors");
  Ran r = run("run " + yaml + " --device host-cpu --threads 2 --tokens --input " + golden + " --output " + out);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("embedding [2,64]:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("image 0: L2 norm "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tokens [2,17,64]"), std::string::npos) << r.out;
  for (const char* t : {"embedding", "tokens"}) {
    const auto got = tensor(out, t), want = tensor(golden, t);
    ASSERT_EQ(got.size(), want.size()) << t;
    EXPECT_LE(testutil::rel_error(got.data(), want.data(), want.size()), tol::kFp32EndToEnd) << t;
  }
  auto f = SafetensorsFile::open(out);
  ASSERT_TRUE(f.ok());
  EXPECT_NE(f->find("pre_logits"), nullptr);
  EXPECT_EQ(f->find("logits"), nullptr) << "a model without a classifier head has no logits";

  Ran plain = run("plan " + yaml + " --device host-cpu --batch 2 --json");
  Ran with = run("plan " + yaml + " --device host-cpu --batch 2 --tokens --json");
  ASSERT_EQ(plain.code, 0) << plain.out;
  ASSERT_EQ(with.code, 0) << with.out;
  const auto pj = nlohmann::json::parse(plain.out), wj = nlohmann::json::parse(with.out);
  std::vector<std::string> plain_names, with_names;
  for (const auto& o : pj["outputs"]) plain_names.push_back(o["name"]);
  for (const auto& o : wj["outputs"]) with_names.push_back(o["name"]);
  EXPECT_EQ(plain_names, (std::vector<std::string>{"embedding", "pre_logits"}));
  EXPECT_EQ(with_names, (std::vector<std::string>{"embedding", "pre_logits", "tokens"}));
  EXPECT_EQ(wj["outputs"][2]["shape"], (std::vector<int>{2, 17, 64}));
  EXPECT_EQ(wj["io_bytes"].get<int64_t>() - pj["io_bytes"].get<int64_t>(), 2 * 17 * 64 * 4);
  EXPECT_NE(plain.out, with.out);
  Ran text = run("plan " + yaml + " --device host-cpu --batch 2 --tokens");
  EXPECT_NE(text.out.find("outputs: embedding [2, 64], pre_logits [2, 64], tokens [2, 17, 64]"), std::string::npos)
      << text.out;
}

// import --image-size HxW: a non-square model end to end (issue #24): the YAML's img_size, the plan's token
// line, the golden input of that size (timm's output at 48 x 32) and an image preprocessed to 48 x 32.
TEST(Cli, ImportAtANonSquareSizeThenPlanAndRun) {
  const std::string ckpt = testutil::source_path("tests/data/families/timm_vit_nohead.safetensors");
  const std::string yaml = tmp("nonsquare.yaml");
  Ran imp = run("import --from timm " + ckpt + " --heads 2 --image-size 48x32 -o " + yaml);
  ASSERT_EQ(imp.code, 0) << imp.out;
  EXPECT_NE(imp.out.find("img 48x32"), std::string::npos) << imp.out;
  EXPECT_NE(read_file(yaml).find("img_size: [48, 32]"), std::string::npos) << read_file(yaml);
  Ran plan = run("plan " + yaml + " --device host-cpu");
  ASSERT_EQ(plan.code, 0) << plan.out;
  EXPECT_NE(plan.out.find("input: 25 tokens at 48x32 (6x4 patches of 8 + 1 prefix)"), std::string::npos) << plan.out;
  const std::string golden =
      testutil::source_path("tests/data/families/resize/timm_vit_nohead.size48x32.golden.safetensors");
  const std::string out = tmp("nonsquare.out.safetensors");
  Ran r = run("run " + yaml + " --device host-cpu --threads 2 --input " + golden + " --output " + out);
  ASSERT_EQ(r.code, 0) << r.out;
  const auto got = tensor(out, "pre_logits"), want = tensor(golden, "pre_logits");
  ASSERT_EQ(got.size(), want.size());
  EXPECT_LE(testutil::rel_error(got.data(), want.data(), want.size()), tol::kFp32EndToEnd);
  Ran img = run("run " + yaml + " --device host-cpu --threads 2 --input " +
                testutil::source_path("tests/data/preprocess/images/photo_97x61.png"));
  EXPECT_EQ(img.code, 0) << img.out;
  // The golden input of the transposed size does not fit: refused naming the shape the model takes.
  Ran wrong = run("run " + yaml + " --device host-cpu --input " +
                  testutil::source_path("tests/data/families/resize/timm_vit_nohead.size48x48.golden.safetensors"));
  EXPECT_NE(wrong.code, 0);
  EXPECT_NE(wrong.out.find("needs [N,3,48,32]"), std::string::npos) << wrong.out;
  for (const char* bad : {"48x30", "48x", "x32", "48x32x3", "0x32"}) {
    Ran b = run("import --from timm " + ckpt + " --heads 2 --image-size " + bad + " -o " + tmp("bad.yaml"));
    EXPECT_NE(b.code, 0) << bad;
    EXPECT_NE(b.out.find("--image-size"), std::string::npos) << bad << ": " << b.out;
  }
}

// import says how it read a timm head (runtime/timm_head.h, docs/models.md): timm_clip with an all-zero head
// bias (timm's OpenAI/OpenCLIP conversion) is a CLIP tower's image projection: the YAML says projection_head,
// `run --output` writes `embedding` (timm's head output) and no `logits`. The same folder with a config.json
// naming a fine-tuned tag is a classifier; a config.json whose architecture is not a string exits 3.
TEST(Cli, ImportSaysHowItReadATimmHead) {
  const std::string dir = tmp("timm_head");
  std::filesystem::create_directories(dir);
  testutil::TensorMap w =
      testutil::read_all_f32(testutil::source_path("tests/data/families/timm_clip.safetensors"));
  const std::vector<float> bias = w["head.bias"].data;
  std::fill(w["head.bias"].data.begin(), w["head.bias"].data.end(), 0.0f);
  ASSERT_TRUE(testutil::write_tensors(dir + "/model.safetensors", w).ok());
  const std::string import = "import --from timm " + dir + "/model.safetensors --heads 2 --eps 1e-5 -o " + dir + "/m.yaml";
  Ran imp = run(import);
  ASSERT_EQ(imp.code, 0) << imp.out;
  EXPECT_NE(imp.out.find("head: the CLIP image projection (embedding, no logits): no timm config.json beside the "
                         "checkpoint; norm_pre and a head with an all-zero bias"),
            std::string::npos)
      << imp.out;
  EXPECT_NE(read_file(dir + "/m.yaml").find("projection_head: true"), std::string::npos);
  const std::string golden = testutil::source_path("tests/data/families/timm_clip.golden.safetensors");
  Ran r = run("run " + dir + "/m.yaml --device host-cpu --threads 2 --input " + golden + " --output " + dir + "/o.st");
  ASSERT_EQ(r.code, 0) << r.out;
  std::vector<float> want = tensor(golden, "logits");
  for (size_t i = 0; i < want.size(); ++i) want[i] -= bias[i % bias.size()];
  const std::vector<float> got = tensor(dir + "/o.st", "embedding");
  ASSERT_EQ(got.size(), want.size());
  EXPECT_LE(testutil::rel_error(got.data(), want.data(), want.size()), tol::kFp32EndToEnd);
  auto out = SafetensorsFile::open(dir + "/o.st");
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->find("logits"), nullptr);
  write_file(dir + "/config.json",
             R"({"architecture": "vit_base_patch16_clip_224", "pretrained_cfg": {"tag": "openai_ft_in1k"}})");
  imp = run(import);
  ASSERT_EQ(imp.code, 0) << imp.out;
  EXPECT_NE(imp.out.find("head: a classifier (logits): " + dir + "/config.json names "
                         "vit_base_patch16_clip_224.openai_ft_in1k, a CLIP tower fine-tuned as a classifier"),
            std::string::npos)
      << imp.out;
  EXPECT_EQ(read_file(dir + "/m.yaml").find("projection_head"), std::string::npos);
  write_file(dir + "/config.json", R"({"architecture": 42})");
  imp = run(import);
  EXPECT_EQ(imp.code, 3) << imp.out;
  EXPECT_NE(imp.out.find(dir + "/config.json: key 'architecture': expected a timm model name, got 42"),
            std::string::npos)
      << imp.out;
  std::filesystem::remove_all(dir);
}

TEST(Cli, ImportWithoutHeadsSaysWhatIsMissing) {
  Ran r = run("import --from timm " + testutil::golden_path("vit-micro.safetensors") + " -o " + tmp("noheads.yaml"));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("--heads"), std::string::npos) << r.out;
}

TEST(Cli, PlanJsonHasTheDocumentedKeysAndIsStable) {
  const std::string model = testutil::source_path("config/models/vit-base-patch16-224.yaml");
  Ran a = run("plan " + model + " --device orin-nx-16gb --batch 8 --json");
  Ran b = run("plan " + model + " --device orin-nx-16gb --batch 8 --json");
  ASSERT_EQ(a.code, 0) << a.out;
  EXPECT_EQ(a.out, b.out);
  for (const char* key : {"\"arena_bytes\"", "\"lower_bound_bytes\"", "\"weights_bytes\"", "\"budget_bytes\"",
                          "\"fits\"", "\"plan_hash\"", "\"attention_kernel\"", "\"attention_reason\""})
    EXPECT_NE(a.out.find(key), std::string::npos) << key;
  Ran t = run("plan " + model + " --device orin-nx-16gb");
  EXPECT_NE(t.out.find("FITS"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("predicted"), std::string::npos) << t.out;
  // The class-token tail is on for this token-pooled model, says so, and --all-tokens turns it off.
  EXPECT_NE(a.out.find("\"class_token_tail\": true"), std::string::npos);
  EXPECT_NE(t.out.find("note: class-token tail"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("block 11 is the class-token tail"), std::string::npos) << t.out;
  Ran all = run("plan " + model + " --device orin-nx-16gb --batch 8 --json --all-tokens");
  ASSERT_EQ(all.code, 0) << all.out;
  EXPECT_NE(all.out.find("\"class_token_tail\": false"), std::string::npos);
  EXPECT_NE(all.out.find("\"plan_hash\""), std::string::npos);
  EXPECT_NE(all.out.substr(all.out.find("\"plan_hash\"")).substr(0, 40), a.out.substr(a.out.find("\"plan_hash\"")).substr(0, 40));
}

// bench says which input path it timed: by default the engine's own input buffer (no copy in infer()),
// with --pageable-input a separate array that infer() copies; --no-gemm-tuning and --no-attention-tuning are
// accepted everywhere.
TEST(Cli, BenchSaysWhichInputPath) {
  const std::string micro = testutil::source_path("config/models/vit-micro.yaml");
  Ran a = run("bench " + micro + " --device host-cpu --threads 1 --iters 3 --warmup 1 --no-gemm-tuning --no-attention-tuning");
  ASSERT_EQ(a.code, 0) << a.out;
  EXPECT_NE(a.out.find("input: written once into the engine's input buffer"), std::string::npos) << a.out;
  Ran b = run("bench " + micro + " --device host-cpu --threads 1 --iters 3 --warmup 1 --pageable-input --json");
  ASSERT_EQ(b.code, 0) << b.out;
  EXPECT_NE(b.out.find("\"input_path\": \"pageable_copy\""), std::string::npos) << b.out;
  Ran c = run("bench " + micro + " --device host-cpu --threads 1 --iters 3 --warmup 1 --json");
  ASSERT_EQ(c.code, 0) << c.out;
  EXPECT_NE(c.out.find("\"input_path\": \"engine_buffer\""), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("\"attention_tuning\": true"), std::string::npos) << c.out;
  Ran d = run("bench " + micro + " --device host-cpu --threads 1 --iters 3 --warmup 1 --json --no-attention-tuning");
  ASSERT_EQ(d.code, 0) << d.out;
  EXPECT_NE(d.out.find("\"attention_tuning\": false"), std::string::npos) << d.out;
}

TEST(Cli, ExitCodesForBadInput) {
  const std::string micro = testutil::source_path("config/models/vit-micro.yaml");
  const std::string golden_in = testutil::golden_path("vit-micro.golden.safetensors");

  Ran usage = run("");
  EXPECT_EQ(usage.code, 2) << usage.out;

  Ran missing_model = run("run " + tmp("nope.yaml") + " --device host-cpu --input " + golden_in);
  EXPECT_EQ(missing_model.code, exit_code_for(StatusCode::kNotFound)) << missing_model.out;
  EXPECT_NE(missing_model.out.find("nope.yaml"), std::string::npos);

  const std::string bad_cfg = tmp("bad.yaml");
  write_file(bad_cfg, read_file(micro) + "\nsurprise: 1\n");
  Ran cfg = run("plan " + bad_cfg + " --device host-cpu");
  EXPECT_EQ(cfg.code, exit_code_for(StatusCode::kConfigError)) << cfg.out;
  EXPECT_NE(cfg.out.find("surprise"), std::string::npos) << cfg.out;

  // A truncated checkpoint referenced by an otherwise valid config.
  const std::string ck = read_file(testutil::golden_path("vit-micro.safetensors"));
  const std::string trunc = tmp("trunc.safetensors");
  write_file(trunc, ck.substr(0, ck.size() / 2));
  std::string cfg_text = read_file(micro);
  const std::string from = "../../../shared/testdata/golden/vit-micro.safetensors";
  cfg_text.replace(cfg_text.find(from), from.size(), trunc);
  const std::string trunc_cfg = tmp("trunc.yaml");
  write_file(trunc_cfg, cfg_text);
  Ran ckr = run("run " + trunc_cfg + " --device host-cpu --input " + golden_in);
  EXPECT_EQ(ckr.code, exit_code_for(StatusCode::kCheckpointError)) << ckr.out;
  EXPECT_NE(ckr.out.find("trunc.safetensors"), std::string::npos) << ckr.out;

  const std::string bad_img = tmp("bad.png");
  write_file(bad_img, "\x89PNG\r\n\x1a\nthis is not really a png");
  Ran img = run("run " + micro + " --device host-cpu --input " + bad_img);
  EXPECT_EQ(img.code, exit_code_for(StatusCode::kInputError)) << img.out;
  EXPECT_NE(img.out.find("bad.png"), std::string::npos) << img.out;

  Ran fit = run("plan " + testutil::source_path("config/models/vit-base-patch16-224.yaml") +
                " --device orin-nano-4gb --batch 4096 --precision fp32");
  EXPECT_EQ(fit.code, exit_code_for(StatusCode::kDoesNotFit)) << fit.out;
  EXPECT_NE(fit.out.find("DOES NOT FIT"), std::string::npos) << fit.out;

  Ran dev = run("plan " + micro + " --device no-such-board");
  EXPECT_EQ(dev.code, exit_code_for(StatusCode::kNotFound)) << dev.out;

  Ran fp16 = run("plan " + micro + " --device host-cpu --precision fp16");
  EXPECT_EQ(fp16.code, exit_code_for(StatusCode::kUnsupported)) << fp16.out;

#ifndef EDGEVIT_HAVE_CUDA
  Ran cuda = run("run " + micro + " --device orin-nx-16gb --input " + golden_in);
  EXPECT_EQ(cuda.code, exit_code_for(StatusCode::kUnsupported)) << cuda.out;
  EXPECT_NE(cuda.out.find("without CUDA"), std::string::npos) << cuda.out;
#endif
}

}  // namespace
}  // namespace edgevit
