// Same plan => same bits: the CPU logits and pre_logits of every model with weights here (the shipped
// vit-digits and the three shared goldens), both attention paths, 1 and 2 threads, hash to the values in
// tests/data/cpu_output_hashes.txt. A refactor of the runtime must not change one bit of them.
//
// Bits depend on the instruction set the kernels were generated for (libxsmm JIT target, the AVX level the
// hand-vectorised kernels dispatch on, OpenBLAS's core), so the table is keyed by that; a machine whose key
// is not in the table skips with the key in the reason (tools/skips.sh allows it), and
//   EDGEVIT_UPDATE_OUTPUT_HASHES=1 build/bin/cpu_bits_test
// adds or replaces this machine's section (review the diff; only a deliberate numerics change may).
#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include "kernels/cpu/kernels.h"
#include "platform/device_registry.h"
#include "runtime/config.h"
#include "runtime/engine.h"
#include "runtime/safetensors.h"
#include "tests/testutil/testutil.h"

namespace edgevit {
namespace {

const char* kTable = "tests/data/cpu_output_hashes.txt";

std::string isa_key() {
#if defined(EDGEVIT_SANITIZER_BUILD) || !defined(NDEBUG)
  const std::string build = "-instrumented";  // sanitizer and debug code generation differ from release
#else
  const std::string build;
#endif
#if defined(__x86_64__)
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  const char* level = avx512 ? "avx512" : __builtin_cpu_supports("avx2") ? "avx2" : "sse";
  return std::string("x86_64-") + level + (cpu_packed_gemm_available() ? "-libxsmm" : "") + "-" + cpu_blas_core() +
         build;
#elif defined(__aarch64__)
  return std::string("aarch64-") + cpu_blas_core() + build;
#else
  return std::string("other-") + cpu_blas_core() + build;
#endif
}

struct Case {
  const char* config;
  const char* golden;  // input images from this golden file, or nullptr: seeded pseudo-random input
};

std::vector<float> golden_input(const Case& c, int64_t per_image, int* n) {
  if (c.golden != nullptr) {
    auto f = SafetensorsFile::open(testutil::golden_path(c.golden));
    EXPECT_TRUE(f.ok()) << f.status().to_string();
    if (!f.ok()) return {};
    const TensorInfo* t = f->find("input");
    std::vector<float> v(static_cast<size_t>(t->numel));
    convert_to_f32(*t, f->data(*t), v.data());
    *n = static_cast<int>(t->shape[0]);
    return v;
  }
  *n = 4;
  std::vector<float> v(static_cast<size_t>(per_image * *n));
  uint32_t s = 12345u;
  for (float& x : v) {
    s = s * 1664525u + 1013904223u;
    x = static_cast<float>(s >> 8) / static_cast<float>(1u << 24) * 2.f - 1.f;
  }
  return v;
}

// "config attention threads hash" lines for this machine.
std::vector<std::string> compute_lines() {
  const Case cases[] = {{"vit-micro.yaml", "vit-micro.golden.safetensors"},
                        {"vit-avgpool.yaml", "vit-avgpool.golden.safetensors"},
                        {"vit-tiny-golden.yaml", "vit-tiny-patch16-224.golden.safetensors"},
                        {"vit-digits.yaml", nullptr}};
  std::vector<std::string> lines;
  auto dev = find_device_profile("host-cpu", {testutil::source_path("config/devices")});
  EXPECT_TRUE(dev.ok());
  for (const Case& c : cases) {
    auto spec = load_model_spec(testutil::source_path(std::string("config/models/") + c.config));
    EXPECT_TRUE(spec.ok()) << spec.status().to_string();
    if (!spec.ok()) continue;
    const int64_t per_image = static_cast<int64_t>(spec->arch.in_chans) * spec->arch.img_h * spec->arch.img_w;
    int n = 0;
    const std::vector<float> input = golden_input(c, per_image, &n);
    for (AttentionImpl att : {AttentionImpl::kFused, AttentionImpl::kExplicit}) {
      for (int threads : {1, 2}) {
        EngineOptions o;
        o.plan.attention = att;
        o.plan.batch = n;
        o.threads = threads;
        auto engine = Engine::create(*spec, *dev, o);
        EXPECT_TRUE(engine.ok()) << engine.status().to_string();
        if (!engine.ok()) continue;
        EXPECT_TRUE((*engine)->infer(input.data(), n).ok());
        XXH64_state_t* st = XXH64_createState();
        XXH64_reset(st, 0);
        XXH64_update(st, (*engine)->logits(), sizeof(float) * static_cast<size_t>(n) * (*engine)->output_dim());
        XXH64_update(st, (*engine)->pre_logits(), sizeof(float) * static_cast<size_t>(n) * (*engine)->embed_dim());
        char hex[17];
        std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(XXH64_digest(st)));
        XXH64_freeState(st);
        lines.push_back(std::string(c.config) + " " + to_string(att) + " " + std::to_string(threads) + " " + hex);
      }
    }
  }
  return lines;
}

// The table: "[key]" section headers, then that key's lines.
std::map<std::string, std::vector<std::string>> read_table(const std::string& path) {
  std::map<std::string, std::vector<std::string>> t;
  std::ifstream in(path);
  std::string line, key;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    if (line.front() == '[' && line.back() == ']') {
      key = line.substr(1, line.size() - 2);
      t[key];
    } else if (!key.empty()) {
      t[key].push_back(line);
    }
  }
  return t;
}

TEST(CpuBits, OutputsMatchStoredHashes) {
  const std::string key = isa_key();
  const std::string path = testutil::source_path(kTable);
  auto table = read_table(path);
  const std::vector<std::string> lines = compute_lines();
  ASSERT_EQ(lines.size(), 4u * 2 * 2);
  if (std::getenv("EDGEVIT_UPDATE_OUTPUT_HASHES") != nullptr) {
    table[key] = lines;
    std::ofstream out(path);
    out << "# Generated by EDGEVIT_UPDATE_OUTPUT_HASHES=1 cpu_bits_test (tests/runtime/cpu_bits_test.cpp):\n"
        << "# per instruction-set key, \"model attention threads xxh64(logits, pre_logits)\".\n";
    for (const auto& [k, v] : table) {
      out << "[" << k << "]\n";
      for (const std::string& l : v) out << l << "\n";
    }
    std::printf("wrote section [%s] of %s\n", key.c_str(), path.c_str());
    return;
  }
  auto it = table.find(key);
  if (it == table.end()) GTEST_SKIP() << "no stored CPU output hashes for this instruction set: " << key;
  EXPECT_EQ(it->second, lines) << "key " << key;
}

}  // namespace
}  // namespace edgevit
