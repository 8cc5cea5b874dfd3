// The arena owner: one allocation per engine, in the memory space the plan's device computes from, sized by
// the plan (plan.h draws its regions). It maps tensor ids to addresses and loads the weights; the backends
// and kernels only read addresses from it.
//
//   host arena (CPU)     anonymous mmap; each weight converted from the mmap'd checkpoint straight into
//                        its arena slot.
//   device arena (CUDA)  cudaMalloc; each weight converted into one reusable pinned staging buffer (the
//                        largest weight) and copied into its slot, so no second host copy of the weights
//                        exists (Jetson's DRAM is shared). The staging buffer is freed before create()
//                        returns.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "base/status.h"
#include "runtime/fault.h"
#include "runtime/plan.h"

namespace edgevit {

class WeightSource;

// What differs per memory space.
class ArenaMemory {
 public:
  virtual ~ArenaMemory() = default;
  virtual Result<uint8_t*> allocate(size_t bytes) = 0;  // the one allocation (kDoesNotFit when refused)
  virtual void release(uint8_t* base, size_t bytes) = 0;
  // True when the CPU can write the arena directly (weights are read straight into it).
  virtual bool host_addressable() const = 0;
  // Staged loading (host_addressable() == false): pinned host buffer, copy into the arena, free.
  virtual Result<void*> staging_allocate(size_t bytes);
  virtual Status copy_in(uint8_t* dst, const void* src, size_t bytes);
  virtual Status staging_release(void* p);
};

std::unique_ptr<ArenaMemory> host_arena_memory();  // anonymous mmap (runtime/arena.cpp)
std::unique_ptr<ArenaMemory> cuda_arena_memory();  // cudaMalloc + pinned staging (runtime/cuda/); nullptr
                                                   // in a build without CUDA

class Arena {
 public:
  // Allocates plan.arena_bytes through `memory` (owned from here on).
  static Result<std::unique_ptr<Arena>> create(const Plan& plan, std::unique_ptr<ArenaMemory> memory);
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  // Every weight tensor of the plan from `weights`, converted to the plan's precision. `fault`:
  // kCorruptWeightByte flips one exponent bit (self-test only).
  Status load_weights(WeightSource& weights, InjectedFault fault);

  uint8_t* at(int tensor_id) const { return base_ + plan_.offsets[static_cast<size_t>(tensor_id)]; }
  template <typename T>
  T* as(int tensor_id) const {
    return reinterpret_cast<T*>(at(tensor_id));
  }
  // The backend workspace region: the arena's last `bytes` (plan.h; cuBLASLt's on CUDA).
  uint8_t* tail(int64_t bytes) const { return base_ + bytes_ - static_cast<size_t>(bytes); }
  size_t bytes() const { return bytes_; }

 private:
  Arena(const Plan& plan, std::unique_ptr<ArenaMemory> memory) : plan_(plan), memory_(std::move(memory)) {}
  const Plan& plan_;
  std::unique_ptr<ArenaMemory> memory_;
  uint8_t* base_ = nullptr;  // owned through memory_: the single allocation
  size_t bytes_ = 0;
};

}  // namespace edgevit
