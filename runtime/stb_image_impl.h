// A per-thread memory budget for stb_image. runtime/stb_image_impl.cpp compiles stb_image (and
// stb_image_resize) from Debian's libstb-dev headers into edgevit with STBI_MALLOC/STBI_REALLOC/STBI_FREE
// routed through a size-tracking allocator: while a StbDecodeBudget is alive on a thread, stb_image
// allocations on that thread that would take its live bytes past the limit return null, which stb reports
// as a failed decode ("outofmem"). Without a budget the allocator only tracks sizes.
// Why: stb_image 2.27 grows its zlib output buffer regardless of the PNG header, so a small PNG could
// otherwise make the decoder allocate gigabytes (docs/reliability.md).
#pragma once

#include <cstddef>

namespace edgevit {

class StbDecodeBudget {
 public:
  // Charges stb_image allocations made on this thread from now on against `limit_bytes` (live bytes
  // allocated since construction, net of frees). Budgets do not nest.
  explicit StbDecodeBudget(size_t limit_bytes);
  ~StbDecodeBudget();  // this thread's stb allocations are unlimited again
  StbDecodeBudget(const StbDecodeBudget&) = delete;
  StbDecodeBudget& operator=(const StbDecodeBudget&) = delete;

  size_t limit_bytes() const { return limit_; }
  bool exceeded() const;        // an allocation was refused
  size_t refused_bytes() const; // live bytes the first refused allocation asked to reach (0 if none)
  size_t peak_bytes() const;    // most live bytes since construction

 private:
  size_t limit_;
};

}  // namespace edgevit
