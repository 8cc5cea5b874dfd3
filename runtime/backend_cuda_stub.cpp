// Without a CUDA build, asking for a CUDA device is a clear "unsupported", never a crash.
#ifndef EDGEVIT_HAVE_CUDA
#include "runtime/engine.h"

namespace edgevit {

Result<std::unique_ptr<Backend>> make_cuda_backend(const Plan& plan, WeightSource&, const EngineOptions&) {
  return unsupported("device '" + plan.device.name +
                     "' needs the CUDA backend, but this edgevit was built without CUDA (EDGEVIT_CUDA=OFF or no "
                     "nvcc at configure time); use --device host-cpu, or rebuild with -DEDGEVIT_CUDA=ON");
}

}  // namespace edgevit
#endif
