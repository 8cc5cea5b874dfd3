// Without a CUDA build, asking for a CUDA device is a clear "unsupported", never a crash. The CUDA op
// table's rows exist in every build (runtime/cuda_rows.cpp); their available() says the build has no CUDA.
#ifndef EDGEVIT_HAVE_CUDA
#include "runtime/arena.h"
#include "runtime/backend.h"

namespace edgevit {

Result<std::unique_ptr<Backend>> make_cuda_backend(const Plan& plan, WeightSource&, const EngineOptions&) {
  return unsupported("device '" + plan.device.name +
                     "' needs the CUDA backend, but this edgevit was built without CUDA (EDGEVIT_CUDA=OFF or no "
                     "nvcc at configure time); use --device host-cpu, or rebuild with -DEDGEVIT_CUDA=ON");
}

std::unique_ptr<ArenaMemory> cuda_arena_memory() { return nullptr; }

}  // namespace edgevit
#endif
