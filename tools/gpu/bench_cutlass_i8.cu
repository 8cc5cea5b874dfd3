// A yardstick for the W8A8 GEMM (kernels/cuda/gemm_i8.h, issue #25): CUTLASS's SM80-class int8 GEMM (the
// 2.x device API, cutlass::gemm::device::Gemm with arch::Sm80, OpClassTensorOp, mma.sync 16x8x32 with
// saturation, the multistage cp.async main loop) timed at ViT-B/16's four block GEMMs (M = 197 x batch,
// batch 8 and 64; qkv 2304 x 768, proj 768 x 768, fc1 3072 x 768, fc2 768 x 3072), beside our rows in the
// same process. A measurement tool only: not part of the product, of CI or of CMake's targets; CUTLASS is not
// vendored (the build script takes CUTLASS_DIR), and nothing of it is copied into kernels/.
// Layouts as ours: x (M, K) row-major int8, w (N, K) row-major int8 (CUTLASS's B, K x N column-major).
//   int8 out:  y (M, N) int8 = sat(rne(alpha * acc)), LinearCombinationClamp (per-tensor float scale, no
//              bias: the cheapest epilogue, so the time is the main loop's); ours with kI8Bias, one
//              per-tensor activation scale, unit weight scales, no bias (the same output bytes; our
//              epilogue still reads the N weight scales).
//   int32 out: y (M, N) int32 = acc, LinearCombination (serial split-K capable: the `_ks` configs, timed at
//              split 1 and, for N = 768 at batch 8, splits 2-4); ours with kF32 (fp32 out, the same bytes).
// Every CUTLASS and every one of our launches is checked once against a naive int32 GEMM on the GPU (int32:
// equal; int8: |diff| <= 1, the count of off-by-one outputs printed) before it is timed.
// Timing as tools/gpu/bench_gemm_i8.cu: CUDA events around each launch, 10 warm-ups, median of 60; inputs
// stay in L2 between launches as there. TOP/s = 2 M N K / t.
//   build: tools/gpu/make_cutlass_bundle.sh (CUTLASS_DIR=/path/with/include)
//   usage: bench_cutlass_i8                       the table, then a summary line per shape
//          bench_cutlass_i8 --profile NAME GEMM BATCH
//                                                 three launches of one CUTLASS config (its name) or of one
//                                                 of our rows (row:ID, kI8Bias), nothing else launched (ncu)
#include <cuda_runtime.h>
#include <cxxabi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <vector>

#include "cutlass/cutlass.h"
#include "cutlass/epilogue/thread/linear_combination.h"
#include "cutlass/epilogue/thread/linear_combination_clamp.h"
#include "cutlass/gemm/device/gemm.h"
#include "cutlass/version.h"
#include "kernels/cuda/gemm_i8.h"
#include "tools/gpu/bench_timing.cuh"

namespace {

using namespace edgevit;

constexpr int kWarmup = 10;
constexpr int kRuns = 60;

float median_ms(const std::function<void()>& launch) { return bench::median_ms(launch, kRuns, kWarmup); }

// One GEMM to run: device pointers owned by the caller.
struct Problem {
  int m = 0, n = 0, k = 0;
  const int8_t* x = nullptr;  // (M, K) row-major
  const int8_t* w = nullptr;  // (N, K) row-major
  void* y = nullptr;          // (M, N) row-major: int8 or int32 (the config's output)
  float alpha = 1.f;          // int8 out: y = sat(rne(alpha * acc))
  int split = 1;              // serial split-K slices (`_ks` configs only)
};

// What a launch reports about its kernel, for the table.
struct KernelInfo {
  int regs = 0, threads = 0, smem = 0, blocks_per_sm = 0;
  bool multistage = false;  // the threadblock Mma is cutlass::gemm::threadblock::MmaMultistage
};

class Runner {
 public:
  virtual ~Runner() = default;
  virtual const char* name() const = 0;
  virtual bool i32_out() const = 0;
  virtual bool split_k() const = 0;
  // CUTLASS's can_implement + initialize for p (workspace grown here); kSuccess or why not.
  virtual cutlass::Status prepare(const Problem& p) = 0;
  virtual cutlass::Status launch() = 0;
  virtual KernelInfo info() const = 0;
};

std::string demangled(const char* mangled) {
  int status = 0;
  char* s = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string out = status == 0 && s ? s : mangled;
  std::free(s);
  return out;
}

// Tile TM x TN x TK (bytes of K), warp tile WM x WN x WK, S stages; I32: int32 out with serial split-K.
template <int TM, int TN, int TK, int WM, int WN, int WK, int S, bool I32, int kSwizzle = 8>
class CutlassRunner : public Runner {
  using Out = typename std::conditional<I32, int32_t, int8_t>::type;
  // The profiler's choice (generator.py): 16 int8 outputs an access for tiles at least 128 wide (but 32 high),
  // else 8.
  using Epilogue = typename std::conditional<
      I32, cutlass::epilogue::thread::LinearCombination<int32_t, 4, int32_t, int32_t>,
      cutlass::epilogue::thread::LinearCombinationClamp<int8_t, (TN >= 128 && TM > 32 ? 16 : 8), int32_t, float>>::type;
  using Op = cutlass::gemm::device::Gemm<
      int8_t, cutlass::layout::RowMajor, int8_t, cutlass::layout::ColumnMajor, Out, cutlass::layout::RowMajor,
      int32_t, cutlass::arch::OpClassTensorOp, cutlass::arch::Sm80, cutlass::gemm::GemmShape<TM, TN, TK>,
      cutlass::gemm::GemmShape<WM, WN, WK>, cutlass::gemm::GemmShape<16, 8, 32>, Epilogue,
      cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<kSwizzle>, S, 16, 16, I32,
      cutlass::arch::OpMultiplyAddSaturate>;
  using Kernel = typename Op::GemmKernel;

 public:
  explicit CutlassRunner(std::string name) : name_(std::move(name)) {}
  ~CutlassRunner() override {
    if (ws_) cudaFree(ws_);
  }
  const char* name() const override { return name_.c_str(); }
  bool i32_out() const override { return I32; }
  bool split_k() const override { return I32; }

  cutlass::Status prepare(const Problem& p) override {
    typename Epilogue::Params epi;
    if constexpr (I32) {
      epi = typename Epilogue::Params(1, 0);
    } else {
      epi = typename Epilogue::Params(p.alpha, 0.f);
    }
    Out* y = static_cast<Out*>(p.y);
    typename Op::Arguments args({p.m, p.n, p.k}, {p.x, p.k}, {p.w, p.k}, {y, p.n}, {y, p.n}, epi,
                                I32 ? p.split : 1);
    cutlass::Status s = op_.can_implement(args);
    if (s != cutlass::Status::kSuccess) return s;
    const size_t bytes = Op::get_workspace_size(args);
    if (bytes > ws_bytes_) {
      if (ws_) CHECK(cudaFree(ws_));
      CHECK(cudaMalloc(&ws_, bytes));
      ws_bytes_ = bytes;
    }
    return op_.initialize(args, ws_);
  }
  cutlass::Status launch() override { return op_.run(); }

  KernelInfo info() const override {
    KernelInfo i;
    cudaFuncAttributes attr{};
    CHECK(cudaFuncGetAttributes(&attr, cutlass::Kernel<Kernel>));
    i.regs = attr.numRegs;
    i.threads = Kernel::kThreadCount;
    i.smem = static_cast<int>(sizeof(typename Kernel::SharedStorage));
    if (i.smem >= (48 << 10))
      CHECK(cudaFuncSetAttribute(cutlass::Kernel<Kernel>, cudaFuncAttributeMaxDynamicSharedMemorySize, i.smem));
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&i.blocks_per_sm, cutlass::Kernel<Kernel>, i.threads, i.smem));
    i.multistage = demangled(typeid(typename Kernel::Mma).name()).find("MmaMultistage") != std::string::npos;
    return i;
  }

 private:
  std::string name_;
  Op op_;
  void* ws_ = nullptr;  // owned: the serial split-K semaphores
  size_t ws_bytes_ = 0;
};

// The configs: CUTLASS's own SM80 int8 tensor-op tiles (python/cutlass_library/generator.py,
// GenerateSM80_TensorOp_16832_TN: tile, warps, stages) that fit ViT-B's shapes, and the same tiles with our
// rows' stage counts (128x128x64 s3/s4, 128x128x128 s3, 128x64x64 s4); swizzle 8 (the profiler's) but one.
std::vector<std::unique_ptr<Runner>> make_runners() {
  std::vector<std::unique_ptr<Runner>> r;
  // 8 warps
  r.emplace_back(new CutlassRunner<256, 128, 64, 64, 64, 64, 3, false>("cl_256x128x64_w64x64_s3"));
  r.emplace_back(new CutlassRunner<128, 256, 64, 64, 64, 64, 3, false>("cl_128x256x64_w64x64_s3"));
  r.emplace_back(new CutlassRunner<256, 128, 128, 64, 64, 128, 3, false>("cl_256x128x128_w64x64_s3"));
  r.emplace_back(new CutlassRunner<128, 256, 128, 64, 64, 128, 3, false>("cl_128x256x128_w64x64_s3"));
  // 4 warps of 64 x 64
  r.emplace_back(new CutlassRunner<256, 64, 64, 64, 64, 64, 4, false>("cl_256x64x64_w64x64_s4"));
  r.emplace_back(new CutlassRunner<64, 256, 64, 64, 64, 64, 4, false>("cl_64x256x64_w64x64_s4"));
  r.emplace_back(new CutlassRunner<128, 128, 64, 64, 64, 64, 3, false>("cl_128x128x64_w64x64_s3"));
  r.emplace_back(new CutlassRunner<128, 128, 64, 64, 64, 64, 4, false>("cl_128x128x64_w64x64_s4"));
  r.emplace_back(new CutlassRunner<128, 128, 64, 64, 64, 64, 5, false>("cl_128x128x64_w64x64_s5"));
  r.emplace_back(new CutlassRunner<128, 128, 64, 64, 64, 64, 5, false, 1>("cl_128x128x64_w64x64_s5_swz1"));
  r.emplace_back(new CutlassRunner<128, 128, 128, 64, 64, 128, 3, false>("cl_128x128x128_w64x64_s3"));
  r.emplace_back(new CutlassRunner<128, 128, 128, 64, 64, 128, 4, false>("cl_128x128x128_w64x64_s4"));
  // 4 warps of 64 x 32 / 32 x 64
  r.emplace_back(new CutlassRunner<128, 64, 64, 64, 32, 64, 4, false>("cl_128x64x64_w64x32_s4"));
  r.emplace_back(new CutlassRunner<128, 64, 64, 64, 32, 64, 6, false>("cl_128x64x64_w64x32_s6"));
  r.emplace_back(new CutlassRunner<64, 128, 64, 32, 64, 64, 6, false>("cl_64x128x64_w32x64_s6"));
  r.emplace_back(new CutlassRunner<128, 64, 128, 64, 32, 128, 3, false>("cl_128x64x128_w64x32_s3"));
  r.emplace_back(new CutlassRunner<64, 128, 128, 32, 64, 128, 3, false>("cl_64x128x128_w32x64_s3"));
  // 4 warps of 32 x 32
  r.emplace_back(new CutlassRunner<64, 64, 64, 32, 32, 64, 10, false>("cl_64x64x64_w32x32_s10"));
  r.emplace_back(new CutlassRunner<64, 64, 128, 32, 32, 128, 5, false>("cl_64x64x128_w32x32_s5"));
  r.emplace_back(new CutlassRunner<128, 32, 128, 32, 32, 128, 4, false>("cl_128x32x128_w32x32_s4"));
  r.emplace_back(new CutlassRunner<32, 128, 128, 32, 32, 128, 4, false>("cl_32x128x128_w32x32_s4"));
  // int32 out, serial split-K
  r.emplace_back(new CutlassRunner<128, 128, 64, 64, 64, 64, 5, true>("cl_128x128x64_w64x64_s5_i32_ks"));
  r.emplace_back(new CutlassRunner<128, 64, 64, 64, 32, 64, 6, true>("cl_128x64x64_w64x32_s6_i32_ks"));
  r.emplace_back(new CutlassRunner<64, 64, 128, 32, 32, 128, 5, true>("cl_64x64x128_w32x32_s5_i32_ks"));
  return r;
}

struct Gemm {
  const char* name;
  int n, k;
};
constexpr Gemm kGemms[] = {{"qkv", 2304, 768}, {"proj", 768, 768}, {"fc1", 3072, 768}, {"fc2", 768, 3072}};

__global__ void ref_gemm_kernel(const int8_t* x, const int8_t* w, int32_t* acc, int m, int n, int k) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x, row = blockIdx.y;
  if (col >= n) return;
  const int8_t* xr = x + static_cast<int64_t>(row) * k;
  const int8_t* wr = w + static_cast<int64_t>(col) * k;
  int32_t s = 0;
  for (int i = 0; i < k; ++i) s += static_cast<int32_t>(xr[i]) * static_cast<int32_t>(wr[i]);
  acc[static_cast<int64_t>(row) * n + col] = s;
}

enum class Out { kI8, kI32, kF32 };  // kF32: our kF32 epilogue at unit scales, float(acc)

// stats[0]: outputs off by one, stats[1]: outputs off by more (int32, fp32: any difference counts there).
__global__ void compare_kernel(const int32_t* acc, const void* y, int64_t count, Out out, float alpha, int* stats) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int d = 0;
    if (out == Out::kI32) {
      d = static_cast<const int32_t*>(y)[i] == acc[i] ? 0 : 2;
    } else if (out == Out::kF32) {
      d = static_cast<const float*>(y)[i] == static_cast<float>(acc[i]) ? 0 : 2;
    } else {
      const int q = min(127, max(-128, __float2int_rn(__fmul_rn(static_cast<float>(acc[i]), alpha))));
      d = abs(q - static_cast<int>(static_cast<const int8_t*>(y)[i]));
    }
    if (d == 1) atomicAdd(stats, 1);
    if (d > 1) atomicAdd(stats + 1, 1);
  }
}

struct Device {
  int8_t *x = nullptr, *w = nullptr;
  void* y = nullptr;                // int32 (M, N) at the largest shape
  int32_t* acc = nullptr;           // the reference
  float *sx = nullptr, *sw = nullptr;
  void* ws = nullptr;               // our split rows' workspace, zeroed
  size_t ws_bytes = 64u << 20;
  int* stats = nullptr;
};

// Off-by-one and worse counts of y against the reference acc (y int32, float(acc), or int8 at alpha).
void compare(const Device& d, int64_t count, Out out, float alpha, int bad[2]) {
  CHECK(cudaMemset(d.stats, 0, 2 * sizeof(int)));
  compare_kernel<<<1024, 256>>>(d.acc, d.y, count, out, alpha, d.stats);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpy(bad, d.stats, 2 * sizeof(int), cudaMemcpyDeviceToHost));
}

// alpha keeps int8 outputs mostly unsaturated: acc's spread is about sqrt(K) * E[x^2] (uniform in +-127).
float alpha_for(int k) { return 40.f / (std::sqrt(static_cast<float>(k)) * 5400.f); }

// Our row v at p as GemmI8Args with the epilogue matching the CUTLASS config's output (kI8Bias or kF32).
gpu::GemmI8Args our_args(const Device& d, const Problem& p, int v, bool i32) {
  gpu::GemmI8Args a;
  a.m = p.m, a.n = p.n, a.k = p.k, a.x = p.x, a.w = p.w, a.sx = d.sx, a.sw = d.sw, a.bias = nullptr;
  a.epilogue = i32 ? GemmI8Epilogue::kF32 : GemmI8Epilogue::kI8Bias;
  a.y = p.y, a.out_scale = 1.f, a.variant = v, a.workspace = d.ws;
  return a;
}

constexpr float kOne = 1.f;

struct Best {
  std::string name;
  double tops = 0;
};

void print_row(const char* who, const std::string& name, int split, float ms, double ops, const int bad[2],
               const KernelInfo* ki) {
  std::printf("  %-7s %-34s split %d %8.1f us %6.0f TOP/s  check %d off-by-1 %d worse", who, name.c_str(), split,
              ms * 1e3, ops / (ms * 1e-3) / 1e12, bad[0], bad[1]);
  if (ki)
    std::printf("  | %3d regs %3d threads %6d B smem %d blocks/SM %s", ki->regs, ki->threads, ki->smem,
                ki->blocks_per_sm, ki->multistage ? "MmaMultistage" : "NOT-MmaMultistage");
  std::printf("\n");
}

// Times every CUTLASS config and every one of our rows at one shape; prints the rows and the shape's summary.
void bench_shape(const Device& d, std::vector<std::unique_ptr<Runner>>& runners, int batch, const Gemm& g) {
  Problem p;
  p.m = 197 * batch, p.n = g.n, p.k = g.k, p.x = d.x, p.w = d.w, p.y = d.y, p.alpha = alpha_for(g.k);
  const double ops = 2.0 * p.m * p.n * p.k;
  const int64_t count = static_cast<int64_t>(p.m) * p.n;
  ref_gemm_kernel<<<dim3((p.n + 127) / 128, p.m), 128>>>(p.x, p.w, d.acc, p.m, p.n, p.k);
  CHECK(cudaGetLastError());
  std::printf("batch %d %s: M %d N %d K %d\n", batch, g.name, p.m, p.n, p.k);
  Best cl[2], ours[2];  // [0]: int8 out, [1]: int32 out
  for (auto& r : runners) {
    const bool more_splits = r->split_k() && p.n == 768 && batch == 8;
    for (int split = 1; split <= (more_splits ? 4 : 1); ++split) {
      p.split = split;
      const cutlass::Status s = r->prepare(p);
      if (s != cutlass::Status::kSuccess) {
        std::printf("  cutlass %-34s split %d refused: %s\n", r->name(), split, cutlassGetStatusString(s));
        continue;
      }
      if (r->launch() != cutlass::Status::kSuccess) std::exit(3);
      CHECK(cudaDeviceSynchronize());
      int bad[2];
      compare(d, count, r->i32_out() ? Out::kI32 : Out::kI8, p.alpha, bad);
      const float ms = median_ms([&] { r->launch(); });
      CHECK(cudaGetLastError());
      const KernelInfo ki = r->info();
      print_row("cutlass", r->name(), split, ms, ops, bad, &ki);
      const double tops = ops / (ms * 1e-3) / 1e12;
      Best& b = cl[r->i32_out()];
      if (bad[1] == 0 && tops > b.tops) b = {std::string(r->name()) + (split > 1 ? "/k" + std::to_string(split) : ""), tops};
    }
  }
  int count_rows = 0;
  const gpu::GemmI8Variant* rows = gpu::gemm_i8_variants(&count_rows);
  for (int i32 = 0; i32 < 2; ++i32)
    for (int v = 0; v < count_rows; ++v) {
      CHECK(cudaMemcpy(d.sx, i32 ? &kOne : &p.alpha, sizeof(float), cudaMemcpyHostToDevice));
      const gpu::GemmI8Args a = our_args(d, p, v, i32);
      if (gpu::gemm_i8_workspace_bytes(a) > d.ws_bytes) continue;
      const cudaError_t e = gpu::gemm_i8(a, nullptr);
      if (e == cudaErrorInvalidValue) continue;  // a split row past its tile limit
      CHECK(e);
      CHECK(cudaDeviceSynchronize());
      int bad[2];
      compare(d, count, i32 ? Out::kF32 : Out::kI8, p.alpha, bad);
      const float ms = median_ms([&] { gpu::gemm_i8(a, nullptr); });
      CHECK(cudaGetLastError());
      const std::string name = "row " + std::to_string(v) + " " + rows[v].name + (i32 ? " f32" : " i8");
      print_row("ours", name, rows[v].split_k, ms, ops, bad, nullptr);
      const double tops = ops / (ms * 1e-3) / 1e12;
      if (bad[1] == 0 && tops > ours[i32].tops) ours[i32] = {"row " + std::to_string(v) + " " + rows[v].name, tops};
    }
  for (int i32 = 0; i32 < 2; ++i32)
    std::printf("summary batch %d %-4s %s out | cutlass %-34s %6.0f TOP/s | ours %-32s %6.0f TOP/s | ours/cutlass %.2f\n",
                batch, g.name, i32 ? "i32" : "i8 ", cl[i32].name.c_str(), cl[i32].tops, ours[i32].name.c_str(),
                ours[i32].tops, cl[i32].tops > 0 ? ours[i32].tops / cl[i32].tops : 0.0);
  std::fflush(stdout);
}

// --profile NAME GEMM BATCH: three launches of one config or row (row:ID, kI8Bias), no reference, no timing.
int profile(const Device& d, std::vector<std::unique_ptr<Runner>>& runners, const std::string& name,
            const std::string& gemm, int batch) {
  for (const Gemm& g : kGemms) {
    if (gemm != g.name) continue;
    Problem p;
    p.m = 197 * batch, p.n = g.n, p.k = g.k, p.x = d.x, p.w = d.w, p.y = d.y, p.alpha = alpha_for(g.k);
    if (name.rfind("row:", 0) == 0) {
      CHECK(cudaMemcpy(d.sx, &p.alpha, sizeof(float), cudaMemcpyHostToDevice));
      const gpu::GemmI8Args a = our_args(d, p, std::atoi(name.c_str() + 4), false);
      for (int i = 0; i < 3; ++i) CHECK(gpu::gemm_i8(a, nullptr));
      CHECK(cudaDeviceSynchronize());
      std::printf("profiled %s at %s batch %d\n", name.c_str(), g.name, batch);
      return 0;
    }
    for (auto& r : runners) {
      if (name != r->name()) continue;
      if (r->prepare(p) != cutlass::Status::kSuccess) return 3;
      for (int i = 0; i < 3; ++i)
        if (r->launch() != cutlass::Status::kSuccess) return 3;
      CHECK(cudaDeviceSynchronize());
      std::printf("profiled %s at %s batch %d\n", name.c_str(), g.name, batch);
      return 0;
    }
  }
  std::fprintf(stderr, "bench_cutlass_i8: --profile: no config or row '%s' at gemm '%s'\n", name.c_str(), gemm.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string profile_name, profile_gemm;
  int profile_batch = 0;
  if (argc == 5 && std::string(argv[1]) == "--profile") {
    profile_name = argv[2], profile_gemm = argv[3], profile_batch = std::atoi(argv[4]);
    if (profile_batch != 8 && profile_batch != 64) {
      std::fprintf(stderr, "bench_cutlass_i8: --profile: batch must be 8 or 64, got '%s'\n", argv[4]);
      return 1;
    }
  } else if (argc != 1) {
    std::fprintf(stderr, "usage: bench_cutlass_i8 [--profile NAME|row:ID qkv|proj|fc1|fc2 8|64]\n");
    return 1;
  }
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  const int64_t max_m = 197 * 64, max_n = 3072, max_k = 3072;
  Device d;
  CHECK(cudaMalloc(&d.x, max_m * max_k));
  CHECK(cudaMalloc(&d.w, max_n * max_k));
  CHECK(cudaMalloc(&d.y, max_m * max_n * 4));
  CHECK(cudaMalloc(&d.acc, max_m * max_n * 4));
  CHECK(cudaMalloc(&d.sx, sizeof(float)));
  CHECK(cudaMalloc(&d.sw, max_n * sizeof(float)));
  CHECK(cudaMalloc(&d.ws, d.ws_bytes));
  CHECK(cudaMemset(d.ws, 0, d.ws_bytes));
  CHECK(cudaMalloc(&d.stats, 2 * sizeof(int)));
  {
    std::mt19937 rng(25);
    std::uniform_int_distribution<int> dist(-127, 127);
    std::vector<int8_t> h(max_m * max_k);
    for (auto& v : h) v = static_cast<int8_t>(dist(rng));
    CHECK(cudaMemcpy(d.x, h.data(), max_m * max_k, cudaMemcpyHostToDevice));
    for (int64_t i = 0; i < max_n * max_k; ++i) h[i] = static_cast<int8_t>(dist(rng));
    CHECK(cudaMemcpy(d.w, h.data(), max_n * max_k, cudaMemcpyHostToDevice));
    const std::vector<float> ones(max_n, 1.f);
    CHECK(cudaMemcpy(d.sw, ones.data(), max_n * sizeof(float), cudaMemcpyHostToDevice));
  }
  auto runners = make_runners();
  if (!profile_name.empty()) return profile(d, runners, profile_name, profile_gemm, profile_batch);
  std::printf("%s, %d SMs; CUTLASS %d.%d.%d (arch::Sm80 device::Gemm); median of %d after %d warm-ups\n", prop.name,
              prop.multiProcessorCount, CUTLASS_MAJOR, CUTLASS_MINOR, CUTLASS_PATCH, kRuns, kWarmup);
  for (int batch : {8, 64})
    for (const Gemm& g : kGemms) bench_shape(d, runners, batch, g);
  return 0;
}
