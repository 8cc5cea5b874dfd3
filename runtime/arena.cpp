#include "runtime/arena.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "runtime/int8_scales.h"
#include "runtime/weights.h"

namespace edgevit {

namespace {

class HostMemory final : public ArenaMemory {
 public:
  // One anonymous mapping: page aligned (>= the plan's 256-byte alignment), zero-filled, and returned to
  // the OS whole on release.
  Result<uint8_t*> allocate(size_t bytes) override {
    void* p = mmap(nullptr, bytes == 0 ? 1 : bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
      return does_not_fit("cannot allocate the " + std::to_string(bytes) + "-byte arena: " + std::strerror(errno));
    return static_cast<uint8_t*>(p);
  }
  void release(uint8_t* base, size_t bytes) override { munmap(base, bytes == 0 ? 1 : bytes); }
  bool host_addressable() const override { return true; }
};

// The exponent's top bit of element 0 (byte 1 of an fp16, byte 3 of an fp32; little endian).
void corrupt_first_element(void* data, int64_t elem_bytes) {
  static_cast<uint8_t*>(data)[elem_bytes == 2 ? 1 : 3] ^= 0x40;
}
constexpr const char* kCorruptedTensor = "blocks.0.attn.qkv.weight";

}  // namespace

Result<void*> ArenaMemory::staging_allocate(size_t) { return internal_error("arena: this memory is not staged"); }
Status ArenaMemory::copy_in(uint8_t*, const void*, size_t) { return internal_error("arena: this memory is not staged"); }
Status ArenaMemory::staging_release(void*) { return Status::Ok(); }

std::unique_ptr<ArenaMemory> host_arena_memory() { return std::make_unique<HostMemory>(); }

Result<std::unique_ptr<Arena>> Arena::create(const Plan& plan, std::unique_ptr<ArenaMemory> memory) {
  if (memory == nullptr) return unsupported("arena: no memory for device '" + plan.device.name + "' in this build");
  std::unique_ptr<Arena> a(new Arena(plan, std::move(memory)));
  a->bytes_ = static_cast<size_t>(plan.arena_bytes);
  EV_ASSIGN_OR_RETURN(a->base_, a->memory_->allocate(a->bytes_));
  return a;
}

Arena::~Arena() {
  if (base_ != nullptr) memory_->release(base_, bytes_);
}

Status Arena::load_weights(WeightSource& weights, InjectedFault fault) {
  const Graph& g = plan_.graph;
  const bool int8 = g.precision == Precision::kInt8;
  if (memory_->host_addressable()) {
    for (const TensorDesc& t : g.tensors) {
      if (t.kind != TensorKind::kWeight || (int8 && is_int8_tensor(t))) continue;  // INT8: below
      EV_RETURN_IF_ERROR(t.elem_bytes == 2 ? weights.read_f16(t.name, as<uint16_t>(t.id), static_cast<size_t>(t.numel()))
                              : weights.read_f32(t.name, as<float>(t.id), static_cast<size_t>(t.numel())));
      if (fault == InjectedFault::kCorruptWeightByte && t.name == kCorruptedTensor) corrupt_first_element(at(t.id), t.elem_bytes);
    }
    if (!int8) return Status::Ok();
    return load_int8_weights(plan_, weights, [this](int id, const void* bytes, size_t size) {
      std::memcpy(at(id), bytes, size);
      return Status::Ok();
    });
  }
  // Staged: one buffer the size of the largest weight, reused tensor by tensor.
  int64_t largest = 0;
  for (const TensorDesc& t : g.tensors)
    if (t.kind == TensorKind::kWeight) largest = std::max(largest, t.bytes());
  EV_ASSIGN_OR_RETURN(void* staging, memory_->staging_allocate(static_cast<size_t>(std::max<int64_t>(largest, 1))));
  Status s = Status::Ok();
  for (const TensorDesc& t : g.tensors) {
    if (t.kind != TensorKind::kWeight || (int8 && is_int8_tensor(t))) continue;  // INT8: below
    const size_t count = static_cast<size_t>(t.numel());
    s = t.elem_bytes == 2 ? weights.read_f16(t.name, static_cast<uint16_t*>(staging), count)
             : weights.read_f32(t.name, static_cast<float*>(staging), count);
    if (!s.ok()) break;
    if (fault == InjectedFault::kCorruptWeightByte && t.name == kCorruptedTensor) corrupt_first_element(staging, t.elem_bytes);
    s = memory_->copy_in(at(t.id), staging, static_cast<size_t>(t.bytes()));
    if (!s.ok()) {
      s = Status(s.code(), "weights: tensor '" + t.name + "': " + s.message());
      break;
    }
  }
  if (s.ok() && int8)
    s = load_int8_weights(plan_, weights, [this](int id, const void* bytes, size_t size) {
      return memory_->copy_in(at(id), bytes, size);
    });
  const Status freed = memory_->staging_release(staging);
  return s.ok() ? freed : s;
}

}  // namespace edgevit
