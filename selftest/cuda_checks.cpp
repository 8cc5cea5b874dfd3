// CUDA attention checks (kernels/cuda/mha.h, the launchers the runtime calls) at a model's real shapes, fp16
// in/out. Rule of base/tolerances.h (FlashAttention's): ||out - ref|| / ||ref|| against the
// float64-accumulated reference of the unrounded inputs must be <= kFp16KernelVsFp16RefFactor x the error
// of the reference computed from fp16-rounded inputs with an fp16-rounded output, and <= kFp16Kernel.
// Compiled only on CUDA builds (EDGEVIT_HAVE_CUDA); without a usable GPU every check is a skip.
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>

#include "kernels/cpu/kernels.h"
#include "kernels/cuda/mha.h"
#include "kernels/mha_variants.h"
#include "runtime/safetensors.h"
#include "selftest/alloc_counter.h"
#include "selftest/checks.h"
#include "base/tolerances.h"

namespace edgevit::selftest {
namespace {

// Device memory owned by this object.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) {
    if (bytes > 0) status_ = cudaMalloc(&ptr_, bytes);
  }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return ptr_; }
  cudaError_t status() const { return status_; }

 private:
  void* ptr_ = nullptr;
  cudaError_t status_ = cudaSuccess;
};

CheckResult skip(const std::string& name, const std::string& model, const std::string& why) {
  CheckResult c;
  c.name = name;
  c.model = model;
  c.outcome = Outcome::kSkip;
  c.detail = why;
  return c;
}

CheckResult device_failure(const std::string& name, const std::string& model, const char* what, cudaError_t e) {
  CheckResult c;
  c.name = name;
  c.model = model;
  c.outcome = Outcome::kFail;
  c.measured = std::string(what) + ": " + cudaGetErrorString(e);
  c.bound = "cudaSuccess";
  return c;
}

// One attention case at a model's shapes: the packed fp16 input, its float64-accumulated reference output
// and the bound the launchers' outputs are held to.
struct AttentionCase {
  std::string model;
  int head_dim = 0;
  AttnParams test_p;              // what the launchers run (scale 1 under Fault::kAttentionScale)
  size_t in_n = 0, out_n = 0;     // elements of the packed qkv (B, S, 3, H, D) and of the output (B, S, H * D)
  int64_t ko = 0, vo = 0;         // K and V offsets inside the packed qkv
  std::vector<uint16_t> qkv_h;    // fp16 bits
  std::vector<float> exact;       // reference of the unrounded inputs
  double bound = 0;
  std::string detail;
};

AttentionCase make_attention_case(const KernelCheckSpec& s) {
  AttentionCase c;
  c.model = s.model;
  const VitArch& a = s.arch;
  const int B = s.batch, T = a.num_tokens(), H = a.num_heads, D = a.head_dim(), E = a.embed_dim;
  c.head_dim = D;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const AttnParams ref_p = attn_params_packed_qkv(B, T, H, D, scale);
  c.test_p = ref_p;
  if (s.wrong_scale) c.test_p.scale = 1.0f;
  const uint64_t seed = s.seed ^ 0xc0da;
  c.in_n = static_cast<size_t>(B) * T * 3 * E;
  c.out_n = static_cast<size_t>(B) * T * E;
  const std::vector<float> qkv = random_uniform(c.in_n, seed, -2.f, 2.f);
  c.qkv_h.resize(c.in_n);
  std::vector<float> qkv_r(c.in_n);  // fp16 roundings, widened
  for (size_t i = 0; i < c.in_n; ++i) {
    c.qkv_h[i] = f32_to_f16(qkv[i]);
    qkv_r[i] = f16_to_f32(c.qkv_h[i]);
  }
  c.ko = packed_k_offset(H, D);
  c.vo = packed_v_offset(H, D);
  std::vector<float> ref16(c.out_n);
  c.exact.resize(c.out_n);
  mha_ref(ref_p, qkv.data(), qkv.data() + c.ko, qkv.data() + c.vo, c.exact.data(), s.threads);
  mha_ref(ref_p, qkv_r.data(), qkv_r.data() + c.ko, qkv_r.data() + c.vo, ref16.data(), s.threads);
  for (float& x : ref16) x = f16_to_f32(f32_to_f16(x));
  const double ref16_err = rel_error(ref16.data(), c.exact.data(), c.out_n);
  c.bound = std::fmin(tol::kFp16KernelVsFp16RefFactor * ref16_err, tol::kFp16Kernel);
  c.detail = "B=" + std::to_string(B) + " S=" + std::to_string(T) + " H=" + std::to_string(H) +
             " D=" + std::to_string(D) + " packed qkv fp16, fp16 reference error " + fmt_g(ref16_err) + ", seed " +
             std::to_string(seed);
  return c;
}

// The device operands of a case: q, k and v inside the packed input, and the output o.
struct AttentionOperands {
  const __half *q, *k, *v;
  __half* o;
};

// Turns one launcher's result (its output poisoned before the launch) into a check.
CheckResult finish_check(const AttentionCase& c, const std::string& name, cudaError_t launch, const Stopwatch& w,
                         const __half* o) {
  if (launch == cudaSuccess) launch = cudaDeviceSynchronize();
  if (launch != cudaSuccess) return device_failure(name, c.model, "launch", launch);
  std::vector<uint16_t> oh(c.out_n);
  const cudaError_t e = cudaMemcpy(oh.data(), o, c.out_n * 2, cudaMemcpyDeviceToHost);
  if (e != cudaSuccess) return device_failure(name, c.model, "cudaMemcpy", e);
  std::vector<float> of(c.out_n);
  for (size_t i = 0; i < c.out_n; ++i) of[i] = f16_to_f32(oh[i]);
  return rel_error_check(name, c.model, rel_error(of.data(), c.exact.data(), c.out_n), c.bound, c.detail,
                         w.seconds());
}

// The fused launcher on the table's row for this device and head_dim (the launcher runs the row its caller
// names).
CheckResult fused_check(const AttentionCase& c, const std::string& name, const AttentionOperands& d) {
  const int D = c.head_dim;
  cudaMemset(d.o, 0xff, c.out_n * 2);  // fp16 NaN
  Stopwatch w;
  cudaDeviceProp prop{};
  const bool have_prop = cudaGetDeviceProperties(&prop, 0) == cudaSuccess;
  const MhaChoice table = have_prop ? choose_mha(prop.major * 10 + prop.minor,
                                                 static_cast<int64_t>(prop.sharedMemPerBlockOptin), D, true, false)
                                    : MhaChoice{};
  const cudaError_t r = table.fused ? mha_fused_f16(c.test_p, d.q, d.k, d.v, d.o,
                                                    static_cast<int>(table.variant - kMhaVariants), nullptr)
                                    : cudaErrorNotSupported;
  if (r != cudaErrorNotSupported) return finish_check(c, name, r, w, d.o);
  cudaGetLastError();
  // A skip only where the table has no row for this device and head_dim (the plan then runs the unfused
  // launcher, checked next); a launcher refusing what the table serves is a failure.
  if (have_prop && !table.fused)
    return skip(name, c.model, "skipped: head_dim " + std::to_string(D) + " has no fused row here (" +
                                   table.reason + "); the plan runs the unfused launcher");
  CheckResult f = skip(name, c.model, "");
  f.outcome = Outcome::kFail;
  f.measured = "the fused launcher refused head_dim " + std::to_string(D);
  f.bound = have_prop ? "served (the table's row " + std::string(table.variant->name) + ")" : "served";
  return f;
}

// The unfused launcher (cuBLASLt GEMMs around a softmax kernel) with its own workspace and handle.
CheckResult unfused_check(const AttentionCase& c, const std::string& name, const AttentionOperands& d) {
  const size_t ws_bytes = mha_unfused_workspace_bytes(c.test_p);
  DeviceBuffer ws(ws_bytes);
  cublasLtHandle_t handle = nullptr;
  if (ws.status() != cudaSuccess) return device_failure(name, c.model, "cudaMalloc workspace", ws.status());
  if (cublasLtCreate(&handle) != CUBLAS_STATUS_SUCCESS) {
    CheckResult f = skip(name, c.model, "");
    f.outcome = Outcome::kFail;
    f.measured = "cublasLtCreate failed";
    f.bound = "CUBLAS_STATUS_SUCCESS";
    return f;
  }
  cudaMemset(d.o, 0xff, c.out_n * 2);
  Stopwatch w;
  const cudaError_t r = mha_unfused_f16(c.test_p, d.q, d.k, d.v, d.o, ws.get(), ws_bytes, handle, nullptr);
  CheckResult result = finish_check(c, name, r, w, d.o);
  cublasLtDestroy(handle);
  return result;
}

}  // namespace

int64_t cuda_device_used_bytes() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    cudaGetLastError();
    return -1;
  }
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {  // creates the context on first use
    cudaGetLastError();
    return -1;
  }
  return static_cast<int64_t>(total_bytes) - static_cast<int64_t>(free_bytes);
}

void run_cuda_kernel_checks(const KernelCheckSpec& s, std::vector<CheckResult>* out) {
  const std::string fused = "kernel.attention.cuda_fused_vs_ref", unfused = "kernel.attention.cuda_unfused_vs_ref";
  int devices = 0;
  const cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess || devices == 0) {
    const std::string why = std::string("skipped: no GPU (") + (e != cudaSuccess ? cudaGetErrorString(e) : "0 devices") + ")";
    out->push_back(skip(fused, s.model, why));
    out->push_back(skip(unfused, s.model, why));
    return;
  }
  const AttentionCase c = make_attention_case(s);
  DeviceBuffer d_qkv(c.in_n * 2), d_o(c.out_n * 2);
  // Neither launcher can run without its inputs: both checks fail, each named in the report.
  if (d_qkv.status() != cudaSuccess || d_o.status() != cudaSuccess) {
    const cudaError_t e2 = d_qkv.status() != cudaSuccess ? d_qkv.status() : d_o.status();
    out->push_back(device_failure(fused, s.model, "cudaMalloc", e2));
    out->push_back(device_failure(unfused, s.model, "cudaMalloc", e2));
    return;
  }
  cudaError_t st = cudaMemcpy(d_qkv.get(), c.qkv_h.data(), c.in_n * 2, cudaMemcpyHostToDevice);
  if (st != cudaSuccess) {
    out->push_back(device_failure(fused, s.model, "cudaMemcpy", st));
    out->push_back(device_failure(unfused, s.model, "cudaMemcpy", st));
    return;
  }
  // __half is incomplete here (kernels/cuda/mha.h forward-declares it): address elements as uint16_t.
  const auto* qkv_dev = static_cast<const uint16_t*>(d_qkv.get());
  const AttentionOperands d{reinterpret_cast<const __half*>(qkv_dev), reinterpret_cast<const __half*>(qkv_dev + c.ko),
                            reinterpret_cast<const __half*>(qkv_dev + c.vo), static_cast<__half*>(d_o.get())};
  out->push_back(fused_check(c, fused, d));
  out->push_back(unfused_check(c, unfused, d));
}

}  // namespace edgevit::selftest
