// The executor: binds each op of a plan to its op-table row (runtime/op_table.h), prepares the kernels
// once, and walks the op list. One executor serves every backend; what differs between backends is in
// ExecHooks (around the walk) and in the context the kernels read (CpuContext, CudaContext).
//
//   bind     one kernel per op, from the row the plan names (resolve_rows picks them)
//   prepare  each kernel's prepare(), in op order (packing, descriptors, tuning)
//   walk     hooks.before_ops(n), each op's run(n) (timed between hooks.op_begin/op_end in profile mode),
//            hooks.after_ops(n)
//   capture  the walk recorded between hooks.begin_capture() and hooks.end_capture(n) (CUDA graphs);
//            replay is the backend's (one graph launch)
//
// No allocation after prepare(): walk() writes only preallocated per-op records.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "runtime/arena.h"
#include "runtime/fault.h"
#include "runtime/op_table.h"
#include "runtime/plan.h"

namespace edgevit {

// What every kernel sees. Backends derive their own (runtime/cpu/ops_cpu.h, runtime/cuda/cuda_context.h).
struct ExecContext {
  ExecContext(const Plan& p, Arena& a, InjectedFault f) : plan(p), arena(a), fault(f) {}
  virtual ~ExecContext() = default;
  const Plan& plan;
  Arena& arena;
  InjectedFault fault;
  // Batch sizes the executor will run (CUDA: the captured sizes; CPU: {max_batch}); prepare() readies each.
  std::vector<int> sizes;
};

class ExecHooks {
 public:
  virtual ~ExecHooks() = default;
  virtual Status before_ops(int n) {
    (void)n;
    return Status::Ok();
  }
  virtual Status after_ops(int n) {
    (void)n;
    return Status::Ok();
  }
  virtual Status op_begin(size_t op) {
    (void)op;
    return Status::Ok();
  }
  virtual Status op_end(size_t op) {
    (void)op;
    return Status::Ok();
  }
  virtual Status begin_capture() { return unsupported("this backend does not capture"); }
  virtual Status end_capture(int n) {
    (void)n;
    return unsupported("this backend does not capture");
  }
};

// For each op of the plan, the row that will run it on this build and machine: the planned row when it is
// available here, else the next row of the table that supports the op and is available. Each substitution
// is explained in *notes ("op 'blocks.0.attn.qkv': cpu.gemm_libxsmm_packed unavailable (built without
// libxsmm): cpu.sgemm_openblas"). kUnsupported when no row can run an op.
Result<std::vector<const OpRow*>> resolve_rows(const Plan& plan, std::vector<std::string>* notes);

class Executor {
 public:
  Executor(ExecContext& ctx, ExecHooks& hooks) : ctx_(ctx), hooks_(hooks) {}

  Status bind(const std::vector<const OpRow*>& rows);
  Status prepare();
  Status walk(int n, bool profile);
  Status capture(int n);

  size_t size() const { return kernels_.size(); }
  OpKernel& kernel(size_t op) { return *kernels_[op]; }
  // Per op, what the last walk at batch n dispatched (kernel.resolved(n)); "(not run)" before any walk.
  std::vector<std::string> executed() const;
  // Per op, what runs at batch n.
  std::vector<std::string> resolved(int n) const;
  std::vector<TuningRecord> tuning() const;

 private:
  ExecContext& ctx_;
  ExecHooks& hooks_;
  std::vector<std::unique_ptr<OpKernel>> kernels_;
  std::vector<int> last_n_;  // per op: batch of the last walk that ran it (0: none)
};

}  // namespace edgevit
