// The device arena's memory (runtime/arena.h): one cudaMalloc, and the pinned staging buffer the weights
// pass through on their way from the mmap'd checkpoint into it (cudaHostAlloc with flags 0: page-locked,
// not mapped, so the copy is one DMA).
#include <cuda_runtime_api.h>

#include <string>

#include "runtime/arena.h"
#include "runtime/cuda/cuda_status.h"

namespace edgevit {
namespace {

class CudaArenaMemory final : public ArenaMemory {
 public:
  Result<uint8_t*> allocate(size_t bytes) override {
    int dev = 0;
    cudaGetDevice(&dev);
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess)
      return does_not_fit("cuda backend: cannot allocate the " + std::to_string(bytes) + "-byte arena on device " +
                          std::to_string(dev) + ": " + cudaGetErrorString(e));
    return static_cast<uint8_t*>(p);
  }
  void release(uint8_t* base, size_t bytes) override {
    (void)bytes;
    if (base != nullptr) cudaFree(base);  // teardown: nobody is left to hear an error
  }
  bool host_addressable() const override { return false; }
  Result<void*> staging_allocate(size_t bytes) override {
    void* p = nullptr;
    EV_CUDA_CHECK("weights", cudaHostAlloc(&p, bytes > 0 ? bytes : 1, 0));
    return p;
  }
  Status copy_in(uint8_t* dst, const void* src, size_t bytes) override {
    EV_CUDA_CHECK("weights", cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
    return Status::Ok();
  }
  Status staging_release(void* p) override {
    EV_CUDA_CHECK("weights", cudaFreeHost(p));
    return Status::Ok();
  }
};

}  // namespace

std::unique_ptr<ArenaMemory> cuda_arena_memory() { return std::make_unique<CudaArenaMemory>(); }

}  // namespace edgevit
