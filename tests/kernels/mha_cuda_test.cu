// CUDA attention (kernels/cuda/mha.h) against a float64 reference, through the launchers the runtime calls.
//
// Every case draws fresh inputs, poisons the output (fp16 NaN) before each run and checks the rule of
// base/tolerances.h: ||out - ref|| / ||ref|| <= 2x that of the reference computed from
// fp16-rounded inputs with an fp16-rounded output, and <= 5e-3; never NaN/Inf; padding between output rows
// left untouched. The reference (kernels/cpu/mha_ref) sees the unrounded fp32 inputs, the kernels their
// fp16 roundings.
// Cases: every fused head dim x S in {1, 7, 64, 197, 577, 1025}, packed qkv and separate layouts (Q/O as
// (B, S, H, D) with padded O rows, K/V as (B, H, S, D)), Sq != Skv, key masks with a fully masked batch
// element, logits up to +-1e4 after scaling; each fused variant row of its head dim; unfused for all of
// them and for head_dim 40. Each fused row also runs with int8 output (mha_fused_f16_i8out) at a scale of
// max |o| / 120, against mha_i8out_ref on the fp16-rounded inputs (tol::kInt8AttnOutMaxSteps and the flip
// fraction bound beside it).
#include <cublasLt.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/attn_params.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cuda/mha.h"
#include "kernels/mha_variants.h"
#include "tests/testutil/cuda_main.h"
#include "tests/testutil/testutil.h"
#include "base/tolerances.h"

namespace edgevit {
namespace {

enum class Layout { kPacked, kSeparate };
enum class Mask { kNone, kWithFullyMaskedBatch };
enum class Logits { kNormal, kLarge };

struct Case {
  int batch, heads, seq_q, seq_kv, head_dim;
  Layout layout;
  Mask mask;
  Logits logits;
};

std::string case_name(const Case& c) {
  std::ostringstream s;
  s << "B" << c.batch << "_H" << c.heads << "_Sq" << c.seq_q << "_Skv" << c.seq_kv << "_D" << c.head_dim
    << (c.layout == Layout::kPacked ? "_packed" : "_separate") << (c.mask == Mask::kNone ? "" : "_masked")
    << (c.logits == Logits::kLarge ? "_large" : "");
  return s.str();
}

// Host copies of the inputs in the device layout: `exact` as drawn (fp32), `half` their fp16 roundings.
struct Inputs {
  AttnParams p;
  size_t q_elems = 0, kv_elems = 0, o_elems = 0;  // buffer sizes; packed: q holds q, k and v
  int64_t k_offset = 0, v_offset = 0;            // of K and V inside their buffers
  std::vector<float> q, k, v;                    // exact; packed: only q is used
  std::vector<__half> qh, kh, vh;
  std::vector<uint8_t> mask;  // (B, Skv) or empty
};

float round_half(float x) { return __half2float(__float2half_rn(x)); }

Inputs make_inputs(const Case& c, uint32_t seed) {
  Inputs in;
  const int B = c.batch, H = c.heads, Sq = c.seq_q, Skv = c.seq_kv, D = c.head_dim;
  const float scale = c.logits == Logits::kLarge ? 64.f : 1.f / std::sqrt(static_cast<float>(D));
  if (c.layout == Layout::kPacked) {
    // The buffer holds Skv tokens; the queries are its first Sq (Sq < Skv: the class-token tail).
    in.p = attn_params_packed_qkv(B, Skv, H, D, scale, Sq);
    in.q_elems = static_cast<size_t>(B) * Skv * 3 * H * D;
    in.k_offset = packed_k_offset(H, D);
    in.v_offset = packed_v_offset(H, D);
    in.o_elems = static_cast<size_t>(B) * Sq * H * D;
  } else {
    AttnParams& p = in.p;
    p.batch = B; p.heads = H; p.seq_q = Sq; p.seq_kv = Skv; p.head_dim = D; p.scale = scale;
    p.q = AttnStrides{static_cast<int64_t>(Sq) * H * D, static_cast<int64_t>(H) * D, D};        // (B, Sq, H, D)
    p.k = p.v = AttnStrides{static_cast<int64_t>(H) * Skv * D, D, static_cast<int64_t>(Skv) * D};  // (B, H, Skv, D)
    const int64_t o_row = static_cast<int64_t>(H) * D + 8;  // 8 padding elements that must stay untouched
    p.o = AttnStrides{Sq * o_row, o_row, D};
    in.q_elems = static_cast<size_t>(B) * Sq * H * D;
    in.kv_elems = static_cast<size_t>(B) * H * Skv * D;
    in.o_elems = static_cast<size_t>(B) * Sq * o_row;
  }
  std::mt19937 gen(seed);
  // Normal logits: uniform inputs, logits of order 1. Large: small integers for Q and K, so that the scaled
  // logits (multiples of 64, up to about +-1e4) are exact and their ties exact too; V stays non-integer.
  auto fill = [&](std::vector<float>& x, size_t n, bool integer) {
    std::uniform_real_distribution<float> uni(-2.f, 2.f);
    std::uniform_int_distribution<int> ints(-4, 4);
    x.resize(n);
    for (float& e : x) e = integer ? static_cast<float>(ints(gen)) : uni(gen);
  };
  const bool large = c.logits == Logits::kLarge;
  fill(in.q, in.q_elems, large);
  if (c.layout == Layout::kPacked) {
    if (large) {  // V slots of the packed buffer get non-integer values
      std::uniform_real_distribution<float> uni(-2.f, 2.f);
      for (int64_t i = 0; i < static_cast<int64_t>(in.q_elems); ++i)
        if ((i % (3 * H * D)) >= 2 * H * D) in.q[i] = uni(gen);
    }
  } else {
    fill(in.k, in.kv_elems, large);
    fill(in.v, in.kv_elems, false);
  }
  auto to_half = [](const std::vector<float>& x) {
    std::vector<__half> h(x.size());
    for (size_t i = 0; i < x.size(); ++i) h[i] = __float2half_rn(x[i]);
    return h;
  };
  in.qh = to_half(in.q);
  in.kh = to_half(in.k);
  in.vh = to_half(in.v);
  if (c.mask == Mask::kWithFullyMaskedBatch) {
    std::bernoulli_distribution keep(0.7);
    in.mask.resize(static_cast<size_t>(B) * Skv);
    for (int b = 0; b < B; ++b) {
      bool any = false;
      for (int j = 0; j < Skv; ++j) {
        const bool last = b == B - 1;  // the last batch element has every key masked: its rows are zeros
        in.mask[b * Skv + j] = !last && keep(gen);
        any = any || in.mask[b * Skv + j];
      }
      if (b != B - 1 && !any) in.mask[b * Skv] = 1;
    }
  }
  return in;
}

// kernels/cpu/mha_ref (float64 accumulation) over the given (possibly rounded) inputs; out is dense
// (B, Sq, H, D).
std::vector<double> reference(const AttnParams& p, const float* q, const float* k, const float* v,
                              const uint8_t* mask) {
  AttnParams dense = p;
  const int64_t e = static_cast<int64_t>(p.heads) * p.head_dim;
  dense.o = AttnStrides{p.seq_q * e, e, p.head_dim};
  dense.key_mask = mask;
  std::vector<float> out(static_cast<size_t>(p.batch) * p.seq_q * e);
  mha_ref(dense, q, k, v, out.data(), 1);
  return std::vector<double>(out.begin(), out.end());
}

struct References {
  std::vector<double> exact;    // from the fp32 inputs
  std::vector<float> fp16;      // from the fp16-rounded inputs, output rounded to fp16
  double fp16_error = 0;        // rel. error of fp16 against exact
  std::vector<float> qr, kr, vr;  // the fp16-rounded inputs, as floats (the int8 output's reference reads them)
};

References make_references(const Inputs& in) {
  auto widen = [](const std::vector<__half>& h) {
    std::vector<float> f(h.size());
    for (size_t i = 0; i < h.size(); ++i) f[i] = __half2float(h[i]);
    return f;
  };
  const bool packed = in.k.empty();
  const uint8_t* mask = in.mask.empty() ? nullptr : in.mask.data();
  References r;
  const float* q = in.q.data();
  r.exact = packed ? reference(in.p, q, q + in.k_offset, q + in.v_offset, mask)
                   : reference(in.p, q, in.k.data(), in.v.data(), mask);
  const std::vector<float> qr = widen(in.qh), kr = widen(in.kh), vr = widen(in.vh);
  const std::vector<double> rounded = packed ? reference(in.p, qr.data(), qr.data() + in.k_offset,
                                                         qr.data() + in.v_offset, mask)
                                             : reference(in.p, qr.data(), kr.data(), vr.data(), mask);
  r.fp16.resize(rounded.size());
  for (size_t i = 0; i < rounded.size(); ++i) r.fp16[i] = round_half(static_cast<float>(rounded[i]));
  r.fp16_error = testutil::rel_error(r.fp16.data(), r.exact.data(), r.exact.size());
  r.qr = qr;
  r.kr = kr;
  r.vr = vr;
  return r;
}

template <class T>
struct DeviceBuffer {
  explicit DeviceBuffer(size_t n) : count(n) {
    if (n > 0) status = cudaMalloc(&ptr, n * sizeof(T));
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  T* ptr = nullptr;
  size_t count = 0;
  cudaError_t status = cudaSuccess;
};

// Device copies of one case's inputs; `run` fills the poisoned output and returns it gathered as dense
// (B, Sq, H, D) floats, with `padding_intact` false if anything outside the output rows was written.
class DeviceCase {
 public:
  explicit DeviceCase(const Inputs& in)
      : in_(in), q_(in.q_elems), k_(in.kv_elems), v_(in.kv_elems), o_(in.o_elems), o8_(in.o_elems), scale_(1),
        mask_(in.mask.size()) {}

  ::testing::AssertionResult upload() {
    for (cudaError_t s : {q_.status, k_.status, v_.status, o_.status, o8_.status, scale_.status, mask_.status})
      if (s != cudaSuccess) return ::testing::AssertionFailure() << "cudaMalloc: " << cudaGetErrorString(s);
    cudaError_t s = cudaMemcpy(q_.ptr, in_.qh.data(), in_.qh.size() * 2, cudaMemcpyHostToDevice);
    if (s == cudaSuccess && !in_.kh.empty())
      s = cudaMemcpy(k_.ptr, in_.kh.data(), in_.kh.size() * 2, cudaMemcpyHostToDevice);
    if (s == cudaSuccess && !in_.vh.empty())
      s = cudaMemcpy(v_.ptr, in_.vh.data(), in_.vh.size() * 2, cudaMemcpyHostToDevice);
    if (s == cudaSuccess && !in_.mask.empty())
      s = cudaMemcpy(mask_.ptr, in_.mask.data(), in_.mask.size(), cudaMemcpyHostToDevice);
    if (s != cudaSuccess) return ::testing::AssertionFailure() << "upload: " << cudaGetErrorString(s);
    params_ = in_.p;
    params_.key_mask = in_.mask.empty() ? nullptr : mask_.ptr;
    return ::testing::AssertionSuccess();
  }
  const AttnParams& params() const { return params_; }
  const __half* q() const { return q_.ptr; }
  const __half* k() const { return in_.kh.empty() ? q_.ptr + in_.k_offset : k_.ptr; }
  const __half* v() const { return in_.vh.empty() ? q_.ptr + in_.v_offset : v_.ptr; }
  __half* o() { return o_.ptr; }
  int8_t* o8() { return o8_.ptr; }
  const float* o_scale() const { return scale_.ptr; }
  cudaError_t set_scale(float s) { return cudaMemcpy(scale_.ptr, &s, sizeof s, cudaMemcpyHostToDevice); }
  // -128: a code the int8 output never writes (it saturates to [-127, 127]).
  cudaError_t poison8() { return cudaMemset(o8_.ptr, 0x80, o8_.count); }
  // The raw int8 output buffer (o's layout and padding).
  cudaError_t download8(std::vector<int8_t>* raw) {
    raw->resize(o8_.count);
    return cudaMemcpy(raw->data(), o8_.ptr, raw->size(), cudaMemcpyDeviceToHost);
  }

  cudaError_t poison() { return cudaMemset(o_.ptr, 0xFF, o_.count * sizeof(__half)); }  // fp16 NaN

  cudaError_t download(std::vector<float>* dense, bool* padding_intact) {
    std::vector<__half> raw(o_.count);
    cudaError_t s = cudaMemcpy(raw.data(), o_.ptr, raw.size() * 2, cudaMemcpyDeviceToHost);
    if (s != cudaSuccess) return s;
    const AttnParams& p = params_;
    std::vector<bool> written(raw.size(), false);
    dense->assign(static_cast<size_t>(p.batch) * p.seq_q * p.heads * p.head_dim, 0.f);
    for (int b = 0; b < p.batch; ++b)
      for (int i = 0; i < p.seq_q; ++i)
        for (int h = 0; h < p.heads; ++h)
          for (int d = 0; d < p.head_dim; ++d) {
            const int64_t at = b * p.o.batch + i * p.o.row + h * p.o.head + d;
            written[at] = true;
            (*dense)[((static_cast<size_t>(b) * p.seq_q + i) * p.heads + h) * p.head_dim + d] =
                __half2float(raw[at]);
          }
    *padding_intact = true;
    for (size_t i = 0; i < raw.size(); ++i) {
      uint16_t bits;
      std::memcpy(&bits, &raw[i], 2);
      if (!written[i] && bits != 0xFFFF) *padding_intact = false;
    }
    return cudaSuccess;
  }

 private:
  const Inputs& in_;
  DeviceBuffer<__half> q_, k_, v_, o_;
  DeviceBuffer<int8_t> o8_;
  DeviceBuffer<float> scale_;
  DeviceBuffer<uint8_t> mask_;
  AttnParams params_;
};

// The tolerance rule, with a message naming the case and the numbers.
::testing::AssertionResult within_tolerance(const std::vector<float>& out, const References& ref,
                                            const std::string& what) {
  const double err = testutil::rel_error(out.data(), ref.exact.data(), ref.exact.size());
  const double bound = std::min(tol::kFp16KernelVsFp16RefFactor * ref.fp16_error, tol::kFp16Kernel);
  if (std::isfinite(err) && err <= bound) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": rel. error " << err << " > bound " << bound
                                       << " (fp16 reference error " << ref.fp16_error << ")";
}

// The int8 output against mha_i8out_ref's codes (`want`, o's layout, -128 outside the output rows): every code
// within kInt8AttnOutMaxSteps, padding untouched, and codes one step off on at most kInt8AttnOutFlipFactor x
// e x rms(code) of them (+8), e the fp16 kernel's bound: a value's error in steps is about e x its code, and
// rounding ties lie one step apart.
::testing::AssertionResult codes_match(const std::vector<int8_t>& got, const std::vector<int8_t>& want,
                                       double kernel_bound, const std::string& what) {
  size_t n = 0, off = 0;
  double sum_sq = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (want[i] == -128) {
      if (got[i] != -128) return ::testing::AssertionFailure() << what << ": wrote padding element " << i;
      continue;
    }
    const int d = std::abs(static_cast<int>(got[i]) - static_cast<int>(want[i]));
    if (got[i] == -128 || d > tol::kInt8AttnOutMaxSteps)
      return ::testing::AssertionFailure() << what << ": element " << i << " code " << int(got[i]) << ", reference "
                                           << int(want[i]);
    ++n;
    off += d != 0;
    sum_sq += static_cast<double>(want[i]) * want[i];
  }
  const double rms = n > 0 ? std::sqrt(sum_sq / static_cast<double>(n)) : 0.0;
  const double allowed = tol::kInt8AttnOutFlipFactor * kernel_bound * rms * static_cast<double>(n) + 8.0;
  if (static_cast<double>(off) <= allowed) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << off << " of " << n << " codes one step off > " << allowed;
}

bool has_fused(int head_dim) {
  for (const MhaVariant& row : kMhaVariants)
    if (row.head_dim == head_dim) return true;
  return false;
}

class MhaCudaTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override { ASSERT_EQ(cublasLtCreate(&handle_), CUBLAS_STATUS_SUCCESS); }
  void TearDown() override {
    if (handle_ != nullptr) cublasLtDestroy(handle_);
  }
  cublasLtHandle_t handle_ = nullptr;
};

TEST_P(MhaCudaTest, MatchesFloat64Reference) {
  const Case c = GetParam();
  const uint32_t seed = static_cast<uint32_t>(std::hash<std::string>{}(case_name(c)));
  const Inputs in = make_inputs(c, seed);
  const References ref = make_references(in);
  DeviceCase dev(in);
  ASSERT_TRUE(dev.upload());
  std::vector<float> out;
  bool padding_intact = false;

  if (has_fused(c.head_dim)) {
    // The table's row for this launch on this device (as the CUDA backend picks it untuned), then every row
    // of the table for this head dim.
    int device = 0, major = 0, minor = 0, optin = 0, sms = 0;
    EV_ASSERT_CUDA(cudaGetDevice(&device));
    EV_ASSERT_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    EV_ASSERT_CUDA(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    EV_ASSERT_CUDA(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    EV_ASSERT_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    const MhaGrid grid{c.batch, c.heads, c.seq_q, sms};
    const MhaChoice table = choose_mha(major * 10 + minor, optin, c.head_dim, true, false, &grid);
    ASSERT_TRUE(table.fused) << table.reason;
    std::vector<int> variants = {static_cast<int>(table.variant - kMhaVariants)};
    for (size_t i = 0; i < kNumMhaVariants; ++i)
      if (kMhaVariants[i].head_dim == c.head_dim) variants.push_back(static_cast<int>(i));
    // The int8 output's reference: the scale puts the largest |o| at code 120; -128 marks the padding.
    double amax = 0;
    for (double x : ref.exact) amax = std::max(amax, std::fabs(x));
    const float o_scale = amax > 0 ? static_cast<float>(amax / 120.0) : 1.f;
    std::vector<int8_t> want(in.o_elems, -128);
    const bool packed = in.k.empty();
    {
      AttnParams hp = in.p;
      hp.key_mask = in.mask.empty() ? nullptr : in.mask.data();
      const float* q = ref.qr.data();
      if (packed) {
        mha_i8out_ref(hp, q, q + in.k_offset, q + in.v_offset, o_scale, want.data());
      } else {
        mha_i8out_ref(hp, q, ref.kr.data(), ref.vr.data(), o_scale, want.data());
      }
    }
    EV_ASSERT_CUDA(dev.set_scale(o_scale));
    const double kernel_bound = std::min(tol::kFp16KernelVsFp16RefFactor * ref.fp16_error, tol::kFp16Kernel);
    std::vector<int8_t> got;
    for (size_t vi = 0; vi < variants.size(); ++vi) {
      const int variant = variants[vi];
      const std::string what = std::string(vi == 0 ? "fused (table's row) " : "fused ") + kMhaVariants[variant].name;
      EV_ASSERT_CUDA(dev.poison());
      EV_ASSERT_CUDA(mha_fused_f16(dev.params(), dev.q(), dev.k(), dev.v(), dev.o(), variant, nullptr));
      EV_ASSERT_CUDA(cudaDeviceSynchronize());
      EV_ASSERT_CUDA(dev.download(&out, &padding_intact));
      EXPECT_TRUE(padding_intact) << what << " wrote outside the output rows";
      EXPECT_TRUE(within_tolerance(out, ref, what));
      EV_ASSERT_CUDA(dev.poison8());
      EV_ASSERT_CUDA(mha_fused_f16_i8out(dev.params(), dev.q(), dev.k(), dev.v(), dev.o8(), dev.o_scale(), variant,
                                         nullptr));
      EV_ASSERT_CUDA(cudaDeviceSynchronize());
      EV_ASSERT_CUDA(dev.download8(&got));
      EXPECT_TRUE(codes_match(got, want, kernel_bound, what + " int8 output"));
    }
  } else {
    // No row of this head dim: a row of another is refused.
    EXPECT_EQ(mha_fused_f16(dev.params(), dev.q(), dev.k(), dev.v(), dev.o(), 0, nullptr), cudaErrorInvalidValue);
    EXPECT_EQ(mha_fused_f16_i8out(dev.params(), dev.q(), dev.k(), dev.v(), dev.o8(), dev.o_scale(), 0, nullptr),
              cudaErrorInvalidValue);
  }

  const size_t ws_bytes = mha_unfused_workspace_bytes(dev.params());
  DeviceBuffer<unsigned char> ws(ws_bytes);
  EV_ASSERT_CUDA(ws.status);
  EV_ASSERT_CUDA(dev.poison());
  EV_ASSERT_CUDA(mha_unfused_f16(dev.params(), dev.q(), dev.k(), dev.v(), dev.o(), ws.ptr, ws_bytes, handle_,
                                 nullptr));
  EV_ASSERT_CUDA(cudaDeviceSynchronize());
  EV_ASSERT_CUDA(dev.download(&out, &padding_intact));
  EXPECT_TRUE(padding_intact) << "unfused wrote outside the output rows";
  EXPECT_TRUE(within_tolerance(out, ref, "unfused"));
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  const int kSeqs[] = {1, 7, 64, 197, 577, 1025};
  for (int d : {32, 64, 80, 96, 128, 40}) {
    for (int s : kSeqs) {
      const bool big = s > 256;
      const int batch = big ? 1 : 2, heads = big ? 2 : 3;
      cases.push_back({batch, heads, s, s, d, Layout::kPacked, Mask::kNone, Logits::kNormal});
      // Cross-attention shapes: Skv differs from Sq (and is not a multiple of any tile).
      const int skv = s == 1 ? 5 : s == 7 ? 130 : s == 64 ? 7 : s == 197 ? 577 : s == 577 ? 100 : 1;
      cases.push_back({batch, heads, s, skv, d, Layout::kSeparate, Mask::kNone, Logits::kNormal});
    }
    cases.push_back({3, 2, 197, 197, d, Layout::kPacked, Mask::kWithFullyMaskedBatch, Logits::kNormal});
    cases.push_back({2, 2, 70, 131, d, Layout::kSeparate, Mask::kWithFullyMaskedBatch, Logits::kNormal});
    cases.push_back({2, 2, 197, 197, d, Layout::kPacked, Mask::kNone, Logits::kLarge});
    cases.push_back({2, 2, 33, 257, d, Layout::kSeparate, Mask::kWithFullyMaskedBatch, Logits::kLarge});
    // The class-token tail: the first token's query over every key of the packed qkv buffer (Q's batch
    // stride is the buffer's), as ViT's last block runs it.
    cases.push_back({3, 3, 1, 197, d, Layout::kPacked, Mask::kNone, Logits::kNormal});
    cases.push_back({3, 2, 1, 197, d, Layout::kPacked, Mask::kWithFullyMaskedBatch, Logits::kNormal});
  }
  // Head dims off the fused table (8, 24, 48, 72) and above it (160, 256: a ViT with embed 320 and 2 heads):
  // the fused launcher refuses them (cudaErrorNotSupported, as choose_mha says) and the unfused path serves
  // them within the fp16 tolerance.
  for (int d : {8, 24, 48, 72, 160, 256}) {
    cases.push_back({2, 3, 7, 7, d, Layout::kPacked, Mask::kNone, Logits::kNormal});
    cases.push_back({2, 2, 197, 197, d, Layout::kPacked, Mask::kNone, Logits::kNormal});
    cases.push_back({3, 2, 1, 197, d, Layout::kPacked, Mask::kWithFullyMaskedBatch, Logits::kNormal});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Shapes, MhaCudaTest, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return case_name(info.param); });

TEST(MhaCudaLauncher, RejectsMisalignedInputs) {
  AttnParams p = attn_params_packed_qkv(1, 8, 1, 64, 0.125f);
  DeviceBuffer<__half> buf(3 * 8 * 64 + 8);
  EV_ASSERT_CUDA(buf.status);
  int row = 0;
  while (kMhaVariants[row].head_dim != 64) ++row;
  EXPECT_EQ(mha_fused_f16(p, buf.ptr + 1, buf.ptr + 65, buf.ptr + 129, buf.ptr, row, nullptr), cudaErrorInvalidValue);
  // The int8 output: 8-byte aligned, and a scale is required.
  DeviceBuffer<float> scale(1);
  EV_ASSERT_CUDA(scale.status);
  int8_t* o8 = reinterpret_cast<int8_t*>(buf.ptr);
  EXPECT_EQ(mha_fused_f16_i8out(p, buf.ptr, buf.ptr + 64, buf.ptr + 128, o8 + 4, scale.ptr, row, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(mha_fused_f16_i8out(p, buf.ptr, buf.ptr + 64, buf.ptr + 128, o8, nullptr, row, nullptr),
            cudaErrorInvalidValue);
}

TEST(MhaCudaLauncher, ChosenVariantMatchesDevice) {
  int device = 0, major = 0, minor = 0, optin = 0;
  EV_ASSERT_CUDA(cudaGetDevice(&device));
  EV_ASSERT_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  EV_ASSERT_CUDA(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  EV_ASSERT_CUDA(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  for (int d : {32, 64, 80, 96, 128}) {
    const MhaChoice choice = choose_mha(major * 10 + minor, optin, d, true, false);
    ASSERT_TRUE(choice.fused) << choice.reason;
    EXPECT_LE(choice.variant->smem_bytes, optin) << choice.reason;
  }
}

}  // namespace
}  // namespace edgevit
