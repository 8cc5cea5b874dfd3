// INT8 on the CUDA backend (docs/int8.md), on a profile queried from GPU 0: vit-digits calibrated on its
// calibration split (on the CPU, per tensor) runs through the CUDA INT8 rows (cuda.layernorm_f16->int8,
// cuda.gemm_i8_mma) with fp16 elsewhere; issue #25's acceptance on the GPU: at most 2 more errors than fp32 on
// the 360 test images and top-1 agreement with fp32 >= 99%; its logits against the CPU INT8 path's are
// reported (fp16 residual stream and LayerNorm input vs the CPU's fp32: not bit-equal) and held within
// tol::kInt8EndToEnd.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "base/tolerances.h"
#include "platform/cuda_query.h"
#include "platform/device_registry.h"
#include "runtime/config.h"
#include "runtime/engine.h"
#include "runtime/int8_calibrate.h"
#include "runtime/safetensors.h"
#include "tests/testutil/cuda_main.h"
#include "tests/testutil/testutil.h"

namespace edgevit {
namespace {

std::vector<float> read(const SafetensorsFile& f, const char* name) {
  const TensorInfo* t = f.find(name);
  std::vector<float> v(t ? static_cast<size_t>(t->numel) : 0);
  if (t) convert_to_f32(*t, f.data(*t), v.data());
  return v;
}

std::vector<float> logits(const ModelSpec& spec, Precision p, const DeviceProfile& dev, const std::vector<float>& x,
                          int count, std::vector<std::string>* kernels) {
  EngineOptions o;
  o.plan.precision = p;
  o.plan.batch = 64;
  o.threads = 2;
  auto e = Engine::create(spec, dev, o);
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  if (!e.ok()) return {};
  std::vector<float> out;
  for (int i = 0; i < count; i += 64) {
    const int n = std::min(64, count - i);
    const Status s = (*e)->infer(x.data() + static_cast<size_t>(i) * 64, n);
    EXPECT_TRUE(s.ok()) << s.to_string();
    out.insert(out.end(), (*e)->logits(), (*e)->logits() + n * 10);
  }
  if (kernels) *kernels = (*e)->executed_kernels();
  return out;
}

std::vector<int> top1(const std::vector<float>& l) {
  std::vector<int> t;
  for (size_t i = 0; i + 10 <= l.size(); i += 10)
    t.push_back(static_cast<int>(std::max_element(l.begin() + i, l.begin() + i + 10) - (l.begin() + i)));
  return t;
}

// vit-digits with per-tensor INT8 scales calibrated on its calibration split (on the CPU), and the test split.
struct Digits {
  ModelSpec int8;
  std::vector<float> tx, labels;
};
Digits calibrated_digits(const DeviceProfile& cpu) {
  Digits d;
  auto spec = load_model_spec(testutil::source_path("config/models/vit-digits.yaml"));
  EXPECT_TRUE(spec.ok());
  auto calib = SafetensorsFile::open(testutil::source_path("tests/data/digits/calib_split.safetensors"));
  auto test = SafetensorsFile::open(testutil::source_path("tests/data/digits/test_split.safetensors"));
  EXPECT_TRUE(calib.ok() && test.ok());
  if (!spec.ok() || !calib.ok() || !test.ok()) return d;
  const std::vector<float> cx = read(*calib, "input");
  d.tx = read(*test, "input");
  d.labels = read(*test, "labels");
  auto scales = calibrate_int8(*spec, cpu, cx.data(), static_cast<int>(cx.size() / 64), CalibOptions());
  EXPECT_TRUE(scales.ok()) << scales.status().to_string();
  d.int8 = *spec;
  d.int8.int8_scales_path = testing::TempDir() + "int8_cuda_digits.scales.safetensors";
  EXPECT_TRUE(scales.ok() && write_int8_scales(d.int8.int8_scales_path, *scales).ok());
  return d;
}

TEST(Int8Cuda, DigitsOnTheGpuMatchesFp32AndTheCpuInt8Path) {
  auto gpu = query_cuda_device(0);
  ASSERT_TRUE(gpu.ok()) << gpu.status().to_string();
  auto cpu = find_device_profile("host-cpu", {testutil::source_path("config/devices")});
  ASSERT_TRUE(cpu.ok());
  auto spec = load_model_spec(testutil::source_path("config/models/vit-digits.yaml"));
  ASSERT_TRUE(spec.ok());
  const Digits d = calibrated_digits(*cpu);
  ASSERT_FALSE(d.tx.empty());
  const ModelSpec& int8 = d.int8;
  const std::vector<float>& tx = d.tx;
  const std::vector<float>& labels = d.labels;

  std::vector<std::string> kernels;
  const std::vector<float> ref = logits(*spec, Precision::kFp32, *cpu, tx, 360, nullptr);
  const std::vector<float> cpu_i8 = logits(int8, Precision::kInt8, *cpu, tx, 360, nullptr);
  const std::vector<float> gpu_i8 = logits(int8, Precision::kInt8, *gpu, tx, 360, &kernels);
  ASSERT_EQ(gpu_i8.size(), ref.size());
  int gemms = 0;
  for (const std::string& k : kernels) gemms += k.rfind("cuda.gemm_i8_", 0) == 0;
  EXPECT_EQ(gemms, 16) << "the block GEMMs run on gemm_i8";
  const std::vector<int> r = top1(ref), g = top1(gpu_i8);
  int ref_err = 0, gpu_err = 0, agree = 0;
  for (int i = 0; i < 360; ++i) {
    ref_err += r[i] != static_cast<int>(labels[i]);
    gpu_err += g[i] != static_cast<int>(labels[i]);
    agree += r[i] == g[i];
  }
  const double vs_cpu = testutil::rel_error(gpu_i8.data(), cpu_i8.data(), cpu_i8.size());
  const double vs_fp32 = testutil::rel_error(gpu_i8.data(), ref.data(), ref.size());
  std::printf("digits INT8 on %s: %d errors (fp32 %d), agreement %d/360; logits vs CPU INT8 %.3g, vs fp32 %.3g\n",
              gpu->name.c_str(), gpu_err, ref_err, agree, vs_cpu, vs_fp32);
  EXPECT_LE(gpu_err, ref_err + 2);
  EXPECT_GE(agree, 357);
  EXPECT_LE(vs_cpu, tol::kInt8EndToEnd);
  EXPECT_LE(vs_fp32, tol::kInt8EndToEnd);
}

// The INT8 GEMMs' split-K rows in an engine (runtime/plan.h's workspace, runtime/cuda/ops_int8_cuda.cpp): with
// GEMM tuning on, start-up times split-K rows at batch 1 (the records say how many); whichever rows win, three
// forwards of the same images give the same logits bit for bit (a split row that left its tile counters
// non-zero would corrupt the next launch), within tol::kInt8EndToEnd of an untuned engine (first rows, no
// split: only the cuBLASLt fp16 GEMMs' algorithms differ) and of the CPU INT8 path.
TEST(Int8Cuda, SplitKRowsAreTimedAndRepeatedForwardsAgree) {
  auto gpu = query_cuda_device(0);
  ASSERT_TRUE(gpu.ok()) << gpu.status().to_string();
  auto cpu = find_device_profile("host-cpu", {testutil::source_path("config/devices")});
  ASSERT_TRUE(cpu.ok());
  const Digits d = calibrated_digits(*cpu);
  ASSERT_FALSE(d.tx.empty());
  std::vector<std::vector<float>> runs;
  for (bool tune : {true, false, true}) {
    EngineOptions o;
    o.plan.precision = Precision::kInt8;
    o.plan.batch = 8;
    o.tune_gemms = tune;
    auto e = Engine::create(d.int8, *gpu, o);
    ASSERT_TRUE(e.ok()) << e.status().to_string();
    EXPECT_GT((*e)->plan().int8_split_workspace_bytes, 0);
    int split_timed = 0, split_chosen = 0, records = 0;
    for (const TuningRecord& t : (*e)->plan().tuning) {
      if (t.choice.rfind("i8_", 0) != 0) continue;
      ++records;
      split_chosen += t.choice.find("_k") != std::string::npos;
      const size_t at = t.detail.find(" split-K)");
      if (t.batch == 1 && at != std::string::npos) split_timed += std::stoi(t.detail.substr(t.detail.rfind('(', at) + 1));
    }
    EXPECT_EQ(records, 16 * 4) << "one record per INT8 GEMM and captured size (1, 2, 4, 8)";
    if (tune) {
      EXPECT_GT(split_timed, 0) << "split-K rows timed at batch 1";
      std::printf("tuned engine: %d split-K rows timed at batch 1, %d of %d records chose a split-K row\n", split_timed,
                  split_chosen, records);
    } else {
      EXPECT_EQ(split_chosen, 0);
    }
    for (int rep = 0; rep < 3; ++rep) {
      ASSERT_TRUE((*e)->infer(d.tx.data(), 8).ok());
      const std::vector<float> l((*e)->logits(), (*e)->logits() + 80);
      if (rep > 0 && tune) EXPECT_EQ(l, runs.back()) << "forward " << rep;
      runs.push_back(l);
    }
  }
  EXPECT_LE(testutil::rel_error(runs[0].data(), runs[3].data(), 80), tol::kInt8EndToEnd);
  const std::vector<float> cpu_i8 = logits(d.int8, Precision::kInt8, *cpu, d.tx, 8, nullptr);
  EXPECT_LE(testutil::rel_error(runs[0].data(), cpu_i8.data(), 80), tol::kInt8EndToEnd);
}

}  // namespace
}  // namespace edgevit
