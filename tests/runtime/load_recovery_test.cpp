// A failed load leaves no partial state: after every hostile file of tests/data/hostile/ (and corrupt
// checkpoints given to Engine::create), a valid load of the same kind in the same process succeeds and
// gives exactly what it gave before any failure. Also the arena's fault path: a plan over the budget is
// refused with "needs N bytes, budget M bytes" and a suggestion, before the arena is mapped (mmap is
// interposed in this binary and every anonymous mapping recorded).
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "platform/device_registry.h"
#include "runtime/config.h"
#include "runtime/engine.h"
#include "runtime/inputs.h"
#include "runtime/labels.h"
#include "runtime/safetensors.h"
#include "runtime/weights.h"
#include "tests/runtime/checkpoint_fixtures.h"
#include "tests/testutil/testutil.h"

// ---- mmap interposition: every anonymous writable mapping's length, while recording ----------------------
namespace {
constexpr int kMaxRecorded = 64;
std::atomic<bool> g_recording{false};
std::atomic<int> g_anon_count{0};
size_t g_anon_lengths[kMaxRecorded];
}  // namespace

extern "C" void* mmap(void* addr, size_t length, int prot, int flags, int fd, off_t offset) {
  if (g_recording.load() && (flags & MAP_ANONYMOUS) && (prot & PROT_WRITE)) {
    const int i = g_anon_count.fetch_add(1);
    if (i < kMaxRecorded) g_anon_lengths[i] = length;
  }
  return reinterpret_cast<void*>(syscall(SYS_mmap, addr, length, prot, flags, fd, offset));
}

namespace edgevit {
namespace {

namespace fs = std::filesystem;

std::string repo(const std::string& rel) { return testutil::source_path(rel); }

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

DeviceProfile device(const char* name) {
  auto d = find_device_profile(name, {repo("config/devices")});
  EXPECT_TRUE(d.ok()) << d.status().to_string();
  return d.ok() ? *d : DeviceProfile();
}

ModelSpec digits() {
  auto s = load_model_spec(repo("config/models/vit-digits.yaml"));
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return s.ok() ? *s : ModelSpec();
}

// The valid loads, one per loader, each returning a fingerprint of what it loaded.
std::string good_safetensors() {
  auto f = SafetensorsFile::open(repo("tests/data/digits/test_split.safetensors"));
  if (!f.ok()) return "error: " + f.status().to_string();
  std::string fp;
  for (const TensorInfo& t : f->tensors()) fp += t.name + ":" + std::to_string(t.numel) + ";";
  return fp;
}
std::string good_model() {
  auto s = load_model_spec(repo("config/models/vit-digits.yaml"));
  return s.ok() ? *model_spec_to_yaml(*s, "/") : "error: " + s.status().to_string();
}
std::string good_device() {
  auto d = load_device_profile(repo("config/devices/orin-nx-16gb.yaml"));
  return d.ok() ? d->name + ":" + std::to_string(d->memory_budget_bytes) + ":" + std::to_string(d->sm_count)
                : "error: " + d.status().to_string();
}
std::string good_image() {
  std::vector<float> dst(64);
  const Status s = load_image_file(repo("tests/data/digits/digit-3.png"), digits(), dst.data());
  return s.ok() ? std::string(reinterpret_cast<const char*>(dst.data()), dst.size() * sizeof(float))
                : "error: " + s.to_string();
}
std::string good_checkpoint() {
  auto w = WeightSource::open(repo("config/models/vit-digits.safetensors"), WeightNaming::kTimm);
  if (!w.ok()) return "error: " + w.status().to_string();
  const Status s = w->check(digits().arch);
  return s.ok() ? "ok" : "error: " + s.to_string();
}
std::string good_input() {
  auto b = load_input_file(repo("tests/data/digits/test_split.safetensors"), digits());
  return b.ok() ? std::to_string(b->count) + ":" + std::string(reinterpret_cast<const char*>(b->data.data()),
                                                                b->data.size() * sizeof(float))
                : "error: " + b.status().to_string();
}

// The hostile load of `file`, chosen by its prefix (the naming of tests/data/hostile/).
Status hostile_load(const std::string& file) {
  const std::string path = repo("tests/data/hostile/" + file);
  const auto starts = [&](const char* p) { return file.rfind(p, 0) == 0; };
  if (starts("st_")) return SafetensorsFile::open(path).status();
  if (starts("ckpt_")) {
    EV_ASSIGN_OR_RETURN(WeightSource w, WeightSource::open(path, WeightNaming::kTimm));
    return w.check(digits().arch);
  }
  if (starts("model_")) return load_model_spec(path).status();
  if (starts("device_")) return load_device_profile(path).status();
  if (starts("img_")) {
    std::vector<float> dst(3 * 224 * 224);
    ModelSpec rgb;  // 3x224x224 defaults
    const Status s = load_image_file(path, digits(), dst.data());
    return s.ok() ? load_image_file(path, rgb, dst.data()) : s;
  }
  if (starts("input_")) return load_input_file(path, digits()).status();
  if (starts("labels_")) return load_labels(path, digits().arch.num_classes).status();
  return internal_error(file + ": no loader for this prefix");
}

TEST(LoadRecovery, EveryHostileFileThenAValidLoadOfEachKind) {
  const std::vector<std::pair<const char*, std::string (*)()>> goods = {
      {"safetensors", good_safetensors}, {"model", good_model}, {"device", good_device},
      {"image", good_image},             {"checkpoint", good_checkpoint}, {"input", good_input}};
  std::vector<std::string> before;
  for (const auto& g : goods) {
    before.push_back(g.second());
    ASSERT_EQ(before.back().rfind("error: ", 0), std::string::npos) << g.first << ": " << before.back();
  }
  int hostile = 0;
  for (const auto& entry : fs::directory_iterator(repo("tests/data/hostile"))) {
    const std::string file = entry.path().filename().string();
    if (file == "make_hostile.py") continue;
    ++hostile;
    const Status s = hostile_load(file);
    EXPECT_FALSE(s.ok()) << file << " loaded";
    EXPECT_NE(s.code(), StatusCode::kInternal) << s.to_string();
    for (size_t k = 0; k < goods.size(); ++k)
      EXPECT_EQ(goods[k].second(), before[k]) << goods[k].first << " differs after " << file;
  }
  EXPECT_GT(hostile, 40);
}

// Bit-identical logits of `spec` on the first 8 test images, from a fresh engine.
std::vector<float> digits_logits(const ModelSpec& spec, Status* status) {
  EngineOptions o;
  o.plan.batch = 8;
  o.threads = 1;
  auto e = Engine::create(spec, device("host-cpu"), o);
  if (!e.ok()) {
    *status = e.status();
    return {};
  }
  auto batch = load_input_file(repo("tests/data/digits/test_split.safetensors"), spec);
  if (!batch.ok()) {
    *status = batch.status();
    return {};
  }
  *status = (*e)->infer(batch->data.data(), 8);
  if (!status->ok()) return {};
  return std::vector<float>((*e)->logits(), (*e)->logits() + 8 * (*e)->output_dim());
}

TEST(LoadRecovery, EngineCreateWithCorruptCheckpointsThenAGoodOne) {
  const ModelSpec good = digits();
  Status st;
  const std::vector<float> reference = digits_logits(good, &st);
  ASSERT_TRUE(st.ok()) << st.to_string();
  ASSERT_EQ(reference.size(), 80u);

  const std::string dir = testutil::make_temp_dir("recovery");
  const std::string bytes = slurp(good.weights_path);
  ASSERT_GT(bytes.size(), 4096u);
  std::string header_flip = bytes;
  header_flip[8 + 2] = '\x01';  // a control byte inside the JSON header
  // Valid safetensors, same bytes, one shape the model does not expect: norm.weight [64] -> [8, 8].
  testutil::TensorMap tensors = testutil::read_all_f32(good.weights_path);
  ASSERT_EQ(tensors.count("norm.weight"), 1u);
  tensors["norm.weight"].shape = {8, 8};
  ASSERT_TRUE(testutil::write_tensors(dir + "/reshaped.safetensors", tensors).ok());
  const std::string wrong_shape = slurp(dir + "/reshaped.safetensors");
  struct Corrupt {
    const char* name;
    std::string bytes;
    StatusCode code;
  };
  const std::vector<Corrupt> corrupt = {
      {"truncated", bytes.substr(0, bytes.size() / 2), StatusCode::kCheckpointError},
      {"header_flip", header_flip, StatusCode::kCheckpointError},
      {"wrong_shape", wrong_shape, StatusCode::kCheckpointError},
      {"empty", "", StatusCode::kCheckpointError},
      {"other_model", slurp(repo("tests/data/hf/vit-hf-micro/model.safetensors")), StatusCode::kCheckpointError},
  };
  for (const Corrupt& c : corrupt) {
    SCOPED_TRACE(c.name);
    ModelSpec bad = good;
    bad.weights_path = dir + "/" + c.name + ".safetensors";
    write_file(bad.weights_path, c.bytes);
    Status s;
    const std::vector<float> out = digits_logits(bad, &s);
    EXPECT_EQ(s.code(), c.code) << s.to_string();
    EXPECT_NE(s.message().find(bad.weights_path), std::string::npos) << s.message();
    // The same process, the good checkpoint: the very same logits as before any failure.
    const std::vector<float> again = digits_logits(good, &s);
    ASSERT_TRUE(s.ok()) << s.to_string();
    EXPECT_EQ(0, std::memcmp(again.data(), reference.data(), reference.size() * sizeof(float)));
  }
  ModelSpec missing = good;
  missing.weights_path = dir + "/does_not_exist.safetensors";
  Status s;
  digits_logits(missing, &s);
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s.to_string();
  fs::remove_all(dir);
}

// ---- the arena's fault path --------------------------------------------------------------------------

std::vector<size_t> recorded() {
  const int n = std::min(g_anon_count.load(), kMaxRecorded);
  return std::vector<size_t>(g_anon_lengths, g_anon_lengths + n);
}

TEST(ArenaFault, RecorderSeesTheArenaOfAPlanThatFits) {
  g_anon_count = 0;
  g_recording = true;
  EngineOptions o;
  o.plan.batch = 4;
  o.threads = 1;
  auto e = Engine::create(digits(), device("host-cpu"), o);
  g_recording = false;
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  const size_t arena = static_cast<size_t>((*e)->plan().arena_bytes);
  const std::vector<size_t> lengths = recorded();
  EXPECT_NE(std::find(lengths.begin(), lengths.end(), arena), lengths.end())
      << "the interposed mmap did not see the " << arena << "-byte arena";
}

TEST(ArenaFault, PlanOverBudgetIsRefusedBeforeTheArenaIsMapped) {
  auto spec = load_model_spec(repo("config/models/vit-base-patch16-224.yaml"));
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  const DeviceProfile nano = device("orin-nano-4gb");
  spec->max_batch = 1024;  // ViT-B/16 in fp32 at batch 1024 needs about 5.5 GB: over the Nano's 3 GiB budget
  EngineOptions o;
  o.plan.batch = 1024;
  o.plan.precision = Precision::kFp32;
  auto plan = make_plan(*spec, nano, o.plan);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  ASSERT_FALSE(plan->fits) << plan->total_bytes << " bytes, budget " << plan->budget_bytes;
  ASSERT_GT(plan->total_bytes, plan->budget_bytes);

  g_anon_count = 0;
  g_recording = true;
  auto e = Engine::create(*spec, nano, o);
  g_recording = false;
  ASSERT_FALSE(e.ok());
  const std::string& m = e.status().message();
  EXPECT_EQ(e.status().code(), StatusCode::kDoesNotFit) << m;
  EXPECT_NE(m.find("needs " + std::to_string(plan->total_bytes) + " bytes, budget " +
                   std::to_string(plan->budget_bytes) + " bytes"),
            std::string::npos)
      << m;
  EXPECT_TRUE(std::regex_search(m, std::regex("try a smaller batch \\(--batch 512\\)"))) << m;
  EXPECT_NE(m.find("--precision fp16"), std::string::npos) << m;
  // Nothing the size of the arena (nor anything over 1 MiB) was mapped: the refusal came first. (Had it
  // gone on, the weights file, which does not exist, would have given kNotFound.)
  for (size_t len : recorded()) {
    EXPECT_LT(len, size_t{1} << 20) << "an anonymous mapping of " << len << " bytes during a refused create";
    EXPECT_LT(len, static_cast<size_t>(plan->arena_bytes));
  }
}

TEST(ArenaFault, BudgetOfOneMiBRefusesEvenTheSmallestModel) {
  DeviceProfile tiny = device("host-cpu");
  tiny.memory_budget_bytes = int64_t{1} << 20;
  EngineOptions o;
  o.plan.batch = 64;
  g_anon_count = 0;
  g_recording = true;
  auto e = Engine::create(digits(), tiny, o);
  g_recording = false;
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kDoesNotFit) << e.status().to_string();
  EXPECT_TRUE(std::regex_search(e.status().message(), std::regex("needs [0-9]+ bytes, budget 1048576 bytes")))
      << e.status().message();
  EXPECT_NE(e.status().message().find("--batch 32"), std::string::npos) << e.status().message();
  EXPECT_TRUE(recorded().empty() || *std::max_element(recorded().begin(), recorded().end()) < (size_t{1} << 20));
}

}  // namespace
}  // namespace edgevit
