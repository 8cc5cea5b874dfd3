// The CUDA side of the op-case checks (runtime/op_check.h): a device arena, a CudaContext with tuning off
// (the table's rows and cuBLASLt's first heuristic algorithm), fp16, fp32 or int8 tensors moved with cudaMemcpy.
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include "runtime/cuda/cuda_context.h"
#include "runtime/cuda/cuda_status.h"
#include "runtime/int8_scales.h"
#include "runtime/op_check.h"

namespace edgevit {

namespace {

class CudaOpCaseDevice final : public OpCaseDevice {
 public:
  std::unique_ptr<ArenaMemory> memory() override { return cuda_arena_memory(); }
  Result<std::unique_ptr<ExecContext>> context(const Plan& plan, Arena& arena) override {
    EngineOptions o;
    o.tune_gemms = false;
    o.tune_attention = false;
    auto ctx = std::make_unique<CudaContext>(plan, arena, o);
    EV_RETURN_IF_ERROR(ctx->open());
    return std::unique_ptr<ExecContext>(std::move(ctx));
  }
  Status write(Arena& arena, const TensorDesc& t, const std::vector<float>& values) override {
    if (t.elem_bytes == 4) {
      EV_CUDA_CHECK("op case", cudaMemcpy(arena.at(t.id), values.data(), values.size() * 4, cudaMemcpyHostToDevice));
      return Status::Ok();
    }
    if (t.elem_bytes == 1) {  // INT8 ops: integers in [-127, 127], or [0, 255] for uint8 tensors
      const bool u8 = int8_tensor_is_u8(t);
      std::vector<uint8_t> q(values.size());
      for (size_t i = 0; i < values.size(); ++i)
        q[i] = u8 ? static_cast<uint8_t>(values[i]) : static_cast<uint8_t>(static_cast<int8_t>(values[i]));
      EV_CUDA_CHECK("op case", cudaMemcpy(arena.at(t.id), q.data(), q.size(), cudaMemcpyHostToDevice));
      return Status::Ok();
    }
    std::vector<__half> h(values.size());
    for (size_t i = 0; i < values.size(); ++i) h[i] = __float2half(values[i]);
    EV_CUDA_CHECK("op case", cudaMemcpy(arena.at(t.id), h.data(), h.size() * 2, cudaMemcpyHostToDevice));
    return Status::Ok();
  }
  Status read(Arena& arena, const TensorDesc& t, std::vector<float>* values) override {
    const size_t n = static_cast<size_t>(t.numel());
    values->resize(n);
    if (t.elem_bytes == 4) {
      EV_CUDA_CHECK("op case", cudaMemcpy(values->data(), arena.at(t.id), n * 4, cudaMemcpyDeviceToHost));
      return Status::Ok();
    }
    if (t.elem_bytes == 1) {
      std::vector<uint8_t> q(n);
      EV_CUDA_CHECK("op case", cudaMemcpy(q.data(), arena.at(t.id), n, cudaMemcpyDeviceToHost));
      const bool u8 = int8_tensor_is_u8(t);
      for (size_t i = 0; i < n; ++i) (*values)[i] = u8 ? q[i] : static_cast<int8_t>(q[i]);
      return Status::Ok();
    }
    std::vector<__half> h(n);
    EV_CUDA_CHECK("op case", cudaMemcpy(h.data(), arena.at(t.id), n * 2, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; ++i) (*values)[i] = __half2float(h[i]);
    return Status::Ok();
  }
  Status sync(ExecContext& ctx) override {
    EV_CUDA_CHECK("op case", cudaStreamSynchronize(static_cast<CudaContext&>(ctx).stream));
    EV_CUDA_CHECK("op case", cudaGetLastError());
    return Status::Ok();
  }
};

}  // namespace

std::unique_ptr<OpCaseDevice> cuda_op_case_device() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();
    return nullptr;
  }
  return std::make_unique<CudaOpCaseDevice>();
}

}  // namespace edgevit
