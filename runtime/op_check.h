// One list of op cases, run on every op-table row a build can run, each compared with its double-precision
// reference (the kernels' *_ref functions), the way ggml's test-backend-ops checks every backend:
//
//   case    an op of a small ViT graph (its shapes, epilogue, attention launch), at a precision
//   rows    every row of the device kind's table that supports the op and is available here
//   run     a plan of the case's model, an arena, the row's kernel bound to the op: prepare, run, sync
//           (prepare may launch the kernel once, e.g. the CUDA INT8 GEMM's first launch that sets its
//           attributes: the op's activations are written again after it, so a residual adds once)
//   check   the op's outputs against its reference on the same (precision-rounded) inputs, normwise,
//           within base/tolerances.h's bound for the precision
//
// The tests run standard_op_cases() on the CPU (tests/runtime/op_cases_test.cpp) and on CUDA
// (op_cases_cuda_test.cu); the self-test runs model_op_cases() at the configured model's shapes.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "platform/device_profile.h"
#include "runtime/arena.h"
#include "runtime/executor.h"
#include "runtime/model_spec.h"
#include "runtime/op_table.h"

namespace edgevit {

struct OpCase {
  std::string name;  // e.g. "linear fc1 gelu_tanh 26x128x64"
  VitArch arch;      // the case's model (one or two blocks)
  int batch = 1;
  std::string op;    // the op of that model's graph to check, e.g. "blocks.0.mlp.fc1"
  Precision precision = Precision::kFp32;
  AttentionImpl attention = AttentionImpl::kAuto;
  bool all_tokens = true;  // false: the class-token tail (the last block's attention has one query row)
  Precision int8_float = Precision::kFp16;  // kInt8 on CUDA: the float tensors' precision (runtime.int8_float)
  Int8Activations int8_activations = Int8Activations::kPerTensor;  // kInt8: runtime.int8_activations
  bool int8_attention = false;  // kInt8: runtime.int8_attention: int8 (qkv writes int8 Q/K for the INT8 attention)
};

struct OpCaseResult {
  std::string row;     // the op-table row run
  std::string kernel;  // what it dispatched (OpKernel::resolved)
  double error = 0;    // ||out - ref|| / ||ref||
  double bound = 0;    // the tolerance for the precision
  bool ok = false;
  std::string detail;  // why not ok, when not
};

// What differs per backend: the arena's memory, the kernels' context, moving values in and out, waiting.
class OpCaseDevice {
 public:
  virtual ~OpCaseDevice() = default;
  virtual std::unique_ptr<ArenaMemory> memory() = 0;
  virtual Result<std::unique_ptr<ExecContext>> context(const Plan& plan, Arena& arena) = 0;
  // Tensor `id` <- host values, converted to its element type (fp16 rounds).
  virtual Status write(Arena& arena, const TensorDesc& t, const std::vector<float>& values) = 0;
  virtual Status read(Arena& arena, const TensorDesc& t, std::vector<float>* values) = 0;
  virtual Status sync(ExecContext& ctx) = 0;
};
std::unique_ptr<OpCaseDevice> cpu_op_case_device();
std::unique_ptr<OpCaseDevice> cuda_op_case_device();  // nullptr in a build without CUDA (runtime/cuda/)

// Cases covering every op kind and its variants (epilogues, head dims 32..160, odd token counts, register
// tokens, no_embed_class, avg pooling, the class-token tail, both attention paths) at `precision`; kInt8:
// the INT8 ops (the block GEMMs and the LayerNorms writing int8, docs/int8.md), once with each
// runtime.int8_float (fp16, fp32: the same on the CPU, whose INT8 graphs are always fp32).
std::vector<OpCase> standard_op_cases(Precision precision);
// One case per op of `spec`'s first block, stem and head at `batch` (the self-test's shapes).
std::vector<OpCase> model_op_cases(const ModelSpec& spec, int batch, Precision precision);

// Runs `c` on every row of `profile`'s table that supports its op and is available in this build.
// Errors: the case's plan or op cannot be built, or a device call failed (not a wrong answer: that is a
// result with ok == false).
Result<std::vector<OpCaseResult>> run_op_case(const OpCase& c, const DeviceProfile& profile, OpCaseDevice& device,
                                              uint32_t seed);

}  // namespace edgevit
