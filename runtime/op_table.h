// Op tables: per backend, the implementations of each op kind at each precision, in order of preference.
//
//   planner (runtime/plan.cpp)        for each op: the first row of the device's table whose kind and
//                                     precision match and whose supports() is empty is chosen; the op
//                                     records the row's name, why it serves, and why each earlier row
//                                     did not (the forecast: a pure function of op, graph and profile).
//   engine  (runtime/engine.cpp)      for each op: the planned row, unless available() says this build or
//                                     machine cannot run it, then the next row that supports the op and is
//                                     available (the reason goes into the plan); bind() makes the op's
//                                     kernel; the executor runs prepare() once and run() per forward, and
//                                     each kernel's resolved() name and tuning record go into the plan.
//
// Adding an op or a precision is adding rows (and the op's reference and op case, docs/ARCHITECTURE.md).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "platform/device_profile.h"
#include "runtime/graph.h"
#include "runtime/plan.h"  // TuningRecord

namespace edgevit {

struct ExecContext;  // runtime/executor.h

// A row bound to one op of one plan. Owned by the executor.
class OpKernel {
 public:
  virtual ~OpKernel() = default;
  // Once, after the weights are in the arena: packing, descriptors, algorithm choice (tuning) for every
  // batch size the executor will run.
  virtual Status prepare(ExecContext& ctx) {
    (void)ctx;
    return Status::Ok();
  }
  // Computes (CPU) or enqueues (CUDA) the op on the first n images. Allocates nothing.
  virtual Status run(ExecContext& ctx, int n) = 0;
  // What run() dispatches at batch n, e.g. "cpu.gemm_libxsmm_packed+bias", "cuda.gemm_lt_f16+bias_gelu".
  virtual std::string resolved(int n) const = 0;
  // Decisions made at prepare() (empty when there were none).
  virtual std::vector<TuningRecord> tuning() const { return {}; }
};

// A row's verdict on one op (plan time).
struct Support {
  bool ok = false;
  std::string reason;  // ok: why this row serves (shown by `plan -v`); else why it does not
  std::string kernel;  // ok: the op's kernel name when more specific than the row's (the CUDA fused
                       // attention's fmha-table row); empty: the row's name
  bool by_request = false;  // not ok only because the config or a flag asked for another row
};

struct OpRow {
  OpKind kind;
  Precision precision;
  const char* name;  // e.g. "cpu.layernorm_f32"
  // Plan time, a pure function of its arguments (the plan hash must not depend on the machine that plans).
  Support (*supports)(const Op& op, const Graph& graph, const DeviceProfile& device);
  // Engine time: empty when this build on this machine can run the row, else why not (e.g. "built without
  // libxsmm").
  std::string (*available)();
  // Binds the row to op `op` of the plan (the op outlives the kernel).
  std::unique_ptr<OpKernel> (*bind)(const Op& op);
  // Attention rows that need a per-op workspace in the arena (the explicit path's S x S scores): its bytes
  // for this graph's shapes (at max batch) on this device. nullptr: none.
  int64_t (*scratch_bytes)(const Graph& graph, const DeviceProfile& device) = nullptr;
  // An INT8 twin row (docs/int8.md "fp32 mode"): float64 arithmetic rounded once to fp32, so that the CPU INT8
  // path and CUDA's runtime.int8_float: fp32 compute the fp32 tensors that reach an int8 rounding alike. It
  // serves only the float ops of INT8 graphs (fp32 and fp16 graphs never see it: their plans are unchanged)
  // and stands before the fp32 rows of its kind.
  bool int8_twin = false;
};

// Whether `row` is a candidate for `op` of `graph`: its kind, op_precision(op, graph), and a twin row only in
// an INT8 graph. Every walk over a table (planner, engine fallback, op cases) asks this.
bool row_matches(const OpRow& row, const Op& op, const Graph& graph);

// The table of a device kind (kCpu: runtime/cpu/ops_cpu.cpp; kCuda: runtime/cuda/ops_cuda.cpp). The CUDA
// table's rows exist in every build (plans for CUDA devices are made on any machine); their available()
// says when the build has no CUDA.
const std::vector<OpRow>& op_table(DeviceKind kind);
const std::vector<OpRow>& cpu_op_table();   // runtime/cpu/ops_cpu.cpp
const std::vector<OpRow>& cuda_op_table();  // compiled in every build (CUDA plans are made anywhere)

// The row serving `op` (the first of its kind and precision that supports it), its kernel name, and the
// reason: the chosen row's own, then each rejected row's ("cpu.mha_fused_f32 not used: head_dim 160 > 128").
// row == nullptr when none does (reason lists why).
struct RowChoice {
  const OpRow* row = nullptr;
  std::string kernel;
  std::string reason;
  bool fallback = false;  // an earlier row was rejected for a reason other than the user's request
};
RowChoice choose_row(const Op& op, const Graph& graph, const DeviceProfile& device);
// The row named `name` in the device's table, or nullptr.
const OpRow* find_row(DeviceKind kind, const std::string& name);
// Rows a test or the self-test can run on this build: every row whose available() is empty.
std::vector<const OpRow*> available_rows(DeviceKind kind);

}  // namespace edgevit
