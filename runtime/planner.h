// Offline memory planner with the TFLite Micro GreedyMemoryPlanner shape: buffers with a size and an
// inclusive [first_use, last_use] op interval get offsets such that no two buffers live at the same op
// overlap. Greedy by size (largest first), each buffer at the lowest aligned offset that fits between the
// already-placed buffers whose lifetimes intersect its own. Ties break on buffer id, never on addresses or
// hash order, so the same buffers give the same offsets on every run and every architecture.
#pragma once

#include <cstdint>
#include <vector>

namespace edgevit {

class MemoryPlanner {
 public:
  explicit MemoryPlanner(int64_t alignment = 256) : alignment_(alignment) {}

  // Returns the buffer id (0, 1, 2, ... in call order). first_use <= last_use; size >= 0.
  int AddBuffer(int64_t size, int first_use, int last_use);
  // Computes offsets (idempotent; called lazily by the accessors).
  void Plan();

  int64_t OffsetOf(int id);
  int64_t ArenaBytes();
  // The largest total of aligned sizes of buffers simultaneously live at one op: no plan can be smaller.
  int64_t LowerBoundBytes() const;
  int BufferCount() const { return static_cast<int>(buffers_.size()); }
  int64_t alignment() const { return alignment_; }

 private:
  struct Buffer {
    int64_t size;     // aligned up
    int first_use;
    int last_use;
    int64_t offset = -1;
  };
  int64_t alignment_;
  std::vector<Buffer> buffers_;
  bool planned_ = false;
  int64_t arena_bytes_ = 0;
};

inline int64_t align_up(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

}  // namespace edgevit
