// The cuBLASLt GEMMs of kernels/cuda/gemm_lt.h against a float64 host reference, through the same
// launcher the CUDA backend calls (gpu::lt_gemm_run): every epilogue (none, bias, bias + GELU (erf, tanh),
// bias + residual accumulate) in fp16 and fp32 at ViT-B's qkv shape at batch 1 (197 x 2304 x 768) and small
// ones with odd M; then every candidate the runtime may time and pin (the heuristic's results, their
// cluster-1 and split-K variants) of one small shape gives the same answer within the same tolerance.
// Outputs are poisoned (NaN) before each launch, except the residual's input.
// Rules (base/tolerances.h): fp32 within tol::kFp32Kernel of the reference; fp16 within
// tol::kFp16KernelVsFp16RefFactor x the error of the reference computed on fp16-rounded inputs with an
// fp16-rounded output, and within tol::kFp16Kernel. The fp16 GELU is cuBLASLt's epilogue, the tanh form, so
// its reference is the tanh form; fp32 runs the GELU asked for (erf or tanh) after the matmul, and so does
// its reference.
#include <cublasLt.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "kernels/cuda/gemm_lt.h"
#include "tests/testutil/cuda_main.h"
#include "tests/testutil/testutil.h"
#include "base/tolerances.h"

namespace edgevit {
namespace {

// The runtime's cuBLASLt workspace (kCudaLtWorkspaceBytes, runtime/plan.h).
constexpr size_t kWorkspaceBytes = 4 << 20;

enum class Epilogue { kNone, kBias, kBiasGelu, kBiasGeluTanh, kBiasResidual };
const char* name_of(Epilogue e) {
  switch (e) {
    case Epilogue::kNone: return "none";
    case Epilogue::kBias: return "bias";
    case Epilogue::kBiasGelu: return "bias_gelu";
    case Epilogue::kBiasGeluTanh: return "bias_gelu_tanh";
    case Epilogue::kBiasResidual: return "bias_residual";
  }
  return "?";
}

gpu::LtGemmShape shape_of(int64_t m, int64_t n, int64_t k, bool fp16, Epilogue e) {
  gpu::LtGemmShape s;
  s.m = m;
  s.n = n;
  s.k = k;
  s.fp16 = fp16;
  s.bias = e != Epilogue::kNone;
  s.gelu = e == Epilogue::kBiasGelu ? gpu::LtGelu::kErf : e == Epilogue::kBiasGeluTanh ? gpu::LtGelu::kTanh
                                                                                        : gpu::LtGelu::kNone;
  s.accumulate = e == Epilogue::kBiasResidual;
  return s;
}

float round16(float v) { return __half2float(__float2half_rn(v)); }
std::vector<float> round16(const std::vector<float>& v) {
  std::vector<float> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = round16(v[i]);
  return r;
}

// Inputs of one case: x (M, K), w (N, K), bias (N), y0 (M, N: the residual's prior output).
struct Inputs {
  std::vector<float> x, w, bias, y0;
};
Inputs make_inputs(const gpu::LtGemmShape& s, uint32_t seed) {
  Inputs in;
  const float ws = 2.f / std::sqrt(static_cast<float>(s.k));  // keeps y near unit scale, GELU's curved part
  in.x = testutil::random_floats(static_cast<size_t>(s.m * s.k), seed, -1.f, 1.f);
  in.w = testutil::random_floats(static_cast<size_t>(s.n * s.k), seed + 1, -ws, ws);
  in.bias = testutil::random_floats(static_cast<size_t>(s.n), seed + 2, -0.5f, 0.5f);
  in.y0 = testutil::random_floats(static_cast<size_t>(s.m * s.n), seed + 3, -1.f, 1.f);
  return in;
}

// y = x w^T [+ bias] [GELU] [+ y0] in float64 (the tanh GELU wherever the kernel computes it: both GELUs
// on fp16, which is cuBLASLt's epilogue, and the tanh one on fp32).
std::vector<double> reference(const gpu::LtGemmShape& s, const Inputs& in) {
  std::vector<double> y(static_cast<size_t>(s.m * s.n));
  for (int64_t i = 0; i < s.m; ++i) {
    for (int64_t j = 0; j < s.n; ++j) {
      double acc = 0;
      const float* xr = &in.x[static_cast<size_t>(i * s.k)];
      const float* wr = &in.w[static_cast<size_t>(j * s.k)];
      for (int64_t p = 0; p < s.k; ++p) acc += static_cast<double>(xr[p]) * wr[p];
      if (s.bias) acc += in.bias[static_cast<size_t>(j)];
      if (s.gelu == gpu::LtGelu::kErf && !s.fp16) {
        acc = 0.5 * acc * (1 + std::erf(acc / std::sqrt(2.0)));
      } else if (s.gelu != gpu::LtGelu::kNone) {
        acc = 0.5 * acc * (1 + std::tanh(0.7978845608028654 * (acc + 0.044715 * acc * acc * acc)));
      }
      if (s.accumulate) acc += in.y0[static_cast<size_t>(i * s.n + j)];
      y[static_cast<size_t>(i * s.n + j)] = acc;
    }
  }
  return y;
}

// Device copies of one case's operands in the GEMM's storage type.
class DeviceCase {
 public:
  DeviceCase(const gpu::LtGemmShape& s, const Inputs& in) : s_(s), in_(in) {
    const size_t elem = s.fp16 ? 2 : 4;
    ok_ = alloc(&x_, in.x.size() * elem) && alloc(&w_, in.w.size() * elem) && alloc(&b_, in.bias.size() * elem) &&
          alloc(&y_, in.y0.size() * elem) && alloc(&ws_, kWorkspaceBytes) && upload(x_, in.x) &&
          upload(w_, in.w) && upload(b_, in.bias);
  }
  ~DeviceCase() {
    for (void* p : {x_, w_, b_, y_, ws_}) cudaFree(p);
  }
  DeviceCase(const DeviceCase&) = delete;
  DeviceCase& operator=(const DeviceCase&) = delete;
  bool ok() const { return ok_; }
  const void* bias() const { return b_; }

  // Poisons y (or writes y0 for the residual), runs the GEMM with `algo`, and downloads y as floats.
  cudaError_t run(cublasLtHandle_t lt, const gpu::LtGemm& g, const cublasLtMatmulAlgo_t& algo,
                  std::vector<float>* out) {
    cudaError_t e = s_.accumulate ? (upload(y_, in_.y0) ? cudaSuccess : cudaErrorUnknown)
                                  : cudaMemset(y_, 0xFF, in_.y0.size() * (s_.fp16 ? 2 : 4));
    if (e != cudaSuccess) return e;
    const gpu::LtRunStatus r = gpu::lt_gemm_run(lt, g, algo, w_, x_, y_, ws_, kWorkspaceBytes, nullptr);
    if (r.lt != CUBLAS_STATUS_SUCCESS) return cudaErrorNotSupported;
    if (r.cuda != cudaSuccess) return r.cuda;
    if ((e = cudaDeviceSynchronize()) != cudaSuccess) return e;
    out->resize(in_.y0.size());
    if (!s_.fp16) return cudaMemcpy(out->data(), y_, out->size() * 4, cudaMemcpyDeviceToHost);
    std::vector<__half> h(out->size());
    if ((e = cudaMemcpy(h.data(), y_, h.size() * 2, cudaMemcpyDeviceToHost)) != cudaSuccess) return e;
    for (size_t i = 0; i < h.size(); ++i) (*out)[i] = __half2float(h[i]);
    return cudaSuccess;
  }

 private:
  static bool alloc(void** p, size_t bytes) { return cudaMalloc(p, bytes) == cudaSuccess; }
  bool upload(void* dst, const std::vector<float>& v) const {
    if (!s_.fp16) return cudaMemcpy(dst, v.data(), v.size() * 4, cudaMemcpyHostToDevice) == cudaSuccess;
    std::vector<__half> h(v.size());
    for (size_t i = 0; i < v.size(); ++i) h[i] = __float2half_rn(v[i]);
    return cudaMemcpy(dst, h.data(), h.size() * 2, cudaMemcpyHostToDevice) == cudaSuccess;
  }
  const gpu::LtGemmShape s_;
  const Inputs& in_;
  bool ok_ = false;
  void *x_ = nullptr, *w_ = nullptr, *b_ = nullptr, *y_ = nullptr, *ws_ = nullptr;
};

// The tolerance rule of the header comment. ref16: the reference on fp16-rounded inputs (fp16 cases only).
::testing::AssertionResult within_tolerance(const gpu::LtGemmShape& s, const std::vector<float>& out,
                                            const std::vector<double>& ref, const std::vector<double>& ref16) {
  if (!testutil::all_finite(out.data(), out.size())) return ::testing::AssertionFailure() << "NaN/Inf in the output";
  const double e = testutil::rel_error(out.data(), ref.data(), ref.size());
  if (!s.fp16) {
    if (e <= tol::kFp32Kernel) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "rel. error " << e << " > " << tol::kFp32Kernel;
  }
  std::vector<float> r16(ref16.size());
  for (size_t i = 0; i < r16.size(); ++i) r16[i] = round16(static_cast<float>(ref16[i]));
  const double e16 = testutil::rel_error(r16.data(), ref.data(), ref.size());
  const double bound = std::min(tol::kFp16KernelVsFp16RefFactor * e16, tol::kFp16Kernel);
  if (e <= bound) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "rel. error " << e << " > " << bound << " (fp16 reference error " << e16
                                       << ")";
}

class GemmLtTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(cublasLtCreate(&lt_), CUBLAS_STATUS_SUCCESS); }
  void TearDown() override {
    if (lt_ != nullptr) cublasLtDestroy(lt_);
  }
  // Runs `check` on every case of one shape: descriptors, device operands, references.
  template <class Check>
  void for_case(const gpu::LtGemmShape& s, uint32_t seed, Check check) {
    const std::string what = std::string(s.fp16 ? "fp16 " : "fp32 ") + std::to_string(s.m) + "x" +
                             std::to_string(s.n) + "x" + std::to_string(s.k);
    const Inputs in = make_inputs(s, seed);
    Inputs in16 = in;  // what an fp16 GEMM reads
    if (s.fp16) in16 = Inputs{round16(in.x), round16(in.w), round16(in.bias), round16(in.y0)};
    const std::vector<double> ref = reference(s, in);
    const std::vector<double> ref16 = s.fp16 ? reference(s, in16) : ref;
    DeviceCase dev(s, in);
    ASSERT_TRUE(dev.ok()) << what << ": device buffers";
    gpu::LtGemm g;
    ASSERT_EQ(gpu::lt_gemm_create(s, dev.bias(), &g), CUBLAS_STATUS_SUCCESS) << what;
    check(what, g, dev, ref, ref16);
    gpu::lt_gemm_destroy(&g);
  }
  cublasLtHandle_t lt_ = nullptr;
};

const Epilogue kEpilogues[] = {Epilogue::kNone, Epilogue::kBias, Epilogue::kBiasGelu, Epilogue::kBiasGeluTanh,
                               Epilogue::kBiasResidual};

// The heuristic's first algorithm (what an untuned engine pins) at each shape, precision and epilogue.
TEST_F(GemmLtTest, EveryEpilogueMatchesFloat64Reference) {
  struct Dims {
    int64_t m, n, k;
  };
  const Dims shapes[] = {{197, 2304, 768}, {13, 192, 64}, {3, 1000, 192}, {1, 72, 40}};
  uint32_t seed = 100;
  for (const bool fp16 : {true, false}) {
    for (const Dims& d : shapes) {
      for (const Epilogue e : kEpilogues) {
        const gpu::LtGemmShape s = shape_of(d.m, d.n, d.k, fp16, e);
        for_case(s, seed += 10, [&](const std::string& what, const gpu::LtGemm& g, DeviceCase& dev,
                                    const std::vector<double>& ref, const std::vector<double>& ref16) {
          const std::string w = what + " " + name_of(e);
          std::vector<cublasLtMatmulAlgo_t> algos;
          ASSERT_EQ(gpu::lt_gemm_heuristic(lt_, g, 1, kWorkspaceBytes, &algos), CUBLAS_STATUS_SUCCESS) << w;
          ASSERT_FALSE(algos.empty()) << w << ": no algorithm";
          std::vector<float> out;
          EV_ASSERT_CUDA(dev.run(lt_, g, algos[0], &out));
          EXPECT_TRUE(within_tolerance(s, out, ref, ref16)) << w << " (" << gpu::lt_describe_algo(algos[0]) << ")";
        });
      }
    }
  }
}

// Every candidate start-up tuning may pin for a small grid: the heuristic's results and their cluster-1 and
// split-K variants, each within the tolerance (so whichever is fastest, the answer is the same).
TEST_F(GemmLtTest, EveryTuningCandidateGivesTheSameAnswer) {
  int device = 0, sms = 0;
  EV_ASSERT_CUDA(cudaGetDevice(&device));
  EV_ASSERT_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  uint32_t seed = 900;
  for (const bool fp16 : {true, false}) {
    for (const Epilogue e : kEpilogues) {
      const gpu::LtGemmShape s = shape_of(13, 192, 768, fp16, e);
      ASSERT_TRUE(gpu::lt_small_grid(s, sms));
      for_case(s, seed += 10, [&](const std::string& what, const gpu::LtGemm& g, DeviceCase& dev,
                                  const std::vector<double>& ref, const std::vector<double>& ref16) {
        const std::string w = what + " " + name_of(e);
        std::vector<cublasLtMatmulAlgo_t> algos;
        ASSERT_EQ(gpu::lt_gemm_heuristic(lt_, g, 8, kWorkspaceBytes, &algos), CUBLAS_STATUS_SUCCESS) << w;
        ASSERT_FALSE(algos.empty()) << w;
        const size_t heuristic = algos.size();
        gpu::lt_add_cluster_variants(lt_, g, kWorkspaceBytes, &algos);
        gpu::lt_add_split_k_variants(lt_, g, kWorkspaceBytes, &algos);
        EXPECT_LE(algos.size(), static_cast<size_t>(gpu::kLtMaxCandidates)) << w;
        std::printf("%s: %zu heuristic results, %zu variants\n", w.c_str(), heuristic, algos.size() - heuristic);
        int ran = 0;
        for (const cublasLtMatmulAlgo_t& a : algos) {
          std::vector<float> out;
          const cudaError_t r = dev.run(lt_, g, a, &out);
          if (r == cudaErrorNotSupported) continue;  // refused at launch: the tuner drops it too
          EV_ASSERT_CUDA(r);
          ++ran;
          EXPECT_TRUE(within_tolerance(s, out, ref, ref16)) << w << " (" << gpu::lt_describe_algo(a) << ")";
        }
        EXPECT_GE(ran, 1) << w << ": no candidate ran";
      });
    }
  }
}

}  // namespace
}  // namespace edgevit
