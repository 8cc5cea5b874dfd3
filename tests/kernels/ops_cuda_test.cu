// The CUDA ops of kernels/cuda/ops.h against their CPU references (kernels/cpu/*_ref.cpp), through the same
// launchers the CUDA backend calls. Every case draws fresh inputs and poisons the output (all bytes 0xFF:
// NaN in fp16 and fp32) before the launch, so an element left unwritten fails.
// Rules (base/tolerances.h): fp32 ops within tol::kFp32Kernel of the reference; fp16 ops within
// tol::kFp16KernelVsFp16RefFactor x the error of the reference computed on fp16-rounded inputs with an
// fp16-rounded output, and within tol::kFp16Kernel; pure data movement (casts, im2col, token pooling) exact.
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/attn_params.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cuda/ops.h"
#include "tests/testutil/cuda_main.h"
#include "tests/testutil/testutil.h"
#include "base/tolerances.h"

namespace edgevit {
namespace {

uint32_t g_seed = 1000;
uint32_t fresh_seed() { return g_seed++; }

std::vector<float> round16(const std::vector<float>& v) {
  std::vector<float> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = __half2float(__float2half_rn(v[i]));
  return r;
}

// Device buffer of n elements of T, poisoned on creation; freed on destruction.
template <typename T>
class DevBuf {
 public:
  explicit DevBuf(size_t n) : n_(n) {
    if (cudaMalloc(&p_, std::max<size_t>(n, 1) * sizeof(T)) != cudaSuccess) p_ = nullptr;
    poison();
  }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  ~DevBuf() { cudaFree(p_); }
  T* get() const { return p_; }
  bool ok() const { return p_ != nullptr; }
  void poison() { cudaMemset(p_, 0xFF, std::max<size_t>(n_, 1) * sizeof(T)); }
  // Upload floats (converted to T).
  void set(const std::vector<float>& v) {
    std::vector<T> h(v.size());
    for (size_t i = 0; i < v.size(); ++i) h[i] = static_cast<T>(v[i]);
    cudaMemcpy(p_, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice);
  }
  // Download as floats.
  std::vector<float> get_f32() const {
    std::vector<T> h(n_);
    cudaMemcpy(h.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost);
    std::vector<float> out(n_);
    for (size_t i = 0; i < n_; ++i) out[i] = static_cast<float>(h[i]);
    return out;
  }

 private:
  T* p_ = nullptr;
  size_t n_;
};

void expect_fp32(const std::vector<float>& out, const std::vector<float>& ref, const std::string& what) {
  ASSERT_EQ(out.size(), ref.size());
  EXPECT_TRUE(testutil::all_finite(out.data(), out.size())) << what << ": NaN/Inf (unwritten output?)";
  const double e = testutil::rel_error(out.data(), ref.data(), ref.size());
  EXPECT_LE(e, tol::kFp32Kernel) << what;
}

// fp16 rule: `out` (from fp16-rounded inputs) vs `ref` (exact inputs); `ref16` is the reference computed on
// the same fp16-rounded inputs, its output rounded to fp16.
void expect_fp16(const std::vector<float>& out, const std::vector<float>& ref, const std::vector<float>& ref16,
                 const std::string& what) {
  ASSERT_EQ(out.size(), ref.size());
  EXPECT_TRUE(testutil::all_finite(out.data(), out.size())) << what << ": NaN/Inf (unwritten output?)";
  const double e = testutil::rel_error(out.data(), ref.data(), ref.size());
  const double e16 = testutil::rel_error(round16(ref16).data(), ref.data(), ref.size());
  EXPECT_LE(e, tol::kFp16KernelVsFp16RefFactor * e16) << what << " (fp16 reference error " << e16 << ")";
  EXPECT_LE(e, tol::kFp16Kernel) << what;
}

void expect_exact(const std::vector<float>& out, const std::vector<float>& ref, const std::string& what) {
  ASSERT_EQ(out.size(), ref.size());
  size_t bad = 0;
  for (size_t i = 0; i < out.size(); ++i) bad += std::memcmp(&out[i], &ref[i], sizeof(float)) != 0;
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << out.size() << " elements differ";
}

// ---- casts -----------------------------------------------------------------------------------------------

TEST(OpsCuda, CastsRoundToNearestAndReadMappedHostMemory) {
  for (const int64_t n : {int64_t{1}, int64_t{7}, int64_t{4096}, int64_t{150531}, int64_t{602112}}) {
    auto x = testutil::random_floats(static_cast<size_t>(n), fresh_seed(), -300.f, 300.f);
    float* host = nullptr;
    ASSERT_EQ(cudaHostAlloc(&host, n * sizeof(float), cudaHostAllocMapped), cudaSuccess);
    std::memcpy(host, x.data(), n * sizeof(float));
    float* mapped = nullptr;
    ASSERT_EQ(cudaHostGetDevicePointer(reinterpret_cast<void**>(&mapped), host, 0), cudaSuccess);
    DevBuf<__half> h(n);
    EV_ASSERT_CUDA(gpu::cast_f32_to_f16(mapped, h.get(), n, nullptr));
    EV_ASSERT_CUDA(cudaDeviceSynchronize());
    expect_exact(h.get_f32(), round16(x), "cast_f32_to_f16 n=" + std::to_string(n));
    // Unaligned source (scalar path).
    if (n > 1) {
      DevBuf<__half> h1(n - 1);
      EV_ASSERT_CUDA(gpu::cast_f32_to_f16(mapped + 1, h1.get(), n - 1, nullptr));
      EV_ASSERT_CUDA(cudaDeviceSynchronize());
      expect_exact(h1.get_f32(), round16(std::vector<float>(x.begin() + 1, x.end())), "cast_f32_to_f16 unaligned");
    }
    // Back to fp32, into mapped host memory, and a plain fp32 copy.
    std::memset(host, 0xFF, n * sizeof(float));
    EV_ASSERT_CUDA(gpu::cast_f16_to_f32(h.get(), mapped, n, nullptr));
    EV_ASSERT_CUDA(cudaDeviceSynchronize());
    expect_exact(std::vector<float>(host, host + n), round16(x), "cast_f16_to_f32");
    DevBuf<float> f(n);
    f.set(x);
    std::memset(host, 0xFF, n * sizeof(float));
    EV_ASSERT_CUDA(gpu::copy_f32(f.get(), mapped, n, nullptr));
    EV_ASSERT_CUDA(cudaDeviceSynchronize());
    expect_exact(std::vector<float>(host, host + n), x, "copy_f32");
    cudaFreeHost(host);
  }
}

// The output casts the backend runs last: the same values as the plain casts, and a count of the
// non-finite ones equal to count_nonfinite_ref's, accumulated across calls until the caller zeroes it.
TEST(OpsCuda, OutputCastsCountNonFiniteValues) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (const int64_t n : {int64_t{1}, int64_t{1000}, int64_t{150531}}) {
    for (int bad : {0, 1, 37}) {
      auto x = testutil::random_floats(static_cast<size_t>(n), fresh_seed(), -300.f, 300.f);
      for (int i = 0; i < bad && i < n; ++i) x[static_cast<size_t>((i * 7919) % n)] = i % 3 == 0 ? nan : (i % 3 == 1 ? inf : -inf);
      x = round16(x);  // exact in fp16 as well
      const int64_t want = count_nonfinite_ref(x.data(), n);
      unsigned* counter = nullptr;
      ASSERT_EQ(cudaHostAlloc(&counter, sizeof(unsigned), cudaHostAllocMapped), cudaSuccess);
      unsigned* dev_counter = nullptr;
      ASSERT_EQ(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dev_counter), counter, 0), cudaSuccess);
      *counter = 0;
      DevBuf<__half> h(n);
      h.set(x);
      DevBuf<float> out(n);
      EV_ASSERT_CUDA(gpu::cast_f16_to_f32_count_nonfinite(h.get(), out.get(), n, dev_counter, nullptr));
      EV_ASSERT_CUDA(cudaDeviceSynchronize());
      EXPECT_EQ(static_cast<int64_t>(*counter), want) << "f16 n=" << n << " bad=" << bad;
      const std::vector<float> got = out.get_f32();
      for (int64_t i = 0; i < n; ++i)
        ASSERT_TRUE(std::memcmp(&got[i], &x[i], sizeof(float)) == 0 || (std::isnan(got[i]) && std::isnan(x[i])))
            << "element " << i;
      DevBuf<float> f(n);
      f.set(x);
      out.poison();
      EV_ASSERT_CUDA(gpu::copy_f32_count_nonfinite(f.get(), out.get(), n, dev_counter, nullptr));
      EV_ASSERT_CUDA(cudaDeviceSynchronize());
      EXPECT_EQ(static_cast<int64_t>(*counter), 2 * want) << "f32 adds to the same counter";
      cudaFreeHost(counter);
    }
  }
}

// ---- im2col ----------------------------------------------------------------------------------------------

struct ImCase { int b, c, h, w, p; };

TEST(OpsCuda, Im2colAllTypePairsMatchTheReferenceExactly) {
  for (const ImCase ic : {ImCase{2, 3, 32, 32, 8}, ImCase{3, 1, 8, 8, 2}, ImCase{2, 3, 224, 224, 16},
                          ImCase{1, 3, 48, 48, 16}, ImCase{2, 3, 48, 32, 8}, ImCase{1, 3, 32, 96, 16},
                          ImCase{2, 1, 6, 10, 2}, ImCase{2, 3, 70, 42, 14}, ImCase{1, 3, 518, 518, 14},
                          ImCase{2, 3, 21, 35, 7}, ImCase{1, 1, 14, 2758, 14}}) {
    const size_t n = static_cast<size_t>(ic.b) * ic.c * ic.h * ic.w;
    const auto img = testutil::random_floats(n, fresh_seed());
    std::vector<float> ref(n), ref16(n);
    im2col_patches_ref(img.data(), ref.data(), ic.b, ic.c, ic.h, ic.w, ic.p);
    im2col_patches_ref(round16(img).data(), ref16.data(), ic.b, ic.c, ic.h, ic.w, ic.p);
    const std::string what = "im2col b" + std::to_string(ic.b) + " " + std::to_string(ic.h) + "x" +
                             std::to_string(ic.w) + " p" + std::to_string(ic.p);
    DevBuf<float> in32(n), out32(n);
    DevBuf<__half> in16(n), out16(n);
    in32.set(img);
    in16.set(img);
    EV_ASSERT_CUDA(gpu::im2col_patches_f32(in32.get(), out32.get(), ic.b, ic.c, ic.h, ic.w, ic.p, nullptr));
    EV_ASSERT_CUDA(cudaDeviceSynchronize());
    expect_exact(out32.get_f32(), ref, what + " f32");
    EV_ASSERT_CUDA(gpu::im2col_patches_f32_to_f16(in32.get(), out16.get(), ic.b, ic.c, ic.h, ic.w, ic.p, nullptr));
    EV_ASSERT_CUDA(cudaDeviceSynchronize());
    expect_exact(out16.get_f32(), round16(ref), what + " f32->f16");
    out16.poison();
    EV_ASSERT_CUDA(gpu::im2col_patches_f16(in16.get(), out16.get(), ic.b, ic.c, ic.h, ic.w, ic.p, nullptr));
    EV_ASSERT_CUDA(cudaDeviceSynchronize());
    expect_exact(out16.get_f32(), ref16, what + " f16");
    // An output 2 bytes past 16-byte alignment takes another kernel than the 16-byte one: same result. (Patch 14
    // and 7 take the shared-memory kernel, aligned or not; 14 x 2758 fp32 elements do not fit its 48 KB: the
    // one-element-per-thread kernel.)
    DevBuf<__half> shifted(n + 1);
    shifted.poison();
    EV_ASSERT_CUDA(gpu::im2col_patches_f16(in16.get(), shifted.get() + 1, ic.b, ic.c, ic.h, ic.w, ic.p, nullptr));
    EV_ASSERT_CUDA(cudaDeviceSynchronize());
    const std::vector<float> got = shifted.get_f32();
    expect_exact(std::vector<float>(got.begin() + 1, got.end()), ref16, what + " f16 unaligned output");
  }
  EXPECT_EQ(gpu::im2col_patches_f32(nullptr, nullptr, 1, 3, 30, 30, 8, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(gpu::im2col_patches_f32(nullptr, nullptr, 1, 3, 32, 30, 8, nullptr), cudaErrorInvalidValue);
}

// ---- assemble tokens -------------------------------------------------------------------------------------

struct AsmCase { bool cls; int reg; bool no_embed_class; };

TEST(OpsCuda, AssembleTokensMatchesTheReference) {
  const int b = 3, p = 196;
  // e = 192: 8 elements per thread; e = 20: one per thread (not a multiple of 8).
  for (const int e : {192, 20})
  for (const AsmCase ac : {AsmCase{true, 0, false}, AsmCase{false, 0, false}, AsmCase{true, 4, true},
                           AsmCase{true, 2, false}}) {
    const int prefix = (ac.cls ? 1 : 0) + ac.reg, t = prefix + p, l = ac.no_embed_class ? p : t;
    const auto patches = testutil::random_floats(size_t{1} * b * p * e, fresh_seed());
    const auto cls = testutil::random_floats(e, fresh_seed());
    const auto reg = testutil::random_floats(std::max(1, ac.reg) * e, fresh_seed());
    const auto pos = testutil::random_floats(size_t{1} * l * e, fresh_seed());
    const size_t out_n = size_t{1} * b * t * e;
    std::vector<float> ref(out_n), ref16(out_n);
    assemble_tokens_ref(patches.data(), ac.cls ? cls.data() : nullptr, ac.reg ? reg.data() : nullptr, ac.reg,
                        pos.data(), ac.no_embed_class, ref.data(), b, p, e);
    const auto p16 = round16(patches), c16 = round16(cls), r16 = round16(reg), pos16 = round16(pos);
    assemble_tokens_ref(p16.data(), ac.cls ? c16.data() : nullptr, ac.reg ? r16.data() : nullptr, ac.reg,
                        pos16.data(), ac.no_embed_class, ref16.data(), b, p, e);
    const std::string what = "assemble e=" + std::to_string(e) + " cls=" + (ac.cls ? "1" : "0") + " reg=" + std::to_string(ac.reg) +
                             " no_embed_class=" + (ac.no_embed_class ? "1" : "0");
    {
      DevBuf<float> dp(patches.size()), dc(cls.size()), dr(reg.size()), dpos(pos.size()), dx(out_n);
      dp.set(patches); dc.set(cls); dr.set(reg); dpos.set(pos);
      EV_ASSERT_CUDA(gpu::assemble_tokens_f32(dp.get(), ac.cls ? dc.get() : nullptr, ac.reg ? dr.get() : nullptr,
                                              ac.reg, dpos.get(), ac.no_embed_class, dx.get(), b, p, e, nullptr));
      EV_ASSERT_CUDA(cudaDeviceSynchronize());
      expect_fp32(dx.get_f32(), ref, what + " f32");
    }
    {
      DevBuf<__half> dp(patches.size()), dc(cls.size()), dr(reg.size()), dpos(pos.size()), dx(out_n);
      dp.set(patches); dc.set(cls); dr.set(reg); dpos.set(pos);
      EV_ASSERT_CUDA(gpu::assemble_tokens_f16(dp.get(), ac.cls ? dc.get() : nullptr, ac.reg ? dr.get() : nullptr,
                                              ac.reg, dpos.get(), ac.no_embed_class, dx.get(), b, p, e, nullptr));
      EV_ASSERT_CUDA(cudaDeviceSynchronize());
      expect_fp16(dx.get_f32(), ref, ref16, what + " f16");
    }
  }
}

// ---- layernorm -------------------------------------------------------------------------------------------

enum class LnData { kUnit, kLargeFp16 };

void layernorm_case(int m, int c, LnData data, bool in_place) {
  std::vector<float> x;
  if (data == LnData::kUnit) {
    x = testutil::random_floats(size_t{1} * m * c, fresh_seed(), -2.f, 3.f);
  } else {
    // Rows near the top of fp16's range (max 65504): mean ~2e3, spread ~2e4, |x| up to 6e4. Their squares
    // (~3.6e9) overflow fp16, and a one-pass E[x^2] - E[x]^2 in fp32 loses the variance to cancellation.
    std::mt19937 gen(fresh_seed());
    std::normal_distribution<float> dist(2000.f, 20000.f);
    x.resize(size_t{1} * m * c);
    for (float& v : x) v = std::clamp(dist(gen), -60000.f, 60000.f);
  }
  const auto gamma = testutil::random_floats(c, fresh_seed(), 0.5f, 1.5f);
  const auto beta = testutil::random_floats(c, fresh_seed(), -0.5f, 0.5f);
  const float eps = 1e-6f;
  std::vector<float> ref(x.size()), ref16(x.size());
  layernorm_ref(x.data(), gamma.data(), beta.data(), ref.data(), m, c, eps, 1);
  const auto x16 = round16(x), g16 = round16(gamma), b16 = round16(beta);
  layernorm_ref(x16.data(), g16.data(), b16.data(), ref16.data(), m, c, eps, 1);
  const std::string what = "layernorm m" + std::to_string(m) + " c" + std::to_string(c) +
                           (data == LnData::kLargeFp16 ? " |x|~6e4" : "") + (in_place ? " in place" : "");
  if (data == LnData::kUnit) {
    DevBuf<float> dx(x.size()), dg(c), db(c), dy(x.size());
    dx.set(x); dg.set(gamma); db.set(beta);
    float* y = in_place ? dx.get() : dy.get();
    EV_ASSERT_CUDA(gpu::layernorm_f32(dx.get(), dg.get(), db.get(), y, m, c, eps, nullptr));
    EV_ASSERT_CUDA(cudaDeviceSynchronize());
    expect_fp32(in_place ? dx.get_f32() : dy.get_f32(), ref, what + " f32");
  }
  DevBuf<__half> dx(x.size()), dg(c), db(c), dy(x.size());
  dx.set(x); dg.set(gamma); db.set(beta);
  __half* y = in_place ? dx.get() : dy.get();
  EV_ASSERT_CUDA(gpu::layernorm_f16(dx.get(), dg.get(), db.get(), y, m, c, eps, nullptr));
  EV_ASSERT_CUDA(cudaDeviceSynchronize());
  expect_fp16(in_place ? dx.get_f32() : dy.get_f32(), ref, ref16, what + " f16");
}

TEST(OpsCuda, LayerNormEveryWidthPath) {
  // Register paths with 1, 2, 4, 8 chunks per lane, and the loop path (C not a multiple of the chunk, or
  // wider than 8 chunks per lane), with 2-row blocks (m < 1024) and 4-row blocks.
  for (const int c : {64, 96, 192, 384, 768, 1000, 1024, 2048, 37, 4100}) layernorm_case(67, c, LnData::kUnit, false);
  layernorm_case(197 * 2, 768, LnData::kUnit, true);
  layernorm_case(5, 37, LnData::kUnit, true);
  // 1024 rows and more take 4-row blocks (fewer, 2-row blocks); odd counts leave a partly idle last block.
  layernorm_case(1023, 768, LnData::kUnit, false);
  layernorm_case(1031, 768, LnData::kUnit, true);
  layernorm_case(1025, 37, LnData::kUnit, false);
}

TEST(OpsCuda, LayerNormFp16RowsNearTheTopOfTheRangeStayFinite) {
  for (const int c : {192, 768, 1000}) layernorm_case(64, c, LnData::kLargeFp16, false);
}

// ---- gelu, pool ------------------------------------------------------------------------------------------

TEST(OpsCuda, GeluF32IsExactErfGelu) {
  const int64_t n = 197 * 768 + 3;
  auto x = testutil::random_floats(static_cast<size_t>(n), fresh_seed(), -6.f, 6.f);
  std::vector<float> ref = x;
  gelu_ref(ref.data(), n, 1);
  DevBuf<float> d(n);
  d.set(x);
  EV_ASSERT_CUDA(gpu::gelu_f32(d.get(), n, nullptr));
  EV_ASSERT_CUDA(cudaDeviceSynchronize());
  expect_fp32(d.get_f32(), ref, "gelu_f32");
}

// gelu_tanh_f32 / f16 against gelu_tanh_ref (double): normwise over random values in [-12, 12] (both tails,
// the left one down to its underflow), element by element over [-20, 20] for fp32, the fp16 rule for fp16
// (|x| <= 6, fp16's useful range for activations), and the non-finite inputs as the CPU kernel treats them.
TEST(OpsCuda, GeluTanhMatchesTheReference) {
  for (const int64_t n : {int64_t{1}, int64_t{197 * 768 + 3}}) {
    auto x = testutil::random_floats(static_cast<size_t>(n), fresh_seed(), -12.f, 12.f);
    std::vector<float> ref = x;
    gelu_tanh_ref(ref.data(), n, 1);
    DevBuf<float> d(n);
    d.set(x);
    EV_ASSERT_CUDA(gpu::gelu_tanh_f32(d.get(), n, nullptr));
    EV_ASSERT_CUDA(cudaDeviceSynchronize());
    expect_fp32(d.get_f32(), ref, "gelu_tanh_f32 n " + std::to_string(n));

    auto x16 = testutil::random_floats(static_cast<size_t>(n), fresh_seed(), -6.f, 6.f);
    std::vector<float> ref_exact = x16, ref16 = round16(x16);
    gelu_tanh_ref(ref_exact.data(), n, 1);
    gelu_tanh_ref(ref16.data(), n, 1);
    DevBuf<__half> h(n);
    h.set(x16);
    EV_ASSERT_CUDA(gpu::gelu_tanh_f16(h.get(), n, nullptr));
    EV_ASSERT_CUDA(cudaDeviceSynchronize());
    expect_fp16(h.get_f32(), ref_exact, ref16, "gelu_tanh_f16 n " + std::to_string(n));
  }
  std::vector<float> grid;
  for (int i = -20 * 64; i <= 20 * 64; ++i) grid.push_back(static_cast<float>(i) / 64.f);
  std::vector<float> ref = grid;
  gelu_tanh_ref(ref.data(), static_cast<int64_t>(ref.size()), 1);
  DevBuf<float> d(grid.size());
  d.set(grid);
  EV_ASSERT_CUDA(gpu::gelu_tanh_f32(d.get(), static_cast<int64_t>(grid.size()), nullptr));
  EV_ASSERT_CUDA(cudaDeviceSynchronize());
  const auto out = d.get_f32();
  for (size_t i = 0; i < grid.size(); ++i) {
    if (std::fabs(ref[i]) < 1e-37f) {  // underflow: nothing left but the size
      EXPECT_LE(std::fabs(out[i]), 1e-37f) << "x = " << grid[i];
    } else {
      EXPECT_LE(std::fabs(static_cast<double>(out[i]) - ref[i]), tol::kFp32Kernel * std::fabs(ref[i]))
          << "x = " << grid[i];
    }
  }
}

TEST(OpsCuda, GeluTanhNonFiniteAndHugeInputs) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const float big = std::numeric_limits<float>::max();
  const std::vector<float> in = {inf, -inf, nan, big, -big, 1e4f, -1e4f, 0.f, -0.f};
  DevBuf<float> d(in.size());
  d.set(in);
  EV_ASSERT_CUDA(gpu::gelu_tanh_f32(d.get(), static_cast<int64_t>(in.size()), nullptr));
  EV_ASSERT_CUDA(cudaDeviceSynchronize());
  const auto out = d.get_f32();
  for (size_t i = 0; i < in.size(); ++i) {
    const float v = in[i];
    if (std::isnan(v) || v == -inf) {
      EXPECT_TRUE(std::isnan(out[i])) << "x = " << v;
    } else if (v > 0.f) {
      EXPECT_EQ(out[i], v) << "x = " << v;
    } else {
      EXPECT_EQ(out[i], 0.f) << "x = " << v;
      EXPECT_EQ(std::signbit(out[i]), std::signbit(v)) << "x = " << v;
    }
  }
  // fp16: +-inf and NaN as above; 6e4 (near fp16's max) stays itself, -6e4 gives -0.
  const std::vector<float> in16 = {inf, -inf, nan, 65504.f, -65504.f};
  DevBuf<__half> h(in16.size());
  h.set(in16);
  EV_ASSERT_CUDA(gpu::gelu_tanh_f16(h.get(), static_cast<int64_t>(in16.size()), nullptr));
  EV_ASSERT_CUDA(cudaDeviceSynchronize());
  const auto out16 = h.get_f32();
  EXPECT_EQ(out16[0], inf);
  EXPECT_TRUE(std::isnan(out16[1]));
  EXPECT_TRUE(std::isnan(out16[2]));
  EXPECT_EQ(out16[3], 65504.f);
  EXPECT_EQ(out16[4], 0.f);
  EXPECT_TRUE(std::signbit(out16[4]));
}

TEST(OpsCuda, PoolTokenAndAverage) {
  const int b = 3, t = 197, e = 192;
  for (const bool avg : {false, true}) {
    for (const int prefix : {0, 1, 5}) {
      const auto x = testutil::random_floats(size_t{1} * b * t * e, fresh_seed());
      std::vector<float> ref(size_t{1} * b * e), ref16(ref.size());
      pool_ref(x.data(), ref.data(), b, t, e, avg, prefix);
      pool_ref(round16(x).data(), ref16.data(), b, t, e, avg, prefix);
      const std::string what = std::string("pool ") + (avg ? "avg" : "token") + " prefix " + std::to_string(prefix);
      DevBuf<float> dx(x.size()), dy(ref.size());
      dx.set(x);
      EV_ASSERT_CUDA(gpu::pool_f32(dx.get(), dy.get(), b, t, e, avg, prefix, nullptr));
      EV_ASSERT_CUDA(cudaDeviceSynchronize());
      if (avg) expect_fp32(dy.get_f32(), ref, what + " f32"); else expect_exact(dy.get_f32(), ref, what + " f32");
      DevBuf<__half> hx(x.size()), hy(ref.size());
      hx.set(x);
      EV_ASSERT_CUDA(gpu::pool_f16(hx.get(), hy.get(), b, t, e, avg, prefix, nullptr));
      EV_ASSERT_CUDA(cudaDeviceSynchronize());
      if (avg) expect_fp16(hy.get_f32(), ref, ref16, what + " f16"); else expect_exact(hy.get_f32(), round16(ref16), what + " f16");
    }
  }
}

// ---- xor fold (the backend's L2 sweep before timed GEMM runs) --------------------------------------------

TEST(OpsCuda, XorFoldMatchesTheHostAndRejectsMisalignment) {
  // Sizes below one warp's worth, one block's, and past the grid's cap (grid-stride tail).
  for (const int64_t words : {int64_t{4}, int64_t{4 * 33}, int64_t{4} * 1024 * 256 * 3 + 12}) {
    std::vector<uint32_t> h(static_cast<size_t>(words));
    std::mt19937 gen(fresh_seed());
    uint32_t want = 0x5a5a5a5au;  // the accumulator's starting value
    for (uint32_t& v : h) want ^= (v = gen());
    DevBuf<uint32_t> d(h.size()), acc(1);
    cudaMemcpy(d.get(), h.data(), h.size() * sizeof(uint32_t), cudaMemcpyHostToDevice);
    const uint32_t start = 0x5a5a5a5au;
    cudaMemcpy(acc.get(), &start, sizeof start, cudaMemcpyHostToDevice);
    EV_ASSERT_CUDA(gpu::xor_fold_u32(d.get(), words * 4, acc.get(), nullptr));
    EV_ASSERT_CUDA(cudaDeviceSynchronize());
    uint32_t got = 0;
    cudaMemcpy(&got, acc.get(), sizeof got, cudaMemcpyDeviceToHost);
    EXPECT_EQ(got, want) << words << " words";
  }
  DevBuf<uint32_t> d(8), acc(1);
  EXPECT_EQ(gpu::xor_fold_u32(d.get(), 12, acc.get(), nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(gpu::xor_fold_u32(d.get() + 1, 16, acc.get(), nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(gpu::xor_fold_u32(d.get(), 0, acc.get(), nullptr), cudaSuccess);
}

// ---- fp32 attention --------------------------------------------------------------------------------------

struct MhaCase { int b, h, sq, skv, d; bool packed; bool mask; };

TEST(OpsCuda, MhaF32MatchesTheReference) {
  for (const MhaCase mc : {MhaCase{2, 3, 197, 197, 64, true, false}, MhaCase{2, 4, 17, 17, 16, true, false},
                           MhaCase{1, 12, 50, 50, 64, true, false}, MhaCase{1, 2, 3, 1025, 64, false, false}, MhaCase{2, 2, 7, 131, 80, false, true},
                           MhaCase{3, 2, 1, 1, 32, false, false}, MhaCase{2, 2, 197, 197, 8, true, false},
                           MhaCase{2, 2, 197, 197, 160, true, false}, MhaCase{1, 2, 65, 65, 256, true, false},
                           MhaCase{2, 2, 1, 197, 72, false, true}}) {
    AttnParams p;
    std::vector<float> q, k, v;
    int64_t o_elems;
    if (mc.packed) {
      p = attn_params_packed_qkv(mc.b, mc.sq, mc.h, mc.d, 1.f / std::sqrt(static_cast<float>(mc.d)));
      q = testutil::random_floats(size_t{1} * mc.b * mc.sq * 3 * mc.h * mc.d, fresh_seed(), -2.f, 2.f);
      o_elems = int64_t{mc.b} * mc.sq * mc.h * mc.d;
    } else {
      // Q, O (B, Sq, H, D); K, V (B, H, Skv, D).
      p.batch = mc.b; p.heads = mc.h; p.seq_q = mc.sq; p.seq_kv = mc.skv; p.head_dim = mc.d;
      p.scale = 1.f / std::sqrt(static_cast<float>(mc.d));
      p.q = p.o = AttnStrides{int64_t{mc.sq} * mc.h * mc.d, int64_t{mc.h} * mc.d, mc.d};
      p.k = p.v = AttnStrides{int64_t{mc.h} * mc.skv * mc.d, mc.d, int64_t{mc.skv} * mc.d};
      q = testutil::random_floats(size_t{1} * mc.b * mc.sq * mc.h * mc.d, fresh_seed(), -2.f, 2.f);
      k = testutil::random_floats(size_t{1} * mc.b * mc.h * mc.skv * mc.d, fresh_seed(), -2.f, 2.f);
      v = testutil::random_floats(k.size(), fresh_seed(), -2.f, 2.f);
      o_elems = int64_t{mc.b} * mc.sq * mc.h * mc.d;
    }
    std::vector<uint8_t> mask;
    if (mc.mask) {
      std::mt19937 gen(fresh_seed());
      mask.resize(size_t{1} * mc.b * mc.skv);
      for (auto& m : mask) m = gen() % 3 != 0;
      std::fill(mask.begin(), mask.begin() + mc.skv, 0);  // batch element 0: nothing to attend to -> zeros
    }
    const float* hq = q.data();
    const float* hk = mc.packed ? q.data() + packed_k_offset(mc.h, mc.d) : k.data();
    const float* hv = mc.packed ? q.data() + packed_v_offset(mc.h, mc.d) : v.data();
    std::vector<float> ref(static_cast<size_t>(o_elems));
    AttnParams hp = p;
    hp.key_mask = mc.mask ? mask.data() : nullptr;
    mha_ref(hp, hq, hk, hv, ref.data(), 1);

    DevBuf<float> dq(q.size()), dk(std::max<size_t>(k.size(), 1)), dv(std::max<size_t>(v.size(), 1)), dout(o_elems);
    DevBuf<uint8_t> dmask(std::max<size_t>(mask.size(), 1));
    dq.set(q);
    if (!mc.packed) { dk.set(k); dv.set(v); }
    if (mc.mask) cudaMemcpy(dmask.get(), mask.data(), mask.size(), cudaMemcpyHostToDevice);
    AttnParams dp = p;
    dp.key_mask = mc.mask ? dmask.get() : nullptr;
    const float* dqp = dq.get();
    const float* dkp = mc.packed ? dqp + packed_k_offset(mc.h, mc.d) : dk.get();
    const float* dvp = mc.packed ? dqp + packed_v_offset(mc.h, mc.d) : dv.get();
    EV_ASSERT_CUDA(gpu::mha_f32(dp, dqp, dkp, dvp, dout.get(), nullptr));
    EV_ASSERT_CUDA(cudaDeviceSynchronize());
    const auto out = dout.get_f32();
    const std::string what = "mha_f32 B" + std::to_string(mc.b) + " H" + std::to_string(mc.h) + " Sq" +
                             std::to_string(mc.sq) + " Skv" + std::to_string(mc.skv) + " D" + std::to_string(mc.d) +
                             (mc.mask ? " masked" : "");
    expect_fp32(out, ref, what);
    if (mc.mask) {
      const int64_t per_batch = int64_t{mc.sq} * mc.h * mc.d;
      EXPECT_TRUE(std::all_of(out.begin(), out.begin() + per_batch, [](float x) { return x == 0.f; }))
          << what << ": a fully masked batch element must give zeros";
    }
  }
}

TEST(OpsCuda, MhaF32RejectsInvalidParameters) {
  AttnParams p = attn_params_packed_qkv(1, 4, 1, 8, 0.f);
  EXPECT_EQ(gpu::mha_f32(p, nullptr, nullptr, nullptr, nullptr, nullptr), cudaErrorInvalidValue);
  p = attn_params_packed_qkv(1, gpu::kMhaF32MaxSmemFloats, 1, 8, 1.f);  // Skv + D over the shared memory
  EXPECT_EQ(gpu::mha_f32(p, nullptr, nullptr, nullptr, nullptr, nullptr), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace edgevit
