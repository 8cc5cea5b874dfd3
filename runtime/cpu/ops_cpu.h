// The CPU backend's op table rows (fp32) and what its kernels read.
#pragma once

#include <memory>
#include <string>

#include "runtime/executor.h"

namespace edgevit {

struct CpuContext : ExecContext {
  CpuContext(const Plan& p, Arena& a, InjectedFault f, int t) : ExecContext(p, a, f), threads(t) {}
  int threads;  // the OpenMP team of every kernel (and OpenBLAS's)
  float* f32(int tensor_id) const { return arena.as<float>(tensor_id); }
};

// Every CPU kernel: an OpKernel that also says the FLOPs it performs (the profile's figures).
class CpuKernel : public OpKernel {
 public:
  explicit CpuKernel(const Op& op) : op_(op), planned_(op.kernel) {}
  virtual double flops() const { return op_.flops; }

 protected:
  const Op& op_;
  const std::string planned_;  // the plan's kernel name at bind (resolve_kernels rewrites op_.kernel later)
};

// Row helpers shared by the CPU table's files: a row every CPU can run, and a row's bind() for kernel K.
inline std::string cpu_row_runs_everywhere() { return ""; }
template <typename K>
std::unique_ptr<OpKernel> bind_cpu_kernel(const Op& op) {
  return std::make_unique<K>(op);
}

}  // namespace edgevit
