#include "runtime/planner.h"

#include <algorithm>
#include <cassert>
#include <numeric>

namespace edgevit {

int MemoryPlanner::AddBuffer(int64_t size, int first_use, int last_use) {
  assert(size >= 0 && first_use <= last_use);
  buffers_.push_back(Buffer{align_up(size, alignment_), first_use, last_use});
  planned_ = false;
  return static_cast<int>(buffers_.size()) - 1;
}

void MemoryPlanner::Plan() {
  if (planned_) return;
  std::vector<int> order(buffers_.size());
  std::iota(order.begin(), order.end(), 0);
  // Largest first; equal sizes: earlier first use first; then lower id. A total order: deterministic.
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    const Buffer& x = buffers_[a];
    const Buffer& y = buffers_[b];
    if (x.size != y.size) return x.size > y.size;
    if (x.first_use != y.first_use) return x.first_use < y.first_use;
    return a < b;
  });

  std::vector<int> placed;  // ids, kept sorted by (offset, id)
  arena_bytes_ = 0;
  for (int id : order) {
    Buffer& buf = buffers_[id];
    // Candidate gaps among live-overlapping placed buffers, scanned in offset order.
    int64_t candidate = 0;
    for (int other_id : placed) {
      const Buffer& other = buffers_[other_id];
      const bool overlaps_in_time = !(other.last_use < buf.first_use || buf.last_use < other.first_use);
      if (!overlaps_in_time) continue;
      if (other.offset >= candidate + buf.size) break;  // fits in the gap before `other`
      candidate = std::max(candidate, other.offset + other.size);
    }
    buf.offset = candidate;
    arena_bytes_ = std::max(arena_bytes_, buf.offset + buf.size);
    auto pos = std::lower_bound(placed.begin(), placed.end(), id, [&](int a, int b) {
      if (buffers_[a].offset != buffers_[b].offset) return buffers_[a].offset < buffers_[b].offset;
      return a < b;
    });
    placed.insert(pos, id);
  }
  planned_ = true;
}

int64_t MemoryPlanner::OffsetOf(int id) {
  Plan();
  assert(id >= 0 && id < BufferCount());
  return buffers_[id].offset;
}

int64_t MemoryPlanner::ArenaBytes() {
  Plan();
  return arena_bytes_;
}

int64_t MemoryPlanner::LowerBoundBytes() const {
  int last = -1;
  for (const Buffer& b : buffers_) last = std::max(last, b.last_use);
  int64_t best = 0;
  for (int t = 0; t <= last; ++t) {
    int64_t live = 0;
    for (const Buffer& b : buffers_)
      if (b.first_use <= t && t <= b.last_use) live += b.size;
    best = std::max(best, live);
  }
  return best;
}

}  // namespace edgevit
